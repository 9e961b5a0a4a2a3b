"""Method `redrafter`: ReDrafter's recurrent drafter with beam search (TensorRT-LLM engine flow only)."""

from __future__ import annotations

from trtspec.methods.base import MethodInfo

DECLARES = (
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
