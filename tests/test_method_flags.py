"""Each method's command-line flags are data rows in its home (`MethodInfo.flags`); cli/_engine.py makes the click
options of every registered home's rows at each use. These tests read the rows from the homes (none is copied here)
and check where the commands list them, that a home's rows are checked at registration, and that `trtspec generate`
applies the rows it has no option of its own for (a registered method's flag is then an engine parameter, as in
`trtspec serve --dynamo`). A throwaway method's row: tests/test_method_registration.py."""

from __future__ import annotations

import json

import click
import pytest
from click.testing import CliRunner

from trtspec import methods
from trtspec.cli._engine import FLAGS, EngineCommand, MethodSlot, flag_of
from trtspec.cli.main import cli, main
from trtspec.methods.base import FlagRow, MethodInfo

PROMPT = "def fibonacci(n):"


def _rows() -> list[FlagRow]:
    """Every home's rows in table order; a row shared by several homes (the hybrids' --hybrid) once."""
    return list(dict.fromkeys(row for info in methods.METHODS.values() for row in info.flags))


def _commands(group: click.Group = cli, path: tuple[str, ...] = ()):
    ctx = click.Context(group)
    for name in group.list_commands(ctx):  # the root group imports its subcommands lazily
        command = group.get_command(ctx, name)
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))
        else:
            yield (*path, name), command


def test_the_engine_flags_list_each_homes_rows_in_table_order_at_their_places():
    flags = list(FLAGS)
    checkpoints = [row.flag for row in _rows() if row.checkpoint]
    knobs = [row.flag for row in _rows() if not row.checkpoint]
    assert checkpoints and knobs  # the built-in homes declare both kinds
    at = flags.index("--model") + 1
    assert flags[at:at + len(checkpoints)] == checkpoints and flags[at + len(checkpoints)] == "--method"
    at = flags.index("--device") + 1
    assert flags[at:at + len(knobs)] == knobs and flags[at + len(knobs)] == "--log-prompts"
    for row in _rows():  # an error about the row's parameter names the row's flag (NAME=VALUE rows: and the NAME)
        suffix = "some_name" if row.multiple else ""
        assert flag_of(f"parameter {row.field}{suffix}") == f"{row.flag} {suffix}".strip()


def test_deploy_takes_the_rows_with_a_deploy_note_each_followed_by_it():
    result = CliRunner().invoke(cli, ["deploy", "--help"], terminal_width=1000, catch_exceptions=False)
    lines = {line.split()[0]: line for line in result.output.splitlines() if line.strip().startswith("--")}
    for row in _rows():
        if row.deploy is None:
            assert row.flag not in lines
        else:
            assert f"{row.help} {row.deploy}" in lines[row.flag]


def test_every_command_with_a_method_slot_lists_its_rows():
    """A slot is only filled by an EngineCommand (else the command would silently lack the methods' flags)."""
    with_slots = [path for path, command in _commands() if any(isinstance(p, MethodSlot) for p in command.params)]
    assert {("serve",), ("deploy",), ("generate",)} <= set(with_slots)
    for path, command in _commands():
        if path in with_slots:
            assert isinstance(command, EngineCommand), path


def _method(name: str, *rows: FlagRow) -> MethodInfo:
    return MethodInfo(name=name, summary="a test method", trtllm_build_mode=None, triton_decoding_mode="",
                      llmapi_decoding_type=None, proposer=None, flags=rows)


def test_a_homes_rows_are_checked_when_it_registers():
    with pytest.raises(ValueError, match="kind 'float'"):
        methods.register(_method("flag_kind_test", FlagRow("--flag-kind-test", "x", "float", "bad kind")))
    taken = _rows()[0]
    with pytest.raises(ValueError, match=f"flag {taken.flag} is method"):
        methods.register(_method("flag_taken_test", FlagRow(taken.flag, "x", "text", "another row, same flag")))
    assert "flag_kind_test" not in methods.METHODS and "flag_taken_test" not in methods.METHODS


def _generate(*args: str) -> dict:
    result = CliRunner().invoke(cli, ["generate", "--json", "--max-new-tokens", "24", "--temperature", "0", *args,
                                      PROMPT], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.output.strip().splitlines()[-1])


