"""Method `lookahead`: Jacobi lookahead decoding, (W, N, G) (TensorRT-LLM: lookahead_decoding)."""

from __future__ import annotations

from trtspec.methods.base import MethodInfo

DECLARES = (
    MethodInfo(
        name="lookahead",
        summary="Jacobi lookahead: an n-gram pool built from parallel guesses, no draft model",
        trtllm_build_mode="lookahead_decoding",
        triton_decoding_mode="lookahead",
        llmapi_decoding_type="Lookahead",
        proposer="lookahead",
        proposer_class="trtspec.spec.proposers.lookahead:LookaheadProposer",
        engine_part="lookahead",
        target_features=("lookahead_engine", "server_lookahead_params"),
    ),
)
