"""The task models (classifier, multiple choice, question answerer, token classifier,
pretrainer), their training entry points and their in-graph decoding."""
