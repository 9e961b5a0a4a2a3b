"""A schedule proposal: the draft length per batch size that the cost model chooses at the window's acceptance,
compressed to a SpecSchedule (trtspec.contracts.schedule), beside what the model serves.

For each batch size b = 1 .. the baseline's largest calibrated batch size (or a given max batch size):
- acceptance: the intervals of b's concurrency bucket (ops/buckets.py) when they hold >= MIN_DRAFTS drafts, else the
  whole window's (labelled `pooled`). E(k) = 1 + sum_{i<k} prod_{j<=i} c_j from the conditional acceptance per
  position c_j = accepted_j / trials_j. Conditional counts stay right under a schedule, where the drafts of one window
  have different lengths (the unconditional accepted_j / drafts would count a short draft as a rejection at positions
  it never proposed); for one draft length they give the same E as recommend.py. A position with fewer than
  MIN_TRIALS trials uses the window's per-token acceptance (labelled `extrapolated`).
- costs: the baseline's calibrated step costs and host overheads at b (interpolated between calibrated batch sizes).
- k: the k in 0..max_k with the highest predicted speedup (ties: the smaller); the served draft length at b stays
  unless the best predicts at least MIN_GAIN more (recommend.MIN_GAIN; k = 0 predicts exactly 1.0).

Compressed: one entry where k changes, from batch size 1; a run of k = 0 that reaches the last batch size becomes
max_concurrency (the batch size before it: no speculation above it). The default k is the schedule's largest draft
length (a schedule caps a request's k, never raises it). A proposal that is one k at every batch size, with no limit
and no gate, is that k alone (no schedule: what `set-k` does). The cost model knows nothing beyond the calibrated
batch sizes, so a served max_concurrency above them is kept.

The gate is left as served unless the window shows it should change: a served gate's threshold is compared with the
break-even at the window's concurrency (the mean acceptance length E at which the proposed k there predicts 1.0x),
in the served gate's unit (`targets.controls.Release.threshold_from_break_even`: TensorRT-LLM 1.2.1's accepted draft
tokens per iteration E - 1, 1.3's rate); when they differ by more than GATE_TOLERANCE, the proposal carries the
break-even (window, probes and controls as served). No gate is proposed where none is served: whether to gate is the
deployment's choice (`trtspec report` recommends one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from trtspec.contracts.baseline import Baseline
from trtspec.contracts.control import ServedSpeculation, describe
from trtspec.contracts.schedule import SpecSchedule
from trtspec.ops.buckets import bucket_of
from trtspec.ops.recommend import MIN_DRAFTS, MIN_GAIN, predicted_speedup
from trtspec.ops.window import WindowStats
from trtspec.targets.controls import release

MIN_TRIALS = 20  # trials at a position below which its conditional acceptance is the window's per-token one
GATE_TOLERANCE = 0.10  # a served gate's threshold changes when the break-even differs from it by more than this
Source = Literal["window", "pooled"]


@dataclass(frozen=True)
class BucketPlan:
    """The proposal at one concurrency bucket's batch size (a power of two), with the numbers behind it."""

    batch_size: int
    k: int  # proposed
    speedup: float  # predicted at k
    served_k: int  # what the served model runs here (its schedule at this batch size, or its k)
    served_speedup: float  # predicted at served_k, the same acceptance
    acceptance: Source  # "window": this bucket's drafts; "pooled": too few here, the whole window's
    drafts: float  # drafts in this bucket's intervals
    concurrency: float | None  # mean requests in flight over those intervals (None: no interval in this bucket)
    tokens_per_s: float | None  # effective tokens/s over those intervals
    extrapolated: bool  # some position past what the drafts reached (the window's per-token acceptance)
    measured_speedup: float | None = None  # tokens_per_s over the baseline's plain tokens/s at that concurrency: what
    # served_speedup predicts, measured (both sides wall clock; a baseline measured elsewhere makes it disagree)


