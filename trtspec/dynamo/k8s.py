"""A build config -> NVIDIA Dynamo's TensorRT-LLM worker configs and Kubernetes manifests (pure: no torch, no I/O
but reading the facts file).

The engine config a Dynamo TensorRT-LLM worker takes (`python -m dynamo.trtllm --extra-engine-args FILE`) is a
TensorRT-LLM LLM-API YAML: the same options `trtspec build` writes for `trtllm-serve` (build/plan.py `llm_api`, with
the target release's `speculative_config`, checked against trtspec/targets/trtllm-<version>.json). This module wraps
it for Dynamo:

- aggregated: one worker kind (`TRTLLMWorker`) serving prefill and decode with `agg.yaml`;
- disaggregated: `prefill` and `decode` workers (`--disaggregation-mode prefill|decode`; the component's type in
  v1beta1, its subComponentType in v1alpha1) with
  `prefill.yaml` / `decode.yaml` (the same options: speculation runs in the decode worker);
- a `DynamoGraphDeployment` for Dynamo's Kubernetes operator: a Frontend plus the workers, the engine configs in a
  ConfigMap mounted at /config, GPUs per worker = the engine's tensor-parallel size. nvidia.com/v1beta1 by default
  (`spec.components[]`, each a Kubernetes pod template whose container `main` runs the component: what Dynamo 1.6.1's
  own tools write), or the legacy nvidia.com/v1alpha1 (`spec.services`, `extraPodSpec.mainContainer`) that its
  operator still accepts;
- the launch commands for one machine (frontend + workers), printed.

Every name is checked against the Dynamo facts (`dynamo-1.6.1.json` beside this module: the worker's flags and modes
from the installed ai-dynamo 1.6.1 wheel; the v1beta1 fields from what that wheel writes and reads; the v1alpha1
fields from Dynamo's sources, commit and path recorded):
`validate` returns the problems, and `render` refuses to return files that have any.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from trtspec.errors import ConfigError

FACTS_FILE = Path(__file__).resolve().parent / "dynamo-1.6.1.json"
MODES = ("agg", "disagg")
API_VERSIONS = ("v1beta1", "v1alpha1")  # the first is the default
CONFIG_MOUNT = "/config"
DISAGG_NOTE = ("Dynamo's disaggregated examples also set `cache_transceiver_config` (the KV transfer backend); "
               "trtspec's TensorRT-LLM facts do not list that key for this release, so it is left for you to add")


@cache
def dynamo_facts() -> dict[str, Any]:
    return json.loads(FACTS_FILE.read_text(encoding="utf-8"))


@dataclass(frozen=True)
class DynamoRender:
    """What `render` produces: files by relative path, the launch commands for one machine, notes."""

    files: dict[str, str]
    commands: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    manifest: list[dict[str, Any]] = field(default_factory=list)  # the Kubernetes objects (also in files)


def render(llm_api: dict[str, Any] | None, *, name: str, model_path: str, served_model_name: str, tp_size: int,
           trtllm_version: str, mode: str = "agg", image: str | None = None, api_version: str = API_VERSIONS[0],
           llm_api_note: str = "") -> DynamoRender:
    """Engine configs, the manifest and the commands for one build (its LLM-API options `llm_api`)."""
    facts = dynamo_facts()
    if mode not in MODES:
        raise ConfigError("mode", mode, f"is not one of {', '.join(MODES)}", hint="agg (one worker kind) or disagg")
    if api_version not in API_VERSIONS:
        raise ConfigError("api_version", api_version, f"is not one of {', '.join(API_VERSIONS)}",
                          hint="v1beta1 (what Dynamo's tools write) or the legacy v1alpha1")
    if llm_api is None:
        raise ConfigError("trtllm.version", trtllm_version, f"has no LLM-API options for this build ({llm_api_note})",
                          hint=f"Dynamo {facts['dynamo_version']} runs TensorRT-LLM "
                               f"{facts['trtllm_pin']['tensorrt_llm']} through the LLM API: use a method with an "
                               "LLM-API form and a release whose LLM-API facts trtspec has (trtllm.version: 1.2.1)")
    default_image = f"{facts['operator']['runtime_image']}:{facts['dynamo_version']}"
    custom_image = image is not None and image != default_image
    image = image or default_image
    roles = {"agg": {"TRTLLMWorker": ("agg", None)},
             "disagg": {"prefill": ("prefill", "prefill"), "decode": ("decode", "decode")}}[mode]
    configs = {f"{config}.yaml": dict(llm_api) for config, _ in roles.values()}
    module = facts["trtllm_worker"]["module"]
    commands = [shlex.join(["python3", "-m", facts["frontend"]["module"], "--http-port", "8000"])]
    workers = []  # (role, disaggregation mode or None, worker args)
    for role, (config, disagg) in roles.items():
        args = ["--model", model_path, "--served-model-name", served_model_name, "--extra-engine-args",
                f"{CONFIG_MOUNT}/{config}.yaml"]
        if tp_size > 1:
            args += ["--tensor-parallel-size", str(tp_size)]
        if disagg:
            args += ["--disaggregation-mode", disagg]
        workers.append((role, disagg, args))
        commands.append(shlex.join(["python3", "-m", module, *args]).replace(f"{CONFIG_MOUNT}/", "./"))
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{name}-engine-config"},
                 "data": {file: _yaml(options) for file, options in configs.items()}}
    if api_version == "v1beta1":
        graph = _graph_v1beta1(name, image, tp_size, workers, runtime_version=custom_image)
    else:
        graph = _graph_v1alpha1(name, image, tp_size, workers)
    header = (f"# trtspec: NVIDIA Dynamo {facts['dynamo_version']} ({mode}) for {name}: TensorRT-LLM LLM-API options "
              f"of release {trtllm_version}; Dynamo {facts['dynamo_version']}'s runtime ships TensorRT-LLM "
              f"{facts['trtllm_pin']['tensorrt_llm']}.\n")
    files = {f"engine_configs/{file}": header + _yaml(options) for file, options in configs.items()}
    files["dynamo-graph.yaml"] = (header + "# kubectl apply -f dynamo-graph.yaml\n"
                                  + "---\n".join(_yaml(obj) for obj in (configmap, graph)))
    notes = [f"image {image}: {facts['operator']['runtime_image_note']}",
             f"model paths ({model_path}) are paths inside the worker container: mount the checkpoints there "
             "(a PersistentVolumeClaim, or a model cache) or pass a Hugging Face id"]
    if trtllm_version != facts["trtllm_pin"]["tensorrt_llm"]:
        notes.append(f"the options use TensorRT-LLM {trtllm_version}'s facts; the runtime image runs "
                     f"{facts['trtllm_pin']['tensorrt_llm']} ({facts['trtllm_pin']['source']['path']} of ai-dynamo "
                     f"{facts['dynamo_version']}): check the keys against that release before production")
    if custom_image:  # the operator reads the runtime's version from the image tag, which a custom image may not carry
        notes.append(f"image {image} is not Dynamo's: " + (
            f"every component sets runtimeVersionOverride: {facts['dynamo_version']}, the runtime these files are for"
            if api_version == "v1beta1" else
            f"set runtimeVersionOverride: {facts['dynamo_version']} on each service if your operator asks for it "
            "(trtspec's v1alpha1 facts do not list the field, so it is not written)"))
    if mode == "disagg":
        notes.append(DISAGG_NOTE)
    result = DynamoRender(files=files, commands=commands, notes=notes, manifest=[configmap, graph])
    problems = validate(result)
    if problems:  # a trtspec bug, never the user's: refuse to write what Dynamo would reject
        raise ConfigError("dynamo", name, "the rendered manifest does not match Dynamo's facts: " + "; ".join(problems),
                          hint="report this")
    return result


def _volume(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The engine configs' ConfigMap as a pod volume, and its read-only mount at CONFIG_MOUNT (new objects per call:
    shared ones would be written as YAML anchors)."""
    return ({"name": "engine-config", "configMap": {"name": f"{name}-engine-config"}},
            {"name": "engine-config", "mountPath": CONFIG_MOUNT, "readOnly": True})


