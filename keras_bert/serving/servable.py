"""ServableModel: the part of a task model that leaves the process. `save` writes one `.keras`
file that predicts on raw strings with nothing beside it (without optimizer state); `export`
writes a TF Serving SavedModel in the precision asked, whatever the model trained in;
`with_precision` gives the model computing in another precision. A subclass (BertTask) has an
`encoder` and a `preprocessor` and says what it serves (`serving_functions`).

An export of a head that was never trained would serve answers as confident as any and as good
as a coin's, so `export` refuses one: a model remembers a digest of its head's weights as they
were made (and a saved file carries it while they are unchanged), and a head whose weights still
match it has not been trained.
"""

import hashlib
import os
import uuid

import keras
import numpy as np

from keras_bert import serving
from keras_bert.model.column_parts import check_column_parts, serving_column_parts
from keras_bert.model.encoder import INPUT_NAMES, BertEncoder

# Compute precisions by name -> the Keras dtype policy that computes in them.
PRECISIONS = {"float32": "float32", "bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}


def _check_precision(precision):
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; use one of {sorted(PRECISIONS)}")


class ServableModel(keras.Model):
    """A Keras model with an `encoder` and a `preprocessor` that saves and exports whole.

    `untrained_head`: the digest of the head's weights as they were made, which `get_config`
    records while they are unchanged (a saved model that was never trained); None for a new
    model, which takes the digest of its own."""

    # The encoder outputs the head reads (None: all): an export's copy of the model builds its
    # encoder with only these (BertEncoder's keep_outputs says why).
    ENCODER_OUTPUTS = None

    def __init__(self, *args, untrained_head=None, **kwargs):
        super().__init__(*args, **kwargs)
        # Outside Keras's tracking, as a plain string.
        object.__setattr__(self, "_untrained_head", untrained_head or self._head_digest())

    def _head_digest(self):
        """SHA-256 of the values of the weights the model adds to its encoder (its head), as
        float32 whatever they are stored in. The preprocessor's, should it hold any, are not
        the head's either (it is set after the graph is made, and would change the digest)."""
        encoder = next(layer for layer in self.layers if isinstance(layer, BertEncoder))
        preprocessor = getattr(self, "preprocessor", None)
        others = encoder.weights + ([] if preprocessor is None else preprocessor.weights)
        not_head = {id(w) for w in others}
        digest = hashlib.sha256()
        for weight in self.weights:
            if id(weight) not in not_head:
                digest.update(np.asarray(weight.value.numpy(), "float32").tobytes())
        return digest.hexdigest()

    def head_is_untrained(self):
        """Whether the head's weights are still those it was made with: no fit, no
        train_on_batch, no weights loaded or set has changed them."""
        return self._head_digest() == self._untrained_head

    def save(self, filepath, overwrite=True, include_optimizer=False, **kwargs):
        """Saves one `.keras` file that predicts on raw strings with nothing beside it.
        Optimizer state (two slots per weight with AdamW) is left out unless asked for.

        The file is written under a temporary name beside `filepath`, then renamed onto it: a
        save that fails part way (a full disk) leaves the file that was there as it was. With
        overwrite=False, an existing file is refused (FileExistsError); so are a path that
        does not end in `.keras` (ValueError), a folder (IsADirectoryError) and a path in a
        folder that does not exist (FileNotFoundError)."""
        if str(filepath).endswith((".h5", ".hdf5")):
            raise ValueError(f"{filepath}: a task model saves as one .keras file (weights, "
                             "vocabulary and settings); HDF5 cannot hold its preprocessor. Use "
                             "a .keras path, or save_weights for the weights alone")
        if not isinstance(filepath, (str, os.PathLike)):
            return self._save(filepath, include_optimizer, **kwargs)
        filepath = os.fspath(filepath)
        if not filepath.endswith(".keras"):  # Keras's load_model reads no other name
            raise ValueError(f"{filepath}: a task model saves as one .keras file, and "
                             "keras.saving.load_model reads it by that extension; end the "
                             "path with .keras")  # fmt: skip
        if os.path.isdir(filepath):
            raise IsADirectoryError(f"{filepath} is a folder; give the path of a .keras file")
        if not overwrite and os.path.exists(filepath):
            raise FileExistsError(f"{filepath} exists; pass overwrite=True to replace it")
        folder, name = os.path.split(os.path.abspath(filepath))
        if not os.path.isdir(folder):
            raise FileNotFoundError(f"{filepath}: the folder {folder} does not exist (or is not "
                                    "a folder); make it first")  # fmt: skip
        tmp = os.path.join(folder, f".{name}.tmp-{os.getpid()}-{uuid.uuid4().hex}.keras")
        try:
            self._save(tmp, include_optimizer, **kwargs)
            os.replace(tmp, filepath)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)

    def _save(self, filepath, include_optimizer, **kwargs):
        if include_optimizer or not self.compiled:
            return super().save(filepath, overwrite=True, **kwargs)
        optimizer = self.optimizer
        # Hidden for the save only: Keras saves an optimizer's state and a compile config
        # (which would rebuild an empty optimizer on load) when it finds them.
        object.__setattr__(self, "optimizer", None)
        object.__setattr__(self, "compiled", False)
        try:
            return super().save(filepath, overwrite=True, **kwargs)
        finally:
            object.__setattr__(self, "optimizer", optimizer)
            object.__setattr__(self, "compiled", True)

    def export(self, filepath, version=None, precision="float32", column_parts=None, *,
               allow_untrained_head=False, **kwargs):
        """Writes a TF Serving SavedModel to `<filepath>/<version>/` and returns its path.

        Args:
          filepath: the model folder; versions are numbered folders inside it.
          version: the version number; default one more than the newest there (two writers
            never take the same one).
          precision: the export's compute precision, whatever the model trained in: "float32"
            (runs at full speed on every CPU), "bfloat16" or "float16" (the dense weights
            stored in that precision; faster only where the hardware's 16-bit products are,
            and answers may differ from float32's on near ties).
          column_parts: each encoder block computes in this many column parts, which
            TensorFlow's inter-op threads run side by side (`BertEncoder.split_columns`; the
            same numbers up to rounding). Default: 2 where the heads and sizes split in two,
            else 1 (each product whole).
          allow_untrained_head: export a head that was never trained (`head_is_untrained`),
            to time or test a server; refused otherwise.

        The SavedModel holds `serving_default` (strings in, answers out), `serve_token_ids`
        (token ids in), inference weights only (no optimizer state), warmup requests, and only
        ops TF Serving 2.12 can run. Its encoder computes only the outputs the head reads
        (`ENCODER_OUTPUTS`). docs/serving.md describes the signatures.

        Returns:
          The version folder's path, a string.
        """
        if kwargs:
            raise ValueError(f"unexpected arguments {sorted(kwargs)}; keras_bert task models "
                             "export TF Serving SavedModels only")  # fmt: skip
        if not allow_untrained_head and self.head_is_untrained():
            raise ValueError(f"this {type(self).__name__}'s head has never been trained (its "
                             "weights are those it was made with), so its answers would mean "
                             "nothing: fit it first, or load a trained one; "
                             "allow_untrained_head=True exports it anyway")  # fmt: skip
        if column_parts is None:
            column_parts = serving_column_parts(self.encoder.config)
        column_parts = check_column_parts(self.encoder.config, column_parts)
        _check_precision(precision)
        inference = self._copy(precision, keep_outputs=self.ENCODER_OUTPUTS)
        if column_parts > 1:
            inference.encoder.split_columns(column_parts)
        return serving.export(inference, filepath, version)

    def with_precision(self, precision, for_inference=False):
        """This model computing in `precision` ("float32", "bfloat16" or "float16"; the latter
        two as Keras mixed precision): itself if it already does, else a copy sharing the
        preprocessor and holding the same weights (variables are float32 under either).

        `for_inference=True` stores the dense layers' weights in `precision` too: the same
        numbers as mixed precision computes (which casts them on every call), half the bytes
        to read per call; for predicting and exporting, not for training. Embeddings and
        LayerNorms stay float32 either way."""
        _check_precision(precision)
        policy = precision if for_inference else PRECISIONS[precision]
        if self.encoder.policy.name == policy:
            return self
        return self._copy(policy)

    def _copy(self, policy, keep_outputs=None):
        """A new model computing under `policy`, sharing the preprocessor, with these weights;
        with `keep_outputs`, its encoder's graph holds only those outputs (BertEncoder)."""
        config = self.get_config()
        encoder_config = {**self.encoder.get_config(), "dtype": policy}
        if keep_outputs is not None:
            encoder_config["keep_outputs"] = list(keep_outputs)
        config["encoder"] = type(self.encoder).from_config(encoder_config)
        config["preprocessor"] = self.preprocessor
        copy = type(self)(**config)
        copy.set_weights(self.get_weights())
        return copy

    def serving_functions(self):
        raise NotImplementedError

    def warmup_requests(self):
        texts = ["A short warm-up sentence.", "",
                 "Another, somewhat longer sentence to warm up the server before it serves."]  # fmt: skip
        windows = getattr(self.preprocessor, "max_windows", 1)
        if windows > 1:  # a text of more than every window: the longest request's path too
            texts.append(" ".join(["word"] * (self.preprocessor.sequence_length * windows)))
        names = self.preprocessor.text_names
        return [{n: texts[:1] for n in names}, {n: texts for n in names}]

    def token_id_function(self, outputs, shape=(None, None)):
        """serve_token_ids: the encoder inputs in, `outputs(logits)` out."""
        def from_token_ids(*ids):
            return outputs(self(dict(zip(INPUT_NAMES, ids)), training=False))

        return from_token_ids, serving.token_id_specs(shape)

    # --- Serialization ---

    def get_config(self):
        config = {
            "name": self.name,
            "trainable": self.trainable,
            "encoder": keras.saving.serialize_keras_object(self.encoder),
            "preprocessor": keras.saving.serialize_keras_object(self.preprocessor),
        }
        if self.head_is_untrained():  # else a new model's own digest is the one to keep
            config["untrained_head"] = self._untrained_head
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        for key in ("encoder", "preprocessor"):
            config[key] = keras.saving.deserialize_keras_object(config[key])
        return cls(**config)
