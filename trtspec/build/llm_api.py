"""The LLM-API options of a build (PyTorch workflow: `trtllm-serve --extra_llm_api_options`, Triton's llmapi model,
Dynamo's TensorRT-LLM workers): every method of trtspec's table either maps to a PyTorch decoding type of the target
or is refused with the reason and the nearest method that has one. Names come from the target's facts
(targets/llm_api.py: `speculative_model` in 1.2.1, `speculative_model_dir` in 1.0.0), and every mapping is checked
against them before it is returned. `llm_api_yaml` writes the file through the YAML serializer.

`validate_llm_api` checks any options mapping: with the installed release's own classes where `tensorrt_llm` imports
(NVIDIA's containers), with the facts everywhere else, and says which ran. Pure except that function's import.
"""

from __future__ import annotations

import copy
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import yaml

from trtspec.errors import ConfigError, shown
from trtspec.methods import resolve
from trtspec.methods.eagle import EAGLE, EAGLE3
from trtspec.methods.mtp import MTP
from trtspec.methods.ngram import NGRAM
from trtspec.methods.suffix import SUFFIX, sa_form
from trtspec.targets import TrtllmTarget, load_target
from trtspec.targets.llm_api import PYTORCH, LlmApiFacts, diff_llm_api, facts_versions

if TYPE_CHECKING:
    from trtspec.contracts.schedule import SpecSchedule
    from trtspec.contracts.suffix import SuffixConfig

LLM_API_FILE = "llm-api/extra_llm_api_options.yaml"

class LlmApiRefusal(ConfigError):
    """A method without a PyTorch decoding type on the target (exit 2): names the method, the target, the nearest
    method that has one (`reason`, `nearest`: the parts, for a plan note)."""

    def __init__(self, method: str, version: str, reason: str, nearest: str, hint: str | None = None) -> None:
        super().__init__("method", method, f"has no LLM-API (PyTorch workflow) form on TensorRT-LLM {version}: "
                         f"{reason}; nearest: {nearest}",
                         hint=hint or f"use method {nearest}, or the engine flow (trtllm-build) where the target has it")
        self.reason, self.nearest = reason, nearest

    def note(self) -> str:
        """One line for a build plan: no file, why, and the nearest method."""
        return f"no LLM-API form: {self.reason}; nearest method: {self.nearest}"


@dataclass(frozen=True)
class Speculation:
    """What the LLM-API options need from a build: method, k, checkpoints and the method's knobs."""

    method: str
    max_draft_len: int
    target_model: str
    draft_model: str | None = None  # draft_target: the draft; EAGLE-3: the drafter
    eagle3: bool = False
    eagle3_one_model: bool = True
    max_matching_ngram_size: int | None = None
    controls: Mapping[str, Any] | None = None  # max_concurrency, draft_len_schedule, the gates (LlmApiSpec, canonical)
    max_batch_size: int = 1  # the engine's: a release that reads schedule keys as upper bounds needs it
    mtp_relaxed: Mapping[str, Any] | None = None  # MTP: relaxed acceptance of thinking tokens (config.MtpSpec.relaxed)
    mtp_one_model: bool = True  # MTP-Eagle in one model (mtp_eagle_one_model)
    # EAGLE-3 trees (max_draft_len then counts the tree's nodes): a static tree's paths, or the dynamic tree's
    # (top-k, depth); neither = the chain of max_draft_len draft layers
    eagle_choices: tuple[tuple[int, ...], ...] | None = None
    dynamic_tree: tuple[int, int] | None = None
    suffix: SuffixConfig | None = None  # suffix -> SA: the build's suffix: section (None: the defaults)


