"""The typed parts of EngineConfig (contracts/engine.py): one per method's knobs, each with its own flat parameters.

`_Part` is the base: a frozen dataclass whose fields map to its own text parameters (`PARAMETERS`: field -> name),
with the round trips EngineConfig calls through `PARTS` (`to_parameters` / `from_parameters`, `to_dict` /
`from_dict`) and its check (a ConfigError naming the parameter, the value and the fix). The parts: EagleTree,
MedusaTree, Lookahead, Ngram, Hybrid, PromptLog, and SuffixPart (SuffixConfig, the suffix home's options, as a part
named by the prefix `suffix_`). Also here, because the parts use them: the tree limits (MAX_TOPK, MAX_DEPTH), `Paths`,
the parameter-text readers (`_text`, `_parse`) and `spelled`. contracts/engine.py re-exports every public name, so
`from trtspec.contracts.engine import EagleTree` keeps working. Pure Python: no torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

from trtspec import choices as tree_choices
from trtspec.errors import ConfigError, shown
from trtspec.methods.eagle import EAGLE, EagleSpec
from trtspec.methods.lookahead import LOOKAHEAD
from trtspec.methods.suffix import SUFFIX, SuffixConfig

MAX_TOPK = tree_choices.MAX_TOPK  # children per node of a dynamic (EAGLE-2) tree at most
MAX_DEPTH = tree_choices.MAX_DEPTH  # levels of an EAGLE tree at most
Paths = tuple[tuple[int, ...], ...]  # a static tree, as choices paths: ((0,), (0, 0), (1,))


@contextmanager
def spelled(spelling: Callable[[str], str | None]) -> Iterator[None]:
    """Errors raised inside name their field as the caller spells it: `spelling(field)` (None keeps the name), e.g. a
    parameter as its CLI flag (`eagle_topk` -> `--eagle-topk`) or its YAML path (`eagle.topk`)."""
    try:
        yield
    except ConfigError as exc:
        name = spelling(exc.field)
        if name is None or name == exc.field:
            raise
        # the hint names it too (`e.g. eagle_topk 4`); an entry's (`draft_len_schedule[4]`) names its field
        old, new = exc.field.removeprefix("parameter ").partition("[")[0], name.partition("[")[0]
        hint = exc.hint.replace(old, new) if exc.hint and old not in new else exc.hint
        raise ConfigError(name, exc.value, exc.problem, hint=hint) from None


# ---------------------------------------------------------------------------------------------------------------------
# Parts: one per method's knobs, each with its own flat parameter names


def _bool(text: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise ValueError(text)
    return text.lower() == "true"


def _paths(text: str) -> Paths:
    return tuple(tuple(p) for p in tree_choices.parse(text, field="choices"))


_PARSE: dict[str, tuple[Callable[[str], Any], str]] = {  # field annotation -> (parser of its text, what it must be)
    "str": (str, "a string"),
    "str | None": (lambda t: t or None, "a string"),
    "int": (int, "an integer"),
    "int | None": (lambda t: int(t) if t else None, "an integer"),
    "float": (float, "a number"),
    "float | None": (lambda t: float(t) if t else None, "a number"),
    "bool": (_bool, "true or false"),
    "Paths | None": (lambda t: _paths(t) if t else None, "a tree of paths, e.g. {0}, {0, 0}, {1}"),
}


def _text(value: object) -> str:
    """A value as its parameter text (what `_PARSE` reads back)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple) and all(isinstance(p, tuple) for p in value):  # a static tree
        return tree_choices.to_triton([list(p) for p in value])
    if isinstance(value, tuple):  # (W, N, G)
        return ",".join(map(str, value))
    return str(value)


def _parse(kind: str, parameter: str, text: str) -> Any:
    parse, expect = _PARSE[kind]
    try:
        return parse(text)
    except (ValueError, ConfigError):
        raise ConfigError(f"parameter {parameter}", text, f"is not {expect}", hint="redeploy the repository") from None


