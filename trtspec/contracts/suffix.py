"""Suffix decoding's options (`SuffixConfig`): one definition, torch-free, for every place they go.

- the build config's `suffix:` section (`config.BuildSpec.suffix`), recorded in the torch bundle;
- `trtspec deploy --suffix NAME=VALUE` and the served model's parameters (`contracts.engine.EngineConfig`, as
  `suffix_<name>` Triton string parameters: `to_parameters` / `from_strings`);
- the proposer (`spec.proposers.suffix.SuffixProposer`), through the engine's `ProposerOptions.suffix`.

Names and defaults are vLLM's `suffix_decoding_*` options without the prefix. Every bad value is a ConfigError naming
the field (`suffix.<name>`, or the parameter / flag it came from), the value and the fix. Pure Python.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace

from trtspec.errors import ConfigError, shown

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
