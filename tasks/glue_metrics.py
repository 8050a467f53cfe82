"""GLUE's official metrics, written out in NumPy: accuracy, F1 of the positive class (MRPC,
QQP), Matthews correlation (CoLA), Pearson and Spearman correlations (STS-B). The GLUE
benchmark's scoring takes them from scikit-learn and SciPy, which this project does not install."""

import numpy as np


def accuracy(predictions, labels):
    return float(np.mean(predictions == labels))


def f1(predictions, labels):
    true_positive = np.sum((predictions == 1) & (labels == 1))
    precision = true_positive / max(np.sum(predictions == 1), 1)
    recall = true_positive / max(np.sum(labels == 1), 1)
    return float(2 * precision * recall / max(precision + recall, 1e-12))


def matthews(predictions, labels):
    tp = np.sum((predictions == 1) & (labels == 1))
    tn = np.sum((predictions == 0) & (labels == 0))
    fp = np.sum((predictions == 1) & (labels == 0))
    fn = np.sum((predictions == 0) & (labels == 1))
    denominator = np.sqrt(float((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)))
    return float((tp * tn - fp * fn) / denominator) if denominator else 0.0


def pearson(x, y):
    return float(np.corrcoef(x, y)[0, 1])


def ranks(values):
    """Ranks starting at 1; ties share the mean of their ranks (as Spearman's rho needs)."""
    order = np.argsort(values, kind="mergesort")
    sorted_values = values[order]
    result = np.empty(len(values))
    start = 0
    for end in range(1, len(values) + 1):
        if end == len(values) or sorted_values[end] != sorted_values[start]:
            result[order[start:end]] = (start + end + 1) / 2.0
            start = end
    return result


def spearman(x, y):
    return pearson(ranks(np.asarray(x)), ranks(np.asarray(y)))


def compute(task, logits, labels):
    """A GLUE task's metrics (a `tasks.glue.Task`'s `metrics`) of logits (examples, classes),
    or for regression scores (examples, 1), against labels (examples,)."""
    if task.labels is None:
        scores = logits[:, 0]
        return {"pearson": pearson(scores, labels), "spearman": spearman(scores, labels)}
    predictions = np.argmax(logits, axis=-1)
    results = {"accuracy": accuracy(predictions, labels)}
    if "f1" in task.metrics:
        results["f1"] = f1(predictions, labels)
    if "mcc" in task.metrics:
        results["mcc"] = matthews(predictions, labels)
    return results
