"""A change of a Triton deployment's speculation, planned as data, per repository form (`repository_form`).

- `triton-llmapi` (NVIDIA's llmapi model, the PyTorch workflow): the new `tensorrt_llm/1/model.yaml`, its
  speculative_config re-rendered by the build's code (`build.llm_api.options_with`, checked by `diff_llm_api` and
  `llmapi.model_yaml_problems`), and a Triton model-control load of `tensorrt_llm` (explicit mode) whose body carries
  the model's configuration as `config`, which forces the reload; the model re-reads model.yaml at each load
  (trtspec/targets/serving-observability.json `forms.triton_llmapi.reload`).
- `triton-inflight` (NVIDIA's C++ backend on engines, the engine workflow): what changes without a rebuild
  (`forms.triton_tensorrtllm.controls`): draft-target's k is the per-request `num_draft_tokens` of tensorrt_llm_bls
  (at most the engine's max_draft_len); a Medusa / EAGLE tree is config.pbtxt's `medusa_choices` / `eagle_choices`
  and a reload; a k above the engine's max_draft_len is a rebuild (the build config with the new max_draft_len and the
  `trtspec build` / `trtspec deploy` commands). The engine workflow has no schedule and no gate (`no_runtime_gate`):
  those parts are refused with the reason.
- `torch` (trtspec's own models): the live reload of trtspec.triton.control (`TritonControl`); `plan_torch_change`
  only describes it.
Pure: reads files, writes none.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trtspec import choices as tree_choices
from trtspec.build.change import target_values
from trtspec.build.llm_api import options_max_draft_len, options_schedule, options_with
from trtspec.contracts.control import PlannedChange, ServedSpeculation, SpeculationChange, describe, unified_diff
from trtspec.contracts.repository import REPO_RECORD, RepoRecord
from trtspec.contracts.schedule import SpecSchedule
from trtspec.errors import ConfigError
from trtspec.methods import resolve
from trtspec.triton import llmapi

TRTLLM_MODEL = "tensorrt_llm"
RELOAD_BODY = "trtspec-reload-{model}.json"  # at the repository root (Triton takes only directories for models)
EXPLICIT_NOTE = ("Triton must run with --model-control-mode=explicit (as `trtspec serve` and the command `trtspec "
                 "deploy` prints start it): a load of a loaded model reloads it; if the reload fails the loaded model "
                 "stays as it was, else the new one replaces it without loss of availability")
LLMAPI_RELOAD_NOTE = ("the llmapi model re-reads model.yaml at every load and builds a new LLM; the `config` in the "
                      "load request forces the reload (a load without it after an edit of model.yaml alone is not "
                      "verified to reload). The old model's finalize waits for its requests in flight; the new LLM's "
                      "engine and KV cache start while the old one still holds its GPU memory")
ZEROED_NOTE = ("TensorRT-LLM 1.2.1 zeroes the llmapi model's per-request acceptance outputs (acceptance_rate, "
               "total_accepted_draft_tokens, total_draft_tokens) on the PyTorch flow's TorchSampler (fixed after 1.2.1, "
               "NVIDIA/TensorRT-LLM PR #17082): do not judge this change by them")
NO_RUNTIME_GATE = ("the engine workflow's C++ backend has no draft_len_schedule, max_concurrency or acceptance gate "
                   "(LLM-API controls of the PyTorch workflow): rebuild with `workflow: pytorch` and deploy the "
                   "llmapi form to get them")


def _where(repo: Path) -> str:
    return f"triton:{repo}"


def read_record(repo: Path) -> RepoRecord:
    """The repository's trtspec-repo.json; ConfigError naming `deployment` when `repo` is not a rendered repository."""
    repo = Path(repo).expanduser().resolve()
    fix = "give a model repository `trtspec deploy` rendered (it holds trtspec-repo.json)"
    if not repo.is_dir():
        raise ConfigError("deployment", _where(repo), "is not a directory", hint=fix)
    record = RepoRecord.read(repo)
    if record is None:
        raise ConfigError("deployment", _where(repo), f"has no {REPO_RECORD}: not a repository trtspec rendered",
                          hint=fix)
    return record


