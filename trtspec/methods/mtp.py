"""Method `mtp`: multi-token prediction with the target's own MTP layers (DeepSeek-V3/R1 style), TensorRT-LLM's
PyTorch workflow only (`speculative_config.decoding_type: MTP`; docs/targets.md, "MTP").

The target carries its drafter: config.json declares `num_nextn_predict_layers` > 0 MTP modules, each predicting one
token further ahead from the previous module's hidden state. No draft model, no drafter directory. The build config's
`mtp:` section (config.MtpSpec) sets how many of them draft (`num_nextn_predict_layers`, at most the model's) and
the relaxed acceptance of thinking-phase tokens.

Not in the engine flow: trtllm-build has no speculative mode for it (the targets' `trtllm-build
--speculative_decoding_mode` choices are draft_tokens_external, medusa, lookahead_decoding, explicit_draft_tokens and
eagle). Not in the reference engine: its embedded models have no MTP layers, and an MTP-style head trained on them
would be a new drafter (an EAGLE-style one, which `eagle3` already is), not the checkpoint's own layers that MTP runs,
so serving it would measure something else under MTP's name.
"""

from __future__ import annotations

from trtspec.methods.base import MethodInfo

MTP = MethodInfo(
    name="mtp",
    summary="multi-token prediction: the target's own MTP layers draft (DeepSeek-V3/R1 num_nextn_predict_layers), "
            "TensorRT-LLM PyTorch workflow",
    trtllm_build_mode=None,
    triton_decoding_mode="",
    llmapi_decoding_type="MTP",
    proposer=None,
    section="mtp",
    draft_len_rule="mtp",
    target_layers_key="num_nextn_predict_layers",
    engine_flow_unsupported="MTP runs on TensorRT-LLM's PyTorch backend only (the LLM API's MTP decoding type): "
                            "trtllm-build has no speculative mode for it",
    reference_unsupported="the reference engine cannot serve MTP honestly: MTP drafts with the target checkpoint's own "
                          "MTP layers (config.json num_nextn_predict_layers), which the embedded models do not have, "
                          "and a head trained for them would be another drafter (eagle3 is that one), not MTP",
    llmapi_nearest=("eagle", "eagle with eagle.eagle3: true (a separate EAGLE-3 drafter)"),
)

DECLARES = (MTP,)
