"""Methods `eagle` (EAGLE-1/2, TensorRT-LLM's engine flow) and `eagle3` (EAGLE-3 drafters: the reference engine and
the LLM API).

Build configs write both as method eagle, with eagle.eagle3: true for EAGLE-3 (one EAGLE section for both
generations); the reference engine and the engine configuration name EAGLE-3 `eagle3`. Both own the `eagle_tree` part.
"""

from __future__ import annotations

from trtspec.methods.base import MethodInfo

EAGLE = MethodInfo(
    name="eagle",
    summary="EAGLE-1/2 draft head on target features (TensorRT-LLM engine flow)",
    trtllm_build_mode="eagle",
    triton_decoding_mode="eagle",
    llmapi_decoding_type="Eagle",
    proposer=None,
    engine_part="eagle_tree",
    tree=True,
    section="eagle",
    section_model="model",
    reference_form="eagle3",
    draft_len_rule="layers",
    llmapi_unsupported="EAGLE-1/2 drafters run on the engine flow only: the PyTorch backend's Eagle decoding type "
                       "loads EAGLE-3 drafters",
    llmapi_nearest=("eagle", "eagle with eagle.eagle3: true and an EAGLE-3 drafter in eagle.model"),
    engine_architectures=("LlamaForCausalLM",),
    target_features=("eagle_engine_flow",),
    build_max_draft_len=True,
    needs_paged_context_fmha=True,
)

EAGLE3 = MethodInfo(
    name="eagle3",
    # the reference engine's EAGLE-3 (trtspec train eagle); LLM-API decoding_type per target in build/llm_api.py
    summary="EAGLE-3 drafter on the target's low/mid/high layer features: feature-level drafting, "
            "static or dynamic trees",
    trtllm_build_mode=None,
    triton_decoding_mode="eagle",
    llmapi_decoding_type="Eagle3",
    proposer="eagle",
    proposer_class="trtspec.spec.proposers.eagle:EagleProposer",
    engine_part="eagle_tree",
    checkpoint="eagle",
    checkpoint_example="tiny-eagle",
    needs_eagle_drafter=True,
    tree=True,
    section="eagle",
    section_model="model",
    build_as="eagle",
    draft_len_rule="layers",
    engine_architectures=("LlamaForCausalLM",),
    target_features=("eagle3_llmapi",),
)

DECLARES = (EAGLE, EAGLE3)