def _graph_v1beta1(name: str, image: str, tp_size: int, workers: list[tuple[str, str | None, list[str]]], *,
                   runtime_version: bool = False) -> dict[str, Any]:
    """nvidia.com/v1beta1: `spec.components[]`, each {name, type, replicas, podTemplate} whose container `main`
    runs it (as the 1.6.1 wheel's TensorRT-LLM blueprints); a disaggregated worker's type is its mode. With
    `runtime_version` (an image that is not Dynamo's, whose tag need not be a Dynamo version), every component sets
    runtimeVersionOverride to the Dynamo release (the 1.6.1 wheel's DGDR: "Set this when Image uses a
    non-semantic-version tag or digest, or when its tag does not identify the Dynamo runtime version")."""
    facts = dynamo_facts()
    beta = facts["operator"]["v1beta1"]
    main = beta["main_container"]
    components = [{"name": "Frontend", "type": "frontend", "replicas": 1, "podTemplate": {"spec": {"containers": [
        {"name": main, "image": image, "command": ["python3"], "args": ["-m", facts["frontend"]["module"]]}]}}}]
    for role, disagg, args in workers:
        volume, mount = _volume(name)
        container = {"name": main, "image": image, "command": ["python3", "-m", facts["trtllm_worker"]["module"]],
                     "args": args, "resources": {"limits": {beta["gpu_resource"]: str(tp_size)}},
                     "volumeMounts": [mount]}
        components.append({"name": role, "type": disagg or "worker", "replicas": 1,
                           "podTemplate": {"spec": {"volumes": [volume], "containers": [container]}}})
    if runtime_version:
        for component in components:
            component["runtimeVersionOverride"] = facts["dynamo_version"]
    return {"apiVersion": beta["api_version"], "kind": facts["operator"]["kind"], "metadata": {"name": name},
            "spec": {"backendFramework": "trtllm", "components": components}}


