"""Methods `eagle` (EAGLE-1/2, TensorRT-LLM's engine flow) and `eagle3` (EAGLE-3 drafters: the reference engine and
the LLM API).

Build configs write both as method eagle, with eagle.eagle3: true for EAGLE-3 (one EAGLE section for both
generations); the reference engine and the engine configuration name EAGLE-3 `eagle3`. Both own the `eagle_tree` part.
"""

from __future__ import annotations

from pydantic import Field

from trtspec.choices import MAX_DEPTH, MAX_TOPK
from trtspec.methods.base import FlagRow, MethodInfo
from trtspec.methods.options import COUNT_MAX, Options, PathText


class EagleSpec(Options):
    """EAGLE-1/2 drafter for the TensorRT-LLM engine flow (Llama-family targets only)."""

    model: PathText = Field(description="HF EAGLE drafter directory (e.g. yuhuili/EAGLE-Vicuna-7B-v1.3)")
    num_layers: int = Field(4, ge=1, le=COUNT_MAX, description="num_eagle_layers: maximum tree depth")
    max_non_leaves_per_layer: int = Field(10, ge=1, le=COUNT_MAX)
    choices: str | list[list[int]] | None = Field(None, description="static tree (a preset, paths, or a `trtspec tune "
                                                  "tree --out` file); engine flow default mc_sim_7b_63; EAGLE-3 in "
                                                  "the LLM API: eagle_choices (k = its nodes)")
    topk: int | None = Field(None, ge=1, le=MAX_TOPK, description="EAGLE-3: the dynamic (EAGLE-2) tree's children per "
                             "expansion (torch default 4; the LLM API's dynamic_tree_max_topK, with depth); excludes "
                             "choices")
    depth: int | None = Field(None, ge=1, le=MAX_DEPTH, description="EAGLE-3: the dynamic tree's levels (torch default "
                              "6; the LLM API's max_draft_len, with topk; k = max_total_draft_tokens in [depth, topk x "
                              "depth]); excludes choices")
    eagle3: bool = Field(False, description="the drafter is an EAGLE-3 head: LLM-API/PyTorch flow only (no engines), "
                                            "max_draft_len = draft layers (default num_layers), targets with "
                                            "eagle3_llmapi only")
    one_model: bool = Field(True, description="EAGLE-3 in the LLM API: drafter and target in one model "
                                              "(eagle3_one_model: true, TensorRT-LLM's default) or two (false)")

    def dynamic_shape(self) -> dict[str, int]:
        """The dynamic tree's fields set here, by YAML path (`eagle.topk`: value); empty when none is. The engine
        configuration's tree from this section: contracts.engine.EagleTree.from_section."""
        return {f"eagle.{name}": value for name in ("topk", "depth") if (value := getattr(self, name)) is not None}


EAGLE = MethodInfo(
    name="eagle",
    summary="EAGLE-1/2 draft head on target features (TensorRT-LLM engine flow)",
    trtllm_build_mode="eagle",
    triton_decoding_mode="eagle",
    llmapi_decoding_type="Eagle",
    proposer=None,
    engine_part="eagle_tree",
    engine_part_class="trtspec.contracts.engine_parts:EagleTree",
    tree=True,
    section="eagle",
    section_model="model",
    options=EagleSpec,
    reference_form="eagle3",
    draft_len_rule="layers",
    llmapi_unsupported="EAGLE-1/2 drafters run on the engine flow only: the PyTorch backend's Eagle decoding type "
                       "loads EAGLE-3 drafters",
    llmapi_nearest=("eagle", "eagle with eagle.eagle3: true and an EAGLE-3 drafter in eagle.model"),
    engine_architectures=("LlamaForCausalLM",),
    target_features=("eagle_engine_flow",),
    build_max_draft_len=True,
    needs_paged_context_fmha=True,
    examples_dir="eagle",
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
    engine_part_class="trtspec.contracts.engine_parts:EagleTree",
    checkpoint="eagle",
    checkpoint_example="tiny-eagle",
    needs_eagle_drafter=True,
    tree=True,
    section="eagle",
    section_model="model",
    options=EagleSpec,
    build_as="eagle",
    draft_len_rule="layers",
    engine_architectures=("LlamaForCausalLM",),
    target_features=("eagle3_llmapi",),
    flags=(
        FlagRow("--eagle", "eagle", "text", "EAGLE-3 drafter (method eagle3).", checkpoint=True),
        FlagRow("--eagle-topk", "eagle_topk", "int", "Method eagle3: the dynamic tree's children per expansion "
                "(default 4); not with a static tree (eagle.choices).", bounds=(1, MAX_TOPK),
                deploy="torch flavour; over the build's eagle.topk."),
        FlagRow("--eagle-depth", "eagle_depth", "int", "Method eagle3: the dynamic tree's levels (default 6). The "
                "node budget is k.", bounds=(1, MAX_DEPTH), deploy="torch flavour; over the build's eagle.depth."),
    ),
    sweep_variant="eagle",
    train_command="eagle",
    modelopt_mode="eagle",
)

DECLARES = (EAGLE, EAGLE3)
