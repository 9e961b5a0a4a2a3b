"""The LLM-API facts of a TensorRT-LLM target (PyTorch workflow) and the check of an `extra_llm_api_options` mapping
against them.

The one definition is `pytorch-workflow.json`'s per-target `llm_api` section (fields, types, defaults, decoding types,
backends and rules, each with its sources); a target without one (0.18.0, 0.19.0) has unverified facts that say why,
from its own data file. `diff_llm_api` validates any mapping: unknown top-level keys, unknown or mistyped
`speculative_config` / `kv_cache_config` keys per decoding type, the draft-length schedule and acceptance-gate rules.
Each problem names the key, the target and the nearest valid key or the rule. It must not know how trtspec renders
options (build/llm_api.py) or how the release's own classes validate them.

Pure: json + difflib only.
"""

from __future__ import annotations

import difflib
import json
import math
import reprlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

FACTS_FILE = "pytorch-workflow.json"
INT64 = (-(1 << 63), (1 << 63) - 1)
_REPR = reprlib.Repr()  # (attributes: Python 3.10 and 3.11 take no keyword arguments)
_REPR.maxlevel, _REPR.maxdict, _REPR.maxlist, _REPR.maxstring, _REPR.maxother, _REPR.maxlong = 2, 4, 4, 60, 60, 40
PYTORCH = "pytorch"  # the backend trtllm-serve and Triton's llmapi model run (trtllm-serve --backend default)


@dataclass(frozen=True)
class FieldFact:
    """One pydantic field of an LLM-API class: its name, type (as the source spells it), default and aliases."""

    name: str
    type: str
    default: Any = None
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class DecodingType:
    """One `speculative_config.decoding_type` of a target: its class, own fields, required keys, backends, rules."""

    decoding_type: str
    class_name: str
    fields: tuple[FieldFact, ...]
    required: tuple[str, ...]
    backends: tuple[str, ...]
    rules: tuple[str, ...]
    # the class's own numeric limits by topic, with their sources (SADecodingConfig: its global pool's); {}: none known
    limits: Mapping[str, Any] = field(default_factory=dict)

    @property
    def runs_on_pytorch(self) -> bool:
        return PYTORCH in self.backends


@dataclass(frozen=True)
class LlmApiFacts:
    """What one TensorRT-LLM release's LLM API reads (PyTorch workflow), or why trtspec has no verified facts for it.

    `base_fields` are DecodingBaseConfig's (every decoding type has them); `decoding_types` maps each `decoding_type`
    string DecodingBaseConfig.from_dict accepts to its class; `top_level` are the LLM() arguments whose types are
    known, `known_args` further argument names (accepted by name only); `rules` the release's rule texts by topic.
    """

    version: str
    verified: bool
    why: str = ""
    pinned: bool = False
    base_fields: tuple[FieldFact, ...] = ()
    decoding_types: dict[str, DecodingType] = field(default_factory=dict)
    invalid_decoding_types: dict[str, str] = field(default_factory=dict)
    top_level: tuple[FieldFact, ...] = ()
    known_args: tuple[str, ...] = ()
    kv_cache_fields: tuple[FieldFact, ...] = ()
    kv_cache_sizing: str = ""
    rules: dict[str, Any] = field(default_factory=dict)
    sources: tuple[str, ...] = ()
    validator: dict[str, str] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def fields_of(self, decoding_type: str) -> dict[str, FieldFact]:
        """Every key a `speculative_config` of `decoding_type` may carry, aliases included (-> their field)."""
        out: dict[str, FieldFact] = {}
        own = self.decoding_types[decoding_type].fields if decoding_type in self.decoding_types else ()
        for fact in (*self.base_fields, *own):
            out[fact.name] = fact
            out.update({alias: fact for alias in fact.aliases})
        return out

    def base_field(self, *names: str) -> str | None:
        """The first of `names` that is a DecodingBaseConfig field of this release (canonical names only)."""
        have = {f.name for f in self.base_fields}
        return next((n for n in names if n in have), None)

    @property
    def draft_model_field(self) -> str | None:
        """The release's name of the draft-model path field: `speculative_model` (1.2.1) or `speculative_model_dir`."""
        return self.base_field("speculative_model", "speculative_model_dir")


def _field(data: Mapping[str, Any]) -> FieldFact:
    return FieldFact(data["name"], str(data.get("type", "Any")), data.get("default"), tuple(data.get("aliases", ())))


@cache
def _facts_data() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(resources.files(__package__).joinpath(FACTS_FILE).read_text(encoding="utf-8"))
    return data


