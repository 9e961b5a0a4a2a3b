"""Dynamo TensorRT-LLM worker configs and Kubernetes manifests from every example build config, checked against the
facts (dynamo-1.6.1.json and the TensorRT-LLM target's LLM-API facts); the facts checked against the installed wheel."""

from __future__ import annotations

import re
import shlex
import tempfile
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

from tests.cli_checks import SETTINGS, assert_clean_failure, run_cli
from trtspec.build.llm_api import LlmApiRefusal
from trtspec.build.plan import llm_api_for_release, plan_build
from trtspec.build.preflight import run_preflight
from trtspec.config import load_build_spec
from trtspec.dynamo.k8s import DynamoRender, dynamo_facts, k8s_name, nearest_name, render, validate
from trtspec.errors import ConfigError, shown
from trtspec.methods import resolve
from trtspec.resources import data_dir
from trtspec.targets import SUPPORTED_TARGETS, diff_llm_api

EXAMPLES = sorted(data_dir("build_configs").glob("*.yaml"))
# the others run on the engine flow only (build/plan.py); suffix renders as SA for 1.3.0rc29 (1.2.1 has none)
LLM_API_METHODS = {"draft_target", "ngram", "none", "mtp", "suffix"}


PIN = dynamo_facts()["trtllm_pin"]["tensorrt_llm"]  # the TensorRT-LLM inside Dynamo's runtime image (1.3.0rc29)
IMAGE_121 = "registry.example/dynamo-trtllm:1.2.1"  # an image that runs TensorRT-LLM 1.2.1 (named by its user)


def rendered(config: Path, mode: str, version: str = PIN, api_version: str = "v1beta1", image: str | None = None
             ) -> tuple[DynamoRender, str]:
    """What `trtspec k8s` renders: the build planned for its target (1.2.1 where `version` is not a build target),
    the options for the release inside the image."""
    spec = load_build_spec(config)
    build_version = version if version in SUPPORTED_TARGETS else "1.2.1"
    spec = spec.model_copy(update={"trtllm": spec.trtllm.model_copy(update={"version": build_version}),
                                   "backend": "tensorrtllm"})
    if version != build_version:  # the release's facts decide the decoding type (suffix: SA, which 1.2.1 lacks)
        try:
            resolved = run_preflight(spec, dry_run=True, release=version)
            options, note = llm_api_for_release(resolved, version), ""
        except LlmApiRefusal as refusal:
            resolved = run_preflight(spec, dry_run=True)
            options, note = None, refusal.note()
    else:
        resolved = run_preflight(spec, dry_run=True)
        plan = plan_build(resolved)
        options, note = plan.llm_api, "; ".join(plan.notes)
    result = render(options, name=nearest_name(spec.name), model_path=resolved.models["target"].path,
                    served_model_name=spec.name, tp_size=spec.engine.tp_size, trtllm_version=version, mode=mode,
                    api_version=api_version, llm_api_note=note, image=image)
    return result, spec.method


def workers_of(graph: dict) -> dict[str, tuple[str, dict, int]]:
    """name -> (role: worker, prefill or decode; the container that runs it; GPUs) in either apiVersion."""
    if "components" in graph["spec"]:  # v1beta1
        return {c["name"]: (c["type"], c["podTemplate"]["spec"]["containers"][0],
                            int(c["podTemplate"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]))
                for c in graph["spec"]["components"] if c["type"] != "frontend"}
    return {name: (s.get("subComponentType", "worker"), s["extraPodSpec"]["mainContainer"],
                   int(s["resources"]["limits"]["gpu"]))
            for name, s in graph["spec"]["services"].items() if s["componentType"] == "worker"}


