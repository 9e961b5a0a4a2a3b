"""Method `medusa`: Medusa heads on the target's last hidden state propose a token tree."""

from __future__ import annotations

from pydantic import Field

from trtspec.methods.base import FlagRow, MethodInfo
from trtspec.methods.options import COUNT_MAX, Options, PathText


class MedusaSpec(Options):
    """Medusa heads (FasterDecoding or ModelOpt/TensorRT-LLM layout) and the verification tree."""

    heads: PathText = Field(description="directory with the Medusa heads (config.json + weights)")
    num_heads: int | None = Field(None, ge=1, le=COUNT_MAX, description="heads to use (default: all heads in the directory)")
    num_layers: int | None = Field(None, ge=1, le=COUNT_MAX, description="residual layers per head (default: from config.json)")
    choices: str | list[list[int]] | None = Field(
        None, description="tree: preset name (mc_sim_7b_63), list of paths, or a file; default mc_sim_7b_63 "
                          "pruned to num_heads levels")


MEDUSA = MethodInfo(
    name="medusa",
    summary="Medusa heads on the target's last hidden state propose a token tree",
    trtllm_build_mode="medusa",
    triton_decoding_mode="medusa",
    llmapi_decoding_type="Medusa",
    proposer="medusa",
    proposer_class="trtspec.spec.proposers.medusa:MedusaProposer",
    engine_part="medusa_tree",
    engine_part_class="trtspec.contracts.engine_parts:MedusaTree",
    checkpoint="medusa",
    checkpoint_example="tiny-medusa",
    needs_medusa_heads=True,
    tree=True,
    section="medusa",
    section_model="heads",
    options=MedusaSpec,
    draft_len_rule="heads",
    llmapi_nearest=("eagle", "eagle with eagle.eagle3: true (an EAGLE-3 drafter also drafts trees from target "
                             "features)"),
    engine_architectures=("LlamaForCausalLM", "MistralForCausalLM", "MixtralForCausalLM", "Qwen2ForCausalLM"),
    target_features=("medusa",),
    flags=(FlagRow("--medusa", "medusa", "text", "Medusa heads (method medusa).", checkpoint=True),),
    sweep_variant="medusa",
    train_command="medusa",
    modelopt_mode="medusa",
    examples_dir="medusa",
)

DECLARES = (MEDUSA,)
