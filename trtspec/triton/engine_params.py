"""EngineParams: the contract between `trtspec deploy` (triton/repo.py, which writes a served model's config.pbtxt
`parameters`) and the served model (triton/engine_model.py, which reads them back when Triton loads it).

One frozen, typed object with its defaults defined here only; `to_parameters()` is what the repository renders and
`from_parameters()` / `from_model_config()` parse what Triton hands the model (every value a string). A value that
does not parse is refused naming the parameter, the value and the fix. Pure Python: no torch, no numpy.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from trtspec import choices as tree_choices
from trtspec.contracts.suffix import SuffixConfig
from trtspec.errors import ConfigError

SUFFIX_PREFIX = "suffix_"  # suffix decoding's options as Triton parameters: suffix_<SuffixConfig field>

VERSION_FILE = "trtspec-version.json"  # per-version overrides in a model's version directory (see for_version)
VERSION_FIELDS = ("target", "draft")  # the checkpoints a version may bring (tensorrt_llm_draft runs its draft as target)


@dataclass(frozen=True)
class EngineParams:
    """How the served reference engine is loaded and which requests it accepts."""

    target: str  # checkpoint directory or embedded name
    method: str = "draft_target"  # the method requests run (one of trtspec.methods.engine_methods())
    draft: str | None = None
    medusa: str | None = None
    eagle: str | None = None  # EAGLE-3 drafter directory (method eagle3)
    eagle_choices: str | None = None  # its static tree, `{0}, {0, 0}` or JSON; None = the dynamic (EAGLE-2) tree
    # the dynamic tree's shape (with eagle_choices unset): children per expansion and levels; None = the proposer's
    # defaults (trtspec/spec/proposers/eagle.py DEFAULT_TOPK, DEFAULT_DEPTH). The node budget is the request's k.
    eagle_topk: int | None = None
    eagle_depth: int | None = None
    max_k: int = 8  # largest k a request may ask for (num_draft_tokens)
    default_k: int = 4  # k of a request that does not say
    lookahead: tuple[int, int, int] | None = None  # (W, N, G) of method lookahead; None = the proposer's default
    device: str = "cpu"
    dtype: str = "float32"
    max_input_len: int = 1024  # prompt tokens at most
    max_output_len: int = 512  # request_output_len at most
    max_queue: int = 256  # requests waiting + running in the engine; one more is refused (OverloadedError)
    # Defaults of a request that does not say, as NVIDIA's tensorrt_llm model parameters of the same names (unset
    # there: exclude_input_in_output false, normalize_log_probs true; tensorrtllm_backend model_instance_state.cc).
    exclude_input_in_output: bool = False
    normalize_log_probs: bool = True
    drain_timeout_s: float = 30.0  # on unload, running requests get this long to finish before they are aborted
    # method suffix: the served engine's suffix decoding options (its cross-request cache lives in the model and learns
    # from every request it serves); rendered as suffix_max_cached_requests, suffix_min_token_prob, ...; None = unset
    suffix: SuffixConfig | None = None
    # Prompt logging (triton/prompt_log.py), off unless a directory is given: a sampled share of the prompts, in a
    # size-bounded rotating JSONL, the input of `trtspec train draft`.
    log_prompts: str | None = None  # directory of the log; None = no logging (the default)
    log_sample_rate: float = 0.1  # share of requests whose prompt is logged, in [0, 1]
    log_max_mb: float = 64.0  # the log's files together stay under this many MiB (rotated, oldest dropped)

    def __post_init__(self) -> None:
        tree_choices.check_dynamic_tree(self.eagle_topk, self.eagle_depth, self.eagle_choices,
                                        names=("parameter eagle_topk", "parameter eagle_depth",
                                               "parameter eagle_choices"))
        if (self.eagle_topk, self.eagle_depth, self.eagle_choices) != (None, None, None) and self.method != "eagle3":
            raise ConfigError("parameter method", self.method, "is not eagle3, but EAGLE tree parameters are set",
                              hint="set method eagle3, or drop eagle_choices / eagle_topk / eagle_depth")
        if not 0.0 <= self.log_sample_rate <= 1.0:
            raise ConfigError("parameter log_sample_rate", self.log_sample_rate, "must be in [0, 1]",
                              hint="e.g. 0.1 logs one prompt in ten (--log-sample-rate)")
        if not self.log_max_mb > 0 or self.log_max_mb == float("inf"):
            raise ConfigError("parameter log_max_mb", self.log_max_mb, "must be a positive number of MiB",
                              hint="e.g. 64 (--log-max-mb)")

    def to_parameters(self) -> dict[str, object]:
        """Triton `parameters` values (None = unset, not rendered); `render.pbtxt_parameters` writes them."""
        values: dict[str, object] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "suffix":
                values |= {SUFFIX_PREFIX + k: v for k, v in value.to_strings().items()} if value is not None else {}
                continue
            values[f.name] = ",".join(map(str, value)) if isinstance(value, tuple | list) else value
        return values

    @classmethod
    def from_parameters(cls, params: Mapping[str, str]) -> EngineParams:
        """Parse Triton's string parameters (unknown keys are refused: they are typos or a newer trtspec's)."""
        known = {f.name: f for f in fields(cls) if f.name != "suffix"}
        suffix = {k.removeprefix(SUFFIX_PREFIX): v for k, v in params.items() if k.startswith(SUFFIX_PREFIX)}
        unknown = sorted(set(params) - set(known) - {SUFFIX_PREFIX + k for k in suffix})
        if unknown:
            raise ConfigError(f"parameter {unknown[0]}", params[unknown[0]], "is not an engine parameter",
                              hint=f"redeploy with this trtspec; known: {', '.join(known)}, "
                                   f"{SUFFIX_PREFIX}<suffix decoding option>")
        if not params.get("target"):
            raise ConfigError("parameter target", params.get("target"), "is required",
                              hint="redeploy with `trtspec deploy --backend torch`")
        values = {name: _PARSE[known[name].type](name, text) for name, text in params.items() if name in known}
        if suffix:
            values["suffix"] = SuffixConfig.from_strings(suffix, field=f"parameter {SUFFIX_PREFIX}")
        return cls(**values)

    def build_engine(self) -> Any:
        """The SpecEngine these parameters describe (imports torch; loads the checkpoints). Every server that runs
        the reference engine (the Triton Python model, the Dynamo worker) builds it here."""
        from trtspec.spec.engine import SpecEngine
        from trtspec.spec.scheduler import SchedulerConfig

        options = {**({"lookahead": self.lookahead} if self.lookahead is not None else {}),
                   **({"suffix": self.suffix} if self.suffix is not None else {}),
                   **{name: value for name in ("eagle_choices", "eagle_topk", "eagle_depth")
                      if (value := getattr(self, name)) is not None}}
        return SpecEngine.from_pretrained(
            target=self.target, draft=self.draft, medusa=self.medusa, eagle=self.eagle, max_k=max(self.max_k, 1),
            device=self.device,
            dtype=self.dtype, proposer_options=options,
            scheduler=SchedulerConfig(max_queue_len=self.max_queue).validate())

    @classmethod
    def from_model_config(cls, config: Mapping[str, Any]) -> EngineParams:
        """From the model config Triton passes to `initialize` (`json.loads(args["model_config"])`)."""
        return cls.from_parameters({k: v["string_value"] for k, v in config.get("parameters", {}).items()})

    def for_version(self, version_dir: Path) -> EngineParams:
        """These parameters with the overrides of one model version (`version_dir/trtspec-version.json`, written by
        `trtspec rollout-draft`): Triton's parameters belong to the model, so what differs between its versions (a
        retrained draft's checkpoint, kept inside the version directory) lives there. Relative paths are resolved
        against `version_dir`; only the checkpoint fields (VERSION_FIELDS) may be overridden."""
        path = Path(version_dir) / VERSION_FILE
        if not path.is_file():
            return self
        try:
            overrides = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConfigError(str(path), "unreadable", f"is not UTF-8 JSON ({exc})",
                              hint="roll the version out again with `trtspec rollout-draft`") from None
        if not isinstance(overrides, dict) or set(overrides) - set(VERSION_FIELDS) or not all(
                isinstance(v, str) and v for v in overrides.values()):
            raise ConfigError(str(path), overrides, f"must map some of {', '.join(VERSION_FIELDS)} to checkpoint paths",
                              hint="roll the version out again with `trtspec rollout-draft`")
        return replace(self, **{k: str(Path(version_dir) / v) for k, v in overrides.items()})


def _typed(cast: Callable[[str], Any], expect: str) -> Callable[[str, str], Any]:
    def parse(name: str, text: str) -> Any:
        try:
            return cast(text)
        except ValueError:
            raise ConfigError(f"parameter {name}", text, f"is not {expect}", hint="redeploy the repository") from None

    return parse


def _bool(text: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise ValueError(text)
    return text.lower() == "true"


def _triple(text: str) -> tuple[int, int, int]:
    parts = tuple(int(p) for p in text.split(","))
    if len(parts) != 3:
        raise ValueError(text)
    return parts  # type: ignore[return-value]


_PARSE: dict[str, Callable[[str, str], Any]] = {  # field annotation -> parser of its Triton string
    "str": _typed(str, "a string"),
    "str | None": _typed(lambda t: t or None, "a string"),
    "int": _typed(int, "an integer"),
    "int | None": _typed(lambda t: int(t) if t else None, "an integer"),
    "float": _typed(float, "a number"),
    "bool": _typed(_bool, "true or false"),
    "tuple[int, int, int] | None": _typed(lambda t: _triple(t) if t else None, "three integers W,N,G"),
}