def test_generate_applies_the_rows_it_has_no_option_of_its_own_for():
    """--eagle-topk 1 --eagle-depth 2 shape EAGLE-3's dynamic tree into a 2-token chain: every draft holds 2 tokens
    (by default a top-4 x 6-level tree of up to k = 8 nodes), and greedy output stays the target's."""
    plain = _generate("--method", "none")
    chain = _generate("--method", "eagle3", "--k", "8", "--eagle-topk", "1", "--eagle-depth", "2")
    assert chain["token_ids"] == plain["token_ids"]
    assert chain["num_drafts"] > 0 and chain["num_draft_tokens"] == 2 * chain["num_drafts"]
    assert len(chain["num_accepted_tokens_per_pos"]) == 2


def _exit(argv: list[str], capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as info:
        main(argv)
    return info.value.code, capsys.readouterr().err


def test_generate_refuses_a_rows_value_for_another_method_naming_the_flag(capsys):
    code, err = _exit(["generate", "--method", "ngram", "--suffix", "tree=false", PROMPT], capsys)
    assert code == 2 and err.startswith("Error: --suffix=") and "the method is ngram" in err
    code, err = _exit(["generate", "--url", "localhost:8001", "--eagle-topk", "2", PROMPT], capsys)
    assert code == 2 and err.startswith("Error: --eagle-topk") and "--url" in err and "Traceback" not in err


def test_draft_runtime_is_draft_targets_row_shared_by_suffix_draft():
    """--draft-runtime runs the draft model: draft_target's knob, the same row in suffix_draft (its model drafter),
    listed once after --device; deploy takes it (torch flavour)."""
    row = next(row for row in methods.METHODS["draft_target"].flags if row.flag == "--draft-runtime")
    assert row.field == "draft_runtime" and not row.checkpoint and row.deploy is not None
    assert row in methods.METHODS["suffix_draft"].flags
    assert [r for r in methods.METHODS["suffix_eagle3"].flags if r.flag == "--draft-runtime"] == []
    assert list(FLAGS).count("--draft-runtime") == 1 and flag_of("parameter draft_runtime") == "--draft-runtime"


@pytest.mark.parametrize("argv", [
    ["generate", "--method", "draft_target", "--draft-runtime", "tvm", PROMPT],
    ["serve", "--dynamo", "1", "--dry-run", "--draft-runtime", "tvm"],
])
def test_a_bad_draft_runtime_is_one_line_naming_the_flag_and_the_choices(argv, capsys):
    code, err = _exit(argv, capsys)
    first, *rest = err.strip().splitlines()
    assert code == 2 and first == "Error: --draft-runtime='tvm': is not one of torch, onnx", err
    assert all(line.startswith("Hint:") for line in rest) and "Traceback" not in err


def test_draft_runtime_onnx_needs_a_float32_cpu_draft_naming_the_flag(capsys):
    code, err = _exit(["generate", "--method", "eagle3", "--draft-runtime", "onnx", PROMPT], capsys)
    assert code == 2 and err.startswith("Error: --draft-runtime='onnx': runs a float32 draft model on the CPU")
    assert "draft None" in err and "--draft-runtime torch" in err
    code, err = _exit(["generate", "--method", "draft_target", "--dtype", "float16", "--draft-runtime", "onnx",
                       PROMPT], capsys)
    assert code == 2 and "dtype float16" in err


@pytest.mark.parametrize("method", ["draft_target", "suffix_draft"])
def test_generate_draft_runtime_onnx_runs_the_draft_in_onnx_runtime_with_the_same_output(method, monkeypatch,
                                                                                         tmp_path):
    """The same greedy tokens and the same drafts accepted as the torch runner's (the hybrid's model drafter too); the
    draft's ONNX export is made in the (temporary) cache, which shows the ONNX runner ran."""
    pytest.importorskip("onnxruntime", reason="draft_runtime onnx needs the optional extra trtspec[onnx]")
    pytest.importorskip("onnx", reason="draft_runtime onnx needs the optional extra trtspec[onnx]")
    monkeypatch.setenv("TRTSPEC_CACHE_DIR", str(tmp_path))
    torch_run = _generate("--method", method, "--k", "4")
    assert not list(tmp_path.rglob("*.onnx"))
    onnx_run = _generate("--method", method, "--k", "4", "--draft-runtime", "onnx")
    assert list(tmp_path.rglob("*.onnx"))
    assert onnx_run["token_ids"] == torch_run["token_ids"]
    assert onnx_run["num_accepted_tokens_per_pos"] == torch_run["num_accepted_tokens_per_pos"]