def repository_form(repo: Path) -> str:
    """Which deployment form the repository is: `torch` (trtspec's own models, either repository form),
    `triton-llmapi` (NVIDIA's llmapi model: tensorrt_llm/1/model.yaml) or `triton-inflight` (NVIDIA's C++ backend)."""
    record = read_record(repo)
    if record.backend == "torch":
        return "torch"
    root = Path(repo).expanduser().resolve()
    if record.models == (TRTLLM_MODEL,) and (root / TRTLLM_MODEL / "1" / llmapi.MODEL_YAML).is_file():
        return "triton-llmapi"
    if (root / TRTLLM_MODEL / "config.pbtxt").is_file():
        return "triton-inflight"
    raise ConfigError("deployment", _where(root), f"has neither {TRTLLM_MODEL}/1/model.yaml (the llmapi form) nor "
                      f"{TRTLLM_MODEL}/config.pbtxt (the inflight batcher)", hint="re-render it with `trtspec deploy "
                      "--force`")


# --- Triton model control: the load request that forces a reload ----------------------------------------------------


def reload_request(repo: Path, model: str, config_text: str, *, http_url: str) -> tuple[str, str, tuple[str, ...]]:
    """(body path, body text, curl argv): Triton's repository extension `POST /v2/repository/models/MODEL/load` with
    parameter `config` = the model configuration `config_text` (config.pbtxt) as JSON; with it Triton reloads a loaded
    model even when only files beside config.pbtxt changed."""
    from google.protobuf.json_format import MessageToJson

    from trtspec.triton.render import validate_model_config

    config = MessageToJson(validate_model_config(config_text, source=f"{model}/config.pbtxt"),
                           preserving_proto_field_name=True, indent=None)
    body = json.dumps({"parameters": {"config": config}}, indent=2) + "\n"
    path = str(Path(repo).expanduser().resolve() / RELOAD_BODY.format(model=model))
    argv = ("curl", "-sS", "--fail-with-body", "-X", "POST", f"http://{http_url}/v2/repository/models/{model}/load",
            "-H", "Content-Type: application/json", "--data-binary", f"@{path}")
    return path, body, argv


def ready_check(model: str, *, http_url: str) -> tuple[str, ...]:
    return ("curl", "-sS", "--fail-with-body", f"http://{http_url}/v2/models/{model}/ready")


# --- the llmapi form -------------------------------------------------------------------------------------------------


def _llmapi_files(repo: Path) -> tuple[RepoRecord, Path, str, dict[str, Any], llmapi.LlmapiFacts]:
    from trtspec.textfile import load_yaml_text

    record = read_record(repo)
    facts = llmapi.facts_for(str(record.trtllm_version))
    path = Path(repo).expanduser().resolve() / facts.name / "1" / llmapi.MODEL_YAML
    text = path.read_text(encoding="utf-8")
    data = load_yaml_text(text)
    if not isinstance(data, dict):
        raise ConfigError("deployment", _where(repo), f"{path} is not a YAML mapping", hint="re-render with `trtspec "
                          "deploy --force`")
    return record, path, text, data, facts


def _llm_args(data: dict[str, Any], facts: llmapi.LlmapiFacts) -> dict[str, Any]:
    return {key: value for key, value in data.items() if key not in facts.model_yaml_keys}


def served_llmapi(repo: Path, model: str, *, max_k: int = 0) -> ServedSpeculation:
    """What the llmapi model's model.yaml speculates with (its max_draft_len is the default k)."""
    record, path, _, data, facts = _llmapi_files(repo)
    args = _llm_args(data, facts)
    k = options_max_draft_len(args, path)
    return ServedSpeculation(model, k, max(k, max_k), options_schedule(args, str(record.trtllm_version)))