@pytest.mark.parametrize("api_version", ["v1beta1", "v1alpha1"])
@pytest.mark.parametrize("mode", ["agg", "disagg"])
@pytest.mark.parametrize("config", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_renders_or_names_why_not(config, mode, api_version):
    spec = load_build_spec(config)
    method = spec.method
    eagle3 = spec.eagle is not None and spec.eagle.eagle3  # EAGLE-3 drafters run through the LLM API
    if resolve(method).trtllm_unsupported:  # refused for TensorRT-LLM before any rendering, with the reason
        with pytest.raises(ConfigError, match=f"method='{method}': cannot be built for TensorRT-LLM"):
            rendered(config, mode, api_version=api_version)
        return
    if method == "suffix" and (spec.suffix is None or spec.suffix.tree):  # SA drafts chains: trees refused by name
        with pytest.raises(ConfigError, match="suffix.tree='true.*SA has no counterpart"):
            rendered(config, mode, api_version=api_version)
        return
    if method not in LLM_API_METHODS and not eagle3:  # 1.2.1's default workflow is pytorch: the method is refused
        with pytest.raises(ConfigError, match=f"method='{method}': has no LLM-API .* on TensorRT-LLM 1.2.1.*nearest"):
            rendered(config, mode, api_version=api_version)
        return
    result, _ = rendered(config, mode, api_version=api_version)
    assert validate(result) == []
    docs = list(yaml.safe_load_all(result.files["dynamo-graph.yaml"]))
    configmap, graph = docs
    assert [d["kind"] for d in docs] == ["ConfigMap", "DynamoGraphDeployment"]
    assert graph["apiVersion"] == f"nvidia.com/{api_version}"
    assert "&id" not in result.files["dynamo-graph.yaml"]  # no YAML anchors: every object written out
    workers = workers_of(graph)
    assert set(workers) == ({"TRTLLMWorker"} if mode == "agg" else {"prefill", "decode"})
    for name, (role, container, gpus) in workers.items():
        args = container["args"]
        assert gpus == spec.engine.tp_size
        engine_file = Path(args[args.index("--extra-engine-args") + 1]).name
        options = yaml.safe_load(configmap["data"][engine_file])
        assert options == yaml.safe_load(result.files[f"engine_configs/{engine_file}"])
        assert diff_llm_api(options, PIN) == []  # the LLM-API facts of the release inside the image
        assert ("speculative_config" in options) == (method != "none")
        assert ("cache_transceiver_config" in options) == (mode == "disagg")  # Dynamo's disaggregated configs set it
        if mode == "disagg":
            assert role == name and args[args.index("--disaggregation-mode") + 1] == name
        else:
            assert role == "worker" and "--disaggregation-mode" not in args


def test_validate_catches_what_dynamo_would_reject():
    result, _ = rendered(next(p for p in EXAMPLES if p.stem == "llama3.1-8b-ngram"), "agg", api_version="v1alpha1")
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


def test_validate_catches_what_dynamo_would_reject_in_v1beta1():
    result, _ = rendered(next(p for p in EXAMPLES if p.stem == "llama3.1-8b-ngram"), "disagg")
    components = {c["name"]: c for c in result.manifest[1]["spec"]["components"]}
    prefill = components["prefill"]
    args = prefill["podTemplate"]["spec"]["containers"][0]["args"]
    args[args.index("--model")] = "--model-path"  # Dynamo's older examples; obsolete in 1.6.1
    prefill["replica"] = 2
    prefill["podTemplate"]["spec"]["containers"][0]["mainContainer"] = {}  # a v1alpha1 field in a v1beta1 container
    components["decode"]["type"] = "prefill"  # its --disaggregation-mode says decode
    components["Frontend"]["type"] = "gateway"
    components["Frontend"]["podTemplate"]["spec"]["containers"][0]["name"] = "frontend"
    components["decode"]["podTemplate"]["spec"]["containers"][0]["resources"]["limits"] = {"gpu": "1"}  # v1alpha1's
    components["decode"]["podTemplate"]["spec"]["hostIPC"] = True  # a PodSpec field trtspec's facts do not list
    result.manifest[1]["spec"]["components"].append(dict(components["prefill"], name="Prefill"))  # case-insensitive
    result.manifest[1]["spec"]["services"] = {}
    problems = validate(result)
    assert any("components[prefill]: --model-path is obsolete" in p for p in problems)
    assert any("components[prefill].replica: not a component field" in p for p in problems)
    assert any("components[prefill].mainContainer: not a container field" in p for p in problems)
    assert any("components[decode]: type 'prefill' differs from its --disaggregation-mode" in p for p in problems)
    assert any("type 'gateway'" in p for p in problems)
    assert any("components[Frontend]: no container named 'main'" in p for p in problems)
    assert any("spec.services: not a field" in p for p in problems)
    assert any("components[decode].resources.limits.gpu: not nvidia.com/gpu" in p for p in problems)
    assert any("components[decode].podTemplate.spec.hostIPC: not used" in p for p in problems)
    assert any("name 'prefill' is used twice" in p for p in problems)
    assert len(problems) == 10 + 3, problems  # the copied prefill repeats its three problems


@pytest.mark.parametrize("api_version", ["v1beta1", "v1alpha1"])
def test_validate_checks_the_backend_framework_in_either_version(api_version):
    result, _ = rendered(next(p for p in EXAMPLES if p.stem == "llama3.1-8b-ngram"), "agg", api_version=api_version)
    result.manifest[1]["spec"]["backendFramework"] = "onnx"
    assert validate(result) == ["spec.backendFramework 'onnx' is not one of ['sglang', 'vllm', 'trtllm']"]


def test_k8s_writes_v1beta1_by_default_and_v1alpha1_on_request(tmp_path):
    from click.testing import CliRunner

    from trtspec.cli.main import cli

    config = next(p for p in EXAMPLES if p.stem == "llama3.1-8b-ngram")
    for flags, version, key in (([], "v1beta1", "components"), (["--api-version", "v1alpha1"], "v1alpha1", "services")):
        out = tmp_path / version
        result = CliRunner().invoke(cli, ["k8s", str(config), "--name", "llama-8b", "--out", str(out), *flags])
        assert result.exit_code == 0, result.output
        graph = list(yaml.safe_load_all((out / "dynamo-graph.yaml").read_text()))[1]
        assert graph["apiVersion"] == f"nvidia.com/{version}" and set(graph["spec"]) == {"backendFramework", key}
    result = CliRunner().invoke(cli, ["k8s", str(config), "--out", str(tmp_path / "x"), "--api-version", "v2"])
    assert result.exit_code == 2 and "--api-version" in result.output


@pytest.mark.parametrize("name", ["llama3.1-8b-eagle3", "llama3.1-8b-draft-target", "llama3.1-8b-ngram-pytorch",
                                  "llama3.1-8b-ngram"])
def test_worker_configs_carry_the_builds_llm_api_options(name, tmp_path):
    """Every engine config of `trtspec k8s` (both modes) is the LLM-API options of the release inside the image: by
    default Dynamo's runtime image and its TensorRT-LLM 1.3.0rc29 (the build's options rendered for that release: its
    decoding-type tags, no eagle3_one_model), with an image that runs 1.2.1 the options file `trtspec build` writes;
    disaggregated workers add the cache transceiver."""
    config = next(p for p in EXAMPLES if p.stem == name)
    plan_121 = plan_build(run_preflight(load_build_spec(config, overrides={"trtllm": {"version": "1.2.1"}}),
                                        dry_run=True))
    built = yaml.safe_load(next(s.content for s in plan_121.steps if s.id == "write-llm-api") or "")
    assert built["speculative_config"]["decoding_type"] in ("Eagle", "DraftTarget", "NGram")
    for_pin = llm_api_for_release(run_preflight(load_build_spec(config, overrides={"trtllm": {"version": "1.2.1"}}),
                                                dry_run=True), PIN)
    assert for_pin["speculative_config"]["decoding_type"] in ("Eagle3", "Draft_Target", "NGram")
    assert "eagle3_one_model" not in for_pin["speculative_config"]
    for flags, written in (([], for_pin), (["--image", IMAGE_121, "--trtllm-version", "1.2.1"], built)):
        for mode in ("agg", "disagg"):
            out = tmp_path / f"{mode}{len(flags)}"
            code, _, err = run_cli(["k8s", str(config), *flags, "--name", "llama-8b", "--mode", mode, "--out",
                                    str(out)])
            assert code == 0, err
            files = sorted((out / "engine_configs").glob("*.yaml"))
            assert [f.name for f in files] == (["agg.yaml"] if mode == "agg" else ["decode.yaml", "prefill.yaml"])
            extra = {"cache_transceiver_config": {"backend": "DEFAULT"}} if mode == "disagg" else {}
            for file in files:
                assert yaml.safe_load(file.read_text()) == {**written, **extra}, file.name


def test_one_releases_options_never_go_into_anothers_image(tmp_path):
    config = next(p for p in EXAMPLES if p.stem == "llama3.1-8b-ngram-pytorch")
    code, _, err = run_cli(["k8s", str(config), "--trtllm-version", "1.2.1", "--out", str(tmp_path / "o")])
    assert_clean_failure(code, err)
    assert ("--trtllm-version='1.2.1': is not the TensorRT-LLM inside nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:"
            "1.6.1 (it runs 1.3.0rc29") in err and code == 2
    assert not (tmp_path / "o").exists()


def test_a_release_without_llm_api_facts_is_refused_naming_the_field():
    with pytest.raises(ConfigError, match=r"trtllm_version='0.18.0'") as info:
        rendered(next(p for p in EXAMPLES if p.stem == "llama3.1-8b-ngram"), "agg", version="0.18.0",
                 image="registry.example/trtllm:0.18.0")
    assert PIN in (info.value.hint or "")


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


def _class_fields(source: str, name: str) -> set[str]:
    """The fields of pydantic model `name` in `source`, by their serialized names (a Field alias when given)."""
    import ast

    cls = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef) and n.name == name)
    fields = set()
    for stmt in cls.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            alias = [k.value.value for k in getattr(stmt.value, "keywords", []) if k.arg == "alias"]
            fields.add(alias[0] if alias else stmt.target.id)
    return fields


