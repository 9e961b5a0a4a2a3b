"""THE method table, derived from the method homes: one module per speculative-decoding method in this package.

Each home (none, draft_target, ngram, suffix, medusa, eagle (eagle and eagle3), lookahead, redrafter, mtp) declares its
`MethodInfo` (base.py): the TensorRT-LLM build flag (`trtllm-build --speculative_decoding_mode`), the Triton
`tensorrt_llm` model's `decoding_mode` parameter, the LLM-API `speculative_config.decoding_type`, what it needs, its
engine configuration part and its proposer as a dotted path. Every other module asks the method object instead of
comparing method strings; CLI choices come from `METHODS` too, so choices and dispatch cannot drift. A new method is
one home module plus one registration line, `register(home)` (its proposer named by a dotted path, anywhere).

Registration is live: `register` / `unregister` keep every table derived from the homes consistent. `METHODS` is one
dict updated in place, and the other tables (here SECTION_MODELS and METHOD_SECTIONS; contracts.engine's METHOD_PARTS,
triton.repo's METHOD_FEATURES, spec.proposers' PROPOSERS) are `derived` views, recomputed on the first read after a
registration, so a module that imported one at its own import time still reads the current table.

Torch-free and click-free (import-linter's torch-free contract, tests/test_imports.py, tests/test_methods_choices.py).
Sources for the TensorRT-LLM/Triton values: shared/reference/trtllm-specdec.md sections 2.1-2.4, 3.5 and 4.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from types import ModuleType, SimpleNamespace
from typing import Any, Generic, TypeVar, overload

from trtspec.errors import ConfigError, UnknownMethodError
from trtspec.methods import draft_target, eagle, hybrid, lookahead, medusa, mtp, ngram, none, redrafter, suffix
from trtspec.methods.base import FLAG_KINDS, FlagRow, MethodInfo

# The lookahead budget has one definition, next to the per-release facts that state it (re-exported here).
from trtspec.targets import lookahead_max_draft_len, validate_lookahead  # noqa: F401 (re-exported)

K = TypeVar("K")
V = TypeVar("V")
T = TypeVar("T")

# The registered homes, in table order (each declares its methods in DECLARES), and THE method table derived from them:
# both updated in place by register / unregister, never rebound.
HOMES: list[Any] = []
METHODS: dict[str, MethodInfo] = {}
_generation = 0  # bumped by every (un)registration; a derived view recomputes when it has moved


class _Derived:
    """The recompute-on-change part of a derived view: `derive()` again after any (un)registration."""

    def __init__(self, derive: Callable[[], Any]) -> None:
        self._derive = derive
        self._generation = -1
        self._value: Any = None

    def _current(self) -> Any:
        if self._generation != _generation:
            self._value, self._generation = self._derive(), _generation
        return self._value

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._current()!r})"


class DerivedTable(_Derived, Mapping[K, V], Generic[K, V]):
    """A read-only dict derived from the registered homes, current at every read (see `derived`)."""

    def __getitem__(self, key: K) -> V:
        return self._current()[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._current())

    def __len__(self) -> int:
        return len(self._current())


class DerivedSequence(_Derived, Sequence[T], Generic[T]):
    """A read-only tuple derived from the registered homes, current at every read (see `derived_sequence`)."""

    @overload
    def __getitem__(self, index: int) -> T: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[T, ...]: ...
    def __getitem__(self, index: int | slice) -> T | tuple[T, ...]:
        return self._current()[index]

    def __len__(self) -> int:
        return len(self._current())

    def __eq__(self, other: object) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, (tuple, DerivedSequence)) else other)

    __hash__ = None  # type: ignore[assignment]


def derived(derive: Callable[[], dict[K, V]]) -> DerivedTable[K, V]:
    """A table computed from `METHODS` by `derive`, recomputed on its first read after each (un)registration: what
    a module keeps instead of a copy made at its import (contracts.engine's METHOD_PARTS, spec.proposers' PROPOSERS)."""
    return DerivedTable(derive)


def derived_sequence(derive: Callable[[], tuple[T, ...]]) -> DerivedSequence[T]:
    """`derived`, for a tuple."""
    return DerivedSequence(derive)


def _declared(home: Any) -> tuple[MethodInfo, ...]:
    infos = getattr(home, "DECLARES", None)
    if not isinstance(infos, tuple) or not infos or not all(isinstance(m, MethodInfo) for m in infos):
        raise TypeError(f"{home!r} is not a method home: it declares no DECLARES tuple of MethodInfo")
    return infos


def _check(infos: tuple[MethodInfo, ...]) -> None:
    """A home's methods are new and well-formed (the methods they name may be registered after them)."""
    names = [m.name for m in infos]
    taken = [n for n in names if n in METHODS] + [n for i, n in enumerate(names) if n in names[:i]]
    if taken:
        raise ValueError(f"method {taken[0]!r} is already registered")
    for m in infos:
        if (m.proposer is None) != (m.proposer_class is None):
            raise ValueError(f"method {m.name!r}: proposer and proposer_class go together")
        if m.proposer_class is not None and ":" not in m.proposer_class:
            raise ValueError(f"method {m.name!r}: proposer_class must be 'module:Class', not {m.proposer_class!r}")
        if m.baseline and any(o.baseline for o in METHODS.values()):
            raise ValueError(f"method {m.name!r}: the table already has its baseline")
        for row in m.flags:
            if row.kind not in FLAG_KINDS:
                raise ValueError(f"method {m.name!r}: flag {row.flag} has kind {row.kind!r}, not one of "
                                 f"{', '.join(FLAG_KINDS)}")
            owners = [o.name for o in (*METHODS.values(), *infos) if any(r.flag == row.flag and r != row
                                                                         for r in o.flags)]  # the same row: shared
            if owners:
                raise ValueError(f"method {m.name!r}: flag {row.flag} is method {owners[0]!r}'s, as another row")


