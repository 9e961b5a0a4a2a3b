"""Fixtures for the Triton tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.triton.helpers import make_tokenizer, with_tokenizer


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tokenizer(tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture(scope="session")
def tokenized_pair(random_pair, tokenizer_dir, tmp_path_factory) -> tuple[Path, Path]:
    """The random test pair (vocab 64) with the character tokenizer in both checkpoints."""
    base = tmp_path_factory.mktemp("tokenized_pair")
    target, draft = random_pair
    return with_tokenizer(target, tokenizer_dir, base / "target"), with_tokenizer(draft, tokenizer_dir, base / "draft")
