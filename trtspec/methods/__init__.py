"""THE method table, derived from the method homes: one module per speculative-decoding method in this package.

Each home (none, draft_target, ngram, suffix, medusa, eagle (eagle and eagle3), lookahead, redrafter, mtp) declares its
`MethodInfo` (base.py): the TensorRT-LLM build flag (`trtllm-build --speculative_decoding_mode`), the Triton
`tensorrt_llm` model's `decoding_mode` parameter, the LLM-API `speculative_config.decoding_type`, what it needs, its
engine configuration part and its proposer as a dotted path. Every other module asks the method object instead of
comparing method strings; CLI choices come from `METHODS` too, so choices and dispatch cannot drift. A new method is
one module here plus its entry in HOMES (and its proposer in spec/proposers/).

Torch-free and click-free (import-linter's torch-free contract, tests/test_imports.py, tests/test_methods_choices.py).
Sources for the TensorRT-LLM/Triton values: shared/reference/trtllm-specdec.md sections 2.1-2.4, 3.5 and 4.
"""

from __future__ import annotations

from trtspec.errors import ConfigError, UnknownMethodError
from trtspec.methods import draft_target, eagle, lookahead, medusa, mtp, ngram, none, redrafter, suffix
from trtspec.methods.base import MethodInfo

# The lookahead budget has one definition, next to the per-release facts that state it (re-exported here).
from trtspec.targets import lookahead_max_draft_len, validate_lookahead  # noqa: F401 (re-exported)

# The registered homes, in table order; each declares its methods in DECLARES.
HOMES = (none, draft_target, ngram, suffix, medusa, eagle, lookahead, redrafter, mtp)

METHODS: dict[str, MethodInfo] = {m.name: m for home in HOMES for m in home.DECLARES}

BASELINE = next(name for name, m in METHODS.items() if m.baseline)  # plain decoding's name ("none")
DEFAULT_METHOD = draft_target.DRAFT_TARGET.name  # what an engine configuration or request runs unless it says
# The build config's method sections (`medusa:`, `eagle:`, ...), and the key of each that names a checkpoint.
METHOD_SECTIONS: tuple[str, ...] = tuple(dict.fromkeys(m.section for m in METHODS.values() if m.section))
SECTION_MODELS: dict[str, str] = {m.section: m.section_model for m in METHODS.values() if m.section and m.section_model}


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


__all__ = ["BASELINE", "DEFAULT_METHOD", "HOMES", "METHODS", "METHOD_SECTIONS", "SECTION_MODELS", "MethodInfo", "engine_methods",
           "lookahead_max_draft_len", "lookahead_trie_nodes", "parse_lookahead", "resolve", "validate_lookahead"]
