"""Every example build config x every supported target x both workflows: the plan's TensorRT-LLM artefacts use only
names that target reads and carry every name it requires (checked against trtspec/targets data files), or the config
is refused naming the target, the missing feature (the PyTorch workflow: the LLM-API facts, or the method's decoding
type) and the nearest target or method that has it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from trtspec.build.llm_api import LlmApiRefusal, decoding_type
from trtspec.build.plan import LLM_API_FILE, TRTLLM, plan_build
from trtspec.build.preflight import run_preflight
from trtspec.config import load_build_spec
from trtspec.errors import ConfigError
from trtspec.methods import resolve
from trtspec.targets import (
    SUPPORTED_TARGETS,
    WORKFLOWS,
    diff_build_argv,
    diff_convert_argv,
    diff_llm_api,
    load_target,
)
from trtspec.targets.llm_api import diff_serve_argv

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "build_configs").glob("*.yaml"))
CASES = [(path, version, workflow) for path in CONFIGS for version in SUPPORTED_TARGETS for workflow in WORKFLOWS]


def plan_for(path: Path, version: str, workflow: str = "engine"):
    spec = load_build_spec(path, overrides={"trtllm": {"version": version}, "workflow": workflow})
    resolved = run_preflight(spec, dry_run=True)
    return spec, resolved, plan_build(resolved)


@pytest.mark.parametrize(("path", "version", "workflow"), CASES, ids=[f"{p.stem}@{v}-{w}" for p, v, w in CASES])
def test_example_artefacts_match_the_target(path, version, workflow):
    target = load_target(version)
    spec = load_build_spec(path, overrides={"trtllm": {"version": version}, "workflow": workflow})
    method = resolve(spec.method)
    eagle3 = spec.eagle is not None and spec.eagle.eagle3
    if workflow == "pytorch" and spec.backend == "tensorrtllm" and not method.trtllm_unsupported:
        _check_pytorch(path, target, method.name, eagle3)
        return
    if method.engine_flow_unsupported and spec.backend == "tensorrtllm":  # MTP: no trtllm-build mode, the reason
        with pytest.raises(ConfigError) as err:
            plan_for(path, version, workflow)
        assert err.value.field == "workflow" and method.engine_flow_unsupported in err.value.message
        return
    features = ["eagle3_llmapi"] if eagle3 else method.target_features  # EAGLE-3: the LLM API only (preflight)
    lacking = [f for f in features if not target.has(f)] if spec.backend == "tensorrtllm" else []
    if lacking:
        with pytest.raises(ConfigError) as err:
            plan_for(path, version, workflow)
        assert f"lacks {lacking[0]}" in str(err.value) and "nearest target with it" in str(err.value)
        return
    spec, _, plan = plan_for(path, version, workflow)
    if spec.backend == "torch":
        assert plan.target is None and all(s.tool is None for s in plan.steps)
        return
    assert (plan.target, plan.container) == (version, target.image)
    for step in plan.steps:
        if step.tool != TRTLLM:
            continue
        argv = list(step.argv)
        if argv[0] == "trtllm-build":
            assert diff_build_argv(argv, target) == [], step.id
        else:
            assert argv[0] == "python3", step.id
            assert diff_convert_argv(argv, target, spec.trtllm.examples_dir) == [], step.id
    llm_api = next((s for s in plan.steps if s.id == "write-llm-api"), None)
    try:
        kind = decoding_type(method.name, target.llm_api, eagle3=eagle3) if target.llm_api.verified else "-"
    except LlmApiRefusal as refusal:
        kind = refusal.note()
    if kind == "-" or (kind or "").startswith("no LLM-API form"):
        assert llm_api is None and plan.llm_api is None and plan.notes
        return
    assert llm_api is not None and llm_api.outputs == (LLM_API_FILE,)
    assert yaml.safe_load(llm_api.content) == plan.llm_api
    assert diff_llm_api(plan.llm_api, target) == []
    # exactly what the target's facts allow: every key a field of the decoding type, decoding_type as the facts spell it
    speculative = plan.llm_api.get("speculative_config")
    assert (speculative or {}).get("decoding_type") == kind
    if speculative:
        assert set(speculative) - {"decoding_type"} <= set(target.llm_api.fields_of(kind))
        assert set(target.llm_api.decoding_types[kind].required) <= set(speculative)
    kv = plan.llm_api["kv_cache_config"]
    assert 0.05 <= kv.get("free_gpu_memory_fraction", 0.9) <= 0.95, kv


def _check_pytorch(path: Path, target, method: str, eagle3: bool) -> None:
    """The PyTorch workflow: refused without the target's LLM-API facts (naming `workflow` and the nearest target with
    them) or without a decoding type for the method (naming the nearest method); else no TensorRT-LLM step, one options
    file exactly as the facts allow and a trtllm-serve command the release declares."""
    if not target.llm_api.verified:
        with pytest.raises(ConfigError) as err:
            plan_for(path, target.version, "pytorch")
        assert err.value.field == "workflow" and "nearest target with them: 1.2.1" in err.value.message
        return
    try:
        kind = decoding_type(method, target.llm_api, eagle3=eagle3)
    except LlmApiRefusal as refusal:
        with pytest.raises(LlmApiRefusal) as err:
            plan_for(path, target.version, "pytorch")
        assert err.value.message == refusal.message and "nearest:" in err.value.message
        return
    _, _, plan = plan_for(path, target.version, "pytorch")
    assert plan.workflow == "pytorch" and not plan.engines and all(s.tool is None for s in plan.steps)
    assert diff_llm_api(plan.llm_api, target) == []
    assert (plan.llm_api.get("speculative_config") or {}).get("decoding_type") == kind
    assert diff_serve_argv(plan.serve["trtllm-serve"], target.version) == []


def test_every_example_names_a_supported_target():
    for path in CONFIGS:
        data = yaml.safe_load(path.read_text())
        if data.get("backend") == "torch":
            continue
        assert data["trtllm"]["version"] in SUPPORTED_TARGETS, path.name
