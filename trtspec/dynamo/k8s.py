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
- the launch commands for one machine (frontend + workers), printed;
- `trtspec-k8s.json` (RECORD_FILE): the parameters it was rendered with, so a change of the speculation can be
  re-rendered by this same code (dynamo/change.py).

Every worker's main container carries the engine configs' hash as the environment variable CONFIG_HASH_ENV: a change
of the ConfigMap alone would not roll a pod (Kubernetes restarts nothing for a mounted ConfigMap's new data), while a
change of a worker's pod template rolls every worker (Dynamo's rolling update); the hash makes every change of the
engine configs such a pod-template change.

Every name is checked against the Dynamo facts (`dynamo-1.6.1.json` beside this module: the worker's flags and modes
from the installed ai-dynamo 1.6.1 wheel; the v1beta1 fields from what that wheel writes and reads; the v1alpha1
fields from Dynamo's sources, commit and path recorded):
`validate` returns the problems, and `render` refuses to return files that have any.

Values from the user (the build config's `name` and model paths, the served model name, the image) reach the files
only through the YAML serializer, quoted wherever a YAML reader could take them for anything but that string, and
comments show them escaped on one line (k8s_yaml.py); names are checked as Kubernetes checks them (`name_problem`),
images as container runtimes parse them (`image_problem`), process arguments as Dynamo's worker reads them
(`argument_problem`).
"""

from __future__ import annotations

import json
import re
import shlex
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from trtspec.dynamo.k8s_yaml import LINE_BREAKS, comment, inline, yaml_documents, yaml_text
from trtspec.errors import ConfigError, shown, shown_text
from trtspec.targets.llm_api import diff_llm_api

FACTS_FILE = Path(__file__).resolve().parent / "dynamo-1.6.1.json"
MODES = ("agg", "disagg")
ROLES = {"agg": {"TRTLLMWorker": ("agg", None)},  # mode -> component -> (Dynamo's component type, disagg mode)
         "disagg": {"prefill": ("prefill", "prefill"), "decode": ("decode", "decode")}}
API_VERSIONS = ("v1beta1", "v1alpha1")  # the first is the default
CONFIG_MOUNT = "/config"
CONFIG_HASH_ENV = "TRTSPEC_ENGINE_CONFIG_SHA256"  # sha256 of the engine configs, on each worker's main container
RECORD_FILE = "trtspec-k8s.json"
RECORD_FORMAT = "trtspec-k8s/1"
# Kubernetes names (k8s.io/apimachinery/pkg/util/validation/validation.go; kubernetes.io/docs/concepts/overview/
# working-with-objects/names):
# - an RFC 1123 label (IsDNS1123Label): lower-case letters a-z, digits and '-', starting and ending with a letter or a
#   digit, at most 63 characters: the names of volumes and containers;
# - an RFC 1123 subdomain (IsDNS1123Subdomain): such labels joined by '.', at most 253 characters: metadata.name of a
#   ConfigMap (ValidateConfigMapName) and of a custom resource (the API server checks a custom resource's name with
#   NameIsDNSSubdomain), the DynamoGraphDeployment's included;
# - an RFC 1035 label (IsDNS1035Label): an RFC 1123 label that starts with a letter: a Service's name
#   (ValidateServiceName).
# Dynamo's operator names each component's objects <metadata.name>-<component name in lower case> (GetDCDResourceName),
# the Frontend's Service <name>-frontend among them. So the DynamoGraphDeployment's name must be an RFC 1035 label with
# room for '-' and its longest component (`name_problem`), stricter than the API server's rule for the object itself.
LABEL_MAX, SUBDOMAIN_MAX = 63, 253
_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
DNS1123_LABEL = re.compile(_LABEL)
DNS1123_SUBDOMAIN = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
DNS1035_LABEL = re.compile(r"[a-z](?:[-a-z0-9]*[a-z0-9])?")
# A container image reference as container runtimes parse the `image` Kubernetes hands them (the grammar of
# github.com/distribution/reference, regexp.go: [HOST[:PORT]/]PATH[:TAG][@DIGEST], a lower-case path, the name at
# most 255 characters); anything else fails on the node as InvalidImageName.
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])"
IMAGE_REFERENCE = re.compile(
    rf"(?P<name>(?:{_HOST}(?::[0-9]+)?/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?")
IMAGE_NAME_MAX = 255
IMAGE_MAX = 1024  # far above any reference the grammar allows but a long digest; checked before the pattern runs
# Disaggregated prefill and decode workers move KV blocks through TensorRT-LLM's cache transceiver: Dynamo's own
# disaggregated engine configs set it (trtllm-specdec.md corrections part 3: index ids 51841262147, 51946360405), a key
# of both releases' LLM API (1.2.1: a known argument; 1.3.0rc29: CacheTransceiverConfig.backend, default None = off).
CACHE_TRANSCEIVER = {"backend": "DEFAULT"}
DISAGG_NOTE = ("prefill and decode configs set cache_transceiver_config {backend: DEFAULT} as Dynamo's disaggregated "
               "examples do (TensorRT-LLM resolves DEFAULT to its transfer backend; TRTLLM_USE_UCX_KVCACHE=1 or "
               "TRTLLM_USE_NIXL_KVCACHE=1 in the worker environment chooses one)")


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
    """Engine configs, the manifest and the commands for one build (its LLM-API options `llm_api`). Bad values are a
    ConfigError naming the parameter (`name`, `served_model_name`, `model_path`, `image`), the value and the fix."""
    facts = dynamo_facts()
    if mode not in MODES:
        raise ConfigError("mode", shown(mode), f"is not one of {', '.join(MODES)}",
                          hint="agg (one worker kind) or disagg")
    if api_version not in API_VERSIONS:
        raise ConfigError("api_version", shown(api_version), f"is not one of {', '.join(API_VERSIONS)}",
                          hint="v1beta1 (what Dynamo's tools write) or the legacy v1alpha1")
    roles = ROLES[mode]
    components = ("Frontend", *roles)
    if problem := name_problem(name, components):
        raise ConfigError("name", shown(name), problem,
                          hint="the nearest valid name is "
                               f"{nearest_name(name, LABEL_MAX - 1 - max(map(len, components)))}")
    for param, value, line_breaks in (("served_model_name", served_model_name, False),
                                      ("model_path", model_path, True)):
        if problem := argument_problem(value, line_breaks=line_breaks):
            raise ConfigError(param, shown(value), problem, hint=(
                "the OpenAI model name clients send: one line of printable text, not starting with '-'"
                if param == "served_model_name" else
                "the model's path inside the worker container (write a path that starts with '-' as ./-...)"))
    if image is not None and (problem := image_problem(image)):
        raise ConfigError("image", shown(image), problem, hint="an image reference [REGISTRY/]PATH[:TAG][@DIGEST] with "
                          "a lower-case path, e.g. Dynamo's " f"{facts['operator']['runtime_image']}:"
                          f"{facts['dynamo_version']} (the default)")
    pin = facts["trtllm_pin"]["tensorrt_llm"]
    if llm_api is None:
        raise ConfigError("trtllm_version", trtllm_version, f"has no LLM-API options for this build ({llm_api_note})",
                          hint=f"Dynamo {facts['dynamo_version']} runs TensorRT-LLM {pin} through the LLM API: use a "
                               "method with an LLM-API form there")
    default_image = f"{facts['operator']['runtime_image']}:{facts['dynamo_version']}"
    custom_image = image is not None and image != default_image
    image = default_image if image is None else image
    if not custom_image and trtllm_version != pin:
        raise ConfigError("trtllm_version", trtllm_version, f"is not the TensorRT-LLM inside {image} (it runs {pin}, "
                          f"the pin of ai-dynamo {facts['dynamo_version']}'s trtllm extra): options of one release "
                          "are not written into another's image", hint=f"render for {pin} (the default), or name an "
                          f"image that runs TensorRT-LLM {inline(trtllm_version)} with --image")
    configs = {f"{config}.yaml": {**llm_api, **({"cache_transceiver_config": dict(CACHE_TRANSCEIVER)} if disagg else {})}
               for config, disagg in roles.values()}
    module = facts["trtllm_worker"]["module"]
    commands = [shlex.join(["python3", "-m", facts["frontend"]["module"], "--http-port", "8000"])]
    workers = []  # (role, disaggregation mode or None, worker args)
    for role, (config, disagg) in roles.items():
        head = ["--model", model_path, "--served-model-name", served_model_name, "--extra-engine-args"]
        tail = [*(["--tensor-parallel-size", str(tp_size)] if tp_size > 1 else []),
                *(["--disaggregation-mode", disagg] if disagg else []),
                "--publish-metrics"]  # TensorRT-LLM's trtllm_spec_decode_* on the worker's /metrics (the monitor's)
        workers.append((role, disagg, [*head, f"{CONFIG_MOUNT}/{config}.yaml", *tail]))
        commands.append(shlex.join(["python3", "-m", module, *head, f"engine_configs/{config}.yaml", *tail]))
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{name}-engine-config"},
                 "data": {file: yaml_text(options) for file, options in configs.items()}}  # the files, as written
    digest = config_hash(configmap["data"])
    if api_version == "v1beta1":
        graph = _graph_v1beta1(name, image, tp_size, workers, digest, runtime_version=custom_image)
    else:
        graph = _graph_v1alpha1(name, image, tp_size, workers, digest)
    header = comment(f"trtspec: NVIDIA Dynamo {facts['dynamo_version']} ({mode}) for {name}: TensorRT-LLM LLM-API "
                     f"options of release {inline(trtllm_version)}, the release inside {inline(image)}.")
    files = {f"engine_configs/{file}": header + text for file, text in configmap["data"].items()}
    files["dynamo-graph.yaml"] = header + comment("kubectl apply -f dynamo-graph.yaml") + yaml_documents([configmap, graph])
    files[RECORD_FILE] = json.dumps({"format": RECORD_FORMAT, "render": {
        "name": name, "model_path": model_path, "served_model_name": served_model_name, "tp_size": tp_size,
        "trtllm_version": trtllm_version, "mode": mode, "image": image if custom_image else None,
        "api_version": api_version}}, indent=2) + "\n"
    notes = [f"image {image}: {facts['operator']['runtime_image_note']}",
             f"model paths ({inline(model_path)}) are paths inside the worker container: mount the checkpoints there "
             "(a PersistentVolumeClaim, or a model cache) or pass a Hugging Face id"]
    if custom_image:
        notes.append(f"the options are TensorRT-LLM {inline(trtllm_version)}'s, the release you named for {image}")
    if custom_image:  # the operator reads the runtime's version from the image tag, which a custom image may not carry
        notes.append(f"image {image} is not Dynamo's: " + (
            f"every component sets runtimeVersionOverride: {facts['dynamo_version']}, the runtime these files are for"
            if api_version == "v1beta1" else
            f"set runtimeVersionOverride: {facts['dynamo_version']} on each service if your operator asks for it "
            "(trtspec's v1alpha1 facts do not list the field, so it is not written)"))
    if mode == "disagg":
        notes.append(DISAGG_NOTE)
    result = DynamoRender(files=files, commands=commands, notes=notes, manifest=[configmap, graph])
    problems = validate(result) + [f"{file}: {p}" for file, options in configs.items()
                                   for p in diff_llm_api(options, trtllm_version)]
    if problems:  # a trtspec bug, never the user's: refuse to write what Dynamo would reject
        raise ConfigError("dynamo", shown(name),
                          "the rendered files do not match Dynamo's or TensorRT-LLM's facts: " + "; ".join(problems),
                          hint="report this")
    return result


def config_hash(data: dict[str, str]) -> str:
    """sha256 of the engine configs (the ConfigMap's data), the value of CONFIG_HASH_ENV."""
    import hashlib

    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def _volume(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The engine configs' ConfigMap as a pod volume, and its read-only mount at CONFIG_MOUNT (new objects per call:
    shared ones would be written as YAML anchors)."""
    return ({"name": "engine-config", "configMap": {"name": f"{name}-engine-config"}},
            {"name": "engine-config", "mountPath": CONFIG_MOUNT, "readOnly": True})


def _graph_v1beta1(name: str, image: str, tp_size: int, workers: list[tuple[str, str | None, list[str]]], digest: str,
                   *, runtime_version: bool = False) -> dict[str, Any]:
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
                     "args": args, "env": [{"name": CONFIG_HASH_ENV, "value": digest}],
                     "resources": {"limits": {beta["gpu_resource"]: str(tp_size)}}, "volumeMounts": [mount]}
        components.append({"name": role, "type": disagg or "worker", "replicas": 1,
                           "podTemplate": {"spec": {"volumes": [volume], "containers": [container]}}})
    if runtime_version:
        for component in components:
            component["runtimeVersionOverride"] = facts["dynamo_version"]
    return {"apiVersion": beta["api_version"], "kind": facts["operator"]["kind"], "metadata": {"name": name},
            "spec": {"backendFramework": "trtllm", "components": components}}


def _graph_v1alpha1(name: str, image: str, tp_size: int, workers: list[tuple[str, str | None, list[str]]],
                    digest: str) -> dict[str, Any]:
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
                                       "args": args, "env": [{"name": CONFIG_HASH_ENV, "value": digest}],
                                       "volumeMounts": [mount]}}}
        if disagg:
            service["subComponentType"] = disagg
        services[role] = service
    return {"apiVersion": facts["operator"]["api_version"], "kind": facts["operator"]["kind"],
            "metadata": {"name": name}, "spec": {"backendFramework": "trtllm", "services": services}}


def validate(result: DynamoRender) -> list[str]:
    """Every name the manifest and the commands use, checked against the Dynamo facts of its apiVersion, and the
    objects' names, component names and images against Kubernetes' rules; [] when all are known and valid."""
    op = dynamo_facts()["operator"]
    graphs = [obj for obj in result.manifest if obj.get("kind") == op["kind"]]
    if len(graphs) != 1:
        return [f"expected one {op['kind']}, found {len(graphs)}"]
    graph = graphs[0]
    framework = graph.get("spec", {}).get("backendFramework")
    problems = [] if framework in op["backend_frameworks"] else [
        f"spec.backendFramework {framework!r} is not one of {op['backend_frameworks']}"]
    for obj in result.manifest:
        name = obj.get("metadata", {}).get("name")
        if obj is graph:
            spec = graph.get("spec", {})
            components = [str(c.get("name")) for c in spec.get("components", [])]
            components += [str(service) for service in spec.get("services", {})]
            problem = name_problem(name, components)
        elif not (isinstance(name, str) and len(name) <= SUBDOMAIN_MAX and DNS1123_SUBDOMAIN.fullmatch(name)):
            problem = (f"is not an RFC 1123 subdomain (lower-case letters, digits, '-' and '.', starting and ending "
                       f"with a letter or a digit, at most {SUBDOMAIN_MAX} characters)")
        else:
            problem = None
        if problem:
            problems.append(f"{obj.get('kind')} metadata.name {shown(name)!r}: {problem}")
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
        problems += _component_name(where, component.get("name"))
        problems += [f"{where}.{key}: not a component field"
                     for key in sorted(set(component) - set(beta["component_fields"]))]
        kind = component.get("type")
        if kind not in beta["component_types"]:
            problems.append(f"{where}.type {kind!r} is not one of {beta['component_types']}")
        pod = component.get("podTemplate", {}).get("spec", {})
        problems += [f"{where}.podTemplate.spec.{key}: not used by trtspec's facts"
                     for key in sorted(set(pod) - set(beta["pod_spec_fields"]))]
        containers = pod.get("containers", [])
        problems += [p for c in containers for p in _image(where, c.get("image"))]
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
        problems += _component_name(f"services.{name}", name)
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
        problems += _image(f"services.{name}", container.get("image"))
        if container.get("command", [None, None, None])[2:] == [worker["module"]]:
            problems += _check_args(f"services.{name}", container.get("args", []), worker)
    return problems


def _component_name(where: str, name: object) -> list[str]:
    """The operator names a component's objects <metadata.name>-<its name in lower case>: that must be a label."""
    if isinstance(name, str) and DNS1123_LABEL.fullmatch(name.lower()):
        return []
    return [f"{where}.name {shown(name)!r}: in lower case not letters, digits and '-' (the operator names the "
            "component's objects <metadata.name>-<its name in lower case>)"]


def _image(where: str, image: object) -> list[str]:
    problem = image_problem(image)
    return [f"{where}.image {shown(image)!r}: {problem}"] if problem else []


def _check_args(where: str, args: list[str], worker: dict[str, Any]) -> list[str]:
    problems = [f"{where}: argument {shown(a)!r} is not text without NUL" for a in args
                if not isinstance(a, str) or "\0" in a]
    args = [a for a in args if isinstance(a, str)]
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


def k8s_name(name: str, mode: str) -> tuple[str, str | None]:
    """A build config's name as the DynamoGraphDeployment's metadata.name: itself when it is a valid one, else the
    nearest valid name and a note that says why (a name the user gives with --name is checked as it is by `render`)."""
    components = ("Frontend", *ROLES.get(mode, ROLES["agg"]))
    problem = name_problem(name, components)
    if problem is None:
        return name, None
    derived = nearest_name(name, LABEL_MAX - 1 - max(map(len, components)))
    return derived, f"metadata.name {derived}: the config's name {shown_text(name)} {problem}; --name sets another"


def name_problem(name: object, components: Iterable[str]) -> str | None:
    """Why `name` cannot be the metadata.name of a DynamoGraphDeployment with these components, or None: an RFC 1035
    label with room for '-<component>' within 63 characters (see LABEL_MAX)."""
    if not isinstance(name, str) or not name:
        return "is empty: it is the DynamoGraphDeployment's metadata.name"
    if not DNS1035_LABEL.fullmatch(name):
        return ("is not a Kubernetes name: lower-case letters a-z, digits and '-', starting with a letter and ending "
                "with a letter or a digit (an RFC 1035 label)")
    longest = max(components, key=len, default="")
    if len(name) + 1 + len(longest) > LABEL_MAX:
        return (f"is {len(name)} characters, over {LABEL_MAX - 1 - len(longest)}: Dynamo's operator names the "
                f"{longest} component's objects <name>-{longest.lower()}, and a Kubernetes name is at most "
                f"{LABEL_MAX} characters")
    return None


def nearest_name(value: object, limit: int = LABEL_MAX) -> str:
    """The valid name closest to `value` (for hints): accents dropped, lower case, every run of other characters one
    '-', a leading digit prefixed with `model-`, at most `limit` characters."""
    text = "" if value is None else str(value)[:4 * LABEL_MAX]
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode().lower()
    text = re.sub(r"[^a-z0-9]+", "-", text).strip("-")
    if text[:1].isdigit():
        text = "model-" + text
    return text[:limit].rstrip("-") or "model"


def argument_problem(value: object, *, line_breaks: bool) -> str | None:
    """Why `value` cannot be a value argument of Dynamo's worker (argparse reads one starting with '-' as an option;
    no process argument can hold NUL; Kubernetes strings are UTF-8), or None. `line_breaks`: whether it may hold line
    breaks and other control characters (a path may; a name clients send may not)."""
    if not isinstance(value, str) or not value:
        return "is empty"
    if "\0" in value:
        return "contains a NUL character, which no process argument can hold"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "is not UTF-8 text (Kubernetes strings are)"
    if not line_breaks and (LINE_BREAKS.intersection(value) or len(value.splitlines()) > 1):
        return "contains a line break"
    if not line_breaks and not value.isprintable():
        return "contains a control character"
    if value.startswith("-"):
        return "starts with '-': Dynamo's worker would read it as an option"
    return None


def image_problem(image: object) -> str | None:
    """Why `image` is not a container image reference a container runtime can pull (IMAGE_REFERENCE), or None."""
    if not isinstance(image, str) or not image:
        return "is empty"
    if len(image) > IMAGE_MAX:
        return f"is {len(image)} characters, longer than an image reference can be"
    match = IMAGE_REFERENCE.fullmatch(image)
    if match is None:
        return ("is not an image reference: [REGISTRY[:PORT]/]PATH[:TAG][@DIGEST], the path lower-case letters, digits "
                "and . _ -, a tag of at most 128 letters, digits and _ . -")
    if len(match["name"]) > IMAGE_NAME_MAX:
        return f"has a name of {len(match['name'])} characters; container runtimes take at most {IMAGE_NAME_MAX}"
    return None
