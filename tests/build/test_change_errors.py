"""A change planned from files a user may have edited is refused with one line naming the file, the key and the fix
(exit 2), never a traceback: the trtllm-serve form (a PyTorch-workflow build: its options file and its manifest's
serve command) and Triton's llmapi model (its model.yaml). The build and deploy are trtspec's own (a second or two)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from tests.cli_checks import run_cli
from trtspec.contracts.control import SpeculationChange
from trtspec.errors import ConfigError, UsageError

CONFIG = {"name": "tiny-dt", "method": "draft_target", "target": "tiny", "draft": "tiny-draft", "max_draft_len": 4,
          "workflow": "pytorch", "trtllm": {"version": "1.2.1"},
          "engine": {"max_batch_size": 8, "max_input_len": 128, "max_seq_len": 256, "max_num_tokens": 1024}}
OPTIONS = "llm-api/extra_llm_api_options.yaml"


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("change-errors")
    config = base / "tiny-dt.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    out = {"build": base / "build", "llmapi": base / "llmapi"}
    for argv in (["build", config, "--out", out["build"]],
                 ["deploy", "--backend", "tensorrtllm", "--build", out["build"], "--out", out["llmapi"]]):
        code, _, err = run_cli([str(a) for a in argv])
        assert code == 0, (argv, err)
    return out


@pytest.fixture
def build(made, tmp_path) -> Path:
    """A copy of the build output, for one test to edit."""
    return Path(shutil.copytree(made["build"], tmp_path / "build"))


def _edit_yaml(path: Path, edit) -> None:
    data = yaml.safe_load(path.read_text())
    edit(data)
    path.write_text(yaml.safe_dump(data))


def _one_line_refusal(argv: list[str], *needles: str) -> str:
    code, _, err = run_cli(argv)
    lines = err.strip().splitlines()
    assert code == 2 and lines[0].startswith("Error: ") and "Traceback" not in err, err
    assert all(needle in lines[0] for needle in needles), lines[0]
    return lines[0]


@pytest.mark.parametrize("speculative, key", [
    ({"decoding_type": "Draft_Target", "max_draft_len": "four"}, "speculative_config.max_draft_len"),
    ({"decoding_type": "Draft_Target", "max_draft_len": -1}, "speculative_config.max_draft_len"),
    ({"decoding_type": "Draft_Target", "max_draft_len": True}, "speculative_config.max_draft_len"),
    (["Draft_Target", 4], "speculative_config"),
])
def test_a_bad_max_draft_len_in_the_options_file_is_one_line_naming_file_and_key(build, speculative, key):
    from trtspec.build.change import plan_serve_change, served_speculation

    _edit_yaml(build / OPTIONS, lambda data: data.update(speculative_config=speculative))
    for call in (lambda: served_speculation(build, "m"), lambda: plan_serve_change(build, SpeculationChange(2))):
        with pytest.raises(ConfigError) as info:
            call()
        assert info.value.field == f"{build / OPTIONS}: {key}" and "\n" not in str(info.value)
        assert str(build / OPTIONS) in (info.value.hint or "")
    _one_line_refusal(["set-k", "2", "--deployment", f"trtllm-serve:{build}", "--dry-run"], key, str(build / OPTIONS))


def test_an_options_file_without_max_draft_len_serves_k_0(build):
    from trtspec.build.change import served_speculation

    _edit_yaml(build / OPTIONS, lambda data: data["speculative_config"].pop("max_draft_len"))
    assert served_speculation(build, "m").default_k == 0


def test_an_edited_serve_command_in_the_manifest_is_refused_naming_the_manifest(build):
    from trtspec.build.change import plan_serve_change
    from trtspec.contracts.build_output import MANIFEST

    manifest = json.loads((build / MANIFEST).read_text())
    manifest["serve"]["trtllm-serve"]["argv"] += ["--no-such-flag", "1"]
    (build / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(UsageError, match=r"--no-such-flag: not a trtllm-serve option of TensorRT-LLM 1\.2\.1") as info:
        plan_serve_change(build, SpeculationChange(2))
    assert str(build / MANIFEST) in info.value.message and "re-run `trtspec build`" in (info.value.hint or "")
    _one_line_refusal(["set-k", "2", "--deployment", f"trtllm-serve:{build}", "--dry-run"], str(build / MANIFEST),
                      "--no-such-flag")


@pytest.mark.parametrize("max_draft_len", ["4", 2.5, None])
def test_the_llmapi_model_yaml_max_draft_len_is_read_by_the_same_rule(made, tmp_path, max_draft_len):
    from trtspec.triton.change import plan_llmapi_change, served_llmapi

    repo = Path(shutil.copytree(made["llmapi"], tmp_path / "repo"))
    model_yaml = repo / "tensorrt_llm" / "1" / "model.yaml"
    _edit_yaml(model_yaml, lambda data: data["speculative_config"].update(max_draft_len=max_draft_len))
    if max_draft_len is None:  # none set: no draft length
        assert served_llmapi(repo, "m").default_k == 0
        return
    for call in (lambda: served_llmapi(repo, "m"), lambda: plan_llmapi_change(repo, SpeculationChange(2))):
        with pytest.raises(ConfigError) as info:
            call()
        assert info.value.field == f"{model_yaml}: speculative_config.max_draft_len"
    _one_line_refusal(["set-k", "2", "--deployment", f"triton:{repo}", "--dry-run"], str(model_yaml))