def _graph_v1alpha1(name: str, image: str, tp_size: int, workers: list[tuple[str, str | None, list[str]]]
                    ) -> dict[str, Any]:
    """nvidia.com/v1alpha1 (legacy): `spec.services` by name, `extraPodSpec.mainContainer`, GPUs as
    `resources.limits.gpu`, a disaggregated worker's mode as its subComponentType."""
    facts = dynamo_facts()
    services: dict[str, Any] = {"Frontend": {"componentType": "frontend", "replicas": 1,
                                             "extraPodSpec": {"mainContainer": {"image": image}}}}
    for role, disagg, args in workers:
        volume, mount = _volume(name)
        service: dict[str, Any] = {"componentType": "worker", "replicas": 1, "resources": {"limits": {"gpu": str(tp_size)}},
                                   "extraPodSpec": {"volumes": [volume], "mainContainer": {
                                       "image": image, "command": ["python3", "-m", facts["trtllm_worker"]["module"]],
                                       "args": args, "volumeMounts": [mount]}}}
        if disagg:
            service["subComponentType"] = disagg
        services[role] = service
    return {"apiVersion": facts["operator"]["api_version"], "kind": facts["operator"]["kind"],
            "metadata": {"name": name}, "spec": {"backendFramework": "trtllm", "services": services}}


def validate(result: DynamoRender) -> list[str]:
    """Every name the manifest and the commands use, checked against the Dynamo facts of its apiVersion; [] when all
    are known."""
    op = dynamo_facts()["operator"]
    graphs = [obj for obj in result.manifest if obj.get("kind") == op["kind"]]
    if len(graphs) != 1:
        return [f"expected one {op['kind']}, found {len(graphs)}"]
    graph = graphs[0]
    framework = graph.get("spec", {}).get("backendFramework")
    problems = [] if framework in op["backend_frameworks"] else [
        f"spec.backendFramework {framework!r} is not one of {op['backend_frameworks']}"]
    if graph.get("apiVersion") == op["v1beta1"]["api_version"]:
        return problems + _validate_v1beta1(graph)
    if graph.get("apiVersion") == op["api_version"]:
        return problems + _validate_v1alpha1(graph)
    return [f"apiVersion {graph.get('apiVersion')} is not {op['v1beta1']['api_version']} or {op['api_version']}"]


