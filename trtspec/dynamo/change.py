"""A change of a Dynamo deployment's speculation on Kubernetes, planned as data (what `trtspec k8s` wrote).

Dynamo's TensorRT-LLM worker reads its engine config once, at start: a new draft length, schedule or gate is a new
engine config and new worker pods. `plan_k8s_change(out_dir, change)` re-renders the deployment with the same code
that rendered it (`k8s.render`, with the parameters `trtspec k8s` recorded in RECORD_FILE): the engine configs with
speculative_config re-rendered by the build's code (`build.llm_api.options_with`, the release's own schedule form and
gate names, checked by `diff_llm_api`), and the DynamoGraphDeployment whose workers' CONFIG_HASH_ENV changes with
them, so `kubectl apply` changes every worker's pod template and Dynamo's operator rolls every worker (an edit of
the mounted ConfigMap alone would roll none: trtspec/targets/serving-observability.json `forms.dynamo_trtllm`). The
manifest is checked against the Dynamo facts (`k8s.validate`, dynamo-1.6.1.json). Pure: reads files, writes none.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtspec.build.change import target_values
from trtspec.build.llm_api import options_max_draft_len, options_schedule, options_with
from trtspec.contracts.control import PlannedChange, ServedSpeculation, SpeculationChange, describe, unified_diff
from trtspec.dynamo import k8s
from trtspec.errors import ConfigError, shown_text

GRAPH_FILE = "dynamo-graph.yaml"
ROLLING_NOTES = (
    "a change of a worker's pod template rolls every worker (componentType worker, prefill and decode: the operator "
    "hashes all worker specs into nvidia.com/current-worker-hash; maxSurge / maxUnavailable per service from the "
    "annotations nvidia.com/deployment-rolling-update-max-surge and -max-unavailable, 25% by default); the new "
    "workers start with the new engine config while the old ones serve",
    f"the workers' {k8s.CONFIG_HASH_ENV} carries the engine configs' hash, so the ConfigMap's new data comes with a "
    "pod-template change: an edit of the mounted ConfigMap alone would roll no pod",
    "progress: status.rollingUpdate.phase of the DynamoGraphDeployment (Pending, InProgress, Completed; Failed is "
    "terminal)",
)


@dataclass(frozen=True)
class K8sDeployment:
    """What `trtspec k8s` wrote into `root`: its render parameters, the engine configs (text and options) and the
    LLM-API options they carry."""

    root: Path
    params: dict[str, Any]
    texts: dict[str, str]  # relative path -> text, of every file the render wrote
    llm_api: dict[str, Any]
    options_file: str  # relative to root: the engine config `llm_api` was read from (agg.yaml, else decode.yaml)

    @property
    def version(self) -> str:
        return str(self.params["trtllm_version"])

    @property
    def max_draft_len(self) -> int:
        return options_max_draft_len(self.llm_api, self.root / self.options_file)


def _where(root: Path) -> str:
    return f"dynamo-k8s:{root}"


def read_k8s_output(out_dir: Path) -> K8sDeployment:
    """The deployment `trtspec k8s` wrote into `out_dir`; ConfigError naming `deployment` when it is not one."""
    from trtspec.textfile import load_yaml_text

    root = Path(out_dir).expanduser().resolve()
    fix = "give the --out directory of `trtspec k8s CONFIG --out DIR` (re-run it with this trtspec if it has no " \
          f"{k8s.RECORD_FILE})"
    if not root.is_dir():
        raise ConfigError("deployment", _where(root), "is not a directory", hint=fix)
    record_path = root / k8s.RECORD_FILE
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
        params = dict(record["render"])
        if record.get("format") != k8s.RECORD_FORMAT:
            raise ValueError(record.get("format"))
    except (OSError, ValueError, KeyError, TypeError):
        raise ConfigError("deployment", _where(root), f"has no readable {k8s.RECORD_FILE}: not what `trtspec k8s` "
                          "wrote", hint=fix) from None
    _check_render_params(params, root, fix)
    mode = params.get("mode")
    roles = k8s.ROLES.get(str(mode))
    if roles is None:
        raise ConfigError("deployment", _where(root), f"{k8s.RECORD_FILE} names mode {mode!r}", hint=fix)
    texts: dict[str, str] = {}
    for rel in [f"engine_configs/{config}.yaml" for config, _ in roles.values()] + [GRAPH_FILE]:
        try:
            texts[rel] = (root / rel).read_text(encoding="utf-8")
        except OSError:
            raise ConfigError("deployment", _where(root), f"has no {rel}", hint=fix) from None
    source = "engine_configs/agg.yaml" if mode == "agg" else "engine_configs/decode.yaml"
    options = load_yaml_text(texts[source])
    if not isinstance(options, dict):
        raise ConfigError("deployment", _where(root), f"{source} is not a YAML mapping", hint=fix)
    if mode == "disagg":  # render adds the cache transceiver to each disaggregated config
        options.pop("cache_transceiver_config", None)
    return K8sDeployment(root=root, params=params, texts=texts, llm_api=options, options_file=source)


def _check_render_params(params: dict[str, Any], root: Path, fix: str) -> None:
    """The record's render parameters against `k8s.render`'s own keyword parameters: each known, each required one
    there, each value of its annotated type; a one-line ConfigError naming the record's key otherwise."""
    import inspect
    import typing

    accepted = {name: p for name, p in inspect.signature(k8s.render).parameters.items() if p.kind is p.KEYWORD_ONLY}
    types = typing.get_type_hints(k8s.render)
    where = f"{k8s.RECORD_FILE} render"
    for key in params:
        if key not in accepted:
            raise ConfigError("deployment", _where(root), f"{where}.{shown_text(key)} is not a parameter of "
                              f"`trtspec k8s` (it records {', '.join(accepted)})", hint=fix)
    for key, parameter in accepted.items():
        if key not in params:
            if parameter.default is parameter.empty:
                raise ConfigError("deployment", _where(root), f"{where} has no {key}", hint=fix)
            continue
        kinds = typing.get_args(types[key]) or (types[key],)
        value = params[key]
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            wanted = " or ".join("null" if kind is type(None) else kind.__name__ for kind in kinds)
            raise ConfigError("deployment", _where(root), f"{where}.{key} is {shown_text(value)}, not {wanted}",
                              hint=fix)


