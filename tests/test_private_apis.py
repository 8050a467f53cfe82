"""The private TensorFlow and Keras names the library relies on, where no public way exists.

Each fails here, by name, when a TensorFlow or Keras release moves or renames it, rather than
deep inside a fit or an export. docs/performance.md says why each is used.
"""

import inspect

import keras
import tensorflow as tf
from conftest import TINY

import keras_bert


def parameters(function):
    return list(inspect.signature(function).parameters)


def test_keras_trainer_internals_of_the_distribution_workarounds():
    # keras_bert/training/distribute.py: keras-team/keras issue 20585 and uneven replica batches.
    from keras.src.backend.tensorflow import trainer

    assert parameters(trainer.TensorFlowTrainer._maybe_symbolic_build) == [
        "self", "iterator", "data_batch"]  # fmt: skip
    assert "data_batch" in parameters(trainer.TensorFlowTrainer._symbolic_build)
    assert parameters(trainer.reduce_per_replica) == ["values", "strategy", "reduction"]
    assert parameters(trainer._collective_all_reduce_multi_worker) == ["strategy"]
    assert "_distribute_strategy" in vars(keras.Sequential([keras.layers.Dense(1)]))


def test_tensorflow_device_dataset_function_of_the_autotuning_workaround():
    # keras_bert/training/distribute.py: device_datasets_without_autotuning.
    from tensorflow.python.data.ops import multi_device_iterator_ops

    assert callable(multi_device_iterator_ops._create_device_dataset)


def test_keras_adam_slots_and_clipping_of_the_fused_update():
    # keras_bert/training/optimization.py: the fused Adam step reads Keras Adam's slots by index, and
    # the clipping overrides Keras's own.
    optimizer = keras.optimizers.AdamW(1e-3)
    variable = keras.Variable(tf.zeros((3,)))
    optimizer.build([variable])
    index = optimizer._get_variable_index(variable)
    assert optimizer._momentums[index].shape == optimizer._velocities[index].shape == (3,)
    assert isinstance(optimizer._var_key(variable), str)
    assert parameters(keras.optimizers.Optimizer._clip_gradients) == ["self", "grads"]


def test_keras_layer_internals_of_string_inputs_seeds_and_sublayers():
    # A layer that takes strings turns off Keras's conversion of its inputs (tokenizer,
    # preprocessors); tasks/runs.py saves every layer's seed generators in a backup;
    # task_training.py and encoder.py walk every sublayer.
    layer = keras.layers.Dropout(0.1)
    for name in ("_convert_input_args", "_allow_non_tensor_positional_args"):
        assert isinstance(getattr(layer, name), bool), name
    assert [type(g).__name__ for g in layer._seed_generators] == ["SeedGenerator"]
    encoder = keras_bert.BertEncoder(**TINY)
    flattened = list(encoder._flatten_layers(include_self=False))
    assert any(isinstance(sub, keras_bert.model.layers.BertTransformerBlock) for sub in flattened)
    assert len({id(sub) for sub in flattened}) == len(flattened)


def test_tensorflow_concrete_function_call_of_the_string_graphs():
    # keras_bert/text/tokenizer.py call_traced: the tokenizer's and preprocessors' traced graphs run
    # without ConcreteFunction.__call__'s binding of their inputs.
    graph = tf.function(lambda x: x + 1).get_concrete_function(tf.TensorSpec((), tf.int32))
    flat = [tf.constant(1)] + list(graph.captured_inputs)
    assert graph.inference_fn.call_preflattened(flat).numpy() == 2


def test_tensorflow_text_wordpiece_model_builder_of_the_cached_models():
    # keras_bert/text/tokenizer.py: wordpiece_model builds the model that BertTokenizer hands
    # FastWordpieceTokenizer, with its arguments by position.
    import tensorflow_text as tf_text
    from tensorflow_text.core.pybinds import pywrap_fast_wordpiece_tokenizer_model_builder as b

    vocabulary = ["[UNK]", "the", "##s"]
    model = b.build_fast_wordpiece_model(vocabulary, 100, "##", "[UNK]", False, False)
    tokenizer = tf_text.FastWordpieceTokenizer(model_buffer=tf.constant(list(model), tf.uint8),
                                               token_out_type=tf.int32)  # fmt: skip
    assert tokenizer.tokenize(tf.constant(["thes cat"])).to_list() == [[1, 2, 0]]
