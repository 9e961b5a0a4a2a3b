"""Method `suffix`: suffix decoding with a cross-request cache (docs/suffix.md).

The reference engine runs arctic-inference's suffix trees. TensorRT-LLM's nearest form is SA (`SADecodingConfig`,
standalone suffix-automaton speculation, PyTorch backend only), which 1.3.0rc29 has and 1.2.1 lacks
(targets/pytorch-workflow.json): `sa_form` translates the options that mean the same there and refuses, by name,
those SA has no counterpart for unless their value makes the behaviour the same (then they are dropped with a note).
docs/suffix.md, "TensorRT-LLM's SA", has the table and the sources.

Its options, `SuffixConfig` (vLLM's `suffix_decoding_*` names and defaults without the prefix), are defined here once,
torch-free, for every place they go: the build config's `suffix:` section (`config.BuildSpec.suffix`, recorded in the
torch bundle); `trtspec deploy --suffix NAME=VALUE` and the served model's `suffix_<name>` parameters
(`contracts.engine.SuffixPart`: `to_strings` / `from_strings`); the proposer
(`spec.proposers.suffix.SuffixProposer`, through the engine's `ProposerOptions.suffix`). Every bad value is a
ConfigError naming the field (`suffix.<name>`, or the parameter / flag it came from), the value and the fix.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from trtspec.errors import ConfigError, shown
from trtspec.methods.base import FlagRow, MethodInfo

MAX_TREE_DEPTH = 1024  # longest suffix matched; memory and per-step work grow with it
MAX_CACHED_REQUESTS = 2**31 - 1  # arctic-inference's limit (int32 sequence ids)


@dataclass(frozen=True)
class SuffixConfig:
    """Suffix decoding knobs (vLLM's `suffix_decoding_*` names without the prefix; defaults are vLLM's)."""

    max_tree_depth: int = 24  # longest context suffix matched, and the depth of every tree
    max_cached_requests: int = 10_000  # outputs kept in the global tree (FIFO eviction); 0 = no cross-request cache
    max_spec_factor: float = 1.0  # a match of m tokens drafts at most max_spec_factor * m + max_spec_offset tokens
    max_spec_offset: float = 0.0
    min_token_prob: float = 0.1  # nodes whose estimated probability (frequency share) is lower are not drafted
    tree: bool = True  # a frequency-ordered token tree; False = the single most frequent path (a chain)

    def validate(self, field: str = "suffix.") -> SuffixConfig:
        """Raise ConfigError naming the field (`field` + name: `suffix.<name>` by default), the value and the fix."""
        if isinstance(self.max_tree_depth, bool) or not isinstance(self.max_tree_depth, int) \
                or not 1 <= self.max_tree_depth <= MAX_TREE_DEPTH:
            raise ConfigError(f"{field}max_tree_depth", shown(self.max_tree_depth),
                              f"must be an integer in [1, {MAX_TREE_DEPTH}]",
                              hint="e.g. 24 (vLLM's default); a longer match never drafts more than k tokens anyway")
        if isinstance(self.max_cached_requests, bool) or not isinstance(self.max_cached_requests, int) \
                or not 0 <= self.max_cached_requests <= MAX_CACHED_REQUESTS:
            raise ConfigError(f"{field}max_cached_requests", shown(self.max_cached_requests),
                              f"must be an integer in [0, {MAX_CACHED_REQUESTS}] (the cache is always bounded)",
                              hint="e.g. 10000; 0 turns the cross-request cache off")
        for name, low in (("max_spec_factor", 0.0), ("max_spec_offset", None)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
                    or (low is not None and value <= low):
                problem = "must be a finite number" + (" > 0" if low is not None else "")
                raise ConfigError(f"{field}{name}", shown(value), problem,
                                  hint="e.g. max_spec_factor 1.0 (a match of m tokens drafts up to m), offset 0")
        if isinstance(self.min_token_prob, bool) or not isinstance(self.min_token_prob, int | float) \
                or not 0.0 <= self.min_token_prob <= 1.0:
            raise ConfigError(f"{field}min_token_prob", shown(self.min_token_prob), "must be a probability in [0, 1]",
                              hint="e.g. 0.1; higher drafts only the more certain continuations")
        if not isinstance(self.tree, bool):
            raise ConfigError(f"{field}tree", shown(self.tree), "must be true or false", hint="true drafts token trees")
        return self

    @classmethod
    def from_options(cls, value: object) -> SuffixConfig:
        """A SuffixConfig, a mapping of its fields (unknown keys refused), or None (the defaults); validated."""
        if value is None:
            return cls().validate()
        if isinstance(value, SuffixConfig):
            return value.validate()
        if not isinstance(value, Mapping):
            raise ConfigError("suffix", shown(value), "must be a mapping of suffix decoding options",
                              hint="e.g. {max_cached_requests: 10000, max_spec_factor: 1.0}")
        _known(value, "suffix.")
        return replace(cls(), **dict(value)).validate()

    @classmethod
    def from_strings(cls, values: Mapping[str, str], *, field: str = "suffix.") -> SuffixConfig:
        """From text values (Triton string parameters, `--suffix NAME=VALUE`), each parsed by its field's type;
        `field` + name is what an unparsable value's error names. Unset names keep their defaults; validated."""
        _known(values, field)
        parsed: dict[str, object] = {}
        types = {f.name: f.type for f in fields(cls)}
        for name, text in values.items():
            kind = types[name]
            try:
                parsed[name] = _PARSE[kind](text.strip())
            except ValueError:
                raise ConfigError(f"{field}{name}", shown(text), f"is not {_EXPECT[kind]}",
                                  hint=f"e.g. {field}{name}={cls().to_strings()[name]}") from None
        return replace(cls(), **parsed).validate(field)

    def to_strings(self) -> dict[str, str]:
        """Every field as text that `from_strings` reads back to an equal SuffixConfig."""
        return {name: str(value).lower() if isinstance(value, bool) else repr(value)
                for name, value in asdict(self).items()}


