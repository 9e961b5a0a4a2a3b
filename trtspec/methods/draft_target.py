"""Method `draft_target`: a smaller draft model proposes, the target verifies (TensorRT-LLM: draft_tokens_external,
LLM-API DraftTarget)."""

from __future__ import annotations

from trtspec.methods.base import FlagRow, MethodInfo

DRAFT_TARGET = MethodInfo(
    name="draft_target",
    summary="a smaller draft model proposes k tokens; the target verifies them in one pass",
    trtllm_build_mode="draft_tokens_external",
    triton_decoding_mode="",
    llmapi_decoding_type="DraftTarget",
    proposer="draft_model",
    proposer_class="trtspec.spec.proposers.draft_model:DraftModelProposer",
    checkpoint="draft",
    checkpoint_example="tiny-draft",
    needs_draft_model=True,
    target_features=("draft_tokens_external",),
    build_max_draft_len=True,
    needs_paged_context_fmha=True,
    repository_features=("bls_draft_target",),
    flags=(FlagRow("--draft", "draft", "text", "Draft model (method draft_target).", checkpoint=True),),
    sweep_variant="draft",
)

DECLARES = (DRAFT_TARGET,)
