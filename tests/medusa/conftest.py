"""Medusa fixtures: heads for the random target, trained for a handful of steps through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from trtspec.cli.main import cli

HEADS, LAYERS = 4, 1


@pytest.fixture(autouse=True, scope="session")
def _few_threads() -> None:
    import torch

    torch.set_num_threads(1)  # 2 shared cores on CI machines


@pytest.fixture(scope="session")
def trained_heads(random_pair, tmp_path_factory) -> tuple[Path, dict]:
    """Heads for the random target, trained for a handful of steps through the CLI."""
    target, _ = random_pair
    out = tmp_path_factory.mktemp("medusa") / "heads"
    result = CliRunner().invoke(cli, ["train", "medusa", "--model", str(target), "--heads", str(HEADS), "--layers",
                                      str(LAYERS), "--steps", "4", "--prompts", "8", "--gen-len", "24",
                                      "--max-draft-len", "31", "--out", str(out), "--json"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    return out, report