def _validate_v1beta1(graph: dict[str, Any]) -> list[str]:
    facts = dynamo_facts()
    beta, worker = facts["operator"]["v1beta1"], facts["trtllm_worker"]
    spec = graph.get("spec", {})
    problems = [f"spec.{key}: not a field trtspec's v1beta1 facts list"
                for key in sorted(set(spec) - set(beta["spec_fields"]))]
    names = [str(c.get("name")).lower() for c in spec.get("components", [])]  # unique ignoring case
    problems += [f"components: name {n!r} is used twice" for n in sorted({n for n in names if names.count(n) > 1})]
    for component in spec.get("components", []):
        where = f"components[{component.get('name')}]"
        problems += [f"{where}.{key}: not a component field"
                     for key in sorted(set(component) - set(beta["component_fields"]))]
        kind = component.get("type")
        if kind not in beta["component_types"]:
            problems.append(f"{where}.type {kind!r} is not one of {beta['component_types']}")
        pod = component.get("podTemplate", {}).get("spec", {})
        problems += [f"{where}.podTemplate.spec.{key}: not used by trtspec's facts"
                     for key in sorted(set(pod) - set(beta["pod_spec_fields"]))]
        containers = pod.get("containers", [])
        main = [c for c in containers if c.get("name") == beta["main_container"]]
        if len(main) != 1:
            problems.append(f"{where}: no container named {beta['main_container']!r} (the one Dynamo runs)")
            continue
        container = main[0]
        problems += [f"{where}.{key}: not a container field trtspec's facts list"
                     for key in sorted(set(container) - set(beta["container_fields"]))]
        for bound in ("limits", "requests"):
            unknown = set(container.get("resources", {}).get(bound, {})) - {beta["gpu_resource"]}
            problems += [f"{where}.resources.{bound}.{key}: not {beta['gpu_resource']}" for key in sorted(unknown)]
        if container.get("command", [None, None, None])[2:] == [worker["module"]]:
            args = container.get("args", [])
            problems += _check_args(where, args, worker)
            if "--disaggregation-mode" in args and args[args.index("--disaggregation-mode") + 1] != kind:
                problems.append(f"{where}: type {kind!r} differs from its --disaggregation-mode")
    return problems


def _validate_v1alpha1(graph: dict[str, Any]) -> list[str]:
    facts = dynamo_facts()
    op, worker = facts["operator"], facts["trtllm_worker"]
    spec = graph.get("spec", {})
    problems = [f"spec.{key}: not a field" for key in sorted(set(spec) - set(op["spec_fields"]))]
    for name, service in spec.get("services", {}).items():
        problems += [f"services.{name}.{key}: not a service field" for key in sorted(set(service) - set(op["service_fields"]))]
        if service.get("componentType") not in op["component_types"]:
            problems.append(f"services.{name}.componentType {service.get('componentType')!r} is not one of "
                            f"{op['component_types']}")
        for kind in ("limits", "requests"):
            unknown = set(service.get("resources", {}).get(kind, {})) - set(op["resource_fields"])
            problems += [f"services.{name}.resources.{kind}.{key}: not a resource" for key in sorted(unknown)]
        pod = service.get("extraPodSpec", {})
        problems += [f"services.{name}.extraPodSpec.{key}: not used by trtspec's facts"
                     for key in sorted(set(pod) - set(op["extra_pod_spec_fields"]))]
        container = pod.get("mainContainer", {})
        if container.get("command", [None, None, None])[2:] == [worker["module"]]:
            problems += _check_args(f"services.{name}", container.get("args", []), worker)
    return problems


def _check_args(where: str, args: list[str], worker: dict[str, Any]) -> list[str]:
    problems = []
    flags = [a for a in args if a.startswith("--")]
    for flag in flags:
        if flag in worker["obsolete_flags"]:
            problems.append(f"{where}: {flag} is obsolete in Dynamo's worker (use {worker['obsolete_flags'][flag]})")
        elif flag not in worker["flags"]:
            problems.append(f"{where}: {flag} is not a flag of python -m {worker['module']}")
    if "--disaggregation-mode" in args:
        mode = args[args.index("--disaggregation-mode") + 1]
        if mode not in worker["disaggregation_modes"]:
            problems.append(f"{where}: --disaggregation-mode {mode} is not one of {worker['disaggregation_modes']}")
    if worker["engine_config_flag"] not in args:
        problems.append(f"{where}: no {worker['engine_config_flag']} (the engine config)")
    return problems


def _yaml(data: Any) -> str:
    """Block-style YAML, multi-line strings (the engine configs in the ConfigMap) as literal `|` blocks."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)

    Dumper.add_representer(str, text)
    return yaml.dump(data, Dumper=Dumper, sort_keys=False, default_flow_style=False, width=120)
