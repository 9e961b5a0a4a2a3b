"""Adding a method is one new module plus one registration line (issue 41, acceptance line 1).

A throwaway home, `echo_test`, is written to a temp module with its proposer (the last token repeated k times: a poor
draft, but greedy verification keeps the output the target's own), registered with `trtspec.methods.register`, and
then the CLI (`trtspec generate`, `trtspec build --dry-run`), the build plan and the engine all see it. The fixture
unregisters it, so no other test's table has it (tests/test_methods_choices.py asserts the table's contents).
"""

from __future__ import annotations

import importlib
import json
import sys

import pytest
import yaml
from click.testing import CliRunner

from trtspec import methods
from trtspec.cli.main import cli
from trtspec.errors import ConfigError

HOME = '''\
"""Method `echo_test`: the last token, repeated (a throwaway home for tests/test_method_registration.py)."""

from __future__ import annotations

from typing import ClassVar

import torch

from trtspec.methods.base import FlagRow, MethodInfo
from trtspec.spec.proposers.base import Draft, ProposeInput, Proposer, ProposerContext

ECHO_TEST = MethodInfo(
    name="echo_test",
    summary="drafts the last token k times",
    trtllm_build_mode=None,
    triton_decoding_mode="",
    llmapi_decoding_type=None,
    proposer="echo_test",
    proposer_class="{module}:EchoProposer",
    trtllm_unsupported="echo_test is a test method: no TensorRT-LLM decoding mode repeats the last token",
    flags=(FlagRow("--echo-repeat", "echo_repeat", "int", "Method echo_test: how often the last token repeats.",
                   bounds=(1, 8)),),
)

DECLARES = (ECHO_TEST,)


class EchoProposer(Proposer):
    name: ClassVar[str] = "echo_test"

    @classmethod
    def create(cls, ctx: ProposerContext) -> EchoProposer:
        return cls()

    def propose(self, batch: list[ProposeInput]) -> list[Draft]:
        return [Draft(token_ids=torch.tensor([item.token_ids[-1]] * item.k, dtype=torch.long)) for item in batch]
'''

PROMPT = "def fibonacci(n):"


@pytest.fixture
def echo_home(tmp_path, monkeypatch):
    """The temp home module, importable (sys.path) and registered: the one line a new method adds."""
    module = f"echo_home_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{module}.py").write_text(HOME.replace("{module}", module))
    monkeypatch.syspath_prepend(str(tmp_path))
    home = importlib.import_module(module)
    before = (list(methods.METHODS), tuple(methods.METHOD_SECTIONS), dict(methods.SECTION_MODELS))
    methods.register(home)  # the registration line
    try:
        yield home
    finally:
        methods.unregister(home)
        sys.modules.pop(module, None)
        assert (list(methods.METHODS), tuple(methods.METHOD_SECTIONS), dict(methods.SECTION_MODELS)) == before


def _generate(*args: str) -> dict:
    result = CliRunner().invoke(cli, ["generate", "--json", "--max-new-tokens", "24", "--temperature", "0", *args,
                                      PROMPT], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.output.strip().splitlines()[-1])


def test_cli_generate_runs_it_with_the_targets_greedy_output(echo_home):
    plain = _generate("--method", "none")
    echo = _generate("--method", "echo_test", "--k", "3")
    assert echo["method"] == "echo_test" and echo["num_draft_tokens"] > 0
    assert echo["token_ids"] == plain["token_ids"] and echo["text"] == plain["text"]


def test_every_table_sees_it_and_forgets_it(echo_home):
    from trtspec.contracts.engine import METHOD_PARTS
    from trtspec.spec.proposers import PROPOSERS, runnable_methods
    from trtspec.triton.repo import METHOD_FEATURES

    assert methods.resolve("echo_test") is echo_home.ECHO_TEST and "echo_test" in methods.engine_methods()
    assert PROPOSERS["echo_test"] is echo_home.EchoProposer and "echo_test" in runnable_methods()
    assert "echo_test" not in METHOD_FEATURES and all("echo_test" not in owners for owners in METHOD_PARTS.values())
    with pytest.raises(ValueError, match="already registered"):
        methods.register(echo_home.ECHO_TEST)
    methods.unregister("echo_test")
    try:
        assert "echo_test" not in methods.METHODS and "echo_test" not in PROPOSERS
        assert "echo_test" not in runnable_methods()
        result = CliRunner().invoke(cli, ["generate", "--method", "echo_test", PROMPT])
        assert result.exit_code == 2 and "echo_test" in result.output
    finally:
        methods.register(echo_home)  # the fixture unregisters it