class _Part:
    """A typed part of EngineConfig: its fields <-> its own flat parameters (`PARAMETERS`: field -> name). EngineConfig
    calls each part's class (`PARTS`) with the value: `to_parameters(part)`, `from_parameters(values)`,
    `to_dict(part)`, `from_dict(data, where)`, `checked(part)`, `named_value(part)`; a class whose value is another
    type (SuffixPart: SuffixConfig) answers the same calls, and names its parameters by `PREFIX`."""

    PARAMETERS: ClassVar[dict[str, str]]
    PREFIX: ClassVar[str | None] = None  # None: the part owns exactly its PARAMETERS names

    @classmethod
    def checked(cls, part: Any) -> Any:
        """The part, checked (a _Part checks itself when made)."""
        return part

    def named_value(self) -> tuple[str, Any]:
        """One set parameter and its value: what an error about the whole part names."""
        return next(iter(self.values().items()))

    def check(self) -> None:
        """Raise ConfigError naming the parameter, the value and the fix."""

    def to_parameters(self) -> dict[str, str]:
        return {self.PARAMETERS[f.name]: _text(v) for f in fields(self)  # type: ignore[arg-type]
                if (v := getattr(self, f.name)) is not None}

    def values(self) -> dict[str, Any]:
        """The set fields by parameter name, typed (a report's row; `to_parameters` is the text form)."""
        return {self.PARAMETERS[f.name]: v for f in fields(self)  # type: ignore[arg-type]
                if (v := getattr(self, f.name)) is not None}

    @classmethod
    def from_parameters(cls, values: Mapping[str, str]) -> Any:
        """The part from those of `values` that are its parameters (unset ones keep their defaults)."""
        kinds = {f.name: str(f.type) for f in fields(cls)}  # type: ignore[arg-type]
        return cls(**{name: _parse(kinds[name], param, values[param])
                      for name, param in cls.PARAMETERS.items() if param in values})

    def to_dict(self) -> dict[str, Any]:
        return {f.name: [list(p) for p in v] if isinstance(v := getattr(self, f.name), tuple) else v
                for f in fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str) -> Any:
        known = [f.name for f in fields(cls)]  # type: ignore[arg-type]
        unknown = sorted(str(k) for k in data if k not in known)
        if unknown:
            raise ConfigError(f"{where}.{unknown[0]}", shown(data[unknown[0]]), "is not a field",
                              hint=f"known: {', '.join(known)} (rebuild with this trtspec)")
        values = dict(data)
        if values.get("choices") is not None:
            values["choices"] = tuple(tuple(p) for p in values["choices"])
        return cls(**values)

    def __post_init__(self) -> None:
        self.check()


@dataclass(frozen=True)
class EagleTree(_Part):
    """EAGLE's draft tree: a static tree (`choices`, EAGLE-1), or the dynamic EAGLE-2 shape: `topk` children of each
    frontier node, `depth` levels, the k best nodes drafted (None: the proposer's defaults). Static excludes dynamic,
    as in TensorRT-LLM's EagleDecodingConfig."""

    PARAMETERS: ClassVar[dict[str, str]] = {"choices": "eagle_choices", "topk": "eagle_topk", "depth": "eagle_depth"}
    CHAIN: ClassVar[str] = "chain"
    DYNAMIC: ClassVar[str] = "dynamic"

    choices: Paths | None = None
    topk: int | None = None
    depth: int | None = None

    def check(self) -> None:
        for name, value, limit, example in (("topk", self.topk, MAX_TOPK, 4), ("depth", self.depth, MAX_DEPTH, 6)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit):
                raise ConfigError(self.PARAMETERS[name], value, f"must be an integer in [1, {limit}] (the limit of the "
                                  "dynamic tree)", hint=f"e.g. {self.PARAMETERS[name]} {example}")
        if self.choices is not None:
            tree_choices.validate([list(p) for p in self.choices], max_depth=MAX_DEPTH, field="eagle_choices")
            if self.topk is not None or self.depth is not None:
                name = "topk" if self.topk is not None else "depth"
                raise ConfigError(self.PARAMETERS[name], getattr(self, name), "sets a dynamic tree but eagle_choices "
                                  "sets a static one", hint=f"drop {self.PARAMETERS[name]} (static tree) or "
                                                            "eagle_choices (dynamic tree)")

    @classmethod
    def from_section(cls, eagle: EagleSpec, choices: Sequence[Sequence[int]] | None = None) -> EagleTree:
        """The tree a build config's `eagle:` section sets: the resolved static `choices`, else the dynamic shape set
        there (errors name `eagle.<field>`)."""
        with spelled(lambda name: f"{EAGLE.section}." + name.removeprefix("eagle_")):
            return cls(choices=tuple(map(tuple, choices)) if choices else None, topk=eagle.topk, depth=eagle.depth)

    def dynamic_values(self) -> dict[str, int]:
        """The dynamic shape's parameters that are set, by name (what only the reference engine reads)."""
        return {name: value for name, value in self.values().items() if name != self.PARAMETERS["choices"]}

    @property
    def label(self) -> str:
        """How the sweep and the tuner name the tree: `dynamic:TOPKxDEPTH` (unset: the defaults) or `static:N nodes`."""
        if self.choices is not None:
            return f"static:{len(self.choices)} nodes"
        return f"dynamic:{self.topk or 'default'}x{self.depth or 'default'}"

    @classmethod
    def parse(cls, value: str, field: str = "eagle_tree") -> EagleTree:
        """`chain` (top-1: a chain of k), `dynamic` (EAGLE-2 defaults), `dynamic:TOPKxDEPTH`, or static choices (a
        preset, JSON, the `{0}, {0, 0}` form or a file)."""
        if value == cls.CHAIN:
            return cls(topk=1)
        if value == cls.DYNAMIC:
            return cls()
        if value.startswith(cls.DYNAMIC + ":"):
            try:
                topk, depth = (int(v) for v in value.split(":", 1)[1].split("x"))
            except ValueError:
                raise ConfigError(field, value, "must be dynamic:TOPKxDEPTH with two integers",
                                  hint="e.g. dynamic:4x6 (top-4 children per node, 6 levels)") from None
            with spelled(lambda _: field):
                return cls(topk=topk, depth=depth)
        paths = tree_choices.validate(tree_choices.parse(value, field=field), max_depth=MAX_DEPTH, field=field)
        return cls(choices=tuple(tuple(p) for p in paths))


