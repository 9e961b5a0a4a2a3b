"""Windowed numbers from cumulative counters: a ring of scrapes, per-model increments, derived acceptance and speed.

`Ring` keeps the scrapes of the last `window_s` seconds (plus one older, the window's start). `increments(a, b)`
diffs two scrapes of one model with Prometheus' counter-reset rule, per model: when any of its series went down (a
counter, a per-position count, requests, a histogram's count, sum or any bucket), the model reloaded and all of its
series restarted at 0, so the increments are the new values and never negative. A decrease without a reload (an
exporter whose counters go backwards) is read the same way, as Prometheus' rate() reads it, and counted in
`resets` (the dashboard notes it). (A reload whose new counts all overtook the old ones between two scrapes cannot be
seen; with 1 s scrapes and reloads that take seconds, it does not happen.) `WindowStats` is what a window holds, with the seed's numbers derived
from it through the one definition of each formula (`trtspec.contracts.metrics`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from trtspec.contracts.metrics import (
    acceptance_rate,
    alpha_from_totals,
    conditional_acceptance,
    draft_length,
    mean_acceptance_length,
)
from trtspec.contracts.series import PER_POSITION
from trtspec.ops.sample import Histogram, ModelCounters, ModelId, Sample
from trtspec.ops.scrape import HISTOGRAMS


def _went_down(new: ModelCounters, old: ModelCounters) -> bool:
    """Whether any series of the model is below its previous value: the model reloaded, and all of its series
    restarted at 0 together."""
    if any(v < old.counters.get(key, 0.0) for key, v in new.counters.items()):
        return True
    if any(v < old.requests.get(reason, 0.0) for reason, v in new.requests.items()):
        return True
    for key, values in new.per_pos.items():
        before = old.per_pos.get(key, [])
        if any(v < before[i] for i, v in enumerate(values) if i < len(before)):
            return True
    for key, hist in new.histograms.items():
        before = old.histograms.get(key)
        if before is not None and (hist.count < before.count or hist.sum < before.sum or any(
                count < before.buckets.get(bound, 0.0) for bound, count in hist.buckets.items())):
            return True
    return False


@dataclass
class WindowStats:
    """One model's increments over `seconds` (all counts are events inside the window)."""

    model: ModelId
    seconds: float = 0.0
    counts: dict[str, float] = field(default_factory=dict)  # COUNTERS key -> increment
    per_pos: dict[str, list[float]] = field(default_factory=dict)  # PER_POSITION key -> [position]
    requests: dict[str, float] = field(default_factory=dict)  # finish_reason -> ended requests
    histograms: dict[str, Histogram] = field(default_factory=dict)
    k: float | None = None  # the served default k at the window's end
    resets: int = 0  # counters that went down inside the window (reloads)
    note: str = ""  # the source's note at the window's end (`ModelCounters.note`)

    def count(self, key: str) -> float:
        return self.counts.get(key, 0.0)

    @property
    def num_drafts(self) -> float:
        return self.count("num_drafts")

    @property
    def mean_acceptance_length(self) -> float:
        return mean_acceptance_length(self.num_drafts, self.count("num_accepted_tokens"))

    @property
    def acceptance_rate(self) -> float:
        """Accepted over drafted tokens, with a tap's records that count in the rate only (ops/tap.py)."""
        return acceptance_rate(self.count("num_draft_tokens") + self.count("rate_only_num_draft_tokens"),
                               self.count("num_accepted_tokens") + self.count("rate_only_num_accepted_tokens"))

    @property
    def per_pos_estimated(self) -> bool:
        """Whether the source published totals only (TensorRT-LLM's iteration statistics): the per-position counts
        below are then the constant-alpha model's expectation for the window's totals (`alpha_from_totals`), not
        counts; drift is tested on the totals (`ops.drift.RateDetector`)."""
        return self.num_drafts > 0 and not any(self.per_pos.get(key) for key in PER_POSITION)

    @property
    def accepted_per_pos(self) -> list[float]:
        if self.per_pos_estimated:
            return self._estimated()[0]
        return self.per_pos.get("num_accepted_tokens_per_pos", [])

    @property
    def rejections_per_pos(self) -> list[float]:
        if self.per_pos_estimated:
            return self._estimated()[1]
        return self.per_pos.get("num_rejections_per_pos", [])

    def _estimated(self) -> tuple[list[float], list[float]]:
        """Expected accepted and rejected drafts per position for the totals, at a constant alpha: of D drafts of
        length k, D alpha^(i+1) accept position i and D alpha^i (1 - alpha) reject it."""
        drafts, tokens = self.num_drafts, self.count("num_draft_tokens")
        alpha = alpha_from_totals(drafts, tokens, self.count("num_accepted_tokens"))
        k = draft_length(tokens, drafts)
        return ([drafts * alpha ** (i + 1) for i in range(k)],
                [drafts * alpha ** i * (1.0 - alpha) for i in range(k)])

    @property
    def acceptance_per_pos(self) -> list[float]:
        """r_i = P(first i+1 draft tokens accepted) over the window's drafts."""
        drafts = self.num_drafts
        return [n / drafts for n in self.accepted_per_pos] if drafts else []

    @property
    def conditional_per_pos(self) -> list[float]:
        """c_i = P(token i accepted | the first i were): the Bernoulli events drift detection tests."""
        return conditional_acceptance(self.accepted_per_pos, self.rejections_per_pos)

    @property
    def trials_per_pos(self) -> list[float]:
        """Drafts that reached each position (accepted or rejected a token there)."""
        accepted, rejected = self.accepted_per_pos, self.rejections_per_pos
        size = max(len(accepted), len(rejected))
        return [(accepted[i] if i < len(accepted) else 0.0) + (rejected[i] if i < len(rejected) else 0.0)
                for i in range(size)]

    @property
    def tokens_per_s(self) -> float:
        """Effective output tokens per second (emitted tokens of requests that ended inside the window)."""
        return self.count("num_emitted_tokens") / self.seconds if self.seconds > 0 else 0.0

    @property
    def requests_per_s(self) -> float:
        return sum(self.requests.values()) / self.seconds if self.seconds > 0 else 0.0

    @property
    def concurrency(self) -> float | None:
        """Mean requests in flight (Little's law: latency seconds summed over the window / its length, from the
        latency histogram or a tap's `request_seconds`); from iteration statistics, the mean batch of an iteration
        (requests run / iterations: the batch size the schedule's buckets need)."""
        if self.count("iterations"):
            return self.count("num_target_forwards") / self.count("iterations")
        hist = self.histograms.get("request_latency_seconds")
        if self.seconds <= 0:
            return None
        if hist is None or not hist.count:
            seconds = self.count("request_seconds")
            return seconds / self.seconds if seconds else None
        return hist.sum / self.seconds

    def latency_quantile(self, key: str, q: float) -> float | None:
        """A quantile of a latency histogram over the window (linear inside the bucket, as histogram_quantile)."""
        hist = self.histograms.get(key)
        if hist is None or not hist.count:
            return None
        rank, prev_bound, prev_count = q * hist.count, 0.0, 0.0
        for bound in sorted(hist.buckets):
            count = hist.buckets[bound]
            if count >= rank:
                if bound == float("inf"):
                    return prev_bound
                share = (rank - prev_count) / (count - prev_count) if count > prev_count else 1.0
                return prev_bound + (bound - prev_bound) * share
            prev_bound, prev_count = bound, count
        return prev_bound