def decoding_type(method: str, facts: LlmApiFacts, *, eagle3: bool = False) -> str | None:
    """The PyTorch decoding type `method` maps to on the facts' target (None: method none); LlmApiRefusal when it
    has none there."""
    info = resolve(method)
    if info.baseline:
        return None
    # EAGLE-3 (eagle3, or a build's eagle with eagle.eagle3: true): its decoding type where the release has it, else
    # the older name the release loads EAGLE-3 drafters under
    newer = resolve(info.reference_form) if info.reference_form and eagle3 else info if info.build_as else None
    if newer is not None:
        kind: str | None = newer.llmapi_decoding_type
        if kind not in facts.decoding_types and newer.build_as is not None:
            kind = resolve(newer.build_as).llmapi_decoding_type
    elif info.llmapi_unsupported:  # no PyTorch decoding type in any target's facts
        kind = None
    else:
        kind = info.llmapi_decoding_type
    if kind is not None and kind not in facts.decoding_types:
        from trtspec.targets.controls import has_release, release

        kind = release(facts.version).tag(kind) if has_release(facts.version) else kind  # 1.3's pydantic tags
    if kind is None or kind not in facts.decoding_types:
        why = facts.invalid_decoding_types.get(kind) if kind is not None else None  # the facts' own words
        reason = info.llmapi_unsupported or (f"TensorRT-LLM {facts.version} has no {kind} decoding type"
                                             + (f" ({why})" if why else ""))
        raise _refusal(method, facts, reason)
    if not facts.decoding_types[kind].runs_on_pytorch:
        backends = ", ".join(facts.decoding_types[kind].backends)
        raise _refusal(method, facts, f"{method}'s decoding type {kind} does not run on TensorRT-LLM {facts.version}'s "
                                      f"PyTorch backend ({facts.decoding_types[kind].class_name}: {backends})")
    return kind


def _refusal(method: str, facts: LlmApiFacts, reason: str) -> LlmApiRefusal:
    """The refusal of `method` on the facts' target, naming the nearest method its home says has a decoding type."""
    info = resolve(method)
    nearest = info.llmapi_nearest
    hint = None if info.llmapi_hint is None else f"{info.llmapi_hint}; or use method {nearest[0] if nearest else 'none'}"
    return LlmApiRefusal(method, facts.version, reason, nearest[1] if nearest else "none", hint=hint)


def speculative_config(spec: Speculation, facts: LlmApiFacts) -> dict[str, Any] | None:
    """The `speculative_config` mapping for `spec` on the facts' target (None: no speculation)."""
    kind = decoding_type(spec.method, facts, eagle3=spec.eagle3)
    if kind is None:
        return None
    config: dict[str, Any] = {"decoding_type": kind, "max_draft_len": spec.max_draft_len}
    fields = facts.fields_of(kind)
    if spec.draft_model is not None:
        config[facts.draft_model_field or "speculative_model"] = spec.draft_model
    if kind == NGRAM.llmapi_decoding_type:
        config["max_matching_ngram_size"] = spec.max_matching_ngram_size or 2
    eagle = kind in (EAGLE.llmapi_decoding_type, EAGLE3.llmapi_decoding_type)
    if eagle and "eagle3_one_model" in fields:
        config["eagle3_one_model"] = spec.eagle3_one_model
    elif eagle and not spec.eagle3_one_model:
        raise ConfigError("eagle.one_model", False, f"TensorRT-LLM {facts.version} has no two-model EAGLE-3 (no "
                          "eagle3_one_model field: one model only)", hint="set eagle.one_model: true, or target a "
                          "release with two-model EAGLE-3 (1.2.1)")
    if eagle and (spec.eagle_choices is not None or spec.dynamic_tree is not None):
        config.update(_eagle_tree(spec, facts, kind, fields))
    if kind == MTP.llmapi_decoding_type:
        config.update(_mtp(spec, facts, fields))
    if kind == SUFFIX.llmapi_decoding_type:
        config.update(_sa(spec, facts, fields).fields)
    config.update(_controls(spec, facts, kind, fields))
    return config


