"""SchedulePolicy: a SpecSchedule (trtspec.contracts.schedule) run step by step, without a model.

Two inputs, two outputs:
- caps: the step's batch size and each request's draft length -> each request's draft length under the schedule
  (`SpecSchedule.draft_len_at`: the schedule's value at the largest key <= batch size, 0 above max_concurrency),
  and 0 for every request while the gate is closed, except probes;
- the gate: each finished request that drafted -> its mean acceptance length (tokens per drafting step, bonus
  included: `trtspec.contracts.metrics.mean_acceptance_length`) enters a rolling window of the last
  `acceptance_window` such requests. The gate closes when the window is full and its mean is below
  `acceptance_length_threshold`; it opens again once the window's mean is back at the threshold.

Probes (trtspec's reopening gate; `probes` 0 is TensorRT-LLM's, which never reopens): while the gate is closed, one
request at a time still speculates (within the schedule's caps) for its whole life, and its acceptance enters the
window when it finishes. The first probe is the `probes`-th admitted request that would draft after the close; after
a probe finishes, the next comes an interval of such admissions later: `probes`, doubled after each probe below the
threshold (up to MAX_PROBE_BACKOFF x `probes`), back to `probes` after one at or above it. A probe widens its
steps' target forward to k + 1 tokens for every row of a padded batch, so while acceptance stays low the probes'
share of the traffic falls geometrically towards TensorRT-LLM's permanent gate; when it recovers they come every
`probes` admissions again and refill the window.

Requests that drafted before the gate closed and finish later enter the window too (they drafted). A request is
admitted once: a preempted request that comes back keeps whether it is a probe.

`state` (a frozen `GateState`, replaced on each change) is what servers and tests read from other threads.
Pure Python.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace

from trtspec.contracts.metrics import mean_acceptance_length
from trtspec.contracts.schedule import SpecSchedule

MAX_PROBE_BACKOFF = 16  # the probe interval doubles up to this many x probe_every (256 admissions at 16)


@dataclass(frozen=True)
class GateState:
    """The acceptance gate as servers export it."""

    open: bool = True
    window_mean: float | None = None  # mean acceptance length over the window (None: empty)
    window_fill: int = 0  # finished drafting requests in the window (at most acceptance_window)
    closes: int = 0  # times the gate closed
    opens: int = 0  # times it reopened
    probes: int = 0  # probe requests admitted while it was closed


class SchedulePolicy:
    """A SpecSchedule's caps and acceptance gate over one engine's requests (module docstring)."""

    def __init__(self, schedule: SpecSchedule) -> None:
        self.schedule = schedule
        self.gated = schedule.gated
        self._window: deque[float] = deque(maxlen=schedule.acceptance_window or 1)
        self._admitted: set[int] = set()  # request ids seen (admitted at least once, not yet finished)
        self._probes: set[int] = set()  # of those, the probes
        self._interval = schedule.probes  # drafting admissions between probes (doubles after a probe below threshold)
        self._countdown: int | None = None  # drafting admissions until the next probe (None: a probe is running)
        self.state = GateState()

    # -- requests ----------------------------------------------------------------------------------------------------
    def admit(self, request_id: int, drafts: bool) -> None:
        """A request got its first KV slot (`drafts`: it would speculate); while the gate is closed and no probe is
        running, the admission that ends the countdown is a probe. A second admission (after a preemption) changes
        nothing."""
        if request_id in self._admitted:
            return
        self._admitted.add(request_id)
        if not drafts or self.state.open or not self.schedule.probes or self._countdown is None:
            return
        self._countdown -= 1
        if self._countdown == 0:
            self._countdown = None
            self._probes.add(request_id)
            self.state = replace(self.state, probes=self.state.probes + 1)

    def caps(self, batch_size: int, request_ids: Sequence[int], ks: Sequence[int]) -> list[int]:
        """[batch] draft lengths: each request's k under the schedule at `batch_size` running requests, 0 while the
        gate is closed unless the request is a probe."""
        open_ = self.state.open
        return [self.schedule.draft_len_at(batch_size, k) if open_ or rid in self._probes else 0
                for rid, k in zip(request_ids, ks, strict=True)]

    def finish(self, request_id: int, num_drafts: int, num_accepted_tokens: int) -> None:
        """A request finished with these counts (its AcceptanceStats); one that drafted enters the gate's window."""
        probe = request_id in self._probes
        self.forget(request_id)
        if not self.gated or num_drafts == 0:
            return
        length = mean_acceptance_length(num_drafts, num_accepted_tokens)
        self._window.append(length)
        mean = sum(self._window) / len(self._window)
        state = replace(self.state, window_mean=mean, window_fill=len(self._window))
        threshold = self.schedule.acceptance_length_threshold
        assert threshold is not None  # (gated)
        if probe:  # backoff: a losing probe doubles the interval to the next, a winning one restores it
            base = self.schedule.probes
            self._interval = base if length >= threshold else min(2 * self._interval, MAX_PROBE_BACKOFF * base)
            self._countdown = self._interval
        if state.open and len(self._window) == self._window.maxlen and mean < threshold:
            state = replace(state, open=False, closes=state.closes + 1)
            self._interval = self._countdown = self.schedule.probes
        elif not state.open and self.schedule.probes and mean >= threshold:
            state = replace(state, open=True, opens=state.opens + 1)
        self.state = state

    def forget(self, request_id: int) -> None:
        """A request left (finished or aborted); an aborted probe's countdown starts again."""
        self._admitted.discard(request_id)
        if request_id in self._probes:
            self._probes.discard(request_id)
            if self._countdown is None:
                self._countdown = self._interval
