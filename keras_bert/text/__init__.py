"""Raw strings to encoder inputs: clean-up, vocabulary, WordPiece tokenizer, packer,
the task preprocessors, and reading a user's text files."""