def _known(values: Mapping[object, object], field: str) -> None:
    known = [f.name for f in fields(SuffixConfig)]
    unknown = sorted(str(k) for k in values if k not in known)
    if unknown:
        key = next(k for k in values if str(k) == unknown[0])
        raise ConfigError(f"{field}{unknown[0]}", shown(values[key]), "is not a suffix decoding option",
                          hint=f"use {', '.join(known)}")


def _bool(text: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise ValueError(text)
    return text.lower() == "true"


_PARSE = {"int": int, "float": float, "bool": _bool}  # SuffixConfig field annotation -> parser of its text
_EXPECT = {"int": "an integer", "float": "a number", "bool": "true or false"}


SUFFIX = MethodInfo(
    name="suffix",
    summary="suffix decoding: frequency-scored draft trees from suffix trees over the request and over earlier "
            "requests' outputs (a cross-request cache that learns from the traffic), no draft model",
    trtllm_build_mode=None,
    triton_decoding_mode="",
    llmapi_decoding_type="SA",  # TensorRT-LLM's suffix automaton (1.3 line): the facts decide which release has it
    proposer="suffix",
    proposer_class="trtspec.spec.proposers.suffix:SuffixProposer",
    engine_part="suffix",
    engine_part_class="trtspec.contracts.engine_parts:SuffixPart",
    tree=True,
    cross_request_cache=True,
    section="suffix",
    options=SuffixConfig,
    flags=(FlagRow("--suffix", "suffix_", "name_value", "Method suffix: one suffix decoding option NAME=VALUE "
                   "(repeatable): max_tree_depth, max_cached_requests (the cross-request cache's bound), "
                   "max_spec_factor, max_spec_offset, min_token_prob, tree (true/false).",
                   deploy="torch flavour; over the build's."),),
    sweep_variant="suffix_cache",
    llmapi_nearest=("ngram", "ngram (also draft-model-free: drafts copied from the context)"),
    llmapi_hint="SA exists from 1.3: render for Dynamo with `trtspec k8s CONFIG` (Dynamo 1.6.1 runs TensorRT-LLM "
                "1.3.0rc29, whose SA this build maps to), or use backend: torch (the reference engine runs suffix "
                "decoding itself)",
    engine_flow_unsupported=(
        "trtllm-build has no speculative mode for suffix decoding, and a draft_tokens_external engine takes chains "
        "from the caller while the Triton tensorrtllm repository has no model that would keep the cross-request "
        "suffix cache and draft for it; the LLM API's SA decoding type (TensorRT-LLM 1.3) is the nearest form"),
)

DECLARES = (SUFFIX,)

@dataclass(frozen=True)
class SaForm:
    """The SA keys of a suffix build (besides decoding_type and max_draft_len) and what the plan says about them."""

    fields: dict[str, Any]
    notes: tuple[str, ...]


def sa_form(options: SuffixConfig | None, *, max_draft_len: int, max_batch_size: int, version: str,
            fields: Collection[str], limits: Mapping[str, Any] | None = None) -> SaForm:
    """`options` (None: the defaults) as TensorRT-LLM `version`'s SA keys (`fields`: the keys its SADecodingConfig
    reads; `limits`: its global pool's limits from the release's facts, pytorch-workflow.json SADecodingConfig
    `limits.global_pool`: match_max tokens matched, slots_max requests held; None: none known). Mapped:
    max_tree_depth -> max_matching_ngram_size (the longest context suffix matched), max_cached_requests
    -> enable_global_pool and global_pool_size (N finished requests kept + max_batch_size running ones; 0: no pool).
    SA has no counterpart for tree, min_token_prob, max_spec_factor / max_spec_offset: each is dropped with a note
    where its value makes the behaviour SA's (a chain; nothing pruned; a cap that never binds), else a ConfigError
    (exit 2) naming `suffix.<option>`, the release and the value that maps."""
    config = (options or SuffixConfig()).validate()
    default = SuffixConfig()
    sa = f"TensorRT-LLM {version}'s SA"
    torch = "or serve suffix decoding with backend: torch (the reference engine runs arctic-inference's trees)"

    def refuse(name: str, problem: str, fix: str) -> ConfigError:
        value = getattr(config, name)
        text = str(value).lower() if isinstance(value, bool) else value
        shown = f"{text} (the default)" if value == getattr(default, name) else text
        return ConfigError(f"suffix.{name}", shown, f"{sa} has no counterpart: {problem}", hint=f"{fix}, {torch}")

    # options SA has no counterpart for: the same behaviour, or refused
    if config.tree:
        raise refuse("tree", "arctic-inference drafts frequency-ordered token trees, SA one chain of max_draft_len "
                     "tokens", "set suffix.tree: false (one path, a chain as SA drafts)")
    if config.min_token_prob > 0:
        raise refuse("min_token_prob", "arctic-inference leaves out draft tokens whose frequency share is below it, "
                     "SA scores no frequencies and prunes nothing", "set suffix.min_token_prob: 0 (nothing pruned)")
    if config.max_spec_factor + config.max_spec_offset < max_draft_len:
        raise refuse("max_spec_offset", f"with max_spec_factor {config.max_spec_factor} a match of m tokens drafts "
                     f"at most {config.max_spec_factor} x m + {config.max_spec_offset} tokens, while SA drafts "
                     f"max_draft_len ({max_draft_len}) tokens after any match",
                     f"set suffix.max_spec_offset: {max_draft_len} (the cap never binds, as in SA)")
    dropped = ["suffix.tree false (SA drafts one chain)", "suffix.min_token_prob 0 (SA prunes nothing)",
               f"suffix.max_spec_factor {config.max_spec_factor} + max_spec_offset {config.max_spec_offset} >= "
               f"max_draft_len {max_draft_len} (the cap never binds; SA drafts max_draft_len after any match)"]
    # options that mean the same
    out: dict[str, Any] = {}
    mapped = []
    pool = config.max_cached_requests > 0
    for key in ("max_matching_ngram_size", "enable_global_pool") + (("global_pool_size",) if pool else ()):
        if key not in fields:
            name = "max_tree_depth" if key == "max_matching_ngram_size" else "max_cached_requests"
            raise refuse(name, f"its SADecodingConfig has no {key}", "use a release whose SA has it")
    pool_limits = (limits or {}).get("global_pool", {})
    match_max, slots_max = pool_limits.get("match_max"), pool_limits.get("slots_max")
    if pool and match_max is not None and config.max_tree_depth > match_max:
        raise refuse("max_tree_depth", f"with the global pool (max_cached_requests > 0) SA matches at most "
                     f"{match_max} tokens (max_matching_ngram_size -1 or 1..{match_max})",
                     f"set suffix.max_tree_depth <= {match_max}, or max_cached_requests: 0")
    out["max_matching_ngram_size"] = config.max_tree_depth
    mapped.append(f"max_tree_depth {config.max_tree_depth} -> max_matching_ngram_size {config.max_tree_depth} (the "
                  "longest context suffix matched)")
    out["enable_global_pool"] = pool
    if pool:
        slots = config.max_cached_requests + max_batch_size
        if slots_max is not None and slots > slots_max:
            raise refuse("max_cached_requests", f"SA's global pool holds at most {slots_max} requests, running "
                         f"ones included ({config.max_cached_requests} + max_batch_size {max_batch_size} = {slots})",
                         f"set suffix.max_cached_requests <= {slots_max - max_batch_size}")
        out["global_pool_size"] = slots
        mapped.append(f"max_cached_requests {config.max_cached_requests} -> enable_global_pool true, global_pool_size "
                      f"{slots} ({config.max_cached_requests} finished + max_batch_size {max_batch_size} running)")
    else:
        mapped.append("max_cached_requests 0 -> enable_global_pool false (no cross-request drafting)")
    return SaForm(out, (f"suffix -> {sa}: " + "; ".join(mapped),
                        "dropped (SA behaves the same): " + "; ".join(dropped)))
