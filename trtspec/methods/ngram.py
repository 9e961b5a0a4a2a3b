"""Method `ngram`: prompt lookup, drafts copied from an earlier n-gram match (TensorRT-LLM: draft_tokens_external,
LLM-API NGram)."""

from __future__ import annotations

from trtspec.methods.base import MethodInfo

NGRAM = MethodInfo(
    name="ngram",
    summary="prompt lookup: the draft is copied from an earlier n-gram match in the context",
    trtllm_build_mode="draft_tokens_external",
    triton_decoding_mode="",
    llmapi_decoding_type="NGram",
    proposer="ngram",
    proposer_class="trtspec.spec.proposers.ngram:NgramProposer",
    engine_part="ngram",
    section="ngram",
    target_features=("draft_tokens_external",),
    build_max_draft_len=True,
    needs_paged_context_fmha=True,
)

DECLARES = (NGRAM,)
