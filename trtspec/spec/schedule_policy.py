"""SchedulePolicy: a SpecSchedule (trtspec.contracts.schedule) run step by step, without a model.

Three inputs, two outputs:
- caps: the step's batch size and each request's draft length -> each request's draft length under the schedule
  (`SpecSchedule.draft_len_at`: the schedule's value at the largest key <= batch size, 0 where max_concurrency turns
  speculation off by the release's rule), and 0 for every request while the gate is closed, except probes;
- the gate, in the unit of the release whose names the schedule uses (trtspec.targets.controls):
  `acceptance_length_threshold` (TensorRT-LLM 1.2.1): each completed request -> its accepted draft tokens per
  iteration, bonus token excluded (`Release.request_gate_value`: max(0, emitted tokens / target forwards - 1), every
  forward of the request counted, the prompt's included), into a window of the last `acceptance_window` requests;
  `acceptance_rate_threshold` (TensorRT-LLM 1.3): each step that drafted (`step`) -> accepted / drafted draft tokens
  of the batch, into a window of the last `acceptance_rate_window_size` such steps.
  The gate closes when the window is full and its mean is below the threshold.

Exact controls (`speculation_controls trtllm-<release>`) run the release's own `targets.controls.Gate`: checked from
the window-th sample on, strict `<`, closed for good; a completed request is recorded when the step it finished in
speculated (TensorRT-LLM records only while speculation is on). trtspec's controls record every request that drafted
and reopen the gate: while closed, one request at a time still speculates (within the schedule's caps) for its whole
life, and its samples enter the window. The first probe is the `probes`-th admitted request that would draft after the
close; after a probe finishes, the next comes an interval of such admissions later: `probes`, doubled after each probe
below the threshold (up to MAX_PROBE_BACKOFF x `probes`), back to `probes` after one at or above it. The gate opens
again once the window's mean is back at the threshold. A probe widens its steps' target forward to k + 1 tokens for
every row of a padded batch, so while acceptance stays low the probes' share of the traffic falls geometrically
towards TensorRT-LLM's permanent gate.

Requests that drafted before the gate closed and finish later enter the window too (they drafted). A request is
admitted once: a preempted request that comes back keeps whether it is a probe.

`state` (a frozen `GateState`, replaced on each change) is what servers and tests read from other threads.
Pure Python.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace

from trtspec.contracts.metrics import AcceptanceStats
from trtspec.contracts.schedule import SpecSchedule
from trtspec.targets.controls import Gate, Release, release

MAX_PROBE_BACKOFF = 16  # the probe interval doubles up to this many x probe_every (256 admissions at 16)
MAX_K = 1 << 20  # a draft length no schedule caps below: asks the schedule alone


@dataclass(frozen=True)
class GateState:
    """The acceptance gate as servers export it."""

    open: bool = True
    window_mean: float | None = None  # the window's mean, in the gate's unit (None: empty)
    window_fill: int = 0  # samples in the window (at most its size)
    closes: int = 0  # times the gate closed
    opens: int = 0  # times it reopened
    probes: int = 0  # probe requests admitted while it was closed


class SchedulePolicy:
    """A SpecSchedule's caps and acceptance gate over one engine's requests (module docstring)."""

    def __init__(self, schedule: SpecSchedule, *, max_batch_size: int | None = None) -> None:
        self.schedule = schedule
        self.gated = schedule.gated
        self.max_batch_size = max_batch_size
        self.release: Release = release(schedule.release)
        self.unit = schedule.gate_unit  # "request", "iteration" or None (read once: step() runs every engine step)
        threshold = schedule.gate_threshold
        self._gate: Gate | None = (self.release.gate(schedule.gate_window, threshold)
                                   if schedule.exact and self.gated and threshold is not None else None)
        self._window: deque[float] = deque(maxlen=schedule.gate_window or 1)
        self._admitted: set[int] = set()  # request ids seen (admitted at least once, not yet finished)
        self._probes: set[int] = set()  # of those, the probes
        self._interval = schedule.probes  # drafting admissions between probes (doubles after a probe below threshold)
        self._countdown: int | None = None  # drafting admissions until the next probe (None: a probe is running)
        self._speculating = True  # whether the last step's batch speculated (caps above 0)
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
        """[batch] draft lengths: each request's k under the schedule at `batch_size` requests, 0 while the gate is
        closed unless the request is a probe."""
        open_ = self.state.open
        caps = [self.schedule.draft_len_at(batch_size, k, max_batch_size=self.max_batch_size)
                if open_ or rid in self._probes else 0 for rid, k in zip(request_ids, ks, strict=True)]
        # the batch-level decision TensorRT-LLM records under (its enable_spec_decode): the schedule and max_concurrency
        # at this batch size with the gate open, whatever each request's own k (one near its end reserves none)
        self._speculating = open_ and self.schedule.draft_len_at(batch_size, MAX_K, max_batch_size=self.max_batch_size) > 0
        return caps

    def step(self, num_draft_tokens: int, num_accepted_tokens: int) -> None:
        """One step's verified drafts over the batch (a per-iteration gate samples accepted / drafted; no sample
        when nothing was drafted)."""
        if self.unit != "iteration":
            return
        rate = self.release.iteration_gate_value(num_draft_tokens, num_accepted_tokens)
        if rate is not None:
            self._sample(min(1.0, rate))

    def finish(self, request_id: int, stats: AcceptanceStats) -> None:
        """A request finished with these counts; under a per-request gate its value enters the window (trtspec: when
        it drafted; exact controls: when the step it finished in speculated)."""
        probe = request_id in self._probes
        self.forget(request_id)
        if self.unit is None:
            return
        if probe and not self.schedule.exact:  # backoff: a losing probe doubles the interval, a winning one restores it
            base, threshold = self.schedule.probes, self.schedule.gate_threshold
            assert threshold is not None  # (gated)
            won = self._request_value(stats) >= threshold
            self._interval = base if won else min(2 * self._interval, MAX_PROBE_BACKOFF * base)
            self._countdown = self._interval
        if self.unit != "request":
            return
        if (self._speculating if self.schedule.exact else stats.num_drafts > 0):
            self._sample(self.release.request_gate_value(stats.num_emitted_tokens, stats.num_target_forwards))

    def forget(self, request_id: int) -> None:
        """A request left (finished or aborted); an aborted probe's countdown starts again."""
        self._admitted.discard(request_id)
        if request_id in self._probes:
            self._probes.discard(request_id)
            if self._countdown is None:
                self._countdown = self._interval

    # -- the gate ----------------------------------------------------------------------------------------------------
    def _request_value(self, stats: AcceptanceStats) -> float:
        """A request's own value in the gate's unit (a probe's verdict)."""
        if self.unit == "request":
            return self.release.request_gate_value(stats.num_emitted_tokens, stats.num_target_forwards)
        return self.release.iteration_gate_value(stats.num_draft_tokens, stats.num_accepted_tokens) or 0.0

    def _sample(self, value: float) -> None:
        if self._gate is not None:  # the release's own gate: permanent
            if self._gate.disabled:
                return
            disabled_now, _ = self._gate.record(value)
            state = replace(self.state, window_mean=self._gate.mean, window_fill=self._gate.fill)
            if disabled_now:
                state = replace(state, open=False, closes=state.closes + 1)
            self.state = state
            return
        self._window.append(value)
        mean = math.fsum(self._window) / len(self._window)
        state = replace(self.state, window_mean=mean, window_fill=len(self._window))
        threshold = self.schedule.gate_threshold
        assert threshold is not None  # (gated)
        if state.open and len(self._window) == self._window.maxlen and mean < threshold:
            state = replace(state, open=False, closes=state.closes + 1)
            self._interval = self._countdown = self.schedule.probes
        elif not state.open and self.schedule.probes and mean >= threshold:
            state = replace(state, open=True, opens=state.opens + 1)
        self.state = state
