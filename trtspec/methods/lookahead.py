"""Method `lookahead`: Jacobi lookahead decoding, (W, N, G) (TensorRT-LLM: lookahead_decoding)."""

from __future__ import annotations

from trtspec.methods.base import MethodInfo

LOOKAHEAD = MethodInfo(
    name="lookahead",
    summary="Jacobi lookahead: an n-gram pool built from parallel guesses, no draft model",
    trtllm_build_mode="lookahead_decoding",
    triton_decoding_mode="lookahead",
    llmapi_decoding_type="Lookahead",
    proposer="lookahead",
    proposer_class="trtspec.spec.proposers.lookahead:LookaheadProposer",
    engine_part="lookahead",
    jacobi=True,
    section="lookahead",
    draft_len_rule="window",
    llmapi_nearest=("ngram", "ngram (also draft-model-free: drafts copied from the context)"),
    inflight_k_fixed=("lookahead's server (W, N, G) must match the engine's max_draft_len, so the server-wide draft "
                      "cannot shrink by a reload; per request, lookahead_window_size, lookahead_ngram_size and "
                      "lookahead_verification_set_size at most the server's draft fewer tokens (live)"),
    target_features=("lookahead_engine", "server_lookahead_params"),
    build_max_draft_len=True,
)

DECLARES = (LOOKAHEAD,)