def _rebuild() -> None:
    global _generation
    METHODS.clear()
    METHODS.update((m.name, m) for home in HOMES for m in home.DECLARES)
    _generation += 1


def register(home: ModuleType | MethodInfo | Any) -> tuple[str, ...]:
    """Add a method home (a module declaring `DECLARES`, or one `MethodInfo`) to the table, after those registered;
    every derived table (METHODS, METHOD_SECTIONS, SECTION_MODELS, contracts.engine.METHOD_PARTS,
    triton.repo.METHOD_FEATURES, spec.proposers.PROPOSERS, the CLI's method choices) sees it from now on.
    Returns the names it declares. A name already registered is a ValueError."""
    if isinstance(home, MethodInfo):
        home = SimpleNamespace(__name__=f"<method {home.name}>", DECLARES=(home,))
    if any(h is home for h in HOMES):
        raise ValueError(f"home {getattr(home, '__name__', home)!r} is already registered")
    infos = _declared(home)
    _check(infos)
    HOMES.append(home)
    _rebuild()
    return tuple(m.name for m in infos)


def unregister(home: ModuleType | MethodInfo | str | Any) -> None:
    """Remove a registered home (the module or MethodInfo given to `register`, or one of its method names) and its
    methods from every table. Unknown: UnknownMethodError."""
    for i, h in enumerate(HOMES):
        names = {m.name for m in h.DECLARES}
        if h is home or (isinstance(home, MethodInfo) and h.DECLARES == (home,)) or home in names:
            del HOMES[i]
            _rebuild()
            return
    raise UnknownMethodError(f"{getattr(home, '__name__', home)!r} is not a registered method home",
                             hint=f"registered: {', '.join(sorted(METHODS))}")


# The built-in homes: one registration line each, in table order.
register(none)
register(draft_target)
register(ngram)
register(suffix)
register(medusa)
register(eagle)
register(lookahead)
register(redrafter)
register(mtp)
register(hybrid)

BASELINE = next(name for name, m in METHODS.items() if m.baseline)  # plain decoding's name ("none")
DEFAULT_METHOD = draft_target.DRAFT_TARGET.name  # what an engine configuration or request runs unless it says
# The build config's method sections (`medusa:`, `eagle:`, ...), and the key of each that names a checkpoint.
METHOD_SECTIONS: DerivedSequence[str] = derived_sequence(
    lambda: tuple(dict.fromkeys(m.section for m in METHODS.values() if m.section)))
SECTION_MODELS: DerivedTable[str, str] = derived(
    lambda: {m.section: m.section_model for m in METHODS.values() if m.section and m.section_model})


def resolve(name: str) -> MethodInfo:
    """The row for `name`, or an UnknownMethodError that lists the valid names."""
    try:
        return METHODS[name]
    except KeyError:
        raise UnknownMethodError(
            f"method={name!r} is not a speculative-decoding method trtspec knows",
            hint=f"use one of: {', '.join(sorted(METHODS))}",
        ) from None


def engine_methods() -> list[str]:
    """Methods the reference (torch) engine runs: the baseline plus every method with a proposer."""
    return sorted(name for name, m in METHODS.items() if m.proposer is not None or m.baseline)


def lookahead_trie_nodes(window: int, ngram: int, verification_set: int) -> int:
    """The reference engine's k for lookahead (W, N, G) that verifies every candidate: G x (N - 1) trie nodes.

    Each step drafts up to G pooled n-grams of N - 1 tokens merged into one token trie, and k caps the trie's node
    count, so a larger k drafts nothing more; e.g. (4, 4, 4) -> 12, (7, 5, 7) -> 28.
    """
    validate_lookahead(window, ngram, verification_set)
    return verification_set * (ngram - 1)


def parse_lookahead(value: str, field: str = "lookahead") -> tuple[int, int, int]:
    """"W,N,G" -> (W, N, G), validated with TensorRT-LLM's legality rules."""
    try:
        window, ngram, verification_set = (int(v) for v in value.split(","))
    except ValueError:
        flag = f"{field} " if field.startswith("--") else ""
        raise ConfigError(field, value, "must be three integers W,N,G", hint=f"e.g. {flag}4,4,4") from None
    validate_lookahead(window, ngram, verification_set, field=field)
    return window, ngram, verification_set


__all__ = ["BASELINE", "DEFAULT_METHOD", "HOMES", "METHODS", "METHOD_SECTIONS", "SECTION_MODELS", "DerivedSequence",
           "DerivedTable", "FlagRow", "MethodInfo",
           "derived", "derived_sequence", "engine_methods", "lookahead_max_draft_len",
           "lookahead_trie_nodes", "parse_lookahead", "register", "resolve", "unregister", "validate_lookahead"]