def increments(model: ModelId, new: ModelCounters, old: ModelCounters | None, seconds: float) -> WindowStats:
    """The window between two scrapes of `model` (old None: the model appeared; everything it holds is new)."""
    old = old or ModelCounters()
    reset = _went_down(new, old)
    if reset:  # everything the model holds now happened since it reloaded
        old = ModelCounters()
    out = WindowStats(model, seconds=seconds, k=new.k, resets=int(reset), note=new.note)
    for key, value in new.counters.items():
        out.counts[key] = value - old.counters.get(key, 0.0)
    for key in PER_POSITION:
        values, before = new.per_pos.get(key, []), old.per_pos.get(key, [])
        out.per_pos[key] = [v - (before[i] if i < len(before) else 0.0) for i, v in enumerate(values)]
    out.requests = {r: v - old.requests.get(r, 0.0) for r, v in new.requests.items()}
    for key in HISTOGRAMS:
        hist = new.histograms.get(key)
        if hist is None:
            continue
        prev = old.histograms.get(key, Histogram())
        out.histograms[key] = Histogram({b: c - prev.buckets.get(b, 0.0) for b, c in hist.buckets.items()},
                                        hist.sum - prev.sum, hist.count - prev.count)
    return out


class Ring:
    """The scrapes of the last `window_s` seconds (and the newest one older than that, where the window starts)."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self.samples: deque[Sample] = deque()

    def push(self, sample: Sample) -> None:
        self.samples.append(sample)
        while len(self.samples) > 2 and sample.time - self.samples[1].time >= self.window_s:
            self.samples.popleft()

    @property
    def span_s(self) -> float:
        """Seconds covered so far (less than window_s until the ring has filled)."""
        return self.samples[-1].time - self.samples[0].time if len(self.samples) > 1 else 0.0

    def window(self) -> dict[ModelId, WindowStats]:
        """Per model: the increments from the window's first scrape to the newest, summed pairwise so that a reset
        between any two scrapes loses nothing."""
        if len(self.samples) < 2:
            return {}
        out: dict[ModelId, WindowStats] = {}
        pairs = list(zip(list(self.samples)[:-1], list(self.samples)[1:], strict=True))
        for old, new in pairs:
            for model, counters in new.models.items():
                step = increments(model, counters, old.models.get(model), new.time - old.time)
                out[model] = merge(out[model], step) if model in out else step
        for stats in out.values():
            stats.seconds = self.span_s
        return out


def merge(a: WindowStats, b: WindowStats) -> WindowStats:
    """a then b: increments added (b is later: its k wins)."""
    out = WindowStats(a.model, a.seconds + b.seconds, k=b.k if b.k is not None else a.k, resets=a.resets + b.resets,
                      note=b.note)
    for key in set(a.counts) | set(b.counts):
        out.counts[key] = a.counts.get(key, 0.0) + b.counts.get(key, 0.0)
    for key in set(a.per_pos) | set(b.per_pos):
        x, y = a.per_pos.get(key, []), b.per_pos.get(key, [])
        out.per_pos[key] = [(x[i] if i < len(x) else 0.0) + (y[i] if i < len(y) else 0.0)
                            for i in range(max(len(x), len(y)))]
    for reason in set(a.requests) | set(b.requests):
        out.requests[reason] = a.requests.get(reason, 0.0) + b.requests.get(reason, 0.0)
    for key in set(a.histograms) | set(b.histograms):
        x, y = a.histograms.get(key, Histogram()), b.histograms.get(key, Histogram())
        out.histograms[key] = Histogram({bound: x.buckets.get(bound, 0.0) + y.buckets.get(bound, 0.0)
                                         for bound in set(x.buckets) | set(y.buckets)}, x.sum + y.sum,
                                        x.count + y.count)
    return out


def pool(stats: Iterable[WindowStats], seconds: float) -> dict[ModelId, WindowStats]:
    """Per model: the increments of every instance serving it added up (`ModelId.pooled`: one instance per scraped
    page, e.g. a Dynamo deployment's workers), over `seconds` (the instances ran side by side, not one after another).
    The served k is the last instance's."""
    out: dict[ModelId, WindowStats] = {}
    for one in stats:
        key = one.model.pooled
        one = replace(one, model=key)
        out[key] = merge(out[key], one) if key in out else one
    for stats_of_model in out.values():
        stats_of_model.seconds = seconds
    return out
