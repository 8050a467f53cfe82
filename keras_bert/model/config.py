"""BertConfig: the fields of `bert_config.json`, shared by Google and Hugging Face files."""

import dataclasses
import json
import math
import numbers
import os

# Activation names follow Hugging Face: "gelu" is the exact erf form; "gelu_new" (also spelled
# "gelu_pytorch_tanh") is the tanh approximation that Google's original code calls "gelu".
# The Google checkpoint reader translates, so a loaded config always says which form it uses.
ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "tanh")
LAYER_NORM_EPSILON = 1e-12


def whole_number(value, least, name, note=""):
    """`value` as an int, refused in one line unless a whole number (a Python or NumPy int,
    not a bool) of at least `least`: "{name} must be a whole number of at least {least}{note},
    got {value!r}". For the counts and sizes the library's callers pass."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
        raise ValueError(f"{name} must be a whole number of at least {least}{note}, got "
                         f"{value!r}")  # fmt: skip
    return int(value)


@dataclasses.dataclass(frozen=True)
class BertConfig:
    """Hyper-parameters of a BERT encoder, named as in `bert_config.json`.

    The defaults are BERT-base (uncased, vocabulary 30,522).
    """

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02

    def __post_init__(self):
        for name in (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
            "type_vocab_size",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"BertConfig.{name} must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"BertConfig.hidden_size ({self.hidden_size}) must be divisible by "
                f"num_attention_heads ({self.num_attention_heads})"
            )
        if self.hidden_act not in ACTIVATIONS:
            raise ValueError(
                f"BertConfig.hidden_act {self.hidden_act!r} is not supported; use one of {ACTIVATIONS}"
            )
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            if not _is_number(getattr(self, name)) or not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(
                    f"BertConfig.{name} must be a number in [0, 1), got {getattr(self, name)!r}"
                )
        if not _is_number(self.initializer_range) or not 0 < self.initializer_range < math.inf:
            raise ValueError(
                "BertConfig.initializer_range must be a positive number, got "
                f"{self.initializer_range!r}"
            )

    @classmethod
    def from_dict(cls, values, source="config"):
        """Builds a config from a `bert_config.json` or Hugging Face `config.json` dict.

        Fields this class does not hold (`model_type`, `pad_token_id`, ...) are ignored, except
        those that would change the model's numbers: those must have BERT's values.
        """
        missing = [f.name for f in dataclasses.fields(cls) if f.name not in values]
        if missing:
            raise ValueError(f"{source} lacks the field(s) {', '.join(missing)}")
        eps = values.get("layer_norm_eps", LAYER_NORM_EPSILON)
        if not _is_number(eps) or abs(eps - LAYER_NORM_EPSILON) > 1e-15:
            raise ValueError(f"{source}: layer_norm_eps={eps!r} is not supported (BERT uses 1e-12)")
        position_type = values.get("position_embedding_type", "absolute")
        if position_type != "absolute":
            raise ValueError(
                f"{source}: position_embedding_type={position_type!r} is not supported "
                "(BERT uses 'absolute')"
            )
        try:
            return cls(**{f.name: values[f.name] for f in dataclasses.fields(cls)})
        except ValueError as e:  # a field's value: named with the file it came from
            raise ValueError(f"{source}: {e}") from None

    @classmethod
    def from_json_file(cls, path):
        if not os.path.isfile(path):
            raise FileNotFoundError(f"BERT config file not found: {path}")
        with open(path, encoding="utf-8") as f:
            try:
                values = json.load(f)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path} is not valid JSON: {e}") from None
        if not isinstance(values, dict):
            raise ValueError(f"{path} must hold a JSON object, not {type(values).__name__}")
        return cls.from_dict(values, source=path)

    def to_dict(self):
        return dataclasses.asdict(self)

    def to_json_string(self):
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"


def _is_number(value):
    """A real number (an int or a float; not a bool, not a string)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)