def plan_llmapi_change(repo: Path, change: SpeculationChange, *, model: str = TRTLLM_MODEL,
                       http_url: str = "localhost:8000") -> PlannedChange:
    """The new model.yaml and the Triton load that applies `change` to the llmapi model of `repo`."""
    record, path, text, data, facts = _llmapi_files(repo)
    version = str(record.trtllm_version)
    args = _llm_args(data, facts)
    old_k = options_max_draft_len(args, path)
    old_schedule = options_schedule(args, version)
    k, schedule = target_values(old_k, old_schedule, change)
    new_args = options_with(args, version, max_draft_len=k, schedule=schedule)
    new_data = {key: new_args.get(key, value) if key not in facts.model_yaml_keys else value for key, value in data.items()}
    if problems := llmapi.model_yaml_problems(new_data, facts):
        raise ConfigError("model.yaml", problems[0], f"is not read by TensorRT-LLM {version}",
                          hint="; ".join(problems[1:]) or "keep the keys the release reads")
    old = describe(old_schedule, old_k)
    new = describe(options_schedule(new_args, version), k)
    notes = [ZEROED_NOTE] if version == "1.2.1" else []
    if new_data == data:
        return PlannedChange("triton-llmapi", model, old, new, "reload",
                             notes=(*notes, f"{path} already says this: nothing to change or reload"))
    new_text = llmapi._yaml_text(new_data, facts)
    root = Path(repo).expanduser().resolve()
    config_text = (root / facts.name / "config.pbtxt").read_text(encoding="utf-8")
    body_path, body, load = reload_request(root, facts.name, config_text, http_url=http_url)
    files = {str(path): new_text, body_path: body}
    old_body = Path(body_path).read_text(encoding="utf-8") if Path(body_path).is_file() else None
    diffs = {str(path): unified_diff(str(path), text, new_text), body_path: unified_diff(body_path, old_body, body)}
    return PlannedChange("triton-llmapi", model, old, new, "reload", files=files, diffs=diffs,
                         commands=(load, ready_check(facts.name, http_url=http_url)),
                         notes=(EXPLICIT_NOTE, LLMAPI_RELOAD_NOTE, *notes))


# --- the inflight batcher (engine workflow) --------------------------------------------------------------------------


def _parameters(text: str, source: str) -> dict[str, str]:
    from trtspec.triton.render import validate_model_config

    config = validate_model_config(text, source=source)
    return {key: value.string_value for key, value in config.parameters.items()}


def _engine_facts(repo: Path, record: RepoRecord) -> tuple[int, Path | None, dict[str, Any] | None, int | None]:
    """(the target engine's max_draft_len, its build output directory, the build config, Medusa heads) from
    config.pbtxt's gpt_model_path and that build's manifest; the repository record's max_k where the build is gone."""
    from trtspec.contracts.build_output import read_manifest
    from trtspec.triton.build_output import read_build_output

    root = Path(repo).expanduser().resolve()
    params = _parameters((root / TRTLLM_MODEL / "config.pbtxt").read_text(encoding="utf-8"),
                         f"{TRTLLM_MODEL}/config.pbtxt")
    engine = Path(params.get("gpt_model_path", ""))
    build = engine.parent.parent if engine.parts else None
    manifest = read_manifest(build) if build is not None else None
    if build is None or manifest is None:
        return record.max_k, None, None, None
    output = read_build_output(build)
    target = output.engines.get("target")
    return (target.max_draft_len if target is not None else record.max_k, build, manifest.config,
            target.num_medusa_heads if target is not None else None)


def served_inflight(repo: Path, model: str) -> ServedSpeculation:
    """What the inflight repository serves: the engine's max_draft_len as default k and max k, no schedule."""
    record = read_record(repo)
    max_k, *_ = _engine_facts(repo, record)
    k = record.engine.default_k if record.engine is not None and record.engine.default_k else max_k
    return ServedSpeculation(model, min(k, max_k), max_k, None)


