"""Shipped data: one resolver for the templates and example build configs; `trtspec build --example/--list-examples`."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from trtspec import resources
from trtspec.cli.main import cli, main
from trtspec.config import load_build_spec
from trtspec.errors import ConfigError, UsageError

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(p.stem for p in (ROOT / "build_configs").glob("*.yaml"))


def test_checkout_reads_the_top_level_directories():
    # This checkout has no trtspec/_data (only a built wheel does): the source of truth is read directly.
    assert not (ROOT / "trtspec" / "_data").exists()
    assert resources.data_dir(resources.MODEL_REPO) == ROOT / "model_repo"
    assert resources.data_dir(resources.BUILD_CONFIGS) == ROOT / "build_configs"
    assert resources.example_names() == EXAMPLES and "tiny-torch" in EXAMPLES


def test_shipped_copy_wins_over_the_checkout(tmp_path, monkeypatch):
    (tmp_path / "_data" / "build_configs").mkdir(parents=True)
    (tmp_path / "_data" / "build_configs" / "only-one.yaml").write_text("# One.\nname: only-one\noutput: x\n")
    monkeypatch.setattr(resources.importlib.resources, "files", lambda package: tmp_path)
    assert resources.data_dir(resources.BUILD_CONFIGS) == tmp_path / "_data" / "build_configs"
    assert resources.example_names() == ["only-one"]
    assert resources.data_dir(resources.MODEL_REPO) == ROOT / "model_repo"  # not shipped there: the checkout's


def test_no_other_path_lookup_of_the_shipped_directories():
    """Every lookup of model_repo/ and build_configs/ in the package goes through trtspec.resources."""
    offenders = []
    for path in sorted((ROOT / "trtspec").rglob("*.py")):
        if path.name == "resources.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                    node.value.strip("/") in (resources.MODEL_REPO, resources.BUILD_CONFIGS):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


def test_list_examples_names_every_example():
    result = CliRunner().invoke(cli, ["build", "--list-examples"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    listed = [line.split()[0] for line in result.output.splitlines()[:-1]]
    assert listed == EXAMPLES
    assert "Torch-path bundle of the embedded pair" in result.output
    result = CliRunner().invoke(cli, ["build", "--list-examples", "--json"], catch_exceptions=False)
    assert [e["name"] for e in json.loads(result.output)] == EXAMPLES


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_saved_anywhere_loads_and_writes_beside_itself(tmp_path, name):
    result = CliRunner().invoke(cli, ["build", "--example", name], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert f"trtspec build --example {name} " in result.output  # its usage comment names the portable command
    shipped = yaml.safe_load((ROOT / "build_configs" / f"{name}.yaml").read_text())
    saved = yaml.safe_load(result.output)
    assert saved == {**shipped, "output": f"out/build/{name}"}  # only output: differs from the shipped file
    (tmp_path / f"{name}.yaml").write_text(result.output)
    spec = load_build_spec(tmp_path / f"{name}.yaml")
    assert Path(spec.output) == tmp_path / "out" / "build" / name


def test_unknown_example_lists_the_valid_names(capsys):
    result = CliRunner().invoke(cli, ["build", "--example", "tiny-nope"])
    assert isinstance(result.exception, ConfigError)
    assert result.exception.field == "--example" and result.exception.value == "tiny-nope"
    assert all(name in result.exception.hint for name in EXAMPLES)
    with pytest.raises(SystemExit) as exc:
        main(["build", "--example", "tiny-nope"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Error: --example='tiny-nope': no such example build config" in err and "tiny-torch" in err


def test_example_and_config_do_not_go_together(tmp_path):
    result = CliRunner().invoke(cli, ["build", str(tmp_path / "x.yaml"), "--example", "tiny-torch"])
    assert isinstance(result.exception, UsageError) and "do not go together" in result.exception.message


def test_missing_config_hint_points_at_the_examples():
    result = CliRunner().invoke(cli, ["build"])
    assert isinstance(result.exception, UsageError)
    assert "trtspec build --example" in result.exception.hint and "build_configs/" not in result.exception.hint
