import json
import re
import subprocess
import sys

import pytest
from click.testing import CliRunner

from tests import cli_checks
from trtspec.cli.main import cli, main


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """`trtspec ARGS` in this process (tests/cli_checks.py), as a CompletedProcess."""
    code, out, err = cli_checks.run_cli(list(args), limit=120)
    return subprocess.CompletedProcess(["trtspec", *args], code, out, err)


def run_process(*args: str) -> subprocess.CompletedProcess:
    """`python -m trtspec ARGS`: for what only a process shows (a traceback printed on the way out)."""
    return subprocess.run([sys.executable, "-m", "trtspec", *args], capture_output=True, text=True, timeout=120)


def test_help_and_version():
    result = CliRunner().invoke(cli, ["--help"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "doctor" in result.output
    result = CliRunner().invoke(cli, ["--version"], catch_exceptions=False)
    assert result.exit_code == 0 and "trtspec" in result.output


def test_doctor_reports_tensorrt_llm_unavailable_without_traceback():
    proc = run_cli("doctor", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    checks = {c["name"]: c for c in json.loads(proc.stdout)}
    assert checks["torch"]["ok"] and checks["tritonserver"]["ok"]
    trt = checks["tensorrt_llm"]
    assert not trt["required"]
    if not trt["ok"]:
        assert "unavailable" in trt["detail"] and "Traceback" not in proc.stderr
    assert checks["model tiny"]["ok"] and checks["model tiny-draft"]["ok"]


def test_unknown_model_exits_2_with_path_and_no_traceback():
    proc = run_cli("models", "no-such-model")
    assert proc.returncode == 2
    assert "no-such-model" in proc.stderr and "Hint:" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_directory_without_config_names_missing_file(tmp_path):
    proc = run_cli("models", str(tmp_path))
    assert proc.returncode == 2
    assert str(tmp_path / "config.json") in proc.stderr and "missing" in proc.stderr


@pytest.mark.process
def test_debug_shows_traceback(tmp_path):
    proc = run_process("--debug", "models", str(tmp_path))
    assert proc.returncode != 0 and "Traceback" in proc.stderr


def test_main_maps_errors_to_exit_code(tmp_path, capsys):
    try:
        main(["models", str(tmp_path / "nope")])
    except SystemExit as exc:
        assert exc.code == 2
    assert "Error:" in capsys.readouterr().err


def _commands(group, path=("trtspec",)):
    """The paths of the root group and of every command and subcommand under it."""
    import click

    yield path
    for name in group.list_commands(None):
        command = group.get_command(None, name)
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))
        else:
            yield (*path, name)


def _examples(help_text: str) -> list[str]:
    """The `trtspec ...` commands of the help's Examples: section (up to the next section: Options:, Commands:), a
    command continued over lines with a shell backslash joined into one."""
    section = help_text.split("Examples:", 1)[1].split("\nOptions:", 1)[0].split("\nCommands:", 1)[0]
    joined = re.sub(r" \\\n\s+", " ", section)
    return [line.strip() for line in joined.splitlines() if line.strip().startswith("trtspec ")]


def test_every_command_help_shows_examples_that_parse():
    """Each command's --help shows an Examples: block (click's \\b, not rewrapped) of `trtspec ...` lines, and each
    example names a real command with options it has, the values they need and its required parameters, with no run of
    stray spaces (a docstring's bare backslash-newline)."""
    import shlex

    import click

    walked = []
    for path in _commands(cli):
        walked.append(" ".join(path))
        result = CliRunner().invoke(cli, [*path[1:], "--help"], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        assert "Examples:" in result.output, f"{' '.join(path)} --help shows no Examples:"
        examples = _examples(result.output)
        assert 1 <= len(examples) <= 3, (path, examples)
        for example in examples:  # a docstring's bare backslash-newline joins its lines with the indent between
            assert not re.search(r"\S {3,}\S", example), f"{' '.join(path)} --help: stray spaces in {example!r}"
        for example in examples:
            for part in example.split("&&"):
                words = shlex.split(part.split(">")[0])  # the command, without a redirection
                assert words[0] == "trtspec", example
                target, name, args = cli, "trtspec", words[1:]
                while isinstance(target, click.Group):
                    name, args = args[0], args[1:]
                    target = target.get_command(None, name)
                    assert target is not None, f"{example}: no command {name!r}"
                opts, rest, _ = target.make_parser(click.Context(target, info_name=name)).parse_args(list(args))
                assert not rest, f"{example}: extra arguments {rest}"
                for param in target.params:
                    if param.required:
                        assert isinstance(opts.get(param.name), (str, tuple, list)), f"{example}: no {param.name}"
    assert {"trtspec", "trtspec train medusa", "trtspec tune tree", "trtspec serve"} <= set(walked)
    assert len(walked) == 20  # the root, its 15 commands (train and tune groups), train's 3 and tune's 1
