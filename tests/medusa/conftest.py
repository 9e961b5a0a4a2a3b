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
    from tests.shared_files import made_once

    target, _ = random_pair

    def make(base: Path) -> None:
        result = CliRunner().invoke(cli, ["train", "medusa", "--model", str(target), "--heads", str(HEADS), "--layers",
                                          str(LAYERS), "--steps", "4", "--prompts", "8", "--gen-len", "24",
                                          "--max-draft-len", "31", "--out", str(base / "heads"), "--json"],
                                    catch_exceptions=False)
        assert result.exit_code == 0, result.output
        (base / "report.json").write_text(result.stdout)

    base = made_once(tmp_path_factory, "trained_heads", make)
    return base / "heads", json.loads((base / "report.json").read_text())