def _eagle_tree(spec: Speculation, facts: LlmApiFacts, kind: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """An EAGLE-3 tree in the release's fields, every value written out so each stored version of the class reads it
    alike (pytorch-workflow.json `tree`): static = eagle_choices with max_draft_len = its depth and
    max_total_draft_tokens = len(choices) (what the release resets them to); dynamic = use_dynamic_tree,
    dynamic_tree_max_topK = top-k, max_draft_len = depth, max_total_draft_tokens = the node budget (which the older
    stored version requires and the later one defaults to top-k x depth)."""
    if spec.eagle_choices is not None:
        if "eagle_choices" not in fields:
            raise ConfigError("eagle.choices", "set", f"TensorRT-LLM {facts.version}'s {kind} has no eagle_choices "
                              "(static tree)", hint="use the dynamic tree (eagle.topk + eagle.depth) or a release "
                              "with eagle_choices")
        paths = [list(path) for path in spec.eagle_choices]
        return {"max_draft_len": max(map(len, paths)), "max_total_draft_tokens": len(paths), "eagle_choices": paths}
    assert spec.dynamic_tree is not None
    topk, depth = spec.dynamic_tree
    if "use_dynamic_tree" not in fields or "dynamic_tree_max_topK" not in fields:
        raise ConfigError("eagle.topk", topk, f"TensorRT-LLM {facts.version}'s {kind} has no dynamic tree",
                          hint="use a static tree (eagle.choices) or a release with use_dynamic_tree")
    return {"max_draft_len": depth, "max_total_draft_tokens": spec.max_draft_len, "use_dynamic_tree": True,
            "dynamic_tree_max_topK": topk}


def _sa(spec: Speculation, facts: LlmApiFacts, fields: Mapping[str, Any]) -> Any:
    """trtspec's suffix options as the release's SA keys (methods/suffix.py `sa_form`: what maps, what is dropped with
    a note, what is refused by name, under the global-pool limits of the release's facts)."""
    kind = SUFFIX.llmapi_decoding_type
    limits = facts.decoding_types[kind].limits if kind in facts.decoding_types else {}
    return sa_form(spec.suffix, max_draft_len=spec.max_draft_len, max_batch_size=spec.max_batch_size,
                   version=facts.version, fields=fields, limits=limits)


def speculation_notes(spec: Speculation, facts: LlmApiFacts) -> tuple[str, ...]:
    """What a plan says about how `spec` became the release's speculative_config: suffix -> SA's mapping and the options
    dropped because SA behaves the same; () for every other form."""
    kind = decoding_type(spec.method, facts, eagle3=spec.eagle3)
    if kind != SUFFIX.llmapi_decoding_type:
        return ()
    return _sa(spec, facts, facts.fields_of(kind)).notes


def _mtp(spec: Speculation, facts: LlmApiFacts, fields: Mapping[str, Any]) -> dict[str, Any]:
    """MTP's own keys: num_nextn_predict_layers = the draft length where the release takes it as the MTP layer count
    (1.2.1: an int, max_draft_len is set from it); a release whose field is unset by default fills it from the
    checkpoint and remaps a user's value to max_draft_len (1.3.0rc29), so max_draft_len alone says it there. Then
    the relaxed acceptance fields and mtp_eagle_one_model where the release has them."""
    out: dict[str, Any] = {}
    layers = fields.get("num_nextn_predict_layers")
    if layers is not None and layers.default is not None:
        out["num_nextn_predict_layers"] = spec.max_draft_len
    for key, value in (spec.mtp_relaxed or {}).items():
        if key not in fields:
            raise ConfigError(f"mtp.{key}", value, f"TensorRT-LLM {facts.version}'s MTP has no {key}",
                              hint=f"drop mtp.{key}, or target a release that has it")
        out[key] = value
    if "mtp_eagle_one_model" in fields:
        out["mtp_eagle_one_model"] = spec.mtp_one_model
    elif not spec.mtp_one_model:
        raise ConfigError("mtp.one_model", False, f"TensorRT-LLM {facts.version} has no two-model MTP (no "
                          "mtp_eagle_one_model field: one model only)", hint="set mtp.one_model: true, or target a "
                          "release with two-model MTP (1.2.1)")
    return out


def _controls(spec: Speculation, facts: LlmApiFacts, kind: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """The build's canonical controls in the target release's form (targets.controls: the schedule translated, its own
    gate's names); a release without a controls model (1.0.0, 1.1.0) takes the keys its facts list, as they are."""
    from trtspec.targets.controls import has_release, release, releases

    controls = {key: value for key, value in (spec.controls or {}).items() if value is not None}
    if not controls:
        return {}
    if not has_release(facts.version):
        for key, value in controls.items():
            if key not in fields:
                raise ConfigError(f"llm_api.{key}", value, f"is not read by TensorRT-LLM {facts.version}'s {kind} "
                                  "speculative_config", hint=f"remove llm_api.{key} or use a target that reads it: "
                                  + ", ".join(v for v in facts_versions() if key in load_target_facts(v).fields_of(kind)))
        return {key: dict(value) if isinstance(value, Mapping) else value for key, value in controls.items()}
    rel = release(facts.version)
    names = rel.keys
    if controls.get("max_concurrency") == 0 and rel.facts["max_concurrency"]["minimum"] > 0:
        raise ConfigError("llm_api.max_concurrency", 0, f"TensorRT-LLM {rel.name} reads a positive max_concurrency only: "
                          "it cannot turn speculation off at every batch size", hint="use method: none")
    schedule, concurrency = rel.release_schedule(controls.get("draft_len_schedule"), controls.get("max_concurrency"),
                                                 spec.max_batch_size)
    out: dict[str, Any] = {}
    if concurrency is not None:
        out[names["max_concurrency"]] = concurrency
    if schedule is not None:
        out[names["draft_len"]] = schedule
    gates = [key for r in releases() for key in (r.keys["window"], r.keys["threshold"])]
    out.update({key: controls[key] for key in gates if key in controls})  # another release's gate: refused
    return out


def served_schedule(speculative_config: Mapping[str, Any], version: str, *, max_batch_size: int | None = None
                    ) -> SpecSchedule | None:
    """The canonical SpecSchedule a `speculative_config` of TensorRT-LLM `version` runs (the release's own schedule
    read back through `Release.canonical_schedule`, its gate by its own names; a last entry of 0 past
    `max_batch_size`, which no batch reaches, left out); None when it sets no control."""
    from trtspec.contracts.schedule import SpecSchedule
    from trtspec.targets.controls import has_release, release

    names = release(version).keys if has_release(version) else {"draft_len": "draft_len_schedule",
                                                                  "max_concurrency": "max_concurrency"}
    draft_len, concurrency = speculative_config.get(names["draft_len"]), speculative_config.get(names["max_concurrency"])
    if isinstance(draft_len, Mapping) and has_release(version):
        draft_len, concurrency = release(version).canonical_schedule(dict(draft_len), concurrency)
        if draft_len and max_batch_size is not None and len(draft_len) > 1 and max(draft_len) > max_batch_size \
                and draft_len[max(draft_len)] == 0:
            draft_len.pop(max(draft_len))
    gates = {key: speculative_config.get(key) for key in SpecSchedule.LLM_API[2:]}
    return SpecSchedule.from_llm_api({"draft_len_schedule": draft_len, "max_concurrency": concurrency, **gates})


def options_max_draft_len(options: Mapping[str, Any], source: object) -> int:
    """The draft length an options mapping's speculative_config sets (0 when it sets none: no speculative_config, or
    no max_draft_len). A ConfigError naming `source` (the file it was read from) and the key when speculative_config
    is not a mapping or max_draft_len not a whole number >= 0."""
    speculative = options.get("speculative_config")
    if speculative is None:
        return 0
    fix = f"fix it in {source}, or write the file again with the trtspec command that wrote it"
    if not isinstance(speculative, Mapping):
        raise ConfigError(f"{source}: speculative_config", shown(speculative), "is not a mapping", hint=fix)
    value = speculative.get("max_draft_len")
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{source}: speculative_config.max_draft_len", shown(value),
                          "is not a whole number >= 0 (the draft length)", hint=fix)
    return value


def options_schedule(options: Mapping[str, Any], version: str) -> SpecSchedule | None:
    """`served_schedule` of an options mapping's speculative_config, at its max_batch_size."""
    speculative = options.get("speculative_config")
    batch = options.get("max_batch_size")
    return served_schedule(speculative if isinstance(speculative, Mapping) else {}, version,
                           max_batch_size=batch if isinstance(batch, int) and not isinstance(batch, bool) else None)


CONTROL_KEYS = ("draft_len_schedule", "max_concurrency", "acceptance_window", "acceptance_length_threshold",
                "acceptance_rate_window_size", "acceptance_rate_threshold")  # every release's names (controls.json)


def options_with(options: Mapping[str, Any], version: str, *, max_draft_len: int,
                 schedule: SpecSchedule | None) -> dict[str, Any]:
    """`options` (an `extra_llm_api_options` mapping of TensorRT-LLM `version`, as a build wrote it) with its
    speculative_config's `max_draft_len` and controls replaced: `schedule` (canonical; None: no controls) rendered
    in the release's form by the code that renders a build's (`_controls`: `Release.release_schedule` at the
    options' max_batch_size, the gate by its release's names), every other key kept. Checked against the release's
    facts (`diff_llm_api`, the controls' own rules with them): ConfigError (exit 2) naming the key and the rule."""
    from trtspec.targets.controls import releases

    facts = load_target_facts(version)
    speculative = options.get("speculative_config")
    if not isinstance(speculative, Mapping) or not speculative.get("decoding_type"):
        raise ConfigError("speculative_config", shown(speculative), f"the options (TensorRT-LLM {version}) do not "
                          "speculate: there is no draft length or schedule to change",
                          hint="build with a speculative method (trtspec build CONFIG)")
    kind = str(speculative["decoding_type"])
    control_keys = set(CONTROL_KEYS) | {key for r in releases() for key in r.keys.values()}
    config = {key: value for key, value in speculative.items() if key not in control_keys}
    config["max_draft_len"] = max_draft_len
    controls = schedule.llm_api_options() if schedule is not None else {}
    max_batch = options.get("max_batch_size")
    spec = Speculation(method="", max_draft_len=max_draft_len, target_model="", controls=controls,
                       max_batch_size=max_batch if isinstance(max_batch, int) and max_batch > 0 else 1)
    config.update(_controls(spec, facts, kind, facts.fields_of(kind)))
    out = {key: (config if key == "speculative_config" else copy.deepcopy(value)) for key, value in options.items()}
    problems = diff_llm_api(out, facts)
    if problems:
        first = problems[0]
        raise ConfigError(first.key, _value_at(out, first.key), f"TensorRT-LLM {version}: {first.problem}"
                          + (f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""),
                          hint=first.fix or "see docs/targets.md, PyTorch workflow facts")
    return out


def load_target_facts(version: str) -> LlmApiFacts:
    """The LLM-API facts of `version`, a supported build target or a release with facts only (1.0.0)."""
    from trtspec.targets import SUPPORTED_TARGETS
    from trtspec.targets.llm_api import llm_api_facts

    return load_target(version).llm_api if version in SUPPORTED_TARGETS else llm_api_facts(version)


def llm_api_options(spec: Speculation, target: TrtllmTarget | LlmApiFacts, base: Mapping[str, Any]) -> dict[str, Any]:
    """The whole options mapping for a target (or a release's LLM-API facts): `base` (the engine envelope and
    kv_cache_config) plus `speculative_config` and, for two-model speculation, `disable_overlap_scheduler: true`
    (trtllm-specdec.md 3.5). Checked against the release's facts: a user's control that breaks a rule is a ConfigError
    (exit 2) naming the key and the rule."""
    facts = target if isinstance(target, LlmApiFacts) else target.llm_api
    options = dict(base)
    speculative = speculative_config(spec, facts)
    if speculative is not None:
        options["speculative_config"] = speculative
        two_model = resolve(spec.method).needs_draft_model or False in (
            speculative.get("eagle3_one_model"), speculative.get("mtp_eagle_one_model"))
        if two_model:
            options["disable_overlap_scheduler"] = True
    problems = diff_llm_api(options, facts)
    if problems:
        first = problems[0]
        field = first.key.replace("speculative_config.", "llm_api.", 1) if _user_key(first.key) else first.key
        raise ConfigError(field, _value_at(options, first.key), f"TensorRT-LLM {facts.version}: {first.problem}"
                          + (f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""),
                          hint=first.fix or "see docs/targets.md, PyTorch workflow facts")
    return options


def _user_key(key: str) -> bool:
    from trtspec.contracts.schedule import SpecSchedule

    return key.split("[")[0].split(".")[-1] in SpecSchedule.LLM_API


def _value_at(options: Mapping[str, Any], key: str) -> Any:
    """The value at a problem's dotted key; `path[entry]` is the mapping's entry whose key is shown as `entry`."""
    path, _, entry = key.partition("[")
    value: Any = options
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if entry and isinstance(value, Mapping):
        return next((v for k, v in value.items() if entry.removesuffix("]") in (str(k), repr(k))), value)
    return value


def serve_argv(model: str, options_file: str = LLM_API_FILE, *, tp_size: int = 1, pp_size: int = 1) -> list[str]:
    """`trtllm-serve` for the options file (PyTorch backend); the parallel sizes as flags when they are not 1."""
    parallel = [*(["--tp_size", str(tp_size)] if tp_size != 1 else []), *(["--pp_size", str(pp_size)] if pp_size != 1
                                                                          else [])]
    return ["trtllm-serve", model, "--backend", PYTORCH, *parallel, "--extra_llm_api_options", options_file]


def llm_api_yaml(options: Mapping[str, Any], header: list[str] | tuple[str, ...] = ()) -> str:
    """The options file: `header` as comment lines (each line break continues the comment), then the mapping
    through yaml.safe_dump in its own key order."""
    lines = [f"# {line}" for text in header for line in (str(text).splitlines() or [""])]
    body = yaml.safe_dump(_plain(options), sort_keys=False, default_flow_style=False, allow_unicode=False)
    return "".join(f"{line}\n" for line in lines) + body


def header_lines(method: str, target: TrtllmTarget, model: str, argv: list[str] | tuple[str, ...] | None = None
                 ) -> list[str]:
    """What the file is and how to serve it (`argv`, default `serve_argv(model)`), for the top of the options file."""
    return [f"trtspec: LLM-API options for method {method}, TensorRT-LLM {target.version} ({target.image}), PyTorch "
            "backend. Serve from the build output directory:", shlex.join(argv or serve_argv(model))]


def _plain(value: Any) -> Any:
    """Plain dicts and lists (yaml.safe_dump refuses mapping proxies and tuples' tags)."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


# --- validation (the release's own classes where they import, else the facts) ---------------------------------------


@dataclass(frozen=True)
class Validation:
    """The outcome of validating one options mapping: which validator ran and what it found."""

    validator: str  # "tensorrt_llm <version>" | "facts <version>"
    problems: tuple[str, ...]
    note: str = ""

    @property
    def ok(self) -> bool:
        return not self.problems


def validate_llm_api(options: Any, version: str, *, release: bool | None = None) -> Validation:
    """Validate `options` for TensorRT-LLM `version`. With `tensorrt_llm` importable (release None or True): the
    installed release's update_llm_args_with_extra_dict (speculative_config through DecodingBaseConfig.from_dict,
    every other config section through its class) and TorchLlmArgs' field names decide; where the facts flag more,
    the note says so. Elsewhere: the facts only. `validator` says which ran."""
    facts = load_target_facts(version)
    fact_problems = tuple(map(str, diff_llm_api(options, facts)))
    if release is False or not _release_importable():
        return Validation(f"facts {version}", fact_problems,
                          "tensorrt_llm is not importable here: checked against trtspec's facts (docs/targets.md); "
                          "inside the target's container the release's own classes check it")
    installed, problems = _release_problems(options)
    notes = [] if installed == version else [f"the installed release is {installed}, not {version}"]
    if fact_problems and not problems:
        notes.append(f"the release accepts what trtspec's {version} facts flag: " + "; ".join(fact_problems))
    return Validation(f"tensorrt_llm {installed}", tuple(problems), "; ".join(notes))


MAX_OPTIONS_BYTES = 1 << 20  # an options file is a few hundred bytes; a larger one is not one


def read_options(path: Any) -> Any:
    """The YAML of an options file (a mapping, or whatever the file holds: validate_llm_api names it). ConfigError
    (exit 2) naming `--llm-api` and the file when it cannot be read or is not YAML; never echoes the file."""
    from pathlib import Path

    from trtspec.config import check_size
    from trtspec.textfile import load_yaml_text, read_text_file

    text = read_text_file(Path(path), "--llm-api", limit=MAX_OPTIONS_BYTES, what="an LLM-API options file")
    try:
        data = load_yaml_text(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = " ".join(str(getattr(exc, "problem", "") or "").split())[:100]
        raise ConfigError("--llm-api", str(path), f"is not valid YAML{': ' + problem if problem else ''}{where}",
                          hint="an extra_llm_api_options file is a YAML mapping of LLM() arguments") from None
    except RecursionError:
        raise ConfigError("--llm-api", str(path), "nests too deeply to be an options file",
                          hint="an extra_llm_api_options file is a YAML mapping of LLM() arguments") from None
    except (ValueError, OverflowError) as exc:  # a scalar YAML resolves but cannot construct (2024-13-45, 10**5000)
        raise ConfigError("--llm-api", str(path), f"holds a value YAML cannot read ({' '.join(str(exc).split())[:120]})",
                          hint="quote the value if it is a string") from None
    check_size(data, str(path), "an LLM-API options file")  # aliases that expand past any options file, deep nesting
    return data


def _release_importable() -> bool:
    import importlib.util

    return importlib.util.find_spec("tensorrt_llm") is not None


def _release_problems(options: Any) -> tuple[str, list[str]]:
    """(installed version, problems) from the installed release's own LLM-API classes."""
    import tensorrt_llm
    from tensorrt_llm.llmapi.llm_args import TorchLlmArgs, update_llm_args_with_extra_dict

    version = str(getattr(tensorrt_llm, "__version__", "unknown"))
    if not isinstance(options, Mapping):
        return version, ["(file): is not a mapping of LLM-API arguments"]
    names = set(TorchLlmArgs.model_fields)
    for info in TorchLlmArgs.model_fields.values():
        alias = getattr(info, "alias", None)
        if alias:
            names.add(alias)
    problems = [f"{key}: not a TorchLlmArgs field of tensorrt_llm {version}" for key in options if key not in names]
    try:
        update_llm_args_with_extra_dict({}, copy.deepcopy(dict(options)))
    except Exception as exc:  # pydantic ValidationError, ValueError, TypeError: the release's own words
        problems.append(f"tensorrt_llm {version}: " + " ".join(str(exc).split())[:600])
    return version, problems