def served_k8s(out_dir: Path, model: str, *, max_k: int = 0) -> ServedSpeculation:
    """What the deployment's engine configs speculate with (max_draft_len is the default k)."""
    deployment = read_k8s_output(out_dir)
    k = deployment.max_draft_len
    return ServedSpeculation(model, k, max(k, max_k), options_schedule(deployment.llm_api, deployment.version))


def plan_k8s_change(out_dir: Path, change: SpeculationChange, *, model: str = "") -> PlannedChange:
    """The new engine configs and DynamoGraphDeployment that apply `change`, their diffs and `kubectl apply`."""
    deployment = read_k8s_output(out_dir)
    version = deployment.version
    old_k = deployment.max_draft_len
    old_schedule = options_schedule(deployment.llm_api, version)
    k, schedule = target_values(old_k, old_schedule, change)
    options = options_with(deployment.llm_api, version, max_draft_len=k, schedule=schedule)
    old = describe(old_schedule, old_k)
    new = describe(options_schedule(options, version), k)
    try:  # render refuses bad values and files that break Dynamo's or TensorRT-LLM's facts (k8s.validate)
        result = k8s.render(options, **deployment.params)
    except ConfigError as exc:
        raise ConfigError("deployment", _where(deployment.root), f"{k8s.RECORD_FILE}'s render parameters do not render:"
                          f" {exc.message}", hint=f"{exc.hint}; or re-run `trtspec k8s` into {deployment.root}"
                          if exc.hint else f"re-run `trtspec k8s` into {deployment.root}") from None
    files, diffs = {}, {}
    for rel, text in result.files.items():
        current = deployment.texts.get(rel)
        if current is None and (deployment.root / rel).is_file():
            current = (deployment.root / rel).read_text(encoding="utf-8")
        if text != current:
            path = str(deployment.root / rel)
            files[path], diffs[path] = text, unified_diff(path, current, text)
    if not files:
        return PlannedChange("dynamo-k8s", model, old, new, "rolling update",
                             notes=("the engine configs already say this: nothing to apply",))
    name = str(deployment.params["name"])
    graph = str(deployment.root / GRAPH_FILE)
    commands = (("kubectl", "apply", "-f", graph),
                ("kubectl", "get", "dynamographdeployment", name, "-o", "jsonpath={.status.rollingUpdate.phase}"))
    local = "; ".join(result.commands[1:])
    notes = [*ROLLING_NOTES, f"on one machine (`trtspec k8s`'s launch commands, from {deployment.root}) restart the "
                             f"workers instead: {local}"]
    if "--publish-metrics" not in result.files[GRAPH_FILE]:
        notes.append("the workers run without --publish-metrics, so their /metrics carries no trtllm_spec_decode_* "
                     "families (the monitor's acceptance source on this form): add it to the workers' args (or "
                     "DYN_TRTLLM_PUBLISH_METRICS=1 to their env) and DYN_SYSTEM_PORT to scrape it")
    return PlannedChange("dynamo-k8s", model, old, new, "rolling update", files=files, diffs=diffs, commands=commands,
                         notes=tuple(notes))
