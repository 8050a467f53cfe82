"""BertEncoder: a functional Keras model with the TF Hub BERT interface."""


import keras

from keras_bert.model import column_parts, layers, packing
from keras_bert.model.config import BertConfig

INPUT_NAMES = ("input_word_ids", "input_mask", "input_type_ids")

# What Keras's functional Model takes besides its graph. It drops any other keyword argument
# without a word, so a misspelt one ("hiden_size", "num_clases") built a model with the default.
MODEL_ARGUMENTS = {"name", "trainable"}


def refuse_unknown_arguments(model, kwargs, takes):
    """Raises TypeError for keyword arguments of a functional model's constructor that neither
    it nor Keras's Model takes; `takes` says what it does take."""
    unknown = sorted(set(kwargs) - MODEL_ARGUMENTS)
    if unknown:
        raise TypeError(f"{type(model).__name__} got unexpected argument(s) "
                        f"{', '.join(unknown)}: it takes {takes}")  # fmt: skip


@keras.saving.register_keras_serializable(package="keras_bert")
class BertEncoder(keras.Model):
    """The BERT transformer encoder.

    Constructor arguments are the fields of `BertConfig` (validated by it).

    Inputs, a dict of int32 (batch, seq) tensors, seq <= max_position_embeddings:
      input_word_ids: token ids.
      input_mask: 1 for real tokens, 0 for padding; padded positions get no attention.
      input_type_ids: segment ids, 0 for the first segment and 1 for the second.
    Outputs, a dict:
      sequence_output: float32 (batch, seq, hidden_size), the last block's output (0 at
        padded positions: the blocks compute on real tokens only).
      pooled_output: (batch, hidden_size), tanh(dense(sequence_output[:, 0])).
      encoder_outputs: list of num_hidden_layers float32 (batch, seq, hidden_size), one per block
        (0 at padded positions too).
      pooled_output_only: pooled_output's numbers (up to rounding), computed with the last block
        on the first tokens alone: for a model that needs nothing else (a classifier head). The
        last block then costs its key and value products, about a sixth of its work; a model
        that also takes sequence_output should read pooled_output, or the last block's keys
        and values are computed twice. In a `tf.function` (`fit`, `predict`, an export) only
        what the outputs read is computed.

    `keep_outputs` (a list of those names; default all): the model's graph holds only these
    outputs and what they need, as a task model's export builds its encoder. A Keras
    functional model computes all its outputs when called, and in a SavedModel that a session
    runs (TF Serving) Grappler then prunes the rest, at a cost to the first request.
    """

    def __init__(
        self,
        vocab_size=30522,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        hidden_act="gelu",
        hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1,
        max_position_embeddings=512,
        type_vocab_size=2,
        initializer_range=0.02,
        dtype=None,
        keep_outputs=None,
        **kwargs,
    ):
        # Blocks and pooler get the encoder's policy explicitly (recorded in get_config), so a
        # mixed-precision encoder reloads as one whatever the global policy is at load time.
        refuse_unknown_arguments(self, kwargs, "bert_config.json's fields (BertConfig), dtype, "
                                 "keep_outputs, name and trainable; a whole config.json's dict "
                                 "goes through BertConfig.from_dict(values).to_dict()")  # fmt: skip
        policy = keras.dtype_policies.get(dtype) if dtype else keras.config.dtype_policy()
        config = BertConfig(
            vocab_size=vocab_size,
            hidden_size=hidden_size,
            num_hidden_layers=num_hidden_layers,
            num_attention_heads=num_attention_heads,
            intermediate_size=intermediate_size,
            hidden_act=hidden_act,
            hidden_dropout_prob=hidden_dropout_prob,
            attention_probs_dropout_prob=attention_probs_dropout_prob,
            max_position_embeddings=max_position_embeddings,
            type_vocab_size=type_vocab_size,
            initializer_range=initializer_range,
        )

        # === Layers ===
        embeddings = layers.BertEmbeddings(
            vocab_size,
            hidden_size,
            max_position_embeddings,
            type_vocab_size,
            hidden_dropout_prob,
            initializer_range,
            dtype="float32",  # the embedding sum and its LayerNorm stay float32 under mixed precision
            name="embeddings",
        )
        blocks = [
            layers.BertTransformerBlock(
                hidden_size,
                num_attention_heads,
                intermediate_size,
                hidden_act,
                hidden_dropout_prob,
                attention_probs_dropout_prob,
                initializer_range,
                dtype=policy,
                name=f"layer_{i}",
            )
            for i in range(num_hidden_layers)
        ]
        pooler = layers.BertPooler(hidden_size, initializer_range, dtype=policy, name="pooler")

        # === Graph ===
        inputs = {name: keras.Input((None,), dtype="int32", name=name) for name in INPUT_NAMES}
        x = embeddings(inputs["input_word_ids"], inputs["input_type_ids"])
        # The blocks see the real tokens only, packed as (tokens, hidden) (packing.py). These
        # layers only move float32 vectors: float32 policies, so that nothing casts on the way.
        layout = packing.TokenLayout(dtype="float32", name="token_layout")(inputs["input_mask"])
        tokens = packing.PackTokens(dtype="float32", name="pack_tokens")(x, layout)
        unpack = packing.UnpackTokens(dtype="float32", name="unpack_tokens")
        encoder_outputs = []
        for block in blocks:
            last_input = tokens
            tokens = block(tokens, layout)
            encoder_outputs.append(unpack(tokens, layout))  # (batch, seq, hidden)
        first_tokens = blocks[-1](last_input, layout, first_only=True)  # (batch, hidden)
        outputs = {
            "sequence_output": encoder_outputs[-1],
            "pooled_output": pooler(encoder_outputs[-1]),
            "encoder_outputs": encoder_outputs,
            "pooled_output_only": pooler(first_tokens),
        }
        if keep_outputs is not None:
            unknown = sorted(set(keep_outputs) - set(outputs))
            if unknown or not keep_outputs:
                raise ValueError(f"keep_outputs must name some of {sorted(outputs)}, got "
                                 f"{list(keep_outputs)!r}")  # fmt: skip
            outputs = {name: outputs[name] for name in keep_outputs}
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)

        # === Config ===
        self.config = config
        self.policy = policy
        self.keep_outputs = None if keep_outputs is None else tuple(keep_outputs)
        self.embeddings = embeddings
        self.transformer_layers = blocks
        self.pooler = pooler

    def split_columns(self, count):
        """For serving: each block computes in `count` column parts, on frozen copies of its
        weights (layers.BertTransformerBlock.split_columns). Task models' `export` does this
        on a copy; a split encoder refuses to train. Where pooled_output_only is the one
        output kept, the last block runs for the first tokens alone, and is split for that."""
        column_parts.check_column_parts(self.config, count)
        first_only = self.keep_outputs == ("pooled_output_only",)
        for block in self.transformer_layers:
            block.split_columns(count, first_only and block is self.transformer_layers[-1])

    @property
    def static_shapes(self):
        """Whether the blocks compute on every position of the batch (True) or on its real
        tokens packed (False, the default): see keras_bert/model/packing.py. XLA compiles only the
        static form; task models set it for every step they compile with XLA. Real positions'
        numbers are the same either way; padded ones are 0 in the outputs either way."""
        return self._static_shapes

    @static_shapes.setter
    def static_shapes(self, static):
        static = bool(static)
        for layer in self._flatten_layers(include_self=False):
            if hasattr(type(layer), "static_shapes"):
                layer.static_shapes = static
        self._static_shapes = static

    _static_shapes = False

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def get_config(self):
        config = {"name": self.name, "trainable": self.trainable, "dtype": self.policy.name,
                  **self.config.to_dict()}  # fmt: skip
        if self.keep_outputs is not None:
            config["keep_outputs"] = list(self.keep_outputs)
        return config
