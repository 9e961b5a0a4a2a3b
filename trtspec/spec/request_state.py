"""The engine's request types: what a caller gets (`RequestOutput`, `RequestDelta` per step) and one request's state
inside the engine (`EngineRequest`: its parameters, generator, proposer, KV slot, output and stats)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from trtspec.contracts.metrics import AcceptanceStats
from trtspec.spec.logits_process import LogitsControls
from trtspec.spec.params import SamplingParams, SpecParams
from trtspec.spec.proposers import Proposer

Prompt = str | Sequence[int]


@dataclass
class RequestOutput:
    """A finished request."""

    request_id: int
    prompt_token_ids: list[int]
    token_ids: list[int]  # generated tokens (stop token / stop word included when it ended the request)
    text: str  # decoded generated tokens ("" without a tokenizer)
    finish_reason: str  # "length" | "stop"
    stats: AcceptanceStats
    log_probs: list[float] | None = None  # [len(token_ids)] with SamplingParams.return_log_probs
    cum_log_prob: float | None = None  # sum of the unnormalised log-probs (TensorRT-LLM cum_log_probs)


@dataclass
class RequestDelta:
    """What one step added to one request (`step()` and `stream()` yield these)."""

    request_id: int
    token_ids: list[int]  # tokens appended this step
    finished: bool
    finish_reason: str | None = None
    text: str = ""  # decoded text delta (filled by `stream()`)
    stats: AcceptanceStats | None = None  # only when finished
    # with SamplingParams.return_log_probs, aligned with token_ids: each token's log-prob under the target
    # distribution of the position that verified it (logits_process.emitted_log_probs), and the running sum of the
    # request's unnormalised log-probs up to and including it
    log_probs: list[float] | None = None
    cum_log_probs: list[float] | None = None

    @property
    def cum_log_prob(self) -> float | None:
        """The request's cumulative log-prob after this delta's last token (None: no tokens or no log-probs)."""
        return self.cum_log_probs[-1] if self.cum_log_probs else None


@dataclass
class EngineRequest:
    request_id: int
    prompt_ids: list[int]
    sampling: SamplingParams
    spec: SpecParams
    proposer: Proposer | None  # None = plain decoding
    generator: torch.Generator
    stop_ids: frozenset[int]
    controls: LogitsControls  # the request's logits processors (logits_process.py)
    external_draft: list[int] | None = None  # the caller's draft, verified in the first step (then None)
    output_ids: list[int] = field(default_factory=list)
    slot: int | None = None  # target KV slot, assigned when scheduled
    target_hidden: Tensor | None = None  # [hidden] for proposers that read the target's hidden state
    stats: AcceptanceStats = field(default_factory=AcceptanceStats)
    start_time: float = field(default_factory=time.perf_counter)
    cum_log_prob: float = 0.0  # running sum of the emitted tokens' unnormalised log-probs (return_log_probs)

    @property
    def token_ids(self) -> list[int]:
        return self.prompt_ids + self.output_ids


