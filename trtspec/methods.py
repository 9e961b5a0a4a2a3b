"""THE method table: one row per speculative-decoding method, resolved once.

Every other module asks this table instead of comparing method strings: the TensorRT-LLM build flag
(`trtllm-build --speculative_decoding_mode`), the Triton `tensorrt_llm` model's `decoding_mode` parameter, the
LLM-API `speculative_config.decoding_type`, and the reference engine's proposer key. CLI choices come from
`METHODS` too, so choices and dispatch cannot drift.

Sources for the TensorRT-LLM/Triton values: shared/reference/trtllm-specdec.md sections 2.1-2.4, 3.5 and 4.
"""

from __future__ import annotations

from dataclasses import dataclass

from trtspec.errors import ConfigError, UnknownMethodError

# The lookahead budget has one definition, next to the per-release facts that state it (re-exported here).
from trtspec.targets import lookahead_max_draft_len, validate_lookahead  # noqa: F401 (re-exported)


@dataclass(frozen=True)
class MethodInfo:
    """What one method means on each execution path."""

    name: str
    summary: str
    # `trtllm-build --speculative_decoding_mode` (engine flow); None = plain engine, no speculative mode.
    trtllm_build_mode: str | None
    # Triton tensorrt_llm model parameter `decoding_mode`; "" lets TensorRT-LLM pick (top_k_top_p / external drafts).
    triton_decoding_mode: str
    # LLM-API `speculative_config.decoding_type` (trtllm-serve / extra_llm_api_options); None = not in the LLM API.
    llmapi_decoding_type: str | None
    # Key into trtspec.spec.proposers.PROPOSERS; None = the reference engine has no proposer for it (yet).
    proposer: str | None
    needs_draft_model: bool = False
    needs_medusa_heads: bool = False
    needs_eagle_drafter: bool = False
    tree: bool = False
    # Lossless at temperature > 0 on the reference engine (exact rejection sampling).
    lossless_sampling: bool = True
    # Architectures TensorRT-LLM's engine flow supports for this method (HF `architectures[0]`); () = any.
    engine_architectures: tuple[str, ...] = ()
    # trtspec.targets FEATURES a TensorRT-LLM target must have to build and serve this method (engine flow + Triton).
    target_features: tuple[str, ...] = ()
    # Why no supported TensorRT-LLM target can run this method (engine flow, Triton or LLM API); None = it can.
    # `trtspec build` refuses backend tensorrtllm with this reason.
    trtllm_unsupported: str | None = None


METHODS: dict[str, MethodInfo] = {
    m.name: m
    for m in (
        MethodInfo(
            name="none",
            summary="plain autoregressive decoding (baseline)",
            trtllm_build_mode=None,
            triton_decoding_mode="",
            llmapi_decoding_type=None,
            proposer=None,
        ),
        MethodInfo(
            name="draft_target",
            summary="a smaller draft model proposes k tokens; the target verifies them in one pass",
            trtllm_build_mode="draft_tokens_external",
            triton_decoding_mode="",
            llmapi_decoding_type="DraftTarget",
            proposer="draft_model",
            needs_draft_model=True,
            target_features=("draft_tokens_external",),
        ),
        MethodInfo(
            name="ngram",
            summary="prompt lookup: the draft is copied from an earlier n-gram match in the context",
            trtllm_build_mode="draft_tokens_external",
            triton_decoding_mode="",
            llmapi_decoding_type="NGram",
            proposer="ngram",
            target_features=("draft_tokens_external",),
        ),
        MethodInfo(
            name="suffix",
            summary="suffix decoding: frequency-scored draft trees from suffix trees over the request and over earlier "
                    "requests' outputs (a cross-request cache that learns from the traffic), no draft model",
            trtllm_build_mode=None,
            triton_decoding_mode="",
            llmapi_decoding_type=None,
            proposer="suffix",
            tree=True,
            trtllm_unsupported=(
                "TensorRT-LLM has no suffix decoding in any supported target: trtllm-build has no speculative mode "
                "for it, its LLM API's decoding types (MTP, Medusa, Eagle, Lookahead, NGram, DraftTarget, "
                "UserProvided, AUTO) have none either (UserProvided takes a Python drafter object, which an "
                "extra_llm_api_options file cannot carry), and a draft_tokens_external engine takes chains from the "
                "caller, while the Triton tensorrtllm repository has no model that would keep the cross-request "
                "suffix cache and draft for it"),
        ),
        MethodInfo(
            name="medusa",
            summary="Medusa heads on the target's last hidden state propose a token tree",
            trtllm_build_mode="medusa",
            triton_decoding_mode="medusa",
            llmapi_decoding_type="Medusa",
            proposer="medusa",
            needs_medusa_heads=True,
            tree=True,
            engine_architectures=("LlamaForCausalLM", "MistralForCausalLM", "MixtralForCausalLM", "Qwen2ForCausalLM"),
            target_features=("medusa",),
        ),
        MethodInfo(
            name="eagle",
            summary="EAGLE-1/2 draft head on target features (TensorRT-LLM engine flow)",
            trtllm_build_mode="eagle",
            triton_decoding_mode="eagle",
            llmapi_decoding_type="Eagle",
            proposer=None,
            tree=True,
            engine_architectures=("LlamaForCausalLM",),
            target_features=("eagle_engine_flow",),
        ),
        MethodInfo(
            name="eagle3",
            # the reference engine's EAGLE-3 (trtspec train eagle); build configs write it as method eagle with
            # eagle.eagle3: true (one EAGLE section; LLM-API decoding_type per target in build/plan.py)
            summary="EAGLE-3 drafter on the target's low/mid/high layer features: feature-level drafting, "
                    "static or dynamic trees",
            trtllm_build_mode=None,
            triton_decoding_mode="eagle",
            llmapi_decoding_type="Eagle3",
            proposer="eagle",
            needs_eagle_drafter=True,
            tree=True,
            engine_architectures=("LlamaForCausalLM",),
            target_features=("eagle3_llmapi",),
        ),
        MethodInfo(
            name="lookahead",
            summary="Jacobi lookahead: an n-gram pool built from parallel guesses, no draft model",
            trtllm_build_mode="lookahead_decoding",
            triton_decoding_mode="lookahead",
            llmapi_decoding_type="Lookahead",
            proposer="lookahead",
            target_features=("lookahead_engine", "server_lookahead_params"),
        ),
        MethodInfo(
            name="redrafter",
            summary="ReDrafter recurrent drafter with beam search (explicit draft tokens)",
            trtllm_build_mode="explicit_draft_tokens",
            triton_decoding_mode="redrafter",
            llmapi_decoding_type=None,
            proposer=None,
            engine_architectures=("LlamaForCausalLM", "QWenForCausalLM", "Qwen2ForCausalLM"),
            target_features=("redrafter",),
        ),
    )
}


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
    return sorted(name for name, m in METHODS.items() if m.proposer is not None or name == "none")



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