def test_v1beta1_facts_match_what_the_installed_wheel_writes():
    """The v1beta1 facts are what ai-dynamo 1.6.1's own tools write: its profiler's DGD model (apiVersion, component
    and container fields), its TensorRT-LLM blueprints (component types, container `main`, nvidia.com/gpu), and a
    v1beta1 DGD with spec.backendFramework handed to the operator's Go override engine in its tests."""
    try:
        dist = metadata.distribution("ai-dynamo")
    except metadata.PackageNotFoundError:
        pytest.skip("ai-dynamo is not installed")
    beta = dynamo_facts()["operator"]["v1beta1"]
    paths = list(beta["source"]["paths"])
    model = Path(dist.locate_file(paths[0])).read_text()
    assert f'apiVersion: str = "{beta["api_version"]}"' in model
    assert _class_fields(model, "Component") == set(beta["component_fields"])
    assert _class_fields(model, "Container") == set(beta["container_fields"])
    assert _class_fields(model, "Spec") >= {"components"}
    assert f'"{beta["gpu_resource"]}"' in model and f'container.name == "{beta["main_container"]}"' in model
    assert 'component_type: str = Field(default="planner", alias="type")' in model
    blueprints = [yaml.safe_load(Path(dist.locate_file(p)).read_text()) for p in paths[1:3]]
    components = [c for b in blueprints for c in b["spec"]["components"]]
    assert {b["apiVersion"] for b in blueprints} == {beta["api_version"]}
    assert {c["type"] for c in components} | {"planner"} == set(beta["component_types"])
    assert set().union(*components) <= set(beta["component_fields"])
    containers = [x for c in components for x in c["podTemplate"]["spec"]["containers"]]
    assert {x["name"] for x in containers} == {beta["main_container"]}
    # envFrom: a Kubernetes container field the model passes through (extra fields allowed); trtspec does not use it
    assert set().union(*containers) - {"envFrom"} <= set(beta["container_fields"])
    assert {k for x in containers for k in x.get("resources", {}).get("limits", {})} == {beta["gpu_resource"]}
    go_test = Path(dist.locate_file(paths[3])).read_text()
    assert f'"apiVersion": "{beta["api_version"]}"' in go_test and '"backendFramework": "vllm"' in go_test
    pod = _class_fields(model, "PodSpec")
    assert pod == set(beta["pod_spec_fields"])
    request = Path(dist.locate_file(paths[4])).read_text()
    assert "runtimeVersionOverride" in request and "non-semantic-version tag or digest" in request


