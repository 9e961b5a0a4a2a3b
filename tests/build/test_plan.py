"""The planner: per-method trtllm-build recipes (trtllm-specdec.md 2.3), LLM-API form (3.5), golden example plans."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.build.helpers import plan_of
from trtspec.build.memory import MIN_FRACTION
from trtspec.build.plan import plan_build
from trtspec.build.preflight import run_preflight
from trtspec.config import load_build_spec
from trtspec.errors import ConfigError
from trtspec.targets import DEFAULT_TARGET, load_target

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "build_configs").glob("*.yaml"))
GOLDEN = Path(__file__).parent / "golden"
BASE = (["--max_beam_width", "1"], ["--logits_dtype", "float32"], ["--use_paged_context_fmha", "enable"],
        ["--kv_cache_type", "paged"])


def dry_plan(path: Path, version: str | None = None):
    # another target for an example: its engine workflow there (the example's own meaning; the PyTorch workflow's
    # examples name 1.2.1 and `workflow: pytorch` themselves)
    overrides = {"trtllm": {"version": version}, "workflow": "engine"} if version else None
    resolved = run_preflight(load_build_spec(path, overrides=overrides), dry_run=True)
    return resolved, plan_build(resolved)


def normalized(path: Path, version: str | None = None) -> dict:
    """The plan as JSON with machine-specific paths replaced (repo root, embedded models)."""
    resolved, plan = dry_plan(path, version)
    plan_dict = plan.to_dict()
    for step, full in zip(plan_dict["steps"], plan.steps, strict=True):
        step["content"] = full.content  # the full text: its length would depend on where the repo is checked out
    data = {"plan": plan_dict, "max_draft_len": resolved.max_draft_len, "choices": resolved.choices,
            "llm_api_yaml": next((s.content for s in plan.steps if s.id == "write-llm-api"), None)}
    text = json.dumps(data, indent=1, sort_keys=True).replace(str(ROOT), "<root>")
    return json.loads(text)


# Each example as written (its own target and workflow), and each engine-workflow example again at 1.2.1, the newest
# target that still builds engines (its examples layout, its LLM-API file beside the engines).
GOLDEN_CASES = [(p, None) for p in CONFIGS] + [(p, "1.2.1") for p in CONFIGS if "backend: torch" not in p.read_text()
                                               and "workflow: pytorch" not in p.read_text()]


@pytest.mark.parametrize(("path", "version"), GOLDEN_CASES,
                         ids=[p.stem + (f"@{v}" if v else "") for p, v in GOLDEN_CASES])
def test_example_plan_matches_golden(path, version):
    golden = GOLDEN / f"{path.stem}{'@' + version if version else ''}.json"
    data = normalized(path, version)
    if os.environ.get("TRTSPEC_UPDATE_GOLDEN") or not golden.exists():
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        if not os.environ.get("TRTSPEC_UPDATE_GOLDEN"):
            pytest.fail(f"wrote missing golden {golden.name}; re-run")
    assert data == json.loads(golden.read_text())


def argv_of(plan, step_id: str) -> list[str]:
    return list(next(s for s in plan.steps if s.id == step_id).argv)


def flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def contains(argv: list[str], seq: list[str]) -> bool:
    return any(argv[i:i + len(seq)] == seq for i in range(len(argv)))


def test_draft_target_recipe():
    _, plan = dry_plan(ROOT / "build_configs/llama3.3-70b-draft-target.yaml")
    target, draft = argv_of(plan, "engine-target"), argv_of(plan, "engine-draft")
    assert contains(target, ["--speculative_decoding_mode", "draft_tokens_external", "--max_draft_len", "10"])
    assert "--gather_generation_logits" in target and all(contains(target, pair) for pair in BASE)
    assert "--speculative_decoding_mode" not in draft and "--max_draft_len" not in draft
    assert "--gather_generation_logits" in draft and flag(draft, "--use_paged_context_fmha") == "enable"
    convert = argv_of(plan, "convert-target")
    assert convert[1].endswith("examples/llama/convert_checkpoint.py") and flag(convert, "--tp_size") == "4"
    assert flag(argv_of(plan, "convert-draft"), "--tp_size") == "1"
    # TP 4 cannot use trtspec's single-rank converter; the 1-rank draft can
    steps = {s.id: s for s in plan.steps}
    assert steps["convert-target"].fallback == () and steps["convert-draft"].fallback[:3] == (
        "python", "-m", "trtspec.build.convert")
    assert [s.id for s in plan.steps] == ["convert-target", "convert-draft", "engine-target", "engine-draft"]
    assert plan.llm_api is None and any("LLM-API options are not verified" in n for n in plan.notes)
    _, plan = dry_plan(ROOT / "build_configs/llama3.3-70b-draft-target.yaml", "1.2.1")
    assert [s.id for s in plan.steps][-1] == "write-llm-api"


def test_medusa_recipe_takes_draft_len_from_checkpoint():
    resolved, plan = dry_plan(ROOT / "build_configs/vicuna-7b-medusa.yaml")
    engine, convert = argv_of(plan, "engine-target"), argv_of(plan, "convert-target")
    assert contains(engine, ["--speculative_decoding_mode", "medusa"]) and "--max_draft_len" not in engine
    assert "--gather_generation_logits" not in engine
    assert convert[1].endswith("examples/medusa/convert_checkpoint.py")
    assert flag(convert, "--num_medusa_heads") == "4" and flag(convert, "--max_medusa_token_len") == "63"
    assert resolved.max_draft_len == 63 and plan.llm_api is None  # engine flow only


def test_eagle_recipe():
    _, plan = dry_plan(ROOT / "build_configs/vicuna-7b-eagle.yaml")
    engine, convert = argv_of(plan, "engine-target"), argv_of(plan, "convert-target")
    assert contains(engine, ["--speculative_decoding_mode", "eagle", "--max_draft_len", "63"])
    assert flag(engine, "--use_paged_context_fmha") == "enable"
    assert flag(convert, "--num_eagle_layers") == "4" and flag(convert, "--max_non_leaves_per_layer") == "10"
    assert plan.steps[0].fallback == () and plan.llm_api is None


def test_lookahead_recipe_uses_formula():
    resolved, plan = dry_plan(ROOT / "build_configs/llama3.1-8b-lookahead.yaml")
    assert contains(argv_of(plan, "engine-target"),
                    ["--speculative_decoding_mode", "lookahead_decoding", "--max_draft_len", "83"])
    assert resolved.lookahead == (7, 7, 7) and plan.llm_api is None


def test_ngram_is_dtm_target_without_draft():
    _, plan = dry_plan(ROOT / "build_configs/llama3.1-8b-ngram.yaml")
    engine = argv_of(plan, "engine-target")
    assert contains(engine, ["--speculative_decoding_mode", "draft_tokens_external", "--max_draft_len", "10"])
    assert plan.engines == {"target": "engines/target"} and plan.llm_api is None
    _, plan = dry_plan(ROOT / "build_configs/llama3.1-8b-ngram.yaml", "1.2.1")
    assert plan.llm_api["speculative_config"] == {"decoding_type": "NGram", "max_draft_len": 10,
                                                  "max_matching_ngram_size": 2}


def test_redrafter_recipe():
    resolved, plan = dry_plan(ROOT / "build_configs/vicuna-7b-redrafter.yaml")
    assert [s.id for s in plan.steps] == ["convert-target-base", "convert-target", "engine-target"]
    merge, engine = argv_of(plan, "convert-target"), argv_of(plan, "engine-target")
    assert flag(merge, "--base_model_checkpoint_dir") == "checkpoints/target-base"
    assert flag(merge, "--redrafter_num_beams") == "5" and "--redrafter_no_greedy_search" not in merge
    assert contains(engine, ["--speculative_decoding_mode", "explicit_draft_tokens"]) and resolved.max_draft_len == 25


def test_baseline_has_no_speculative_flags():
    _, plan = dry_plan(ROOT / "build_configs/llama3.1-8b-baseline.yaml")
    engine = argv_of(plan, "engine-target")
    assert "--speculative_decoding_mode" not in engine and "--gather_generation_logits" not in engine
    _, plan = dry_plan(ROOT / "build_configs/llama3.1-8b-baseline.yaml", "1.2.1")
    assert "speculative_config" not in plan.llm_api and "disable_overlap_scheduler" not in plan.llm_api


def test_llm_api_draft_target(random_pair):
    target, draft = random_pair
    _, plan = plan_of(target=str(target), draft=str(draft), method="draft_target", max_draft_len=3,
                      engine={"max_input_len": 64, "max_seq_len": 128}, gpu={"memory_gib": 8},
                      trtllm={"version": "1.2.1"})
    api = plan.llm_api
    # 1.2.1's field is speculative_model (speculative_model_dir is its alias)
    assert api["speculative_config"] == {"decoding_type": "DraftTarget", "max_draft_len": 3,
                                         "speculative_model": str(draft)}
    assert api["disable_overlap_scheduler"] is True and api["kv_cache_config"]["max_tokens"] == 8 * 131
    # a tiny model needs 0.0003 of an 8 GiB GPU: the fraction is floored (max_tokens bounds the cache anyway)
    assert api["kv_cache_config"]["free_gpu_memory_fraction"] == MIN_FRACTION
    content = next(s.content for s in plan.steps if s.id == "write-llm-api")
    import yaml

    assert yaml.safe_load(content) == api
    assert "TensorRT-LLM 1.2.1 (nvcr.io/nvidia/tritonserver:26.04-trtllm-python-py3)" in content.splitlines()[0]


def test_llm_api_eagle3_where_the_target_has_it(random_pair, tmp_path):
    (tmp_path / "eagle3").mkdir()
    fields = dict(target=str(random_pair[0]), method="eagle", engine={"max_input_len": 64, "max_seq_len": 128},
                  eagle={"model": str(tmp_path / "eagle3"), "eagle3": True, "num_layers": 3},
                  workflow="engine")  # the engine workflow's plan for it (the PyTorch workflow: test_pytorch_workflow.py)
    _, plan = plan_of(trtllm={"version": "1.2.1"}, **fields)
    assert [s.id for s in plan.steps] == ["write-llm-api"] and plan.engines == {}
    # 1.2.1 reads EAGLE-3 drafters as decoding_type Eagle; max_draft_len counts draft layers, not tree nodes (63)
    assert plan.llm_api["speculative_config"] == {"decoding_type": "Eagle", "max_draft_len": 3,
                                                  "speculative_model": str(tmp_path / "eagle3"),
                                                  "eagle3_one_model": True}
    assert "disable_overlap_scheduler" not in plan.llm_api
    assert any("EAGLE-3 runs only through the LLM API" in n for n in plan.notes)
    resolved, plan = plan_of(trtllm={"version": "1.2.1"}, max_draft_len=5, **fields)
    assert resolved.max_draft_len == 5 and plan.llm_api["speculative_config"]["max_draft_len"] == 5


def test_version_selects_examples_layout_and_quantization(random_pair):
    _, plan = plan_of(target=str(random_pair[0]), method="none", engine={"max_input_len": 8, "max_seq_len": 16,
                      "quantization": "fp8"}, trtllm={"version": "0.19.0"})
    convert = argv_of(plan, "convert-target")
    assert convert[1] == "TensorRT-LLM/examples/quantization/quantize.py" and flag(convert, "--qformat") == "fp8"
    assert plan.steps[0].fallback == ()
    layout = {"0.18.0": "examples/llama", "0.19.0": "examples/llama", "1.2.1": "examples/models/core/llama"}
    for version, where in layout.items():  # tagged 0.19.0 sources still use the flat layout (docs/targets.md)
        _, plan = plan_of(target=str(random_pair[0]), method="none", engine={"max_input_len": 8, "max_seq_len": 16},
                          trtllm={"version": version}, workflow="engine")
        assert argv_of(plan, "convert-target")[1] == f"TensorRT-LLM/{where}/convert_checkpoint.py"
        assert (plan.target, plan.container) == (version, load_target(version).image)


def test_dry_run_names_the_target_and_its_container(capsys, tmp_path):
    from trtspec.cli.main import main

    main(["build", str(ROOT / "build_configs/tiny-draft-target.yaml"), "--dry-run"])  # names 0.19.0
    out = capsys.readouterr().out
    target = load_target("0.19.0")
    assert f"# target: TensorRT-LLM 0.19.0, container {target.image}" in out.splitlines()[1]
    main(["build", str(ROOT / "build_configs/tiny-draft-target.yaml"), "--dry-run", "--json"])
    plan = json.loads(capsys.readouterr().out)["plan"]
    assert (plan["target"], plan["container"]) == ("0.19.0", target.image)
    config = ROOT / "build_configs/llama3.1-8b-ngram.yaml"  # a config that names no target gets the default's
    unpinned = tmp_path / "unpinned.yaml"
    unpinned.write_text("".join(line for line in config.read_text().splitlines(True) if "version:" not in line
                                and not line.startswith("trtllm:")))
    main(["build", str(unpinned), "--dry-run"])
    lines = capsys.readouterr().out.splitlines()
    default = load_target(DEFAULT_TARGET)
    assert DEFAULT_TARGET == "1.2.1" and f"# target: TensorRT-LLM 1.2.1, container {default.image}" == lines[1]
    assert lines[0] == "# trtspec build plan: backend=tensorrtllm workflow=pytorch method=ngram"


def test_torch_plan_is_a_bundle(random_pair):
    target, draft = random_pair
    _, plan = plan_of(target=str(target), draft=str(draft), method="draft_target", backend="torch",
                      engine={"max_input_len": 64, "max_seq_len": 128})
    assert [s.id for s in plan.steps] == ["copy-target", "copy-draft", "write-bundle"]
    assert all(s.tool is None for s in plan.steps)


def _bundle_engine(plan) -> dict:
    return json.loads(next(s.content for s in plan.steps if s.id == "write-bundle"))["engine"]


def test_draft_runtime_reaches_the_torch_bundles_engine_only_when_set(random_pair):
    target, draft = random_pair
    fields = {"target": str(target), "draft": str(draft), "method": "draft_target", "backend": "torch",
              "engine": {"max_input_len": 64, "max_seq_len": 128, "dtype": "float32"}}
    _, plain = plan_of(**fields)
    assert "draft_runtime" not in _bundle_engine(plain)  # unset: the bundle reads as before
    _, onnx = plan_of(**fields, draft_runtime="onnx")
    assert _bundle_engine(onnx) == {**_bundle_engine(plain), "draft_runtime": "onnx"}
    _, hybrid = plan_of(**{**fields, "method": "suffix_draft"}, draft_runtime="onnx")
    assert _bundle_engine(hybrid)["draft_runtime"] == "onnx"


@pytest.mark.parametrize(("fields", "message", "hint"), [
    ({"draft_runtime": "tvm"}, "draft_runtime='tvm': Input should be 'torch' or 'onnx'", "trtspec build --schema"),
    ({"backend": "tensorrtllm"}, "backend tensorrtllm runs TensorRT-LLM's own draft engine", "set backend: torch"),
    ({"method": "ngram", "draft": None}, "method ngram has none", "method: draft_target"),
    ({"engine": {"max_input_len": 64, "max_seq_len": 128, "dtype": "float16"}}, "engine.dtype is float16",
     "engine.dtype: float32"),
])
def test_draft_runtime_refusals_name_the_field_and_the_fix(random_pair, fields, message, hint):
    target, draft = random_pair
    base = {"target": str(target), "draft": str(draft), "method": "draft_target", "backend": "torch",
            "draft_runtime": "onnx", "engine": {"max_input_len": 64, "max_seq_len": 128, "dtype": "float32"}}
    with pytest.raises(ConfigError) as err:
        plan_of(**{**base, **fields})
    assert err.value.exit_code == 2 and str(err.value).startswith("draft_runtime") and "\n" not in str(err.value)
    assert message in str(err.value) and hint in (err.value.hint or ""), (str(err.value), err.value.hint)


@pytest.mark.parametrize("module", ["trtspec.build.plan", "trtspec.config", "trtspec.build.preflight",
                                    "trtspec.build.bundle", "trtspec.build.execute", "trtspec.cli.build"])
def test_planning_modules_do_not_import_torch(module):
    code = f"import sys, {module}; assert 'torch' not in sys.modules, 'torch imported'"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr


def test_dry_run_plans_without_torch_and_changes_nothing(tmp_path):
    out = tmp_path / "never"
    code = ("import sys; from trtspec.cli.main import main; "
            f"main(['build', 'build_configs/llama3.3-70b-draft-target.yaml', '--dry-run', '--out', '{out}']); "
            "assert 'torch' not in sys.modules")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    assert "trtllm-build --checkpoint_dir checkpoints/target" in proc.stdout and not out.exists()
