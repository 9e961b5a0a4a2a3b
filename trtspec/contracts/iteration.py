"""One engine iteration's statistics: what a step scheduled, drafted, accepted and emitted, and how long it took.

The reference engine fills one `IterationStats` per `SpecEngine.step` (phase 6); servers publish it in the form their
contract has (the trtllm-serve `/metrics` iteration statistics: `trtspec.contracts.trtllm_iterations`). Words as in
`trtspec.contracts.metrics`: accepted draft tokens exclude the target's own (bonus or recovered) token. Pure Python.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class IterationStats:
    """One step of the engine (counts over the requests it ran)."""

    iteration: int  # 0, 1, ... since the engine started
    timestamp: float  # wall-clock seconds (time.time()) at the step's end
    latency_s: float  # the whole step
    draft_latency_s: float  # the step's drafting (proposers)
    num_active_requests: int  # requests the step ran
    num_queued_requests: int  # requests waiting after the step
    num_context_requests: int  # requests that ran their prompt (prefill) this step
    num_context_tokens: int  # prompt tokens those requests ran
    num_generation_requests: int  # requests that decoded this step
    num_completed_requests: int  # requests that finished this step
    num_requests_with_draft_tokens: int  # requests verified with at least one draft token
    num_draft_tokens: int  # draft tokens verified (sum over those requests)
    num_accepted_tokens: int  # of them, accepted (the target's own token not counted)
    num_emitted_tokens: int  # tokens the step committed (accepted + one per request, minus stop cuts)
    # hybrid methods (methods/hybrid.py): requests verified with a draft from the suffix tree / the model drafter
    num_hybrid_suffix_drafts: int = 0
    num_hybrid_model_drafts: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.num_accepted_tokens <= self.num_draft_tokens:
            raise ValueError(f"accepted {self.num_accepted_tokens} of {self.num_draft_tokens} draft tokens")
        if not 0 <= self.num_requests_with_draft_tokens <= self.num_active_requests:
            raise ValueError(f"{self.num_requests_with_draft_tokens} drafting requests of {self.num_active_requests}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> IterationStats:
        return cls(**data)