def test_a_custom_image_names_the_runtime_version():
    config = next(p for p in EXAMPLES if p.stem == "llama3.1-8b-ngram")
    default, _ = rendered(config, "disagg")
    assert all("runtimeVersionOverride" not in c for c in default.manifest[1]["spec"]["components"])
    spec = load_build_spec(config)
    resolved = run_preflight(spec.model_copy(update={"trtllm": spec.trtllm.model_copy(update={"version": "1.2.1"}),
                                                     "backend": "tensorrtllm"}), dry_run=True)
    plan = plan_build(resolved)
    for api_version in ("v1beta1", "v1alpha1"):
        result = render(plan.llm_api, name="llama-8b", model_path="/models/x", served_model_name=spec.name, tp_size=1,
                        trtllm_version="1.2.1", mode="disagg", image=f"registry.example/trtllm@{DIGEST}",
                        api_version=api_version)
        assert any("the options are TensorRT-LLM 1.2.1's, the release you named" in n for n in result.notes)
        assert validate(result) == []
        graph = list(yaml.safe_load_all(result.files["dynamo-graph.yaml"]))[1]
        note = next(n for n in result.notes if "is not Dynamo's" in n)
        if api_version == "v1beta1":
            assert {c.get("runtimeVersionOverride") for c in graph["spec"]["components"]} == {"1.6.1"}
            assert "every component sets runtimeVersionOverride: 1.6.1" in note
        else:
            assert "runtimeVersionOverride" not in result.files["dynamo-graph.yaml"] and "not written" in note


# --- hostile names, paths and images (issue 29, item 1) ---------------------------------------------------------------

NGRAM = {"method": "ngram", "target": "/models/Llama-3.1-8B-Instruct", "max_draft_len": 10,
         "trtllm": {"version": "1.2.1"}}
DRAFT_TARGET = {"method": "draft_target", "target": "/models/target", "draft": "/models/draft", "max_draft_len": 4,
                "trtllm": {"version": "1.2.1"}}
DIGEST = "sha256:" + "0123456789abcdef" * 4


def k8s_cli(tmp_path: Path, doc: dict, *flags: str, out: Path | None = None) -> tuple[int, str, str, Path]:
    """`trtspec k8s` in-process over the build config `doc`: (exit code, stdout, stderr, --out)."""
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(doc), encoding="utf-8")
    out = out or tmp_path / "out"
    code, stdout, stderr = run_cli(["k8s", str(config), "--out", str(out), *flags])
    return code, stdout, stderr, out


def refused(code: int, stderr: str, field: str, out: Path) -> str:
    """The run exited 2 with one `Error: FIELD=...` line (and a hint), and wrote nothing; returns the hint."""
    assert_clean_failure(code, stderr, frozenset({2}))
    assert stderr.startswith(f"Error: {field}="), stderr
    assert not out.exists()
    return stderr.split("Hint: ", 1)[1].strip() if "Hint: " in stderr else ""


def test_a_name_cannot_add_keys_to_the_written_files(tmp_path):
    """The issue's injection: a name that closes the header comment and writes keys of its own."""
    code, _, err, out = k8s_cli(tmp_path, {**NGRAM, "name": "x\ntensor_parallel_size: 64\nevil: injected\n#"})
    hint = refused(code, err, "name", out)
    assert hint.startswith("the nearest valid name is x-tensor-parallel-size-64-evil-injected:")


def test_a_name_cannot_add_a_document(tmp_path):
    code, _, err, out = k8s_cli(tmp_path, {**NGRAM, "name": "x\n---\nkind: Secret"})
    refused(code, err, "name", out)