@dataclass(frozen=True)
class ScheduleProposal:
    """What one served model should speculate with, per batch size, at the window's acceptance."""

    model: str
    action: Literal["keep", "change", "no_data"]
    schedule: SpecSchedule | None  # proposed (None: no schedule, `default_k` at every batch size)
    default_k: int  # proposed
    served: ServedSpeculation | None  # what the model serves (None: not known; its k from the metrics assumed)
    served_k: int
    max_batch_size: int  # the proposal covers batch sizes 1..this
    ks: tuple[int, ...] = ()  # proposed k at batch sizes 1..max_batch_size
    buckets: list[BucketPlan] = field(default_factory=list)
    message: str = ""

    @property
    def single_k(self) -> bool:
        """One k at every batch size and nothing else: a default-k change (`set-k`), not a schedule."""
        return self.schedule is None

    def text(self) -> str:
        return describe(self.schedule, self.default_k)

    def served_text(self) -> str:
        if self.served is None:
            return f"k={self.served_k} (schedule not known)"
        return describe(self.served.schedule, self.served.default_k)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "action": self.action, "message": self.message, "default_k": self.default_k,
                "schedule": None if self.schedule is None else self.schedule.to_parameters(),
                "served": None if self.served is None else {
                    "default_k": self.served.default_k, "max_k": self.served.max_k,
                    "schedule": None if self.served.schedule is None else self.served.schedule.to_parameters()},
                "served_k": self.served_k, "max_batch_size": self.max_batch_size, "ks": list(self.ks),
                "buckets": [vars(b) for b in self.buckets]}


@dataclass(frozen=True)
class Acceptance:
    """E(k) for k = 0..max_k from one set of counts, and whether a position needed extrapolation."""

    tokens: dict[int, float]
    extrapolated: bool
    drafts: float

    @classmethod
    def of(cls, window: WindowStats, max_k: int) -> Acceptance:
        tokens, extrapolated = expected_tokens(window.accepted_per_pos, window.rejections_per_pos, max_k)
        return cls(tokens, extrapolated, window.num_drafts)


def expected_tokens(accepted: Sequence[float], rejections: Sequence[float], max_k: int,
                    min_trials: float = MIN_TRIALS) -> tuple[dict[int, float], bool]:
    """({k: E(k)} for k = 0..max_k, extrapolated) from per-position counts (module docstring)."""
    accepted_all = sum(accepted)
    trials_all = accepted_all + sum(rejections)
    alpha = accepted_all / trials_all if trials_all else 0.0
    out, total, run, extrapolated = {0: 1.0}, 1.0, 1.0, False
    for i in range(max_k):
        hits = accepted[i] if i < len(accepted) else 0.0
        trials = hits + (rejections[i] if i < len(rejections) else 0.0)
        if trials and trials >= min_trials:
            run *= hits / trials
        else:
            run *= alpha
            extrapolated = True
        total += run
        out[i + 1] = total
    return out, extrapolated


def propose_schedule(window: WindowStats, buckets: Mapping[int, WindowStats], baseline: Baseline, *,
                     served: ServedSpeculation | None = None, max_batch_size: int | None = None) -> ScheduleProposal:
    """The schedule the cost model chooses at the acceptance of `window` (the model's whole window) and `buckets`
    (its intervals per concurrency bucket, `BucketWindows.of`), from the baseline's calibration (module docstring)."""
    name = str(window.model)
    served_k = served.default_k if served is not None else int(window.k if window.k is not None else baseline.k)
    max_k = min(baseline.max_k, served.max_k) if served is not None else baseline.max_k
    top = max(1, max_batch_size or max(c.batch_size for c in baseline.costs))
    if window.num_drafts < MIN_DRAFTS:
        return ScheduleProposal(name, "no_data", served.schedule if served else None, served_k, served, served_k, top,
                                message=f"{int(window.num_drafts)} drafts in the window (< {MIN_DRAFTS}): no schedule "
                                        "proposal yet")
    pooled = Acceptance.of(window, max_k)
    by_bucket = {b: Acceptance.of(w, max_k) for b, w in buckets.items() if w.num_drafts >= MIN_DRAFTS}

    def served_at(batch: int) -> int:
        return min(served.k_at(batch) if served is not None else served_k, max_k)

    ks: list[int] = []
    rows: list[BucketPlan] = []
    for batch in range(1, top + 1):
        acceptance = by_bucket.get(bucket_of(batch), pooled)
        costs = baseline.step_costs(batch)
        by_k = {k: predicted_speedup(k, acceptance.tokens, baseline, batch, costs) for k in range(max_k + 1)}
        best = max(by_k, key=lambda k: (by_k[k], -k))
        now = served_at(batch)
        k = now if by_k[best] < by_k[now] * (1 + MIN_GAIN) else best
        ks.append(k)
        if batch & (batch - 1) == 0:  # a bucket's own batch size: one row
            data = buckets.get(batch)
            plain = baseline.plain_tokens_per_s_at(data.concurrency or batch) if data else None
            rows.append(BucketPlan(batch, k, by_k[k], now, by_k[now],
                                   "window" if batch in by_bucket else "pooled",
                                   data.num_drafts if data else 0.0, data.concurrency if data else None,
                                   data.tokens_per_s if data else None, acceptance.extrapolated,
                                   data.tokens_per_s / plain if data and plain else None))
    served_schedule = served.schedule if served is not None else None
    served_limit = served_schedule.max_concurrency if served_schedule is not None else None
    draft_len, limit, default_k = compress(ks, served_limit)
    gate = _gate(window, baseline, ks, served_schedule)
    schedule = SpecSchedule(draft_len=draft_len, max_concurrency=limit, **gate)
    schedule = schedule if schedule.to_parameters() else None
    def beyond(value: int | None) -> int | None:  # a limit past the batch sizes covered (inside, ks show it)
        return value if value is not None and value >= top else None

    unchanged = (ks == [served_at(b) for b in range(1, top + 1)] and beyond(limit) == beyond(served_limit)
                 and gate == _served_gate(served_schedule))
    common = dict(model=name, served=served, served_k=served_k, max_batch_size=top, ks=tuple(ks), buckets=rows)
    if unchanged:
        kept = describe(served_schedule, served_k) if served is not None else f"k={served_k}"
        return ScheduleProposal(**common, action="keep", schedule=served_schedule, default_k=served_k,
                                message=f"keep {kept}: no batch size 1-{top} predicts {MIN_GAIN:.0%} more with "
                                        "another k")
    why = [f"batch {r.batch_size}: k={r.k} {r.speedup:.2f}x (now k={r.served_k} {r.served_speedup:.2f}x)"
           for r in rows if r.k != r.served_k]
    if gate != _served_gate(served_schedule):
        before, after = (served_schedule.gate_threshold if served_schedule else None), SpecSchedule(**gate).gate_threshold
        why.append(f"gate threshold {before} -> {after} (break-even at the window's concurrency)")
    served_text = describe(served_schedule, served_k) if served is not None else f"k={served_k}, schedule not known"
    return ScheduleProposal(**common, action="change", schedule=schedule, default_k=default_k,
                            message=f"serve {describe(schedule, default_k)} (served: {served_text}); "
                                    f"{'; '.join(why) or 'between the buckets: see ks'}")


