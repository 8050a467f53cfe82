"""keras-bert: BERT on TensorFlow 2 and Keras 3.

Importing this package selects Keras's TensorFlow backend (the tokenizer is made of TensorFlow
ops, and the exports are TensorFlow SavedModels), and, when it comes before TensorFlow's own
import, turns TensorFlow's oneDNN kernels on unless the environment says otherwise (see
`_use_onednn`).
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


def _use_onednn():
    """TF_ENABLE_ONEDNN_OPTS=1 unless it is set or TensorFlow is already loaded (it reads the
    variable as it loads). x86 TensorFlow turns oneDNN on by itself only on CPUs with AVX512
    VNNI, AVX512-BF16 or AMX, so this changes nothing there; on a CPU with AVX2 alone its own
    kernels train BERT slower (docs/performance.md). TF_ENABLE_ONEDNN_OPTS=0 keeps them."""
    if "tensorflow" not in sys.modules:
        os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")


_use_tensorflow_backend()
_use_onednn()

# Importing the modules registers every Keras-serializable class, so that saved models load.
from keras_bert.checkpoints import BertCheckpoint, load_checkpoint, save_checkpoint
from keras_bert.model import heads, layers, pooling  # noqa: F401
from keras_bert.model.config import BertConfig
from keras_bert.model.encoder import BertEncoder
from keras_bert.models.classifier import BertClassifier, BertMultipleChoice
from keras_bert.models.embedder import BertTextEmbedder
from keras_bert.models.pretrainer import BertPretrainer, BertPretrainingPreprocessor
from keras_bert.models.question_answerer import BertQuestionAnswerer
from keras_bert.models.reranker import BertReranker
from keras_bert.models.spans import SpanWindows
from keras_bert.models.tagging import WordTagger
from keras_bert.models.token_classifier import BertTokenClassifier
from keras_bert.text.packer import BertPacker
from keras_bert.text.preprocessing import (
    BertMultipleChoicePreprocessor,
    BertPreprocessor,
    BertTextsPreprocessor,
)
from keras_bert.text.tokenizer import BertTokenizer
from keras_bert.text.windows import BertWindowsPreprocessor
from keras_bert.training.losses import CoSENTLoss, MultipleNegativesRankingLoss
from keras_bert.training.optimization import AdamW, WarmupLinearDecay, create_optimizer
from keras_bert.training.pretraining import sentence_pairs

__all__ = [
    "AdamW",
    "BertCheckpoint",
    "BertClassifier",
    "BertConfig",
    "BertEncoder",
    "BertMultipleChoice",
    "BertMultipleChoicePreprocessor",
    "BertPacker",
    "BertPreprocessor",
    "BertPretrainer",
    "BertPretrainingPreprocessor",
    "BertQuestionAnswerer",
    "BertReranker",
    "BertTextEmbedder",
    "BertTextsPreprocessor",
    "BertTokenClassifier",
    "BertWindowsPreprocessor",
    "CoSENTLoss",
    "MultipleNegativesRankingLoss",
    "SpanWindows",
    "WordTagger",
    "BertTokenizer",
    "WarmupLinearDecay",
    "create_optimizer",
    "load_checkpoint",
    "save_checkpoint",
    "sentence_pairs",
]
