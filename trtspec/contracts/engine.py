"""EngineConfig: the one configuration of a reference engine, frozen and torch-free, with typed parts per method.

One object travels from the build config to everything that runs the engine: `trtspec build` writes it into the
bundle and the manifest; the build output, the repository spec and the repository record embed it whole; the Triton
Python model reads it back from its `parameters`, the Dynamo worker from its arguments (the same flat names), and each
proposer receives its own typed part (`ProposerOptions`).

Three forms, each a round trip:
- typed: `EngineConfig(target="tiny", method=EAGLE3.name, eagle="tiny-eagle", eagle_tree=EagleTree(topk=2, depth=4))`;
- flat text parameters (Triton `parameters`, the Dynamo worker's arguments, CLI overrides): `to_parameters` /
  `from_parameters` / `with_parameters`. Each part owns its names (`eagle_choices`, `suffix_max_tree_depth`,
  `lookahead` as "W,N,G", `log_prompts`, ...); a part is rendered only when it is set;
- JSON (bundle, manifest, repository record): `to_dict` / `from_dict`.

Validation is here, once: a bad value is a ConfigError naming the parameter, the value and the fix; callers that take
the value under another name (a CLI flag, a YAML path) rename it with `spelled`. What needs the loaded models (a
tree's ranks against the drafter's vocabulary) is the proposer's to check. Pure Python: no torch.

The parts' classes (EagleTree, MedusaTree, Lookahead, Ngram, Hybrid, PromptLog, SuffixPart) live in
contracts/engine_parts.py and are re-exported here; this module keeps EngineConfig, the tables derived from the
method homes (PARTS, CHECKPOINTS, METHOD_PARTS), `method_fields` and ProposerOptions.
"""

from __future__ import annotations

import importlib
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from trtspec.contracts.engine_parts import (  # noqa: F401 (re-exported)
    DEFAULT_DRAFTER_K,
    MAX_DEPTH,
    MAX_TOPK,
    EagleTree,
    Hybrid,
    Lookahead,
    MedusaTree,
    Ngram,
    Paths,
    PromptLog,
    SuffixPart,
    _parse,
    _Part,
    _text,
    spelled,
)
from trtspec.contracts.schedule import SpecSchedule
from trtspec.errors import ConfigError, shown
from trtspec.methods import DEFAULT_METHOD, METHODS, DerivedSequence, DerivedTable, derived, derived_sequence, resolve
from trtspec.methods.eagle import EAGLE
from trtspec.methods.lookahead import LOOKAHEAD
from trtspec.methods.medusa import MEDUSA
from trtspec.methods.ngram import NGRAM
from trtspec.methods.suffix import SUFFIX, SuffixConfig

DTYPES = ("float32", "float16", "bfloat16")  # what the reference engine loads checkpoints as
DRAFT_RUNTIMES = ("torch", "onnx")  # what runs the draft model (EngineConfig.draft_runtime)
# fields newer than the bundle / manifest / repository formats: written (both forms) only when not at their default,
# so the artefacts of configurations that leave them alone stay byte-identical
WRITTEN_WHEN_SET = ("draft_runtime", "hybrid")


def _check_exact_form(method: str, schedule: SpecSchedule) -> None:
    """Refuse a release's exact controls for a method whose form that release runs without them (1.2.1: one-model
    EAGLE-3, its default, has no drafter): the engine would measure controls the deployment ignores."""
    if not schedule.exact or not schedule.to_parameters().keys() - {"speculation_controls"}:
        return
    from trtspec.targets.controls import release

    kind = resolve(method).llmapi_decoding_type
    if kind is None:
        return
    rel = release(schedule.release)
    if rel.applies(rel.tag(kind)) is False:
        raise ConfigError("speculation_controls", schedule.controls, f"TensorRT-LLM {rel.name}'s {rel.tag(kind)} (method "
                          f"{method}) runs without the schedule and the gate (no drafter): the engine would measure "
                          "controls the deployment ignores", hint="use speculation_controls trtspec, or a method whose "
                          "form reads them (docs/operations.md)")


def _prefix(kind: Any) -> str | None:
    """The prefix a part's class owns its parameters by (SuffixPart's), or None: it owns its PARAMETERS."""
    return getattr(kind, "PREFIX", None)


# ---------------------------------------------------------------------------------------------------------------------
# The engine configuration