def test_a_name_with_a_nul_is_refused(tmp_path):
    code, _, err, out = k8s_cli(tmp_path, {**NGRAM, "name": "x\0"})
    refused(code, err, "name", out)


NOT_K8S_NAMES = [
    ("MyModel", "mymodel"), ("a: b", "a-b"), ("modèle", "modele"), ("../../etc", "etc"), ("a" * 10_014, "a" * 50),
    ("-x", "x"), ("x-", "x"), ("70b", "model-70b"), ("llama.3", "llama-3"), ("a_b", "a-b"),
    ("a" * 51, "a" * 50),  # <name>-trtllmworker would pass 63 characters
]  # fmt: skip


@pytest.mark.parametrize(("name", "nearest"), [(n, near) for n, near in NOT_K8S_NAMES if not n.startswith("-")])
def test_a_config_name_kubernetes_rejects_becomes_the_nearest_valid_name_with_a_note(tmp_path, name, nearest):
    code, stdout, err, out = k8s_cli(tmp_path, {**NGRAM, "name": name})
    assert code == 0, err
    graph = list(yaml.safe_load_all((out / "dynamo-graph.yaml").read_text()))
    assert graph[1]["metadata"]["name"] == nearest
    assert f"# note: metadata.name {nearest}: the config's name" in stdout and "--name sets another" in stdout


@pytest.mark.parametrize(("name", "nearest"), [*NOT_K8S_NAMES, ("", "model")])
def test_a_name_kubernetes_rejects_given_with_name_is_refused_with_the_nearest_valid_name(tmp_path, name, nearest):
    code, _, err, out = k8s_cli(tmp_path, {**NGRAM, "name": "fine"}, "--name", name)
    assert refused(code, err, "--name", out).startswith(f"the nearest valid name is {nearest}")


def test_a_config_without_a_name_is_refused(tmp_path):
    code, _, err, out = k8s_cli(tmp_path, NGRAM)
    assert "add `name: config` to" in refused(code, err, "name", out) and "or pass --name config" in err


@pytest.mark.parametrize("name", ["a", "llama3-8b", "a" * 50])
def test_kubernetes_names_are_accepted(tmp_path, name):
    code, _, err, out = k8s_cli(tmp_path, {**NGRAM, "name": name})
    assert code == 0, err
    assert list(yaml.safe_load_all((out / "dynamo-graph.yaml").read_text()))[1]["metadata"]["name"] == name


def test_name_sets_the_deployment_name_and_is_checked_the_same_way(tmp_path):
    """A config whose name has a dot (the llama3.1 examples) deploys as the nearest valid name; --name sets another,
    checked as given; the OpenAI model name stays the config's."""
    code, _, err, out = k8s_cli(tmp_path, {**NGRAM, "name": "llama3.1-8b-ngram"})
    assert code == 0 and list(yaml.safe_load_all((out / "dynamo-graph.yaml").read_text()))[1]["metadata"]["name"] \
        == "llama3-1-8b-ngram", err
    code, _, err, out = k8s_cli(tmp_path, {**NGRAM, "name": "llama3.1-8b-ngram"}, "--name", "Llama 8B",
                                out=tmp_path / "refused")
    assert refused(code, err, "--name", out) == "the nearest valid name is llama-8b"
    code, _, err, out = k8s_cli(tmp_path, {**NGRAM, "name": "llama3.1-8b-ngram"}, "--name", "llama-8b")
    assert code == 0, err
    graph = list(yaml.safe_load_all((out / "dynamo-graph.yaml").read_text()))[1]
    assert graph["metadata"]["name"] == "llama-8b"
    assert workers_of(graph)["TRTLLMWorker"][1]["args"][:4] == ["--model", "/models/Llama-3.1-8B-Instruct",
                                                                 "--served-model-name", "llama3.1-8b-ngram"]


def test_validate_checks_kubernetes_names_and_images():
    result, _ = rendered(next(p for p in EXAMPLES if p.stem == "llama3.1-8b-ngram"), "agg")
    configmap, graph = result.manifest
    assert validate(result) == []
    for bad in ("MyModel", "a: b", "modèle", "../../etc", "a" * 10_014):
        graph["metadata"]["name"] = bad
        assert any(f"DynamoGraphDeployment metadata.name {shown(bad)!r}" in p for p in validate(result)), bad
    graph["metadata"]["name"] = "ok"
    configmap["metadata"]["name"] = "Engine Config"
    graph["spec"]["components"][1]["name"] = "Worker_1"
    graph["spec"]["components"][1]["podTemplate"]["spec"]["containers"][0]["image"] = "bad image"
    problems = validate(result)
    assert any("ConfigMap metadata.name 'Engine Config'" in p for p in problems), problems
    assert any("components[Worker_1].name" in p for p in problems), problems
    assert any("components[Worker_1].image 'bad image'" in p for p in problems), problems