def facts_versions() -> tuple[str, ...]:
    """The releases with LLM-API facts in pytorch-workflow.json (oldest first)."""
    return tuple(v for v, t in _facts_data()["targets"].items() if "llm_api" in t)


def llm_api_facts(version: str, unverified: Mapping[str, Any] | None = None) -> LlmApiFacts:
    """The LLM-API facts of `version`: pytorch-workflow.json's section when it has one; else unverified facts whose
    `why` is the target data file's `llm_api.source.note` (`unverified`) or a generic reason."""
    section = _facts_data()["targets"].get(version, {}).get("llm_api")
    if section is None:
        note = (unverified or {}).get("source", {}).get("note") or (
            f"pytorch-workflow.json has no LLM-API facts for TensorRT-LLM {version}")
        return LlmApiFacts(version, verified=False, why=note, raw=dict(unverified or {}))
    classes = section["classes"]
    types = {kind: DecodingType(kind, cls, tuple(map(_field, classes[cls]["fields"])), tuple(classes[cls]["required"]),
                                tuple(classes[cls]["backends"]), tuple(classes[cls]["rules"]),
                                dict(classes[cls].get("limits", {})))
             for kind, cls in section["decoding_types"].items()}
    top = section.get("top_level", {})
    kv = section.get("kv_cache_config", {})
    return LlmApiFacts(
        version, verified=True, pinned=bool(section.get("pinned")), why=section.get("bracket", {}).get("note", ""),
        base_fields=tuple(map(_field, section["base"]["fields"])), decoding_types=types,
        invalid_decoding_types=dict(section.get("invalid_decoding_types", {})),
        top_level=tuple(map(_field, top.get("fields", []))), known_args=tuple(top.get("known", [])),
        kv_cache_fields=tuple(map(_field, kv.get("fields", []))), kv_cache_sizing=kv.get("sizing", ""),
        rules=dict(section.get("rules", {})), sources=tuple(section.get("sources", [])),
        validator=dict(section.get("validator", {})), raw=section)


def serve_options(version: str) -> tuple[str, ...]:
    """The `trtllm-serve` options of `version` (pytorch-workflow.json `trtllm_serve.options`, with its sources); empty
    where its serve.py was not read."""
    return tuple(_facts_data()["targets"].get(version, {}).get("trtllm_serve", {}).get("options", ()))


def diff_serve_argv(argv: list[str] | tuple[str, ...], version: str) -> list[str]:
    """Problems of a `trtllm-serve` command line for `version`: options its serve.py does not declare (none read:
    every option is a problem)."""
    known = set(serve_options(version))
    return [f"{arg}: not a trtllm-serve option of TensorRT-LLM {version}" + (
        f" (nearest: {near})" if (near := nearest(arg, known)) else "")
            for arg in argv[1:] if arg.startswith("--") and arg not in known]


# --- the check --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LlmApiProblem:
    """One reason a release would not take an options mapping: the key (a dotted YAML path), what is wrong, the fix."""

    key: str
    problem: str
    fix: str = ""

    def __str__(self) -> str:
        return f"{self.key}: {self.problem}" + (f" ({self.fix})" if self.fix else "")


def nearest(name: str, candidates: list[str] | tuple[str, ...] | set[str]) -> str | None:
    """The candidate closest to `name` (difflib), or None when nothing is close."""
    match = difflib.get_close_matches(str(name), sorted(candidates), n=1, cutoff=0.5)
    return match[0] if match else None


def _nearest_fix(name: str, candidates: Any, what: str) -> str:
    near = nearest(name, candidates)
    if near:
        return f"nearest {what}: {near}"
    names = sorted(candidates)
    return f"{what}s: {', '.join(names)}" if len(names) <= 10 else f"no {what} is close; {len(names)} are known"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (_is_int(value) or isinstance(value, float)) and math.isfinite(value)