@dataclass(frozen=True)
class EngineConfig:
    """What a reference engine loads, which requests it accepts and how its proposers draft (module docstring)."""

    # checkpoints: embedded name or directory
    target: str
    draft: str | None = None
    medusa: str | None = None  # Medusa heads (method medusa)
    eagle: str | None = None  # EAGLE-3 drafter (method eagle3)
    # speculation: the method every request runs unless it says otherwise, and k
    method: str = DEFAULT_METHOD
    max_k: int = 8  # largest k a request may ask for (num_draft_tokens)
    default_k: int = 4  # k of a request that does not say
    # each method's knobs (None: the proposer's defaults; set only for the method they shape)
    eagle_tree: EagleTree | None = None
    medusa_tree: MedusaTree | None = None
    lookahead: Lookahead | None = None
    ngram: Ngram | None = None
    suffix: SuffixConfig | None = None
    hybrid: Hybrid | None = None
    # where and how it runs
    device: str = "cpu"
    dtype: str = "float32"
    draft_runtime: str = "torch"  # what runs the draft model: trtspec's torch runner, or ONNX Runtime (spec/onnx_draft)
    max_input_len: int = 1024  # prompt tokens at most
    max_output_len: int = 512  # request_output_len at most
    max_queue: int = 256  # requests waiting + running; one more is refused (OverloadedError)
    # defaults of a request that does not say, as NVIDIA's tensorrt_llm parameters of the same names (unset there:
    # exclude_input_in_output false, normalize_log_probs true; tensorrtllm_backend model_instance_state.cc)
    exclude_input_in_output: bool = False
    normalize_log_probs: bool = True
    drain_timeout_s: float = 30.0  # on unload, running requests get this long to finish before they are aborted
    prompt_log: PromptLog | None = field(default=None)  # off unless set
    # when requests speculate and how far, by load and by recent acceptance (contracts/schedule.py); None: always k
    schedule: SpecSchedule | None = None

    def __post_init__(self) -> None:
        for name, kind in PARTS.items():  # a part that sets nothing is the defaults: unset (so every form round-trips)
            if getattr(self, name) is not None and not kind.to_parameters(getattr(self, name)):
                object.__setattr__(self, name, None)
        for name in ("target", "method", "device", "dtype"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ConfigError(name, getattr(self, name), "is required", hint="e.g. target tiny")
        if not re.fullmatch(r"cpu|cuda(:\d{1,4})?", self.device):
            raise ConfigError("device", shown(self.device), "is not cpu, cuda or cuda:N", hint="e.g. device cpu")
        if self.dtype not in DTYPES:
            raise ConfigError("dtype", shown(self.dtype), f"is not one of {', '.join(DTYPES)}", hint="e.g. float32")
        if self.draft_runtime not in DRAFT_RUNTIMES:
            raise ConfigError("draft_runtime", shown(self.draft_runtime), f"is not one of {', '.join(DRAFT_RUNTIMES)}",
                              hint="e.g. draft_runtime onnx")
        if self.draft_runtime != "torch" and (self.draft is None or self.dtype != "float32" or self.device != "cpu"):
            raise ConfigError("draft_runtime", self.draft_runtime, "runs a float32 draft model on the CPU, and this "
                              f"configuration has draft {self.draft}, dtype {self.dtype}, device {self.device}",
                              hint="set draft (e.g. tiny-draft), dtype float32 and device cpu, or draft_runtime torch")
        for name in ("max_k", "default_k", "max_input_len", "max_output_len", "max_queue"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < (0 if name == "default_k" else 1):
                raise ConfigError(name, value, "must be a positive integer" if name != "default_k" else
                                  "must be a non-negative integer", hint=f"e.g. {name} {_DEFAULTS[name]}")
        if not 0 <= self.default_k <= self.max_k:
            raise ConfigError("default_k", self.default_k, f"must be in [0, max_k={self.max_k}]",
                              hint="lower k or raise max_k")
        if not self.drain_timeout_s >= 0 or not math.isfinite(self.drain_timeout_s):
            raise ConfigError("drain_timeout_s", self.drain_timeout_s, "must be a finite number of seconds >= 0",
                              hint="e.g. 30")
        for name in METHOD_PARTS:  # a method's part held as another type is checked here (SuffixPart: SuffixConfig)
            if (part := getattr(self, name)) is not None and (kind := PARTS.get(name)) is not None:
                kind.checked(part)
        if self.schedule is not None:
            self.schedule.check(max_k=self.max_k)
            _check_exact_form(self.method, self.schedule)
        for name, readers in METHOD_PARTS.items():
            part = getattr(self, name)
            if part is not None and self.method not in readers:
                methods = [m for m in readers if resolve(m).engine_part == name] or list(readers)  # its homes
                kind = PARTS.get(name)
                parameter, value = kind.named_value(part) if kind is not None else (name, "set")
                raise ConfigError(parameter, value, f"shapes method {' / '.join(methods)}, but the method is "
                                  f"{self.method}", hint=f"set method {methods[-1]}, or drop {parameter}")

    # -- flat text parameters --------------------------------------------------------------------------------------
    def to_parameters(self) -> dict[str, str]:
        """Every field as text: scalars under their own names (None: not listed), each set part under its names."""
        out: dict[str, str] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None or (f.name in WRITTEN_WHEN_SET and value == f.default):
                continue
            if (kind := PARTS.get(f.name)) is not None:
                out |= kind.to_parameters(value)
            else:
                out[f.name] = _text(value)
        return out

    @classmethod
    def from_parameters(cls, params: Mapping[str, str]) -> EngineConfig:
        """Parse text parameters (unknown names are refused: typos, or a newer trtspec's); errors name the parameter."""
        parts = dict(PARTS)
        scalars = {f.name: str(f.type) for f in fields(cls) if f.name not in parts}
        owned = {p: part for part, t in parts.items() for p in t.PARAMETERS.values()}
        prefixed = [t for t in parts.values() if _prefix(t)]
        unknown = sorted(k for k in params if k not in scalars and k not in owned
                         and not any(k.startswith(t.PREFIX) for t in prefixed))
        if unknown:
            raise ConfigError(f"parameter {unknown[0]}", params[unknown[0]], "is not an engine parameter",
                              hint=f"redeploy with this trtspec; known: {', '.join(sorted([*scalars, *owned]))}"
                                   + "".join(f", {t.PREFIX}<{t.OPTION}>" for t in prefixed))
        if not params.get("target"):
            raise ConfigError("parameter target", params.get("target"), "is required",
                              hint="redeploy with `trtspec deploy --backend torch`")
        with spelled(lambda name: f"parameter {name}" if not name.startswith("parameter ") else None):
            values: dict[str, Any] = {name: _parse(kind, name, params[name]) for name, kind in scalars.items()
                                      if name in params}
            for part, kind in parts.items():
                given = {p: v for p, v in params.items() if p.startswith(prefix)} if (prefix := _prefix(kind)) \
                    else {p: params[p] for p in kind.PARAMETERS.values() if p in params}
                if part == "prompt_log" and "log_prompts" not in given:
                    continue  # logging off (older repositories list the rate and the size limit anyway)
                if given:
                    values[part] = kind.from_parameters(given)
            return cls(**values)

    def with_parameters(self, changes: Mapping[str, object]) -> EngineConfig:
        """This configuration with some parameters set (text, or values shown as text; None values are left out): how
        CLI flags override a build's configuration. Parsed and checked as a whole, so errors name the parameter."""
        return EngineConfig.from_parameters({**self.to_parameters(), **{
            k: v if isinstance(v, str) else _text(v) for k, v in changes.items() if v is not None}})

    @classmethod
    def parameter_names(cls) -> list[str]:
        """Every parameter name (suffix options as `suffix_<name>`)."""
        names = [f.name for f in fields(cls) if f.name not in PARTS]
        names += [p for t in PARTS.values() for p in dict.fromkeys(t.PARAMETERS.values())]
        return names + [p for t in PARTS.values() if _prefix(t) for p in t.prefixed()]

    # -- JSON ------------------------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict: parts as nested dicts (None: unset)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in WRITTEN_WHEN_SET and value == f.default:
                continue
            if value is not None and (kind := PARTS.get(f.name)) is not None:
                value = kind.to_dict(value)
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "engine") -> EngineConfig:
        """The inverse of `to_dict` (unknown keys refused, naming `where.<key>`)."""
        if not isinstance(data, Mapping):
            raise ConfigError(where, shown(data), "is not a mapping", hint="rebuild with this trtspec")
        known = [f.name for f in fields(cls)]
        unknown = sorted(str(k) for k in data if k not in known)
        if unknown:
            raise ConfigError(f"{where}.{unknown[0]}", shown(data[unknown[0]]), "is not an engine field",
                              hint=f"known: {', '.join(known)} (rebuild with this trtspec)")
        values = dict(data)
        for name, kind in PARTS.items():
            if values.get(name) is not None:
                values[name] = kind.from_dict(values[name], f"{where}.{name}")
        with spelled(lambda name: f"{where}.{name}"):
            return cls(**values)

    # -- views -----------------------------------------------------------------------------------------------------
    def checkpoints(self) -> dict[str, str]:
        """role -> checkpoint of every checkpoint this configuration names."""
        return {role: path for role in CHECKPOINTS if (path := getattr(self, role)) is not None}

    def with_checkpoints(self, resolve: Callable[[str, str], str]) -> EngineConfig:
        """This configuration with each checkpoint `resolve(role, path)`d (e.g. made absolute against a bundle)."""
        return replace(self, **{role: resolve(role, path) for role, path in self.checkpoints().items()})

    def proposer_options(self) -> ProposerOptions:
        """Each proposer's typed part, with the defaults where unset."""
        return ProposerOptions(eagle_tree=self.eagle_tree or EagleTree(), medusa_tree=self.medusa_tree or MedusaTree(),
                               lookahead=self.lookahead or Lookahead(), ngram=self.ngram or Ngram(),
                               suffix=self.suffix or SuffixConfig(), hybrid=self.hybrid or Hybrid())


_DEFAULTS = {f.name: f.default for f in fields(EngineConfig)}


def _part_class(path: str) -> Any:
    """The class a home names as "module:Class" (MethodInfo.engine_part_class)."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def _parts() -> dict[str, Any]:
    homes = {m.engine_part: _part_class(m.engine_part_class) for m in METHODS.values()
             if m.engine_part and m.engine_part_class}
    own = {**homes, "prompt_log": PromptLog, "schedule": SpecSchedule}
    return {f.name: own[f.name] for f in fields(EngineConfig) if f.name in own}


# field -> the class that writes and reads it (_Part's calls), in field order: each home's part (MethodInfo.engine_part,
# its class MethodInfo.engine_part_class), the prompt log and the schedule; derived from the registered homes
PARTS: DerivedTable[str, Any] = derived(_parts)
# the fields that name checkpoints (bundles store them relative): the target's, then each home's (MethodInfo.checkpoint)
CHECKPOINTS: DerivedSequence[str] = derived_sequence(lambda: ("target", *dict.fromkeys(
    m.checkpoint for m in METHODS.values() if m.checkpoint and m.checkpoint in _DEFAULTS)))
# a method's knobs are set only for that method: each part field -> the methods whose home owns it (engine_part);
# derived from the registered homes at each read
METHOD_PARTS: DerivedTable[str, tuple[str, ...]] = derived(lambda: {
    f.name: owners for f in fields(EngineConfig)
    if (owners := tuple(m.name for m in METHODS.values() if f.name in (m.engine_part, *m.reads_parts)))})


def method_fields(method: str, k: int, *, reference: bool, choices: Sequence[Sequence[int]] | None = None,
                  eagle_tree: Any = None, lookahead: Any = None, ngram_size: Any = None,
                  suffix: Any = None) -> dict[str, Any]:
    """The method's fields of an EngineConfig, from a build's loose values: THE method -> engine configuration
    mapping (build.plan.engine_config, build.bundle's format /1 reader, triton.build_output's older manifests).

    Args:
        method: the engine's method name (`eagle3` for the reference engine's EAGLE-3).
        k: the build's draft length (max_draft_len); max_k is at least 1.
        reference: the reference engine serves it (a torch bundle): every request says its k, so default_k = k;
            else default_k = k only where requests carry their drafts (`MethodInfo.external_drafts`), 0 = the
            engine's own k.
        choices, eagle_tree, lookahead, ngram_size, suffix: the build's values, each a value or a function of none
            that reads it (called only for the method that owns it, so another method's section is never read);
            only the parts the method's home owns or reads (`MethodInfo.engine_part`, `reads_parts`) are set
            (a hybrid's own part: its defaults): medusa_tree from `choices`,
            eagle_tree as given (an EagleTree or None), lookahead from (W, N, G), ngram from
            max_matching_ngram_size, suffix from its options (always set for its method).

    Returns:
        {"method", "max_k", "default_k"} plus the method's part, for EngineConfig(**...).
    """
    info = resolve(method)
    def read(value: Any) -> Any:
        return value() if callable(value) else value

    def medusa_tree() -> MedusaTree | None:
        paths = read(choices)
        return MedusaTree(choices=tuple(map(tuple, paths))) if paths else None

    def lookahead_part() -> Lookahead | None:
        wng = read(lookahead)
        return Lookahead(*wng) if wng else None

    def ngram() -> Ngram | None:
        size = read(ngram_size)
        return Ngram(max_size=size) if size is not None else None

    part: dict[str, Callable[[], Any]] = {
        EAGLE.engine_part: lambda: read(eagle_tree), MEDUSA.engine_part: medusa_tree,
        LOOKAHEAD.engine_part: lookahead_part, NGRAM.engine_part: ngram,
        SUFFIX.engine_part: lambda: SuffixConfig.from_options(read(suffix))}
    owned = {name: part[name]() if name in part else None for name in (info.engine_part, *info.reads_parts) if name}
    return {"method": method, "max_k": max(k, 1), "default_k": k if reference or info.external_drafts else 0,
            **owned}


@dataclass(frozen=True)
class ProposerOptions:
    """What the engine hands its proposers: each one reads its own typed part (defaults where a config sets none)."""

    eagle_tree: EagleTree = EagleTree()
    medusa_tree: MedusaTree = MedusaTree()
    lookahead: Lookahead = Lookahead()
    ngram: Ngram = Ngram()
    suffix: SuffixConfig = SuffixConfig()
    hybrid: Hybrid = Hybrid()
