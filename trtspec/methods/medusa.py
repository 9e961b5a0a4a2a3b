"""Method `medusa`: Medusa heads on the target's last hidden state propose a token tree."""

from __future__ import annotations

from trtspec.methods.base import MethodInfo

MEDUSA = MethodInfo(
    name="medusa",
    summary="Medusa heads on the target's last hidden state propose a token tree",
    trtllm_build_mode="medusa",
    triton_decoding_mode="medusa",
    llmapi_decoding_type="Medusa",
    proposer="medusa",
    proposer_class="trtspec.spec.proposers.medusa:MedusaProposer",
    engine_part="medusa_tree",
    checkpoint="medusa",
    checkpoint_example="tiny-medusa",
    needs_medusa_heads=True,
    tree=True,
    section="medusa",
    section_model="heads",
    draft_len_rule="heads",
    llmapi_nearest=("eagle", "eagle with eagle.eagle3: true (an EAGLE-3 drafter also drafts trees from target "
                             "features)"),
    engine_architectures=("LlamaForCausalLM", "MistralForCausalLM", "MixtralForCausalLM", "Qwen2ForCausalLM"),
    target_features=("medusa",),
)

DECLARES = (MEDUSA,)