@pytest.mark.parametrize("image", [
    "bad image", "", "x\nevil: injected", "nvcr.io/NVIDIA/x:1", "registry.example/x@sha256:abc", ":tag",
    "x:" + "t" * 200, "a" * 300, "nvcr.io/x:tag\0", " nvcr.io/x", "x@", "x:tag:tag",
])  # fmt: skip
def test_invalid_images_are_refused(tmp_path, image):
    code, _, err, out = k8s_cli(tmp_path, {**NGRAM, "name": "m"}, "--image", image)
    refused(code, err, "--image", out)


@pytest.mark.parametrize("image", ["x", "localhost:5000/team/trtllm:1.6.1-custom", f"registry.example/trtllm@{DIGEST}",
                                   "nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:1.6.1", "[::1]:5000/x:y"])
def test_valid_images_are_written_as_given(tmp_path, image):
    code, _, err, out = k8s_cli(tmp_path, {**NGRAM, "name": "m"}, "--image", image)
    assert code == 0, err
    graph = list(yaml.safe_load_all((out / "dynamo-graph.yaml").read_text()))[1]
    assert {c["image"] for comp in graph["spec"]["components"] for c in comp["podTemplate"]["spec"]["containers"]} \
        == {image}


@pytest.mark.parametrize(("served", "problem"), [
    ("a\nb: c", "line break"), ("a\0b", "NUL"), ("", "empty"), ("--model", "'-'"), ("a\u2028b", "line break"),
])  # fmt: skip
def test_served_model_names_that_break_the_worker_are_refused(tmp_path, served, problem):
    code, _, err, out = k8s_cli(tmp_path, {**NGRAM, "name": "m"}, "--served-model-name", served)
    refused(code, err, "--served-model-name", out)
    assert problem in err


@pytest.mark.parametrize("path", ["-x", "/m\0"])
def test_model_paths_the_worker_would_misread_are_refused(tmp_path, path):
    code, _, err, out = k8s_cli(tmp_path, {**NGRAM, "name": "m", "target": path})
    refused(code, err, "target", out)


def test_out_with_a_nul_is_refused(tmp_path):
    code, _, err, out = k8s_cli(tmp_path, {**NGRAM, "name": "m"}, out=tmp_path / "o\0x")
    assert_clean_failure(code, err, frozenset({2}))
    assert "--out" in err


class Yaml11Loader(yaml.SafeLoader):
    """Reads what other YAML 1.1 readers read as booleans or numbers where PyYAML reads strings: Go's yaml.v2 (kubectl,
    the operator) takes y / n as booleans and 1e3 / 0o17 as numbers. A value trtspec writes must be quoted so that
    every reader sees the string."""


Yaml11Loader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:y|Y|n|N)$"), list("yYnN"))
Yaml11Loader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9]+(?:\.[0-9]*)?[eE][-+]?[0-9]+$"),
                                   list("-+0123456789"))
Yaml11Loader.add_implicit_resolver("tag:yaml.org,2002:int", re.compile(r"^0o[0-7]+$"), ["0"])


def test_values_other_yaml_readers_read_as_booleans_or_numbers_are_quoted(tmp_path):
    code, _, err, out = k8s_cli(tmp_path, {**DRAFT_TARGET, "name": "m", "target": "n", "draft": "1e3"},
                                "--served-model-name", "y")
    assert code == 0, err
    graph = list(yaml.load_all((out / "dynamo-graph.yaml").read_text(), Loader=Yaml11Loader))[1]  # noqa: S506
    args = workers_of(graph)["TRTLLMWorker"][1]["args"]
    assert args[:4] == ["--model", "n", "--served-model-name", "y"]
    engine = yaml.load((out / "engine_configs/agg.yaml").read_text(), Loader=Yaml11Loader)  # noqa: S506
    assert engine["speculative_config"]["speculative_model"] == "1e3"


def test_printed_commands_keep_paths_as_given_and_comments_stay_comments(tmp_path):
    """The launch commands are shell-quoted argv; every printed value outside them sits in a comment line (a line
    break in a path does not end the comment), so the output pasted into a shell runs those commands only."""
    model = "/data/config/x\nrm -rf ~ #"
    code, stdout, err, out = k8s_cli(tmp_path, {**NGRAM, "name": "m", "target": model},
                                     out=tmp_path / "o\nrm -rf ~")
    assert code == 0, err
    expected = [["python3", "-m", "dynamo.frontend", "--http-port", "8000", "&"],
                ["python3", "-m", "dynamo.trtllm", "--model", model, "--served-model-name", "m",
                 "--extra-engine-args", "engine_configs/agg.yaml", "--publish-metrics", "&"]]
    assert shlex.split(stdout, comments=True) == [token for command in expected for token in command]
    graph = list(yaml.safe_load_all((out / "dynamo-graph.yaml").read_text()))[1]
    assert workers_of(graph)["TRTLLMWorker"][1]["args"][1] == model


HOSTILE = ["x\ntensor_parallel_size: 64\nevil: injected\n#", "x\n---\nkind: Secret", "\0", "x\0", "a: b", "#", "---",
           "...", "- x", "y", "n", "N", "no", "null", "~", "1e3", "0o17", "0x1F", "1_000", "12:30", "&a", "*a", "<<",
           "!!python/object/apply:os.system", "{a: b}", "[a]", "'", '"', "|", ">", "%YAML 1.2", "@x", "`x`", " x", "x ",
           "\t", "\r", "\u2028", "\x85", "\ufeff", "é", "模型", "MyModel", "../../etc", "-x", "--model",
           "a" * 10_014, "/data/config/x", "$(touch /tmp/pwned)"]
