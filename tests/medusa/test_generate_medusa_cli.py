"""`trtspec generate --method medusa` on the embedded tiny + tiny-medusa: greedy parity, lossy label, bad choices."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from trtspec.cli.main import cli
from trtspec.models import EMBEDDED_MODELS


@pytest.fixture(scope="module")
def embedded_medusa() -> None:
    for name in ("tiny", "tiny-medusa"):
        if not (EMBEDDED_MODELS / name / "config.json").is_file():
            pytest.skip(f"embedded {name} not present")


def _generate(*args: str) -> dict:
    result = CliRunner().invoke(cli, ["generate", "def parse(text):\n", "--max-new-tokens", "24", "--json", *args],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_greedy_medusa_matches_plain_decoding(embedded_medusa):
    plain = _generate("--method", "none")
    for extra in ([], ["--choices", "mc_sim_7b_63"], ["--choices", "[[0], [1], [0, 0]]", "--k", "3"]):
        medusa = _generate("--method", "medusa", *extra)
        assert medusa["token_ids"] == plain["token_ids"]
        assert medusa["lossless"] is True and medusa["num_drafts"] > 0


def test_typical_acceptance_is_labelled_lossy(embedded_medusa):
    out = _generate("--method", "medusa", "--typical", "--temperature", "0.7", "--seed", "3")
    assert out["acceptance"] == "typical_lossy" and out["lossless"] is False
    result = CliRunner().invoke(cli, ["generate", "--help"])
    assert "LOSSY" in result.output


def test_choices_deeper_than_the_heads_are_refused(embedded_medusa, tmp_path, capsys):
    bad = tmp_path / "tree.yaml"
    bad.write_text("medusa_choices:\n  - [0]\n  - [0, 0]\n  - [0, 0, 0]\n  - [0, 0, 0, 0]\n  - [0, 0, 0, 0, 0]\n")
    from trtspec.cli.main import main

    with pytest.raises(SystemExit) as info:
        main(["generate", "x", "--method", "medusa", "--choices", str(bad)])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "[0, 0, 0, 0, 0]" in err and "only 4 heads" in err and "Traceback" not in err
