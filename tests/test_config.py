import json

import pytest

from keras_bert import BertConfig


def test_defaults_are_bert_base():
    config = BertConfig()
    assert (config.hidden_size, config.num_hidden_layers, config.vocab_size) == (768, 12, 30522)


def test_json_round_trip(tmp_path):
    config = BertConfig(hidden_size=12, num_attention_heads=3, intermediate_size=37)
    path = tmp_path / "bert_config.json"
    path.write_text(config.to_json_string())
    assert BertConfig.from_json_file(str(path)) == config


def test_hugging_face_extras_are_ignored(tmp_path):
    values = {**BertConfig().to_dict(), "model_type": "bert", "pad_token_id": 0,
              "layer_norm_eps": 1e-12, "architectures": ["BertModel"]}  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps(values))
    assert BertConfig.from_json_file(str(path)) == BertConfig()


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(hidden_size=770), "divisible by num_attention_heads"),
        (dict(hidden_act="swishy"), "hidden_act 'swishy' is not supported"),
        (dict(num_hidden_layers=0), "num_hidden_layers must be a positive integer"),
        (dict(vocab_size=-5), "vocab_size must be a positive integer"),
        (dict(intermediate_size=3.5), "intermediate_size must be a positive integer"),
        (dict(hidden_dropout_prob=1.0), "hidden_dropout_prob must be a number in"),
        # A config file's numbers as strings (they were TypeErrors from a comparison).
        ({"attention_probs_dropout_prob": "0.1"},
         r"attention_probs_dropout_prob must be a number in \[0, 1\), got '0.1'$"),
        ({"initializer_range": "0.02"}, "initializer_range must be a positive number, got '0.02'$"),
        ({"initializer_range": float("inf")}, "initializer_range must be a positive number"),
    ],
)
def test_invalid_values_are_refused(changes, message):
    with pytest.raises(ValueError, match=message):
        BertConfig(**changes)


def test_missing_field_is_named(tmp_path):
    values = BertConfig().to_dict()
    del values["type_vocab_size"]
    path = tmp_path / "bert_config.json"
    path.write_text(json.dumps(values))
    with pytest.raises(ValueError, match="lacks the field.*type_vocab_size"):
        BertConfig.from_json_file(str(path))


def test_a_bad_value_in_a_file_is_named_with_the_file(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**BertConfig().to_dict(), "hidden_size": "768"}))
    with pytest.raises(ValueError, match=rf"^{path}: BertConfig.hidden_size must be a positive "
                                         "integer, got '768'$"):  # fmt: skip
        BertConfig.from_json_file(str(path))


def test_unsupported_layer_norm_eps_is_refused():
    with pytest.raises(ValueError, match="layer_norm_eps"):
        BertConfig.from_dict({**BertConfig().to_dict(), "layer_norm_eps": 1e-5})
    with pytest.raises(ValueError, match="layer_norm_eps='1e-12' is not supported"):
        BertConfig.from_dict({**BertConfig().to_dict(), "layer_norm_eps": "1e-12"})


def test_bad_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        BertConfig.from_json_file(str(tmp_path / "nope.json"))
    path = tmp_path / "bert_config.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        BertConfig.from_json_file(str(path))
