"""Fixtures for the Triton tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.triton.helpers import build_example, make_tokenizer, with_tokenizer

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tokenizer(tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture(scope="session")
def tokenized_pair(random_pair, tokenizer_dir, tmp_path_factory) -> tuple[Path, Path]:
    """The random test pair (vocab 64) with the character tokenizer in both checkpoints."""
    base = tmp_path_factory.mktemp("tokenized_pair")
    target, draft = random_pair
    return with_tokenizer(target, tokenizer_dir, base / "target"), with_tokenizer(draft, tokenizer_dir, base / "draft")


@pytest.fixture(scope="module")
def torch_bundle(tmp_path_factory) -> Path:
    """The torch bundle of the embedded pair, built the way `trtspec build build_configs/tiny-torch.yaml` builds it;
    one per module (each module's server renders its repository beside it). Its repositories render the 0.19.0
    contract, the one the requests of NVIDIA's v0.19.0 clients (nvidia_requests.py: random_seed, min_length) are
    written for; a test that wants another target passes trtllm_version (test_llmapi.py: 1.2.1)."""
    return build_example("tiny-torch", tmp_path_factory.mktemp("torch") / "bundle", trtllm={"version": "0.19.0"})
