"""EAGLE fixtures: a 4-layer random target (three distinct taps), a drafter trained for it through the CLI
(NVIDIA ModelOpt, a few dozen steps), and the embedded pair when it is present."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import make_random_llama
from trtspec.cli.main import cli
from trtspec.models import EMBEDDED_MODELS

PROMPTS = [[5, 9, 3, 7, 5, 9, 3, 2, 11], [4], [17, 30, 2, 8, 41, 8, 41, 8, 63, 12, 30, 2, 8], [6, 6, 7, 50, 3]]


@pytest.fixture(autouse=True, scope="session")
def _few_threads() -> None:
    import torch

    torch.set_num_threads(1)  # 2 shared cores on CI machines


@pytest.fixture(scope="session")
def eagle_target(tmp_path_factory) -> Path:
    """A random 4-layer target: taps (1, 2, 3) by default."""
    return make_random_llama(tmp_path_factory.mktemp("eagle_target") / "target", hidden=48, layers=4, heads=4,
                             kv_heads=2, seed=3)


@pytest.fixture(scope="session")
def trained_eagle(eagle_target, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("eagle") / "drafter"
    result = CliRunner().invoke(cli, ["train", "eagle", "--model", str(eagle_target), "--steps", "40", "--prompts",
                                      "16", "--gen-len", "40", "--corpus-windows", "0", "--batch-size", "8",
                                      "--out", str(out), "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return out, json.loads(result.stdout)


@pytest.fixture(scope="session")
def embedded_eagle() -> tuple[Path, Path]:
    target, drafter = EMBEDDED_MODELS / "tiny", EMBEDDED_MODELS / "tiny-eagle"
    if not (drafter / "model.safetensors").is_file():
        pytest.skip("embedded tiny-eagle not present yet")
    return target, drafter
