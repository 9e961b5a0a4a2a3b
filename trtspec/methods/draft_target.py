"""Method `draft_target`: a smaller draft model proposes, the target verifies (TensorRT-LLM: draft_tokens_external,
LLM-API DraftTarget)."""

from __future__ import annotations

from trtspec.methods.base import FlagRow, MethodInfo

# what runs the draft model (EngineConfig.draft_runtime, checked there: torch or onnx); shared by the hybrid
# suffix_draft, whose model drafter is the same draft model
DRAFT_RUNTIME_FLAG = FlagRow("--draft-runtime", "draft_runtime", "text", "Methods draft_target / suffix_draft: what "
                             "runs the draft model: torch (default) or onnx (ONNX Runtime; float32 on the CPU, needs "
                             "trtspec[onnx]).", metavar="[torch|onnx]", deploy="torch flavour; over the build's.")

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
    flags=(FlagRow("--draft", "draft", "text", "Draft model (method draft_target).", checkpoint=True),
           DRAFT_RUNTIME_FLAG),
    sweep_variant="draft",
)

DECLARES = (DRAFT_TARGET,)
