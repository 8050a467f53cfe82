"""The batch the encoder parity test runs: five sentences of different lengths and a pair."""

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "BERT reads a sentence in both directions at once.",
    "Short.",
    "Naïve café owners in Zürich serve crème brûlée, 中文 and emoji 😀 too!",
    "A considerably longer sentence, with several clauses, some punctuation; and a few rare "
    "words such as sesquipedalian and antidisestablishmentarianism, to make the batch ragged.",
]
PAIR = ("How old is the universe?", "The universe is about 13.8 billion years old.")