TEXTS = st.one_of(st.text(max_size=40), st.sampled_from(HOSTILE),
                  st.text(st.sampled_from(list("ab:#-\n\0 é/.'\"{}[]&*!|>%@`\\\u2028")), max_size=24))
# Values each field accepts, still hostile to YAML and shells (colons, '#', '---', line breaks in paths, unicode):
# a run draws most fields from these and a few (the `hostile` ones) from anything at all.
ACCEPTED = {
    "name": st.from_regex(r"[a-z]([-a-z0-9]{0,40}[a-z0-9])?", fullmatch=True),
    "target": TEXTS.map(lambda text: "/models/" + text.replace("\0", "_")[:200]),
    "served": TEXTS.map(lambda text: "m" + "".join(c if c.isprintable() else "_" for c in text[:200])),
    "image": st.sampled_from(["x", "localhost:5000/team/trtllm:1.6.1-custom", f"r.example/t@{DIGEST}",
                              "nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:1.6.1", "[::1]:5000/x:y"]),
    "out": TEXTS.map(lambda text: "o" + text.replace("/", "_").replace("\0", "_")[:40]),
}
ACCEPTED["draft"] = ACCEPTED["target"]
ANYTHING = {"image": st.one_of(TEXTS, st.just("a" * 256)), "target": st.one_of(TEXTS, ACCEPTED["target"])}
FIELDS = {"name", "target", "draft", "--served-model-name", "--image", "--out"}  # where a refusal may point


@st.composite
def k8s_values(draw: st.DrawFn) -> dict:
    """name, target, draft, served, image and out (None: the flag is not given), at most two of them hostile."""
    hostile = draw(st.sets(st.sampled_from(sorted(ACCEPTED)), max_size=2))
    values = {key: draw(ANYTHING.get(key, TEXTS) if key in hostile else strategy)
              for key, strategy in ACCEPTED.items()}
    for key in ("served", "image", "out"):
        if key not in hostile and draw(st.booleans()):
            values[key] = None  # the default
    return values


def structure(value: object) -> object:
    """The keys of a document all the way down, with each leaf replaced by its type."""
    if isinstance(value, dict):
        return {key: structure(item) for key, item in value.items()}
    if isinstance(value, list):
        return [structure(item) for item in value]
    return type(value).__name__


_REFERENCE: dict[tuple, dict[str, object]] = {}


def reference(tmp_path: Path, method: dict, mode: str, api_version: str, image: bool) -> dict[str, object]:
    """The structure of each file a run with plain values writes (the image only matters as default or custom)."""
    key = (method["method"], mode, api_version, image)
    if key not in _REFERENCE:
        flags = ["--mode", mode, "--api-version", api_version, *(["--image", "r.example/t:1"] if image else [])]
        base = tmp_path / "reference" / "-".join(map(str, key))
        base.mkdir(parents=True)
        code, _, err, out = k8s_cli(base, {**method, "name": "m"}, *flags)
        assert code == 0, err
        _REFERENCE[key] = {str(p.relative_to(out)): structure(list(yaml.safe_load_all(p.read_text())))
                           for p in sorted(out.rglob("*.yaml"))}
    return _REFERENCE[key]


@settings(SETTINGS, max_examples=80)
@given(method=st.sampled_from([NGRAM, DRAFT_TARGET]), values=k8s_values(), mode=st.sampled_from(["agg", "disagg"]),
       api_version=st.sampled_from(["v1beta1", "v1alpha1"]))