@dataclass(frozen=True)
class MedusaTree(_Part):
    """Medusa's static tree (None: the heads' own tuned tree, else mc_sim_7b_63 cut to the number of heads)."""

    PARAMETERS: ClassVar[dict[str, str]] = {"choices": "medusa_choices"}

    choices: Paths | None = None

    def check(self) -> None:
        if self.choices is not None:
            tree_choices.validate([list(p) for p in self.choices], max_depth=MAX_DEPTH, field="medusa_choices")


@dataclass(frozen=True)
class Lookahead(_Part):
    """Lookahead decoding's (W, N, G): window, n-gram size, verification set (TensorRT-LLM's legality rules).
    One parameter, named as the part (`lookahead` = "W,N,G"; every field maps to it, set below the class)."""

    PARAMETER: ClassVar[str] = LOOKAHEAD.engine_part or ""
    PARAMETERS: ClassVar[dict[str, str]]

    window: int = 4
    ngram: int = 4
    verification_set: int = 4

    def check(self) -> None:
        from trtspec.targets import validate_lookahead

        if not all(isinstance(v, int) and not isinstance(v, bool) for v in self.as_tuple()):
            raise ConfigError(self.PARAMETER, self.as_tuple(), "must be three integers W,N,G", hint="e.g. 4,4,4")
        validate_lookahead(*self.as_tuple())

    def as_tuple(self) -> tuple[int, int, int]:
        return (self.window, self.ngram, self.verification_set)

    def to_parameters(self) -> dict[str, str]:
        return {self.PARAMETER: ",".join(map(str, self.as_tuple()))}

    @classmethod
    def from_parameters(cls, values: Mapping[str, str]) -> Lookahead:
        text = values[cls.PARAMETER]
        try:
            window, ngram, verification_set = (int(p) for p in text.split(","))
        except ValueError:
            raise ConfigError(f"parameter {cls.PARAMETER}", text, "is not three integers W,N,G",
                              hint="e.g. 4,4,4 (redeploy the repository)") from None
        return cls(window, ngram, verification_set)


Lookahead.PARAMETERS = dict.fromkeys((f.name for f in fields(Lookahead)), Lookahead.PARAMETER)

@dataclass(frozen=True)
class Ngram(_Part):
    """Prompt lookup: the longest and shortest n-gram matched against the request's context."""

    PARAMETERS: ClassVar[dict[str, str]] = {"max_size": "ngram_max_size", "min_size": "ngram_min_size"}

    max_size: int = 3
    min_size: int = 1

    def check(self) -> None:
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (self.min_size, self.max_size)) \
                or not 1 <= self.min_size <= self.max_size <= 1024:
            raise ConfigError("ngram_max_size", self.max_size, f"needs 1 <= ngram_min_size ({self.min_size}) <= "
                              "ngram_max_size <= 1024", hint="e.g. ngram_max_size 3, ngram_min_size 1")


# the model drafter's k in a hybrid unless hybrid_drafter_k says (EngineConfig.default_k's default; arctic-inference's
# hybrid pairs a long suffix draft with a short model draft the same way: suffix max_spec_tokens vs n_predict)
DEFAULT_DRAFTER_K = 4