def _help(*command: str) -> str:
    result = CliRunner().invoke(cli, [*command, "--help"], terminal_width=200, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_its_flag_row_shows_in_every_command_that_sets_an_engine(echo_home):
    """The home's one flag row is an option of `trtspec generate` and `trtspec serve` (registered after the commands
    were defined), in the methods' knobs after the built-in ones; deploy takes only rows with a deploy note."""
    generate, serve = _help("generate"), _help("serve")
    assert "--echo-repeat INTEGER RANGE" in generate and "Method echo_test: how often the last token repeats." in generate
    assert "[--dynamo, --trtllm-serve] Method echo_test: how often" in serve
    assert serve.index("--eagle-depth") < serve.index("--echo-repeat") < serve.index("--log-prompts")
    assert "--echo-repeat" not in _help("deploy")
    result = CliRunner().invoke(cli, ["generate", "--method", "echo_test", "--echo-repeat", "9", PROMPT])
    assert result.exit_code == 2 and "--echo-repeat" in result.output and "1<=x<=8" in result.output  # its bounds
    methods.unregister("echo_test")
    try:
        assert "--echo-repeat" not in _help("generate") and "--echo-repeat" not in _help("serve")
    finally:
        methods.register(echo_home)  # the fixture unregisters it


def _config(tmp_path, backend: str) -> str:
    config = {"name": f"tiny-echo-{backend}", "backend": backend, "method": "echo_test", "target": "tiny",
              "max_draft_len": 4, "output": str(tmp_path / "out"),
              "engine": {"dtype": "float32", "max_batch_size": 4, "max_input_len": 128, "max_seq_len": 256}}
    path = tmp_path / f"{backend}.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def test_build_plans_it_for_torch_and_refuses_it_for_tensorrtllm(echo_home, tmp_path):
    result = CliRunner().invoke(cli, ["build", _config(tmp_path, "torch"), "--dry-run", "--json"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert '"echo_test"' in result.output and not (tmp_path / "out").exists()

    result = CliRunner().invoke(cli, ["build", _config(tmp_path, "tensorrtllm"), "--dry-run"])
    assert isinstance(result.exception, ConfigError), result.output  # trtspec's main prints it, exit code 2
    assert "method='echo_test'" in str(result.exception)
    assert "no TensorRT-LLM decoding mode repeats the last token" in str(result.exception)


def test_engine_lists_it_and_generates_with_it(echo_home):
    from trtspec.spec.engine import SpecEngine
    from trtspec.spec.params import SamplingParams, SpecParams

    engine = SpecEngine.from_pretrained("tiny")
    assert "echo_test" in engine.available_methods
    greedy = SamplingParams(temperature=0.0, max_new_tokens=24)
    [plain] = engine.generate([PROMPT], greedy, SpecParams(method="none", k=0))
    [echo] = engine.generate([PROMPT], greedy, SpecParams(method="echo_test", k=3))
    assert echo.token_ids == plain.token_ids
    assert echo.stats.num_draft_tokens > 0  # it drafted (and verification kept the target's own tokens)




def test_the_built_in_homes_register_through_the_same_line():
    import inspect

    source = inspect.getsource(methods)
    assert [home.__name__.rsplit(".", 1)[-1] for home in methods.HOMES] == \
        ["none", "draft_target", "ngram", "suffix", "medusa", "eagle", "lookahead", "redrafter", "mtp", "hybrid"]
    for home in methods.HOMES:
        assert f"\nregister({home.__name__.rsplit('.', 1)[-1]})\n" in source


def test_a_bare_method_info_registers_and_bad_homes_are_refused():
    from trtspec.errors import UnknownMethodError
    from trtspec.methods.base import MethodInfo

    info = MethodInfo(name="echo_bare", summary="no proposer", trtllm_build_mode=None, triton_decoding_mode="",
                      llmapi_decoding_type=None, proposer=None)
    assert methods.register(info) == ("echo_bare",)
    try:
        assert methods.resolve("echo_bare") is info and "echo_bare" not in methods.engine_methods()
    finally:
        methods.unregister(info)
    assert "echo_bare" not in methods.METHODS
    with pytest.raises(TypeError, match="not a method home"):
        methods.register(object())
    with pytest.raises(ValueError, match="proposer and proposer_class"):
        methods.register(MethodInfo(name="echo_half", summary="", trtllm_build_mode=None, triton_decoding_mode="",
                                    llmapi_decoding_type=None, proposer="echo_half"))
    assert "echo_half" not in methods.METHODS
    with pytest.raises(UnknownMethodError):
        methods.unregister("echo_bare")