@pytest.mark.slow
def test_hostile_names_paths_and_images_are_refused_or_written_as_given(tmp_path, method, values, mode, api_version):
    """Whatever the name, model paths, served model name, image and --out: either one `Error:` line naming the field
    (exit 2, nothing written) or files that parse into exactly the documents and keys trtspec writes, holding the
    values as given (read as strings by a YAML 1.1 reader as well), and printed commands that are those argvs."""
    name, target, draft, served, image, out = (values[key] for key in ("name", "target", "draft", "served", "image",
                                                                        "out"))
    doc = {**method, "name": name, "target": target, **({"draft": draft} if "draft" in method else {})}
    assume(yaml.safe_load(yaml.safe_dump(doc)) == doc)  # PyYAML writes the config as given (the test's own step)
    base = Path(tempfile.mkdtemp(dir=tmp_path))
    assume(out is None or ("/" not in out and out not in (".", "..")))  # stay inside base
    flags = ["--mode", mode, "--api-version", api_version]
    flags += ["--served-model-name", served] if served is not None else []
    flags += ["--image", image] if image is not None else []
    code, stdout, err, written = k8s_cli(base, doc, *flags, out=base / "out" / out if out is not None else None)
    event("written" if code == 0 else "refused")
    if code != 0:
        assert_clean_failure(code, err, frozenset({2}))
        line = err[err.index("Error: ") + len("Error: "):].split("\n", 1)[0]
        flag = re.match(r"Invalid value for '([-a-z]+)'", line)  # click's usage error
        assert (flag[1] if flag else line.split("=", 1)[0]) in FIELDS, err
        assert not (written.exists() and any(written.rglob("*.yaml")))
        return
    custom = image is not None and image != "nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:1.6.1"
    files = {str(p.relative_to(written)): p.read_text() for p in written.rglob("*.yaml")}
    docs = {rel: list(yaml.load_all(text, Loader=Yaml11Loader)) for rel, text in files.items()}  # noqa: S506
    assert {rel: structure(d) for rel, d in docs.items()} == reference(tmp_path, method, mode, api_version, custom)
    configmap, graph = docs["dynamo-graph.yaml"]
    deployed = k8s_name(name, mode)[0]  # a config's name that is no Kubernetes name deploys as the nearest one
    assert configmap["metadata"]["name"] == f"{deployed}-engine-config" and graph["metadata"]["name"] == deployed
    expected = ["python3", "-m", "dynamo.frontend", "--http-port", "8000", "&"]  # the printed launch commands
    for _, container, _ in workers_of(graph).values():
        args = container["args"]
        assert args[args.index("--model") + 1] == target
        assert args[args.index("--served-model-name") + 1] == (name if served is None else served)
        assert container["image"] == image or (image is None and container["image"].endswith(":1.6.1"))
        engine = args[args.index("--extra-engine-args") + 1].rsplit("/", 1)[1]
        assert yaml.safe_load(configmap["data"][engine]) == docs[f"engine_configs/{engine}"][0]
        if "draft" in doc:
            assert docs[f"engine_configs/{engine}"][0]["speculative_config"]["speculative_model"] == draft
        at = args.index("--extra-engine-args") + 1
        expected += ["python3", "-m", "dynamo.trtllm", *args[:at], f"engine_configs/{engine}", *args[at + 1:], "&"]
    assert shlex.split(stdout, comments=True) == expected


def test_worker_configs_carry_the_schedule_and_gate(tmp_path):
    """A build config's `llm_api:` schedule, max_concurrency and gate reach every Dynamo TensorRT-LLM worker config in
    the form of the release inside the image (targets/controls.py): 1.3.0rc29 reads schedule keys as upper bounds and
    refuses max_concurrency beside a schedule (folded in: 0 above it), its gate is the rate gate; 1.2.1's gate there
    is refused naming the fix, and with an image that runs 1.2.1 every control is written as the build config has it."""
    config = yaml.safe_load(next(p for p in EXAMPLES if p.stem == "llama3.1-8b-draft-target").read_text())
    k = config.get("max_draft_len") or config.get("k")
    schedule = {"draft_len_schedule": {1: k, 4: 1, 8: 0}, "max_concurrency": 16}
    config.update(engine={**config.get("engine", {}), "max_batch_size": 64})
    length_gate = {"acceptance_window": 32, "acceptance_length_threshold": 0.4}
    rate_gate = {"acceptance_rate_window_size": 64, "acceptance_rate_threshold": 0.3}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({**config, "llm_api": {**schedule, **length_gate}}))
    code, _, err = run_cli(["k8s", str(path), "--name", "llama-8b", "--out", str(tmp_path / "o")])
    assert_clean_failure(code, err)
    assert code == 2 and ("llm_api.acceptance_window=32: TensorRT-LLM 1.3.0rc29: is TensorRT-LLM 1.2.1's gate, not read "
                          "by 1.3.0rc29") in err, err
    assert "acceptance_rate_window_size" in err  # the fix names the release's own gate
    code, _, err = run_cli(["k8s", str(path), "--name", "llama-8b", "--mode", "disagg", "--image", IMAGE_121,
                            "--trtllm-version", "1.2.1", "--out", str(tmp_path / "o121")])
    assert code == 0, err
    for file in sorted((tmp_path / "o121" / "engine_configs").glob("*.yaml")):
        written = yaml.safe_load(file.read_text())
        controls = {**schedule, **length_gate}
        assert {key: written["speculative_config"][key] for key in controls} == controls, file.name
        assert diff_llm_api(written, "1.2.1") == [], file.name
    path.write_text(yaml.safe_dump({**config, "llm_api": {**schedule, **rate_gate}}))
    code, _, err = run_cli(["k8s", str(path), "--name", "llama-8b", "--mode", "disagg", "--out", str(tmp_path / "o")])
    assert code == 0, err
    for file in sorted((tmp_path / "o" / "engine_configs").glob("*.yaml")):
        speculative = yaml.safe_load(file.read_text())["speculative_config"]
        assert speculative["draft_len_schedule"] == {3: k, 7: 1} and "max_concurrency" not in speculative
        assert {key: speculative[key] for key in rate_gate} == rate_gate
        assert diff_llm_api(yaml.safe_load(file.read_text()), PIN) == [], file.name