def compress(ks: Sequence[int], served_limit: int | None = None) -> tuple[tuple[tuple[int, int], ...] | None,
                                                                            int | None, int]:
    """(draft_len, max_concurrency, default k) of the k per batch size 1..len(ks) (module docstring). `served_limit`:
    a served max_concurrency, kept when it lies beyond the batch sizes given and they all speculate."""
    top = len(ks)
    end = top
    while end > 1 and ks[end - 1] == 0:  # ks[end:] is the run of 0 that reaches the last batch size
        end -= 1
    if end < top and ks[end - 1] > 0:
        limit: int | None = end  # no speculation above batch size `end`
    else:
        limit = served_limit if served_limit is not None and served_limit >= top and ks[-1] > 0 else None
    entries = [(b, k) for b, k in enumerate(ks[:end], 1) if b == 1 or k != ks[b - 2]]
    default_k = max(k for _, k in entries)
    if entries == [(1, default_k)]:
        return None, (limit if default_k else None), default_k
    return tuple(entries), limit, default_k


def _served_gate(schedule: SpecSchedule | None) -> dict[str, Any]:
    """The served gate's fields (whichever release's gate it is), with probes and controls."""
    if schedule is None:
        return {}
    names = schedule.gate_keys or ()
    return {**{name: getattr(schedule, name) for name in names}, "probe_every": schedule.probe_every,
            "controls": schedule.controls}


def _gate(window: WindowStats, baseline: Baseline, ks: Sequence[int], served: SpecSchedule | None) -> dict[str, Any]:
    """The gate's fields: as served, the threshold re-derived in its unit (module docstring)."""
    gate = _served_gate(served)
    if served is None or not served.gated:
        return gate
    batch = min(max(round(window.concurrency or 1.0), 1), len(ks))
    k = ks[batch - 1]
    if k == 0:  # no speculation at the expected batch size: nothing for the gate to decide there
        return gate
    even = 1.0 / predicted_speedup(k, {k: 1.0}, baseline, batch)  # the speedup is linear in E(k)
    proposed = release(served.gate_release or "1.2.1").threshold_from_break_even(even, k)
    threshold, keys = served.gate_threshold, served.gate_keys
    assert threshold is not None and keys is not None  # (gated)
    if round(proposed, 3) > 0 and abs(proposed - threshold) > GATE_TOLERANCE * max(threshold, 1e-9):
        gate[keys[1]] = round(proposed, 3)
    return gate
