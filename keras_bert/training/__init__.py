"""Training: the optimizer recipe, losses, metrics, strategies, batching of raw data,
pre-training instances."""