def _type_problem(type_text: str, value: Any) -> str | None:
    """Why `value` does not fit the source's type text (None: it fits, or the type is not one trtspec checks)."""
    text = type_text.replace(" ", "")
    if text.startswith("Optional[") and text.endswith("]"):
        if value is None:
            return None
        text = text[len("Optional["):-1]
    simple = {"int": (_is_int, "an integer"), "bool": (lambda v: isinstance(v, bool), "true or false"),
              "float": (_is_number, "a number"), "str": (lambda v: isinstance(v, str), "a string"),
              "Union[str,Path]": (lambda v: isinstance(v, str) and v != "", "a path or model id (a string)"),
              "List[List[int]]": (lambda v: isinstance(v, list) and all(isinstance(p, list) and all(map(_is_int, p))
                                                                       for p in v), "a list of lists of integers"),
              "List[int]": (lambda v: isinstance(v, list) and all(map(_is_int, v)), "a list of integers"),
              "Set[int]": (lambda v: isinstance(v, list) and all(map(_is_int, v)), "a list of integers"),
              "dict[int,int]": (lambda v: isinstance(v, dict), "a mapping {batch size: draft length}"),
              "KvCacheConfig": (lambda v: isinstance(v, dict), "a mapping"),
              "DecodingBaseConfig": (lambda v: isinstance(v, dict), "a mapping")}
    if text in simple:
        ok, want = simple[text]
        if not ok(value):
            return f"must be {want}, not {_shown(value)}"
        if text == "int" and not INT64[0] <= value <= INT64[1]:
            return f"{_shown(value)} does not fit a 64-bit integer (TensorRT-LLM's C++ side)"
        return None
    if text.startswith("Literal[") and text.endswith("]"):
        choices = [c.strip("'\"") for c in text[len("Literal["):-1].split(",")]
        return None if value in choices else f"must be one of {', '.join(choices)}, not {_shown(value)}"
    if text.startswith("object"):
        return "is a Python object: an options file cannot carry it"
    return None


def _shown(value: Any) -> str:
    """A short printable rendering of a user's value for a message: bounded work whatever its size (a container is
    shown through reprlib, which looks at a few items of a few levels)."""
    if isinstance(value, (dict, list, tuple, set)):
        text = _REPR.repr(value)
    elif isinstance(value, str):
        text = repr(value[:80])
    else:
        text = _REPR.repr(value)
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= 60 else text[:57] + "..."


def diff_llm_api(options: Any, target: Any) -> list[LlmApiProblem]:
    """Problems of an `extra_llm_api_options` mapping for `target` (a TrtllmTarget, a version, or LlmApiFacts); [] =
    every key, type and rule the facts give holds. Never raises on odd input: a non-mapping is one problem."""
    facts = target if isinstance(target, LlmApiFacts) else _facts_of(target)
    version = facts.version
    if not facts.verified:
        return [LlmApiProblem("(file)", f"TensorRT-LLM {version}: no verified LLM-API facts ({facts.why})",
                              f"use a target with them: {', '.join(facts_versions())}")]
    if not isinstance(options, Mapping):
        return [LlmApiProblem("(file)", f"is not a mapping of LLM-API arguments but {_shown(options)}",
                              "write `key: value` lines, e.g. `speculative_config: {decoding_type: NGram, ...}`")]
    problems: list[LlmApiProblem] = []
    typed = {f.name: f for f in facts.top_level}
    known = set(typed) | set(facts.known_args)
    for key, value in options.items():
        if not isinstance(key, str) or key not in known:
            label = key if isinstance(key, str) and key.isprintable() and key else _shown(key)
            problems.append(LlmApiProblem(label, f"not an LLM-API argument of TensorRT-LLM {version}",
                                          _nearest_fix(str(key), known, "argument")))
        elif key in typed and (why := _type_problem(typed[key].type, value)):
            problems.append(LlmApiProblem(key, why))
    if isinstance(options.get("kv_cache_config"), Mapping):
        problems += _check_fields(options["kv_cache_config"], {f.name: f for f in facts.kv_cache_fields},
                                  "kv_cache_config", f"a KvCacheConfig field of TensorRT-LLM {version}")
    if isinstance(options.get("speculative_config"), Mapping):
        problems += _check_speculative(options["speculative_config"], facts, str(options.get("backend") or PYTORCH))
    return problems


def _facts_of(target: Any) -> LlmApiFacts:
    """The LLM-API facts of a TrtllmTarget, or of a version: a build target's, else a release with facts only."""
    if isinstance(target, str):
        from trtspec.targets import SUPPORTED_TARGETS, load_target

        return load_target(target).llm_api if target in SUPPORTED_TARGETS else llm_api_facts(target)
    facts: LlmApiFacts = target.llm_api
    return facts


def _check_fields(section: Mapping[Any, Any], fields: dict[str, FieldFact], path: str, what: str,
                  skip: tuple[str, ...] = ()) -> list[LlmApiProblem]:
    problems = []
    for key, value in section.items():
        if key in skip:
            continue
        fact = fields.get(key) if isinstance(key, str) else None
        if fact is None:
            problems.append(LlmApiProblem(f"{path}.{key}", f"not {what}", _nearest_fix(str(key), fields, "key")))
        elif why := _type_problem(fact.type, value):
            problems.append(LlmApiProblem(f"{path}.{key}", why))
    return problems


