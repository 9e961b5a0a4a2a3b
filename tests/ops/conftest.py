"""The Triton tests' fixtures (a tokenizer, the tokenized random pair) for the operations tests."""

from tests.triton.conftest import tokenized_pair, tokenizer_dir  # noqa: F401