@dataclass(frozen=True)
class Hybrid(_Part):
    """Hybrid drafting's choice, per request and per step (methods/hybrid.py): the suffix tree's draft is taken when
    its score (arctic-inference's: the sum of its tokens' estimated acceptance probabilities) is at least `min_score`
    (None: the step's model-drafter k, arctic-inference's own rule) and its context match is at least
    `min_match_len` tokens long (TensorRT-LLM's SA enhancer rule; None: any); else the model drafter drafts, at most
    `drafter_k` tokens (None: DEFAULT_DRAFTER_K). The request's k bounds both: the suffix tree drafts up to k."""

    PARAMETERS: ClassVar[dict[str, str]] = {"min_score": "hybrid_min_score", "min_match_len": "hybrid_min_match_len",
                                            "drafter_k": "hybrid_drafter_k"}

    min_score: float | None = None
    min_match_len: int | None = None
    drafter_k: int | None = None

    def check(self) -> None:
        score = self.min_score
        if score is not None and (isinstance(score, bool) or not isinstance(score, int | float)
                                  or not math.isfinite(score) or score < 0):
            raise ConfigError("hybrid_min_score", shown(score), "must be a finite number >= 0 (the suffix draft's "
                              "score: expected accepted tokens)", hint="e.g. hybrid_min_score=4, or unset (the "
                              "model drafter's k, arctic-inference's rule)")
        for name, low, example in (("min_match_len", 1, 4), ("drafter_k", 1, 4)):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
                raise ConfigError(self.PARAMETERS[name], shown(value), f"must be an integer >= {low}",
                                  hint=f"e.g. {self.PARAMETERS[name]}={example}, or unset")

    def drafter_k_for(self, k: int) -> int:
        """The model drafter's draft length for a request asking k."""
        return min(k, self.drafter_k or DEFAULT_DRAFTER_K)

    def threshold(self, drafter_k: int) -> float:
        """The score a suffix draft needs when the model drafter would draft `drafter_k` tokens."""
        return float(drafter_k) if self.min_score is None else float(self.min_score)


@dataclass(frozen=True)
class PromptLog(_Part):
    """Prompt logging (contracts/prompt_log.py): a sampled share of the prompts in a size-bounded rotating JSONL under
    `directory`, the input of `trtspec train draft`. The part is unset (None) when logging is off."""

    PARAMETERS: ClassVar[dict[str, str]] = {"directory": "log_prompts", "sample_rate": "log_sample_rate",
                                            "max_mb": "log_max_mb"}

    directory: str
    sample_rate: float = 0.1
    max_mb: float = 64.0

    def check(self) -> None:
        if not isinstance(self.directory, str) or not self.directory:
            raise ConfigError("log_prompts", self.directory, "must be a directory", hint="e.g. --log-prompts logs/")
        if isinstance(self.sample_rate, bool) or not 0.0 <= self.sample_rate <= 1.0:
            raise ConfigError("log_sample_rate", self.sample_rate, "must be in [0, 1]",
                              hint="e.g. 0.1 logs one prompt in ten (--log-sample-rate)")
        if isinstance(self.max_mb, bool) or not self.max_mb > 0 or not math.isfinite(self.max_mb):
            raise ConfigError("log_max_mb", self.max_mb, "must be a positive number of MiB",
                              hint="e.g. 64 (--log-max-mb)")


class SuffixPart:
    """SuffixConfig (the suffix home's options, methods/suffix.py) as a part: its options as `suffix_<name>`
    parameters, owned by the prefix (an unknown name after it is SuffixConfig's to refuse); _Part's calls."""

    PREFIX: ClassVar[str] = "suffix_"
    OPTION: ClassVar[str] = "suffix decoding option"  # what follows the prefix (an unknown parameter's hint)
    PARAMETERS: ClassVar[dict[str, str]] = {}  # no fixed names

    @staticmethod
    def to_parameters(config: SuffixConfig) -> dict[str, str]:
        return {SuffixPart.PREFIX + k: v for k, v in config.to_strings().items()}

    @staticmethod
    def from_parameters(values: Mapping[str, str]) -> SuffixConfig:
        return SuffixConfig.from_strings({k.removeprefix(SuffixPart.PREFIX): v for k, v in values.items()
                                          if k.startswith(SuffixPart.PREFIX)}, field=f"parameter {SuffixPart.PREFIX}")

    @staticmethod
    def prefixed() -> list[str]:
        """Every parameter name the prefix owns: `suffix_<option>` for each option."""
        return [SuffixPart.PREFIX + f.name for f in fields(SuffixConfig)]

    @staticmethod
    def to_dict(config: SuffixConfig) -> dict[str, Any]:
        return {f.name: getattr(config, f.name) for f in fields(SuffixConfig)}

    @staticmethod
    def from_dict(data: Mapping[str, Any], where: str) -> SuffixConfig:
        return SuffixConfig.from_options(data)

    @staticmethod
    def checked(config: SuffixConfig) -> SuffixConfig:
        return config.validate(SuffixPart.PREFIX)

    @staticmethod
    def named_value(config: SuffixConfig) -> tuple[str, Any]:
        """The part's name and its options as far as they differ from the defaults."""
        default = SuffixConfig()
        return SUFFIX.engine_part or "", {k: v for k, v in asdict(config).items() if v != getattr(default, k)} or "set"