def plan_inflight_change(repo: Path, change: SpeculationChange, *, model: str = TRTLLM_MODEL,
                         http_url: str = "localhost:8000") -> PlannedChange:
    """What applies `change` to an inflight-batcher repository of NVIDIA's C++ backend (module docstring)."""
    record = read_record(repo)
    root = Path(repo).expanduser().resolve()
    max_k, build, config, heads = _engine_facts(root, record)
    method = record.method
    served = served_inflight(root, model)
    old = describe(None, served.default_k)
    refused = []
    if change.replace_schedule and change.schedule is not None and change.schedule.to_parameters():
        refused.append(f"{describe(change.schedule, 0).partition(' ')[2]}: {NO_RUNTIME_GATE}")
    k = change.default_k
    if k is None or k == served.default_k:
        return PlannedChange("triton-inflight", model, old, old, "none" if refused else "live", refused=tuple(refused),
                             notes=("nothing this form can change",) if refused else ("nothing to change",))
    new = describe(None, k)
    if k > max_k:
        return _rebuild(root, record, model, old, new, k, max_k, build, config, tuple(refused))
    info = resolve(method)
    if info.needs_draft_model:
        return PlannedChange("triton-inflight", model, old, new, "live", refused=tuple(refused), notes=(
            f"draft-target's k is per request on this form: clients send num_draft_tokens={k} (TYPE_INT32 [1], 0 = no "
            f"speculation) to tensorrt_llm_bls; the engine takes at most its max_draft_len {max_k}, and the BLS does "
            "not check it. Nothing on the server changes or reloads",
            "the BLS refuses streaming and batch size > 1 with speculation"))
    if info.external_drafts:  # a model-free method whose drafts the caller sends (ngram)
        return PlannedChange("triton-inflight", model, old, new, "live", refused=tuple(refused), notes=(
            f"{method} on the engine workflow: the caller's draft_input_ids are the draft; send at most {k} of them per "
            f"request to tensorrt_llm (the engine takes at most {max_k})",))
    if info.tree:
        return _tree_change(root, record, model, old, new, k, max_k, heads, tuple(refused), http_url=http_url)
    reason = info.inflight_k_fixed or f"method {method} has no k this form can change"
    return PlannedChange("triton-inflight", model, old, old, "none", refused=(*refused, f"k={k}: {reason}"),
                         notes=("nothing this form can change",))


def _tree_change(root: Path, record: RepoRecord, model: str, old: str, new: str, k: int, max_k: int,
                 heads: int | None, refused: tuple[str, ...], *, http_url: str) -> PlannedChange:
    """A Medusa / EAGLE tree of k nodes: the served tree's first k paths (each path's prefixes come before it), as
    config.pbtxt's `<method>_choices`, and a reload."""
    from trtspec.triton.control import config_with_parameters

    key = f"{record.method}_choices"
    path = root / TRTLLM_MODEL / "config.pbtxt"
    text = path.read_text(encoding="utf-8")
    served = _parameters(text, f"{TRTLLM_MODEL}/config.pbtxt").get(key)
    tree = tree_choices.parse(served, key) if served else tree_choices.MC_SIM_7B_63
    kept: list[list[int]] = []
    for choice in tree:
        if len(kept) < k and (len(choice) == 1 or list(choice[:-1]) in kept):
            kept.append(list(choice))
    if len(kept) < k:
        raise ConfigError("k", k, f"the served {key} has {len(tree)} nodes; a tree of {k} needs more paths",
                          hint=f"pick k <= {len(tree)}, or rebuild with a larger tree")
    tree_choices.validate(kept, max_depth=heads, max_nodes=max_k or None, field=key)
    _, new_text = config_with_parameters(path, {key: tree_choices.to_triton(kept)}, expect=None)
    body_path, body, load = reload_request(root, TRTLLM_MODEL, new_text, http_url=http_url)
    old_body = Path(body_path).read_text(encoding="utf-8") if Path(body_path).is_file() else None
    return PlannedChange(
        "triton-inflight", model, old, new, "reload", files={str(path): new_text, body_path: body},
        diffs={str(path): unified_diff(str(path), text, new_text), body_path: unified_diff(body_path, old_body, body)},
        commands=(load, ready_check(TRTLLM_MODEL, http_url=http_url)), refused=refused,
        notes=(f"{key}: the served tree's first {k} paths (one draft token each); the engine holds at most "
               f"{max_k}", "the C++ backend reads the tree once when the model loads, into the executor's "
                               "DecodingConfig: a parameter change is a full reload (a new executor loads the engine "
                               "again while the old one serves: the GPU holds both)", EXPLICIT_NOTE))


