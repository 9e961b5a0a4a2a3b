"""Fixtures for the Triton tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.triton.helpers import make_tokenizer


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tokenizer(tmp_path_factory.mktemp("tokenizer"))
