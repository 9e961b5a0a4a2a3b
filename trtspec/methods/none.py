"""Method `none`: plain autoregressive decoding, the baseline."""

from __future__ import annotations

from trtspec.methods.base import MethodInfo

NONE = MethodInfo(
    name="none",
    summary="plain autoregressive decoding (baseline)",
    trtllm_build_mode=None,
    triton_decoding_mode="",
    llmapi_decoding_type=None,
    proposer=None,
    baseline=True,
    draft_len_rule="plain",
)

DECLARES = (NONE,)
