"""`workflow: pytorch`: TensorRT-LLM's LLM API on the PyTorch backend as a build (build/plan.py `_plan_pytorch`).

The plan converts nothing and runs no trtllm-build: it references the HF checkpoints the mode needs by path, writes one
`extra_llm_api_options` file (what trtllm-serve reads, and what Triton's llmapi model and Dynamo's workers carry) and
gives the exact, shell-quoted `trtllm-serve` command. The workflow defaults per target (pytorch where trtspec has the
LLM-API facts, engine elsewhere); a target without facts, or a method without a PyTorch decoding type, is exit 2
naming the key or method, the target and the nearest valid alternative. The goldens of the three PyTorch-workflow
examples (tests/build/golden/llama3.1-8b-{eagle3,draft-target,ngram-pytorch}.json) hold the whole plan.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml

from tests.build.helpers import plan_of, write_config
from tests.cli_checks import run_cli
from trtspec.build.llm_api import LLM_API_FILE, LlmApiRefusal
from trtspec.build.plan import plan_build
from trtspec.build.preflight import run_preflight
from trtspec.config import load_build_spec
from trtspec.errors import ConfigError
from trtspec.methods import resolve
from trtspec.targets import SUPPORTED_TARGETS, default_workflow, diff_llm_api, load_target
from trtspec.targets.llm_api import diff_serve_argv

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "build_configs").glob("*.yaml"))
PYTORCH_EXAMPLES = {"llama3.1-8b-eagle3": "Eagle", "llama3.1-8b-draft-target": "DraftTarget",
                    "llama3.1-8b-ngram-pytorch": "NGram"}
NEAREST = {"medusa": "eagle", "lookahead": "ngram", "redrafter": "eagle", "eagle": "eagle"}  # build/llm_api.py NEAREST
ENVELOPE = {"max_input_len": 64, "max_seq_len": 128}


def test_the_workflow_defaults_per_target():
    assert {v: default_workflow(v) for v in SUPPORTED_TARGETS} == {"0.18.0": "engine", "0.19.0": "engine",
                                                                   "1.2.1": "pytorch"}
    assert load_build_spec(ROOT / "build_configs/tiny-ngram.yaml").workflow_name() == "engine"  # pins 0.19.0


@pytest.mark.parametrize("name", sorted(PYTORCH_EXAMPLES))
def test_each_pytorch_example_plans_no_engines_and_one_options_file(name):
    spec = load_build_spec(ROOT / "build_configs" / f"{name}.yaml")
    assert (spec.workflow, spec.trtllm.version) == ("pytorch", "1.2.1")
    resolved = run_preflight(spec, dry_run=True)
    plan = plan_build(resolved)
    assert plan.workflow == "pytorch" and plan.engines == {}
    assert [(s.id, s.kind, s.outputs) for s in plan.steps] == [("write-llm-api", "write", (LLM_API_FILE,))]
    options = yaml.safe_load(plan.steps[0].content or "")
    assert options == plan.llm_api and diff_llm_api(options, "1.2.1") == []
    assert options["speculative_config"]["decoding_type"] == PYTORCH_EXAMPLES[name]
    # the checkpoints the mode needs, by path: the target, and the draft or the EAGLE-3 drafter the options name
    drafter = {"draft_target": "draft", "eagle": "eagle"}.get(spec.method)
    assert plan.checkpoints == {role: resolved.models[role].path for role in ("target", drafter) if role}
    if drafter:
        assert options["speculative_config"]["speculative_model"] == plan.checkpoints[drafter]
    serve = list(plan.serve["trtllm-serve"])
    assert serve == ["trtllm-serve", spec.target, "--backend", "pytorch", "--extra_llm_api_options", LLM_API_FILE]
    assert diff_serve_argv(serve, "1.2.1") == []
    assert shlex.join(serve) in (plan.steps[0].content or "").splitlines()[1]  # the file's header says how to serve it


def test_dry_run_of_the_8b_eagle3_example_prints_the_trtllm_serve_command_and_the_options_file():
    code, out, err = run_cli(["build", str(ROOT / "build_configs/llama3.1-8b-eagle3.yaml"), "--dry-run"])
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "# trtspec build plan: backend=tensorrtllm workflow=pytorch method=eagle"
    assert ("    $ trtllm-serve /models/Llama-3.1-8B-Instruct --backend pytorch --extra_llm_api_options "
            "llm-api/extra_llm_api_options.yaml") in lines
    start = lines.index(f"# {LLM_API_FILE}:") + 1
    body = [line.removeprefix("    ") for line in lines[start:] if line.startswith("    ")]
    options = yaml.safe_load("\n".join(body))
    assert options["speculative_config"] == {"decoding_type": "Eagle", "max_draft_len": 3, "eagle3_one_model": True,
                                             "speculative_model": "/models/EAGLE3-LLaMA3.1-Instruct-8B"}
    assert not any(line.lstrip().startswith(("$ trtllm-build", "$ python3")) for line in lines)  # nothing to build
    code, out, _ = run_cli(["build", str(ROOT / "build_configs/llama3.1-8b-eagle3.yaml"), "--dry-run", "--json"])
    plan = json.loads(out)["plan"]
    assert plan["workflow"] == "pytorch" and plan["serve"]["trtllm-serve"][0] == "trtllm-serve"


CASES = [p for p in CONFIGS if "backend: torch" not in p.read_text()]


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_every_example_at_1_2_1_maps_or_is_refused_naming_the_method_target_and_nearest(path):
    spec = load_build_spec(path, overrides={"trtllm": {"version": "1.2.1"}, "workflow": "pytorch"})
    method = "eagle3" if spec.eagle is not None and spec.eagle.eagle3 else spec.method
    if method in NEAREST:
        with pytest.raises(LlmApiRefusal) as err:
            run_preflight(spec, dry_run=True)
        assert err.value.exit_code == 2 and (err.value.field, err.value.value) == ("method", method)
        assert "TensorRT-LLM 1.2.1" in err.value.message and f"nearest: {NEAREST[method]}" in err.value.message
        return
    plan = plan_build(run_preflight(spec, dry_run=True))
    assert plan.workflow == "pytorch" and [s.id for s in plan.steps] == ["write-llm-api"]
    assert diff_llm_api(plan.llm_api, "1.2.1") == []


def test_pytorch_on_a_target_without_llm_api_facts_is_exit_2_naming_the_key_target_and_nearest(random_pair, tmp_path):
    config = write_config(tmp_path / "c.yaml", target=str(random_pair[0]), method="ngram", max_draft_len=3,
                          engine=ENVELOPE, trtllm={"version": "0.19.0"}, workflow="pytorch")
    code, out, err = run_cli(["build", str(config), "--dry-run"])
    assert code == 2, out + err
    line = next(line for line in err.splitlines() if line.startswith("Error:"))
    assert "workflow='pytorch'" in line and "TensorRT-LLM 0.19.0" in line and "nearest target with them: 1.2.1" in line
    assert "workflow: engine" in err and len([x for x in err.splitlines() if x.strip()]) == 2  # error + hint


def test_a_method_without_a_pytorch_decoding_type_is_exit_2_naming_the_nearest_method(random_pair, tmp_path):
    config = write_config(tmp_path / "c.yaml", target=str(random_pair[0]), method="lookahead", lookahead=[4, 4, 4],
                          engine=ENVELOPE, trtllm={"version": "1.2.1"})  # pytorch: 1.2.1's default
    code, out, err = run_cli(["build", str(config), "--dry-run"])
    assert code == 2, out + err
    assert "method='lookahead'" in err and "TensorRT-LLM 1.2.1" in err and "nearest: ngram" in err
    config.write_text(config.read_text() + "workflow: engine\n")  # the engine workflow still builds it
    code, out, err = run_cli(["build", str(config), "--dry-run"])
    assert code == 0 and "lookahead_decoding" in out, err


def test_engine_is_exactly_the_engine_plan(random_pair):
    """`workflow: engine` said or defaulted (0.19.0) plans the same; at 1.2.1 it is the engine flow as before."""
    fields = {"target": str(random_pair[0]), "draft": str(random_pair[1]), "method": "draft_target",
              "max_draft_len": 3, "engine": ENVELOPE}
    _, default = plan_of(**fields, trtllm={"version": "0.19.0"})
    _, said = plan_of(**fields, trtllm={"version": "0.19.0"}, workflow="engine")
    assert default == said and default.workflow == "engine"
    _, engine = plan_of(**fields, trtllm={"version": "1.2.1"}, workflow="engine")
    assert [s.id for s in engine.steps] == ["convert-target", "convert-draft", "engine-target", "engine-draft",
                                            "write-llm-api"] and engine.serve == {}


def test_parallel_sizes_become_trtllm_serve_flags(random_pair):
    _, plan = plan_of(target=str(random_pair[0]), method="ngram", max_draft_len=3, trtllm={"version": "1.2.1"},
                      engine={**ENVELOPE, "tp_size": 2})
    serve = list(plan.serve["trtllm-serve"])
    assert serve[serve.index("--tp_size") + 1] == "2" and "--pp_size" not in serve
    assert diff_serve_argv(serve, "1.2.1") == []
    assert diff_serve_argv([*serve, "--tp-size", "2"], "1.2.1") == [
        "--tp-size: not a trtllm-serve option of TensorRT-LLM 1.2.1 (nearest: --tp_size)"]


def test_a_real_build_writes_the_options_and_records_the_workflow_for_deploy(random_pair, tmp_path):
    """On CPU the whole PyTorch-workflow build runs (one file); the manifest names the workflow, the options file and
    the serve command, and the build output that deploy reads says pytorch."""
    from trtspec.triton.build_output import read_build_output

    target, draft = random_pair
    config = write_config(tmp_path / "c.yaml", target=str(target), draft=str(draft), method="draft_target",
                          max_draft_len=3, engine=ENVELOPE, trtllm={"version": "1.2.1"})
    out = tmp_path / "out"
    code, stdout, err = run_cli(["build", str(config), "--out", str(out)])
    assert code == 0, err
    manifest = json.loads((out / "trtspec-manifest.json").read_text())
    assert (manifest["workflow"], manifest["engines"], manifest["llm_api"]) == ("pytorch", {}, LLM_API_FILE)
    assert manifest["pending"] == [] and manifest["checkpoints"] == {"target": str(target), "draft": str(draft)}
    serve = manifest["serve"]["trtllm-serve"]
    assert serve["command"] == f"cd {shlex.quote(str(out))} && {shlex.join(serve['argv'])}"
    assert serve["container"] == load_target("1.2.1").image and serve["command"] in stdout
    options = yaml.safe_load((out / LLM_API_FILE).read_text())
    assert options["speculative_config"]["speculative_model"] == str(draft)
    build = read_build_output(out)
    assert build.workflow == "pytorch" and build.llm_api == options and build.engines == {}


def test_workflow_is_a_typed_key():
    with pytest.raises(ConfigError) as err:
        load_build_spec(ROOT / "build_configs/tiny-ngram.yaml", overrides={"workflow": "trt"})
    assert err.value.field == "workflow" and err.value.exit_code == 2
    assert resolve("ngram").llmapi_decoding_type == "NGram"


def test_a_pytorch_build_renders_without_its_checkpoints_and_deploys(tmp_path):
    """The PyTorch workflow names checkpoints by their path where TensorRT-LLM runs (here /models/..., absent): the
    build writes the options file (the checks that read the files unchecked), and deploy renders NVIDIA's llmapi model
    from it, so a laptop or CI renders a deployment for a cluster that holds the weights."""
    out, repo = tmp_path / "build", tmp_path / "repo"
    code, printed, err = run_cli(["build", str(ROOT / "build_configs/llama3.1-8b-ngram-pytorch.yaml"), "--out",
                                  str(out)])
    assert code == 0, err
    assert "check pending target checkpoint (where the checkpoints are)" in printed
    options = yaml.safe_load((out / LLM_API_FILE).read_text())
    assert options["speculative_config"]["decoding_type"] == "NGram"
    manifest = json.loads((out / "trtspec-manifest.json").read_text())
    assert any(c["name"] == "target checkpoint" and "does not exist here" in c["detail"]
               for c in manifest["pending_checks"]), manifest["pending_checks"]
    code, _, err = run_cli(["deploy", "--backend", "tensorrtllm", "--build", str(out), "--out", str(repo)])
    assert code == 0, err
    model_yaml = yaml.safe_load((repo / "tensorrt_llm" / "1" / "model.yaml").read_text())
    assert model_yaml["model"] == "/models/Llama-3.1-8B-Instruct"
    assert model_yaml["speculative_config"] == options["speculative_config"]
