"""Method `ngram`: prompt lookup, drafts copied from an earlier n-gram match (TensorRT-LLM: draft_tokens_external,
LLM-API NGram)."""

from __future__ import annotations

from pydantic import Field

from trtspec.methods.base import MethodInfo
from trtspec.methods.options import COUNT_MAX, Options


class NgramSpec(Options):
    """Prompt lookup (n-gram) drafts produced on the host."""

    max_matching_ngram_size: int = Field(2, ge=1, le=COUNT_MAX, description="longest n-gram matched against the context")


NGRAM = MethodInfo(
    name="ngram",
    summary="prompt lookup: the draft is copied from an earlier n-gram match in the context",
    trtllm_build_mode="draft_tokens_external",
    triton_decoding_mode="",
    llmapi_decoding_type="NGram",
    proposer="ngram",
    proposer_class="trtspec.spec.proposers.ngram:NgramProposer",
    engine_part="ngram",
    engine_part_class="trtspec.contracts.engine_parts:Ngram",
    section="ngram",
    options=NgramSpec,
    target_features=("draft_tokens_external",),
    build_max_draft_len=True,
    needs_paged_context_fmha=True,
    sweep_variant="max_ngram",
)

DECLARES = (NGRAM,)
