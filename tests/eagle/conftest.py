"""EAGLE fixtures: a 4-layer random target (three distinct taps), a drafter trained for it through the CLI
(NVIDIA ModelOpt, a few dozen steps), and the embedded pair when it is present."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import make_random_llama
from tests.shared_files import made_once
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
    def make(base: Path) -> None:
        make_random_llama(base / "target", hidden=48, layers=4, heads=4, kv_heads=2, seed=3)

    return made_once(tmp_path_factory, "eagle_target", make) / "target"


@pytest.fixture(scope="session")
def trained_eagle(eagle_target, tmp_path_factory) -> tuple[Path, dict]:
    def make(base: Path) -> None:
        result = CliRunner().invoke(cli, ["train", "eagle", "--model", str(eagle_target), "--steps", "40", "--prompts",
                                          "16", "--gen-len", "40", "--corpus-windows", "0", "--batch-size", "8",
                                          "--out", str(base / "drafter"), "--json"], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        (base / "report.json").write_text(result.stdout)

    base = made_once(tmp_path_factory, "trained_eagle", make)
    return base / "drafter", json.loads((base / "report.json").read_text())


@pytest.fixture(scope="session")
def embedded_eagle() -> tuple[Path, Path]:
    target, drafter = EMBEDDED_MODELS / "tiny", EMBEDDED_MODELS / "tiny-eagle"
    if not (drafter / "model.safetensors").is_file():
        pytest.skip("embedded tiny-eagle not present yet")
    return target, drafter
