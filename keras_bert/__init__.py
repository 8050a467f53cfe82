"""keras-bert: BERT on TensorFlow 2 and Keras 3.

Importing this package selects Keras's TensorFlow backend (the tokenizer is made of TensorFlow
ops, and the exports are TensorFlow SavedModels).
"""

import os
import sys


def _use_tensorflow_backend():
    requested = os.environ.get("KERAS_BACKEND", "tensorflow")
    if "keras" in sys.modules:
        import keras

        loaded = keras.config.backend()
        if loaded != "tensorflow":
            raise ImportError(
                f"keras_bert needs Keras's TensorFlow backend, but Keras was already imported "
                f"with the {loaded!r} backend. Import keras_bert before keras, or set "
                f"KERAS_BACKEND=tensorflow."
            )
    elif requested != "tensorflow":
        raise ImportError(
            f"keras_bert needs Keras's TensorFlow backend, but KERAS_BACKEND={requested!r}. "
            f"Unset it or set KERAS_BACKEND=tensorflow."
        )
    os.environ["KERAS_BACKEND"] = "tensorflow"


_use_tensorflow_backend()

# Importing the modules registers every Keras-serializable class, so that saved models load.
from keras_bert import heads, layers, optimization, tokenizer  # noqa: F401
from keras_bert.config import BertConfig
from keras_bert.encoder import BertEncoder

__all__ = ["BertConfig", "BertEncoder"]