def _check_speculative(spec: Mapping[Any, Any], facts: LlmApiFacts, backend: str) -> list[LlmApiProblem]:
    version, kinds = facts.version, facts.decoding_types
    kind = spec.get("decoding_type")
    if not isinstance(kind, str) or kind not in kinds:  # a list or a mapping is no decoding type (nor hashable)
        why = facts.invalid_decoding_types.get(kind) if isinstance(kind, str) else None
        problem = (f"{_shown(kind)} is not a decoding type of TensorRT-LLM {version}" + (f" ({why})" if why else "")
                   if kind is not None else f"is required (one of {', '.join(kinds)})")
        return [LlmApiProblem("speculative_config.decoding_type", problem,
                              _nearest_fix(str(kind), list(kinds), "decoding type"))]
    info = kinds[kind]
    fields = facts.fields_of(kind)
    controls = _control_problems(spec, kind, version)  # first: a control's fix is the release's own
    named = tuple(p.key.removeprefix("speculative_config.") for p in controls)
    problems = controls + _check_fields(spec, fields, "speculative_config", f"a field of {kind} in TensorRT-LLM "
                                        f"{version}", skip=("decoding_type", *named))
    if backend == PYTORCH and not info.runs_on_pytorch:
        problems.append(LlmApiProblem("speculative_config.decoding_type",
                                      f"{kind} does not run on TensorRT-LLM {version}'s PyTorch backend "
                                      f"({info.class_name} supports {', '.join(info.backends)})",
                                      "use a decoding type with pytorch: " + ", ".join(
                                          k for k, t in kinds.items() if t.runs_on_pytorch)))
    for name in info.required:
        fact = fields.get(name)
        names = {name, *(fact.aliases if fact else ())}
        if not names & set(spec):
            problems.append(LlmApiProblem(f"speculative_config.{name}", f"required by {kind} in TensorRT-LLM {version}"))
    for fact in {f.name: f for f in fields.values()}.values():
        given = [n for n in (fact.name, *fact.aliases) if n in spec]
        if len(given) > 1:
            problems.append(LlmApiProblem(f"speculative_config.{given[1]}", f"is another name of {given[0]}, also given",
                                          f"keep {fact.name}"))
    problems += _value_rules(spec, kind, info)
    if "draft_len_schedule" in fields and isinstance(spec.get("draft_len_schedule"), Mapping):
        problems += schedule_problems(spec["draft_len_schedule"], spec.get("max_draft_len"), version)
    return problems


def _control_problems(spec: Mapping[Any, Any], kind: str, version: str) -> list[LlmApiProblem]:
    """What the release's controls model (targets/controls.py) refuses or ignores: controls on a form without a
    drafter, another release's gate, rules the release enforces."""
    from trtspec.targets.controls import has_release, release

    if not has_release(version):
        return []
    return [LlmApiProblem(f"speculative_config.{p.key}", p.problem, p.fix)
            for p in release(version).problems(spec, kind)]


def _value_rules(spec: Mapping[Any, Any], kind: str, info: DecodingType) -> list[LlmApiProblem]:
    """The per-type rules of BaseLlmArgs / the classes that the facts state (`rules` of each class)."""
    problems = []
    text = " ".join(info.rules)
    draft_len = spec.get("max_draft_len")
    if "max_draft_len" in info.required and _is_int(draft_len) and draft_len <= 0:
        problems.append(LlmApiProblem("speculative_config.max_draft_len", f"{draft_len}: {kind} needs max_draft_len > 0"))
    ngram = spec.get("max_matching_ngram_size")
    if "max_matching_ngram_size" in info.required and _is_int(ngram) and ngram <= 0:
        problems.append(LlmApiProblem("speculative_config.max_matching_ngram_size",
                                      f"{ngram}: {kind} needs max_matching_ngram_size > 0"))
    if "exclude each other" in text and spec.get("eagle_choices") and spec.get("use_dynamic_tree"):
        problems.append(LlmApiProblem("speculative_config.use_dynamic_tree", "eagle_choices and use_dynamic_tree "
                                      "exclude each other", "keep one of them"))
    problems += _tree_rules(spec, text)
    layers = spec.get("num_nextn_predict_layers")
    if "num_nextn_predict_layers > 0" in text and _is_int(layers) and layers <= 0:
        problems.append(LlmApiProblem("speculative_config.num_nextn_predict_layers", f"{layers}: must be > 0"))
    return problems


