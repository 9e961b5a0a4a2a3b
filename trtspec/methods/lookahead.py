"""Method `lookahead`: Jacobi lookahead decoding, (W, N, G) (TensorRT-LLM: lookahead_decoding)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from trtspec.methods.base import FlagRow, MethodInfo
from trtspec.methods.options import COUNT_MAX, Options


class LookaheadSpec(Options):
    """Server-level lookahead envelope (W, N, G); TensorRT-LLM's executor defaults are (4, 3, 4)."""

    window: int = Field(4, ge=1, le=COUNT_MAX, description="W: lookahead window size")
    ngram: int = Field(3, ge=1, le=COUNT_MAX, description="N: n-gram size")
    verification_set: int = Field(4, ge=0, le=COUNT_MAX, description="G: verification set size")

    @model_validator(mode="before")
    @classmethod
    def _from_list(cls, value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            if len(value) != 3:
                raise ValueError("give lookahead as [W, N, G], e.g. [4, 4, 4]")
            return dict(zip(("window", "ngram", "verification_set"), value, strict=True))
        return value

    def as_tuple(self) -> tuple[int, int, int]:
        return (self.window, self.ngram, self.verification_set)


LOOKAHEAD = MethodInfo(
    name="lookahead",
    summary="Jacobi lookahead: an n-gram pool built from parallel guesses, no draft model",
    trtllm_build_mode="lookahead_decoding",
    triton_decoding_mode="lookahead",
    llmapi_decoding_type="Lookahead",
    proposer="lookahead",
    proposer_class="trtspec.spec.proposers.lookahead:LookaheadProposer",
    engine_part="lookahead",
    engine_part_class="trtspec.contracts.engine_parts:Lookahead",
    jacobi=True,
    section="lookahead",
    options=LookaheadSpec,
    draft_len_rule="window",
    llmapi_nearest=("ngram", "ngram (also draft-model-free: drafts copied from the context)"),
    inflight_k_fixed=("lookahead's server (W, N, G) must match the engine's max_draft_len, so the server-wide draft "
                      "cannot shrink by a reload; per request, lookahead_window_size, lookahead_ngram_size and "
                      "lookahead_verification_set_size at most the server's draft fewer tokens (live)"),
    target_features=("lookahead_engine", "server_lookahead_params"),
    build_max_draft_len=True,
    flags=(FlagRow("--lookahead", "lookahead", "text", "Method lookahead: the window, n-gram size and verification "
                   "set (W, N, G).", metavar="W,N,G",
                   deploy="On the tensorrtllm flavour it must match the engine's max_draft_len."),),
    sweep_variant="lookahead",
)

DECLARES = (LOOKAHEAD,)