def _rebuild(root: Path, record: RepoRecord, model: str, old: str, new: str, k: int, max_k: int, build: Path | None,
             config: dict[str, Any] | None, refused: tuple[str, ...]) -> PlannedChange:
    """k above the engine's max_draft_len: a new build config (the build's with max_draft_len k), `trtspec build` into
    a new output and `trtspec deploy` of it into a new repository."""
    import yaml

    from trtspec.config import parse_build_spec

    why = f"k={k} is above the engine's max_draft_len {max_k}: the engine must be rebuilt (trtllm-build --max_draft_len)"
    if build is None or config is None:
        return PlannedChange("triton-inflight", model, old, old, "rebuild", refused=(*refused, why + "; the build "
                             "output of this repository's engines is not found: rebuild from its build config with "
                             f"max_draft_len: {k}, then `trtspec deploy` it"))
    new_build = Path(f"{build}-k{k}")
    data = _set(config) | {"max_draft_len": k, "output": str(new_build)}
    data.pop("k", None)
    parse_build_spec(data)  # the same rules `trtspec build` checks first
    path = root / f"trtspec-rebuild-k{k}.yaml"
    text = (f"# trtspec: the build config of {build} with max_draft_len {k} (a k above the built {max_k} needs new "
            "engines)\n") + yaml.safe_dump(data, sort_keys=False)
    new_repo = Path(f"{root}-k{k}")
    deploy = ["trtspec", "deploy", "--backend", "tensorrtllm", "--build", str(new_build), "--out", str(new_repo)]
    if record.decoupled:
        deploy.append("--decoupled")
    if record.baseline:
        deploy += ["--baseline", str(root / record.baseline)]
    old_text = path.read_text(encoding="utf-8") if path.is_file() else None
    return PlannedChange(
        "triton-inflight", model, old, new, "rebuild", files={str(path): text},
        diffs={str(path): unified_diff(str(path), old_text, text)},
        commands=(("trtspec", "build", str(path), "--out", str(new_build)), tuple(deploy)), refused=refused,
        notes=(why, f"`trtspec build` converts here and prints the trtllm-build commands to run in {record.image}; "
                    f"then serve {new_repo} in place of {root} (a tritonserver restart, or a model-control load of "
                    "its models); repeat any other deploy flags it was rendered with"))


def _set(config: dict[str, Any]) -> dict[str, Any]:
    """A build config's fields that are set (None left out, in sections too: the defaults they stand for)."""
    return {key: _set(value) if isinstance(value, dict) else value for key, value in config.items() if value is not None}


# --- the torch flavour -----------------------------------------------------------------------------------------------


def plan_torch_change(repo: Path, change: SpeculationChange, served: ServedSpeculation, *, url: str | None,
                      model: str = TRTLLM_MODEL) -> PlannedChange:
    """The torch flavour's change: a live reload through Triton model control (trtspec.triton.control, what `set-k`
    / `set-schedule` run and `monitor --apply --url` does), persisted in the repository's config.pbtxt."""
    schedule = change.schedule if change.replace_schedule else served.schedule
    k = served.default_k if change.default_k is None else change.default_k
    where = url or "HOST:8001"
    if change.replace_schedule:
        argv = ["trtspec", "set-schedule", where, model, "--clear", *_schedule_flags(schedule)]
        argv += ["--k", str(k)] if change.default_k is not None else []
    else:
        argv = ["trtspec", "set-k", str(k), "--url", where, "--model", model]
    argv += ["--repo", str(Path(repo).expanduser().resolve())]
    return PlannedChange("torch", model, describe(served.schedule, served.default_k), describe(schedule, k), "live",
                         commands=(tuple(argv),), notes=(
                             "trtspec's engine model reloads with the new configuration: requests in flight finish on "
                             "the old instance, later ones run the new one (`monitor --apply --url` does this itself)",))


def _schedule_flags(schedule: SpecSchedule | None) -> list[str]:
    flags = {"draft_len_schedule": "--draft-len-schedule", "gate_probe_every": "--gate-probe-every",
             "speculation_controls": "--speculation-controls"}
    values = schedule.to_parameters() if schedule is not None else {}
    return [part for key, value in values.items() for part in (flags.get(key, "--" + key.replace("_", "-")), value)]


def served_in_repository_or_none(repo: Path, model: str) -> ServedSpeculation | None:
    """What a torch-flavour repository's `model` serves (its config.pbtxt), or None when it is no such model."""
    from trtspec.errors import TrtspecError
    from trtspec.triton.control import served_in_repository

    try:
        return served_in_repository(Path(repo).expanduser().resolve(), model)
    except TrtspecError:
        return None