def _tree_rules(spec: Mapping[Any, Any], text: str) -> list[LlmApiProblem]:
    """The EAGLE tree rules a class states: eagle_choices resets max_draft_len to the tree depth and
    max_total_draft_tokens to len(choices) (a file that says otherwise means another tree than the release runs);
    use_dynamic_tree needs dynamic_tree_max_topK > 0 (and, where stated, max_total_draft_tokens > 0), with
    max_total_draft_tokens in [max_draft_len, dynamic_tree_max_topK x max_draft_len] where the class says so."""
    problems: list[LlmApiProblem] = []
    path = "speculative_config."
    draft_len, total = spec.get("max_draft_len"), spec.get("max_total_draft_tokens")
    choices = spec.get("eagle_choices")
    if "eagle_choices resets" in text and isinstance(choices, list) and choices and all(
            isinstance(p, list) and p and all(map(_is_int, p)) for p in choices):
        depth = max(len(p) for p in choices)
        if _is_int(draft_len) and draft_len != depth:
            problems.append(LlmApiProblem(path + "max_draft_len", f"{draft_len}: eagle_choices resets it to the tree "
                                          f"depth {depth}", f"set max_draft_len: {depth}"))
        if _is_int(total) and total != len(choices):
            problems.append(LlmApiProblem(path + "max_total_draft_tokens", f"{total}: eagle_choices resets it to "
                                          f"len(eagle_choices) {len(choices)}", f"set max_total_draft_tokens: "
                                          f"{len(choices)}"))
    if spec.get("use_dynamic_tree") is True and ("use_dynamic_tree needs" in text or "must lie in" in text):
        topk = spec.get("dynamic_tree_max_topK")
        if not (_is_int(topk) and topk > 0):
            problems.append(LlmApiProblem(path + "dynamic_tree_max_topK", f"{_shown(topk)}: use_dynamic_tree needs "
                                          "dynamic_tree_max_topK > 0", "set dynamic_tree_max_topK, e.g. 4"))
        elif "use_dynamic_tree needs" in text and not (_is_int(total) and total > 0):
            problems.append(LlmApiProblem(path + "max_total_draft_tokens", f"{_shown(total)}: use_dynamic_tree needs "
                                          "max_total_draft_tokens > 0 (the draft tree's nodes)",
                                          "set max_total_draft_tokens"))
        elif "must lie in" in text and _is_int(total) and _is_int(draft_len) and not (
                draft_len <= total <= topk * draft_len):
            problems.append(LlmApiProblem(path + "max_total_draft_tokens", f"{total}: must lie in [max_draft_len "
                                          f"{draft_len}, dynamic_tree_max_topK x max_draft_len {topk * draft_len}]",
                                          f"set it between {draft_len} and {topk * draft_len}"))
    return problems


def schedule_problems(schedule: Mapping[Any, Any], max_draft_len: Any, version: str) -> list[LlmApiProblem]:
    """The draft-length schedule rules ({batch size: draft length}): keys >= 1, values >= 0, key 1 present with
    schedule[1] == max_draft_len (when set), no value above max_draft_len. Each problem names the entry."""
    path, problems = "speculative_config.draft_len_schedule", []
    if not schedule:
        return [LlmApiProblem(path, "is empty (the release then drafts max_draft_len at every batch size)",
                              "leave the key out, or give batch sizes and draft lengths")]
    for key, value in schedule.items():
        entry = f"{path}[{_shown(key)}]"
        if not _is_int(key) or key < 1:
            problems.append(LlmApiProblem(entry, f"batch-size key {_shown(key)} must be an integer >= 1",
                                          f"TensorRT-LLM {version} rule"))
        if not _is_int(value) or value < 0:
            problems.append(LlmApiProblem(entry, f"draft length {_shown(value)} must be an integer >= 0 (0 disables "
                                          "speculation)", f"TensorRT-LLM {version} rule"))
        elif _is_int(max_draft_len) and value > max_draft_len:
            problems.append(LlmApiProblem(entry, f"draft length {value} > max_draft_len {max_draft_len}",
                                          "no value may exceed max_draft_len"))
    from trtspec.targets.controls import has_release, release

    rule = release(version).facts["schedule"] if has_release(version) else {"requires_batch_1": True}
    keys = [k for k in schedule if _is_int(k)]
    if rule["requires_batch_1"] and 1 not in schedule:
        problems.append(LlmApiProblem(path, "must contain batch size 1",
                                      f"add 1: {max_draft_len if _is_int(max_draft_len) else 'max_draft_len'}"))
    elif keys and _is_int(max_draft_len) and schedule[min(keys)] != max_draft_len:
        first = min(keys)
        problems.append(LlmApiProblem(f"{path}[{first}]", f"draft length {_shown(schedule[first])} != max_draft_len "
                                      f"{max_draft_len}", f"schedule[{first}] (the smallest key) must equal "
                                      "max_draft_len"))
    return problems
