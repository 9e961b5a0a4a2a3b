"""Method `redrafter`: ReDrafter's recurrent drafter with beam search (TensorRT-LLM engine flow only)."""

from __future__ import annotations

from pydantic import Field

from trtspec.methods.base import MethodInfo
from trtspec.methods.options import COUNT_MAX, Options, PathText


class RedrafterSpec(Options):
    """ReDrafter drafter; beams x draft length and greedy/sampling are fixed at conversion."""

    drafter: PathText = Field(description="HF ReDrafter drafter directory (config.json + model.safetensors)")
    num_beams: int = Field(5, ge=1, le=COUNT_MAX)
    draft_len_per_beam: int = Field(5, ge=1, le=COUNT_MAX)
    greedy: bool = True


REDRAFTER = MethodInfo(
    name="redrafter",
    summary="ReDrafter recurrent drafter with beam search (explicit draft tokens)",
    trtllm_build_mode="explicit_draft_tokens",
    triton_decoding_mode="redrafter",
    llmapi_decoding_type=None,
    proposer=None,
    section="redrafter",
    section_model="drafter",
    options=RedrafterSpec,
    draft_len_rule="beams",
    llmapi_unsupported="ReDrafter has no LLM-API decoding type",
    llmapi_nearest=("eagle", "eagle with eagle.eagle3: true (a learned drafter on target features), or "
                             "draft_target"),
    inflight_k_fixed="ReDrafter's beams and draft length are built into the engine: no runtime knob",
    engine_architectures=("LlamaForCausalLM", "QWenForCausalLM", "Qwen2ForCausalLM"),
    target_features=("redrafter",),
    examples_dir="redrafter",
)

DECLARES = (REDRAFTER,)
