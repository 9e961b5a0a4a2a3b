"""Dynamo TensorRT-LLM worker configs and Kubernetes manifests from every example build config, checked against the
facts (dynamo-1.6.1.json and the TensorRT-LLM target's LLM-API facts); the facts checked against the installed wheel."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

import pytest
import yaml

from trtspec.build.plan import plan_build
from trtspec.build.preflight import run_preflight
from trtspec.config import load_build_spec
from trtspec.dynamo.k8s import DynamoRender, dynamo_facts, render, validate
from trtspec.errors import ConfigError
from trtspec.methods import resolve
from trtspec.resources import data_dir
from trtspec.targets import diff_llm_api, load_target

EXAMPLES = sorted(data_dir("build_configs").glob("*.yaml"))
LLM_API_METHODS = {"draft_target", "ngram", "none"}  # the others run on the engine flow only (build/plan.py)


def rendered(config: Path, mode: str, version: str = "1.2.1") -> tuple[DynamoRender, str]:
    spec = load_build_spec(config)
    spec = spec.model_copy(update={"trtllm": spec.trtllm.model_copy(update={"version": version}),
                                   "backend": "tensorrtllm"})
    resolved = run_preflight(spec, dry_run=True)
    plan = plan_build(resolved)
    result = render(plan.llm_api, name=spec.name, model_path=resolved.models["target"].path,
                    served_model_name=spec.name, tp_size=spec.engine.tp_size, trtllm_version=version, mode=mode,
                    llm_api_note="; ".join(plan.notes))
    return result, spec.method


@pytest.mark.parametrize("mode", ["agg", "disagg"])
@pytest.mark.parametrize("config", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_renders_or_names_why_not(config, mode):
    spec = load_build_spec(config)
    method = spec.method
    eagle3 = spec.eagle is not None and spec.eagle.eagle3  # EAGLE-3 drafters run through the LLM API
    if resolve(method).trtllm_unsupported:  # suffix: refused for TensorRT-LLM before any rendering, with the reason
        with pytest.raises(ConfigError, match=f"method='{method}': cannot be built for TensorRT-LLM"):
            rendered(config, mode)
        return
    if method not in LLM_API_METHODS and not eagle3:
        with pytest.raises(ConfigError, match="trtllm.version.*no LLM-API options"):
            rendered(config, mode)
        return
    result, _ = rendered(config, mode)
    assert validate(result) == []
    target = load_target("1.2.1")
    docs = list(yaml.safe_load_all(result.files["dynamo-graph.yaml"]))
    configmap, graph = docs
    assert [d["kind"] for d in docs] == ["ConfigMap", "DynamoGraphDeployment"]
    workers = {name: s for name, s in graph["spec"]["services"].items() if s["componentType"] == "worker"}
    assert set(workers) == ({"TRTLLMWorker"} if mode == "agg" else {"prefill", "decode"})
    for name, service in workers.items():
        args = service["extraPodSpec"]["mainContainer"]["args"]
        engine_file = Path(args[args.index("--extra-engine-args") + 1]).name
        options = yaml.safe_load(configmap["data"][engine_file])
        assert options == yaml.safe_load(result.files[f"engine_configs/{engine_file}"])
        assert diff_llm_api(options, target) == []  # the target release's LLM-API facts
        assert ("speculative_config" in options) == (method != "none")
        if mode == "disagg":
            assert service["subComponentType"] == name and args[args.index("--disaggregation-mode") + 1] == name


def test_validate_catches_what_dynamo_would_reject():
    result, _ = rendered(next(p for p in EXAMPLES if p.stem == "llama3.1-8b-ngram"), "agg")
    graph = result.manifest[1]
    worker = graph["spec"]["services"]["TRTLLMWorker"]
    args = worker["extraPodSpec"]["mainContainer"]["args"]
    args[args.index("--model")] = "--model-path"  # Dynamo's older examples; obsolete in 1.6.1
    worker["replica"] = 2
    graph["spec"]["services"]["Frontend"]["componentType"] = "gateway"
    problems = validate(result)
    assert any("--model-path is obsolete" in p for p in problems)
    assert any("services.TRTLLMWorker.replica: not a service field" in p for p in problems)
    assert any("componentType 'gateway'" in p for p in problems)


def test_a_release_without_llm_api_facts_is_refused_naming_the_field():
    with pytest.raises(ConfigError, match=r"trtllm.version='0.18.0'") as info:
        rendered(next(p for p in EXAMPLES if p.stem == "llama3.1-8b-ngram"), "agg", version="0.18.0")
    assert "1.2.1" in (info.value.hint or "")


def test_worker_facts_match_the_installed_wheel():
    try:
        dist = metadata.distribution("ai-dynamo")
    except metadata.PackageNotFoundError:
        pytest.skip("ai-dynamo is not installed")
    facts = dynamo_facts()
    assert dist.version == facts["dynamo_version"]
    source = Path(dist.locate_file(facts["trtllm_worker"]["source"]["path"])).read_text()
    flags = set(re.findall(r'flag_name="(--[a-z0-9-]+)"', source))
    assert set(facts["trtllm_worker"]["flags"]) <= flags
    # obsolete_flag follows the flag_name it is an alias of
    obsolete = dict((old, new) for new, old in re.findall(
        r'flag_name="(--[a-z0-9-]+)",[^)]*?obsolete_flag="(--[a-z0-9-]+)"', source, flags=re.S))
    assert obsolete == facts["trtllm_worker"]["obsolete_flags"]
    from dynamo.common.constants import DisaggregationMode

    modes = {m.value for m in DisaggregationMode} | set(re.findall(r'_MODE = "([a-z]+)"', source))
    assert set(facts["trtllm_worker"]["disaggregation_modes"]) == modes
    assert facts["trtllm_pin"]["source"]["line"] in dist.read_text("METADATA")


def test_operator_facts_match_what_the_installed_wheel_holds():
    """The Kubernetes facts that ai-dynamo 1.6.1's wheel itself carries (the v1.6.1 tag's sources could not be read
    here; see operator.source in the facts): its TensorRT-LLM blueprints' image, the legacy v1alpha1 it still
    accepts, and the fields and component types of its own v1alpha1 DynamoGraphDeployments."""
    try:
        dist = metadata.distribution("ai-dynamo")
    except metadata.PackageNotFoundError:
        pytest.skip("ai-dynamo is not installed")
    op = dynamo_facts()["operator"]
    paths = list(op["source"]["wheel"]["paths"])
    blueprints = [yaml.safe_load(Path(dist.locate_file(p)).read_text()) for p in paths[:2]]
    images = {c["image"] for b in blueprints for comp in b["spec"]["components"]
              for c in comp["podTemplate"]["spec"]["containers"]}
    assert images == {f"{op['runtime_image']}:{dist.version}"}
    assert {comp["type"] for comp in blueprints[1]["spec"]["components"]} == {"frontend", "prefill", "decode"}
    assert f'_LEGACY_DGD_API_VERSION = "{op["api_version"]}"' in Path(dist.locate_file(paths[2])).read_text()
    legacy = [doc for path in Path(dist.locate_file("dynamo/planner/tests")).rglob("*.yaml")
              for doc in yaml.safe_load_all(path.read_text()) if isinstance(doc, dict)
              and doc.get("apiVersion") == op["api_version"] and doc.get("kind") == op["kind"]]
    services = [s for doc in legacy for s in doc["spec"]["services"].values()]
    assert len(services) > 10
    assert set().union(*services) <= set(op["service_fields"])
    assert {s["componentType"] for s in services} - {"main"} == set(op["component_types"])  # main: an older frontend
    assert {s["subComponentType"] for s in services if "subComponentType" in s} == {"prefill", "decode"}
    for s in services:
        for kind in ("limits", "requests"):
            assert set(s.get("resources", {}).get(kind, {})) <= set(op["resource_fields"])
    assert all("mainContainer" in s["extraPodSpec"] for s in services)  # beside the PodSpec's own fields
