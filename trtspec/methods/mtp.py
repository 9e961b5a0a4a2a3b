"""Method `mtp`: multi-token prediction with the target's own MTP layers (DeepSeek-V3/R1 style), TensorRT-LLM's
PyTorch workflow only (`speculative_config.decoding_type: MTP`; docs/targets.md, "MTP").

The target carries its drafter: config.json declares `num_nextn_predict_layers` > 0 MTP modules, each predicting one
token further ahead from the previous module's hidden state. No draft model, no drafter directory. The build config's
`mtp:` section (MtpSpec, below) sets how many of them draft (`num_nextn_predict_layers`, at most the model's) and
the relaxed acceptance of thinking-phase tokens.

Not in the engine flow: trtllm-build has no speculative mode for it (the targets' `trtllm-build
--speculative_decoding_mode` choices are draft_tokens_external, medusa, lookahead_decoding, explicit_draft_tokens and
eagle). Not in the reference engine: its embedded models have no MTP layers, and an MTP-style head trained on them
would be a new drafter (an EAGLE-style one, which `eagle3` already is), not the checkpoint's own layers that MTP runs,
so serving it would measure something else under MTP's name.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from trtspec.errors import ConfigError
from trtspec.methods.base import MethodInfo
from trtspec.methods.options import COUNT_MAX, Options


class MtpSpec(Options):
    """MTP (multi-token prediction) with the target's own MTP layers, TensorRT-LLM's PyTorch workflow only
    (MTPDecodingConfig; trtspec/methods/mtp.py). Preflight checks the layers against the target's config.json."""

    num_nextn_predict_layers: int | None = Field(
        None, ge=1, le=COUNT_MAX, strict=True, description="MTP layers that draft, one token each: max_draft_len "
        "(default: all the target's config.json num_nextn_predict_layers; at most that many)")
    use_relaxed_acceptance_for_thinking: bool = Field(False, strict=True, description="accept any of the top "
                                                      "relaxed_topk candidates within relaxed_delta of the top one "
                                                      "during the thinking phase (DeepSeek-R1)")
    relaxed_topk: int = Field(1, ge=1, le=COUNT_MAX, strict=True, description="relaxed acceptance: candidates kept")
    relaxed_delta: float = Field(0.0, ge=0, le=1, allow_inf_nan=False, description="relaxed acceptance: keep "
                                 "candidates with probability >= top1 - relaxed_delta")
    one_model: bool = Field(True, strict=True, description="MTP-Eagle in one model (mtp_eagle_one_model: true, "
                            "TensorRT-LLM's default; 1.3.0rc29 has one-model only)")

    @model_validator(mode="after")
    def _relaxed(self) -> MtpSpec:
        if not self.use_relaxed_acceptance_for_thinking:
            for name in ("relaxed_topk", "relaxed_delta"):
                if name in self.model_fields_set:
                    raise ConfigError(f"mtp.{name}", getattr(self, name), "applies only with relaxed acceptance",
                                      hint="set mtp.use_relaxed_acceptance_for_thinking: true, or drop "
                                           f"mtp.{name}")
        return self

    def relaxed(self) -> dict[str, Any]:
        """The relaxed-acceptance fields by their LLM-API names; empty when relaxed acceptance is off."""
        if not self.use_relaxed_acceptance_for_thinking:
            return {}
        return {"use_relaxed_acceptance_for_thinking": True, "relaxed_topk": self.relaxed_topk,
                "relaxed_delta": self.relaxed_delta}


MTP = MethodInfo(
    name="mtp",
    summary="multi-token prediction: the target's own MTP layers draft (DeepSeek-V3/R1 num_nextn_predict_layers), "
            "TensorRT-LLM PyTorch workflow",
    trtllm_build_mode=None,
    triton_decoding_mode="",
    llmapi_decoding_type="MTP",
    proposer=None,
    section="mtp",
    options=MtpSpec,
    draft_len_rule="own_layers",
    target_layers_key="num_nextn_predict_layers",
    engine_flow_unsupported="MTP runs on TensorRT-LLM's PyTorch backend only (the LLM API's MTP decoding type): "
                            "trtllm-build has no speculative mode for it",
    reference_unsupported="the reference engine cannot serve MTP honestly: MTP drafts with the target checkpoint's own "
                          "MTP layers (config.json num_nextn_predict_layers), which the embedded models do not have, "
                          "and a head trained for them would be another drafter (eagle3 is that one), not MTP",
    llmapi_nearest=("eagle", "eagle with eagle.eagle3: true (a separate EAGLE-3 drafter)"),
)

DECLARES = (MTP,)
