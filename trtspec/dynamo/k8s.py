"""A build config -> NVIDIA Dynamo's TensorRT-LLM worker configs and Kubernetes manifests (pure: no torch, no I/O
but reading the facts file).

The engine config a Dynamo TensorRT-LLM worker takes (`python -m dynamo.trtllm --extra-engine-args FILE`) is a
TensorRT-LLM LLM-API YAML: the same options `trtspec build` writes for `trtllm-serve` (build/plan.py `llm_api`, with
the target release's `speculative_config`, checked against trtspec/targets/trtllm-<version>.json). This module wraps
it for Dynamo:

- aggregated: one worker kind (`TRTLLMWorker`) serving prefill and decode with `agg.yaml`;
- disaggregated: `prefill` and `decode` workers (`--disaggregation-mode prefill|decode`, subComponentType) with
  `prefill.yaml` / `decode.yaml` (the same options: speculation runs in the decode worker);
- a `DynamoGraphDeployment` (nvidia.com/v1alpha1) for Dynamo's Kubernetes operator: a Frontend plus the workers, the
  engine configs in a ConfigMap mounted at /config, GPUs per worker = the engine's tensor-parallel size;
- the launch commands for one machine (frontend + workers), printed.

Every name is checked against the Dynamo facts (`dynamo-1.6.1.json` beside this module: the worker's flags and modes
from the installed ai-dynamo 1.6.1 wheel, the operator's fields from Dynamo's sources, commit and path recorded):
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
           trtllm_version: str, mode: str = "agg", image: str | None = None,
           llm_api_note: str = "") -> DynamoRender:
    """Engine configs, the manifest and the commands for one build (its LLM-API options `llm_api`)."""
    facts = dynamo_facts()
    if mode not in MODES:
        raise ConfigError("mode", mode, f"is not one of {', '.join(MODES)}", hint="agg (one worker kind) or disagg")
    if llm_api is None:
        raise ConfigError("trtllm.version", trtllm_version, f"has no LLM-API options for this build ({llm_api_note})",
                          hint=f"Dynamo {facts['dynamo_version']} runs TensorRT-LLM "
                               f"{facts['trtllm_pin']['tensorrt_llm']} through the LLM API: use a method with an "
                               "LLM-API form and a release whose LLM-API facts trtspec has (trtllm.version: 1.2.1)")
    image = image or f"{facts['operator']['runtime_image']}:{facts['dynamo_version']}"
    roles = {"agg": {"TRTLLMWorker": ("agg", None)},
             "disagg": {"prefill": ("prefill", "prefill"), "decode": ("decode", "decode")}}[mode]
    configs = {}
    for config, _ in roles.values():
        configs[f"{config}.yaml"] = dict(llm_api)
    module = facts["trtllm_worker"]["module"]
    services: dict[str, Any] = {"Frontend": {"componentType": "frontend", "replicas": 1,
                                             "extraPodSpec": {"mainContainer": {"image": image}}}}
    commands = [shlex.join(["python3", "-m", facts["frontend"]["module"], "--http-port", "8000"])]
    for role, (config, disagg) in roles.items():
        args = ["--model", model_path, "--served-model-name", served_model_name, "--extra-engine-args",
                f"{CONFIG_MOUNT}/{config}.yaml"]
        if tp_size > 1:
            args += ["--tensor-parallel-size", str(tp_size)]
        if disagg:
            args += ["--disaggregation-mode", disagg]
        service: dict[str, Any] = {"componentType": "worker", "replicas": 1, "resources": {"limits": {"gpu": str(tp_size)}},
                                   "extraPodSpec": {
                                       "volumes": [{"name": "engine-config", "configMap": {"name": f"{name}-engine-config"}}],
                                       "mainContainer": {"image": image, "command": ["python3", "-m", module],
                                                         "args": args, "volumeMounts": [
                                                             {"name": "engine-config", "mountPath": CONFIG_MOUNT,
                                                              "readOnly": True}]}}}
        if disagg:
            service["subComponentType"] = disagg
        services[role] = service
        commands.append(shlex.join(["python3", "-m", module, *args]).replace(f"{CONFIG_MOUNT}/", "./"))
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{name}-engine-config"},
                 "data": {file: _yaml(options) for file, options in configs.items()}}
    graph = {"apiVersion": facts["operator"]["api_version"], "kind": facts["operator"]["kind"],
             "metadata": {"name": name}, "spec": {"backendFramework": "trtllm", "services": services}}
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
    if mode == "disagg":
        notes.append(DISAGG_NOTE)
    result = DynamoRender(files=files, commands=commands, notes=notes, manifest=[configmap, graph])
    problems = validate(result)
    if problems:  # a trtspec bug, never the user's: refuse to write what Dynamo would reject
        raise ConfigError("dynamo", name, "the rendered manifest does not match Dynamo's facts: " + "; ".join(problems),
                          hint="report this")
    return result


def validate(result: DynamoRender) -> list[str]:
    """Every name the manifest and the commands use, checked against the Dynamo facts; [] when all are known."""
    facts = dynamo_facts()
    op, worker = facts["operator"], facts["trtllm_worker"]
    problems = []
    graphs = [obj for obj in result.manifest if obj.get("kind") == op["kind"]]
    if len(graphs) != 1:
        return [f"expected one {op['kind']}, found {len(graphs)}"]
    graph = graphs[0]
    if graph.get("apiVersion") != op["api_version"]:
        problems.append(f"apiVersion {graph.get('apiVersion')} is not {op['api_version']}")
    spec = graph.get("spec", {})
    problems += [f"spec.{key}: not a field" for key in sorted(set(spec) - set(op["spec_fields"]))]
    if spec.get("backendFramework") not in op["backend_frameworks"]:
        problems.append(f"spec.backendFramework {spec.get('backendFramework')!r} is not one of {op['backend_frameworks']}")
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
