"""The monitor's state: scrapes in, one `ModelReport` per served model out (window numbers, drift, recommendation).

`Monitor.observe(sample)` pushes a scrape into the ring, feeds each model's drift detector the increments since the
previous scrape (and keeps the increments per concurrency bucket, ops/buckets.py), and `Monitor.reports()` derives
the window's numbers, the recommended k and the proposed schedule (ops/schedule.py). A model served by several instances (the
workers of a Dynamo deployment, one metrics page each) is one report: their increments added up (`window.pool`).
Rendering (rich, text, JSON) is dashboard.py; fetching is scrape.py. A model without drafts (plain decoding, the
draft model itself) is reported with its throughput only. `Monitor.apply` acts on the reports through a server's
control interface (trtspec.contracts.control: `trtspec monitor --apply`): a drifted model's proposed schedule, or
its recommended k where the proposal is one k and the model serves no schedule.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from trtspec.contracts.baseline import Baseline
from trtspec.contracts.control import ServedSpeculation, ServerControl, describe
from trtspec.contracts.costmodel import cost_per_million_tokens
from trtspec.methods import BASELINE
from trtspec.ops.buckets import BucketWindows
from trtspec.ops.drift import CusumDetector, DriftConfig, DriftStatus, RateDetector
from trtspec.ops.recommend import Recommendation, baseline_alpha, recommend
from trtspec.ops.sample import ModelId, Sample
from trtspec.ops.schedule import ScheduleProposal, propose_schedule
from trtspec.ops.window import Ring, WindowStats, increments, pool


@dataclass(frozen=True)
class ModelReport:
    """The seed's numbers for one served model over the window (None where the window cannot tell)."""

    model: str
    method: str
    window_s: float
    k: int | None
    num_drafts: float
    requests: float
    mean_acceptance_length: float | None
    acceptance_rate: float | None
    acceptance_per_pos: list[float]
    conditional_per_pos: list[float]
    tokens_per_s: float
    plain_tokens_per_s: float | None  # the baseline's, at the window's concurrency
    speedup: float | None  # tokens_per_s / plain_tokens_per_s
    concurrency: float | None
    latency_p50_s: float | None
    latency_p95_s: float | None
    time_per_output_token_p50_s: float | None
    cost_per_million: float | None  # $ per 1M output tokens at the window's throughput
    baseline_per_pos: list[float] | None
    drift: DriftStatus | None
    recommendation: Recommendation | None
    resets: int
    schedule: ScheduleProposal | None = None  # the proposed schedule per batch size (with a baseline)
    per_pos_estimated: bool = False  # the source published totals only: per-position numbers are the alpha model's
    missing_iterations: float = 0.0  # iteration rows this monitor never saw (another reader of trtllm-serve's /metrics)
    note: str = ""  # what the source lacks (ModelCounters.note)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["drift"] = None if self.drift is None else {**asdict(self.drift), "drifted": self.drift.drifted}
        out["schedule"] = None if self.schedule is None else self.schedule.to_dict()
        return out


class Monitor:
    """Ring + per-model drift detectors + the baseline (optional: without one, no drift and no recommendation).

    Args:
        window_s: the window's length. baseline: the deploy-time reference. price_per_hour: $ per device-hour.
        models: only these model names (None: every model that publishes the series).
        served: what each model (by name) speculates with, where known (`ServerControl.served`, or the served
            repository's files); the schedule proposal starts from it, and `apply` keeps it current.
        max_batch_size: the largest batch size a schedule proposal covers (None: the baseline's largest calibrated).
    """

    def __init__(self, window_s: float, baseline: Baseline | None = None, *, price_per_hour: float | None = None,
                 drift: DriftConfig | None = None, models: set[str] | None = None,
                 served: Mapping[str, ServedSpeculation] | None = None, max_batch_size: int | None = None) -> None:
        self.ring = Ring(window_s)
        self.buckets = BucketWindows(window_s)
        self.served: dict[str, ServedSpeculation] = dict(served or {})
        self.max_batch_size = max_batch_size
        self.baseline = baseline
        self.price_per_hour = price_per_hour
        self.drift_config = drift or DriftConfig()
        self.models = models
        self.detectors: dict[ModelId, CusumDetector | RateDetector] = {}
        self.steps: dict[ModelId, WindowStats] = {}  # each model's increments of the latest scrape
        self._last: Sample | None = None

    def observe(self, sample: Sample) -> None:
        """Add one scrape: the ring, then each model's detector with the increments since the previous scrape."""
        self.ring.push(sample)
        if self._last is not None:
            seconds = sample.time - self._last.time
            steps = [increments(model, counters, self._last.models.get(model), seconds)
                     for model, counters in sample.models.items() if self._wanted(model)]
            for model, step in pool(steps, seconds).items():  # the instances of a model (Dynamo workers), summed
                self.steps[model] = step
                self.buckets.add(model, sample.time, step)
                if step.num_drafts and self.baseline is not None:
                    detector = self._detector(model, totals_only=step.per_pos_estimated)
                    if isinstance(detector, RateDetector):
                        detector.update(step.count("num_accepted_tokens"), step.count("num_draft_tokens"),
                                        step.num_drafts)
                    else:
                        detector.update(step.accepted_per_pos, step.rejections_per_pos)
        self._last = sample

    def _wanted(self, model: ModelId) -> bool:
        return self.models is None or model.model in self.models

    def _detector(self, model: ModelId, *, totals_only: bool = False) -> CusumDetector | RateDetector:
        """The model's drift test, made on its first drafts: per position, or on the acceptance rate for a source
        that publishes totals only."""
        if model not in self.detectors:
            base = self.baseline
            assert base is not None
            self.detectors[model] = (
                RateDetector(base.conditional_per_pos, sum(base.trials_per_pos[:1]), baseline_alpha(base), self.drift_config)
                if totals_only else CusumDetector(base.conditional_per_pos, base.trials_per_pos, self.drift_config))
        return self.detectors[model]

    def reset_drift(self, model: ModelId | None = None) -> None:
        """Forget the drift statistics (after acting on a recommendation)."""
        for key, detector in self.detectors.items():
            if model is None or key == model:
                detector.reset()

    def apply(self, reports: list[ModelReport], control: ServerControl) -> list[str]:
        """Hand each drifted model's change to the server (`control`): its proposed schedule (`set_schedule`), or its
        recommended k (`set_default_k`) where the proposal is one k at every batch size and the model serves no
        schedule; its drift test starts afresh once a change is applied. Returns one line per change made."""
        done = []
        for report in reports:
            if report.drift is None or not report.drift.drifted:
                continue
            name = report.model.split("/")[0]
            proposal = report.schedule
            if proposal is not None and not (proposal.single_k and (proposal.served is None
                                                                    or proposal.served.schedule is None)):
                if proposal.action == "change":
                    change = control.set_schedule(name, proposal.schedule, default_k=proposal.default_k)
                    max_k = proposal.served.max_k if proposal.served else self._max_k()
                    self.served[name] = ServedSpeculation(name, change.new_k, max_k, change.new)
                    done.append(f"applied: {change.model} {describe(change.old, change.old_k)} -> "
                                f"{describe(change.new, change.new_k)} ({proposal.message})")
                    self.reset_drift()
                continue
            rec = report.recommendation
            if rec is None:
                continue
            if rec.action in ("reduce_k", "increase_k", "retrain_draft") and rec.recommended_k != rec.current_k:
                change = control.set_default_k(name, rec.recommended_k)
                if name in self.served:
                    self.served[name] = replace(self.served[name], default_k=change.new_k)
                done.append(f"applied: {change.model} k {change.old_k} -> {change.new_k} ({rec.message})")
                self.reset_drift()
        return done

    def _max_k(self) -> int:
        return self.baseline.max_k if self.baseline is not None else 0

    def reports(self) -> list[ModelReport]:
        """One report per model in the window (models with drafts first, then by name)."""
        windows = [w for w in pool(self.ring.window().values(), self.ring.span_s).values() if self._wanted(w.model)]
        windows.sort(key=lambda w: (not w.num_drafts, w.model.model))
        return [self._report(w) for w in windows]

    def _report(self, w: WindowStats) -> ModelReport:
        drafting = w.num_drafts > 0
        baseline = self.baseline
        plain = baseline.plain_tokens_per_s_at(w.concurrency or 1.0) if baseline else None
        detector = self.detectors.get(w.model)
        drift = (None if detector is None else
                 detector.status((w.count("num_accepted_tokens"), w.count("num_draft_tokens")))
                 if isinstance(detector, RateDetector) else detector.status((w.accepted_per_pos, w.rejections_per_pos)))
        speculates = baseline is not None and drafting and w.model.method != BASELINE
        rec = recommend(w, baseline) if speculates else None
        proposal = propose_schedule(w, self.buckets.of(w.model), baseline, served=self.served.get(w.model.model),
                                    max_batch_size=self.max_batch_size) if speculates and baseline else None
        price = self.price_per_hour
        return ModelReport(
            model=str(w.model), method=w.model.method, window_s=w.seconds,
            k=int(w.k) if w.k is not None else None, num_drafts=w.num_drafts,
            requests=sum(w.requests.values()),
            mean_acceptance_length=w.mean_acceptance_length if drafting else None,
            acceptance_rate=w.acceptance_rate if drafting or w.count("num_draft_tokens")
            or w.count("rate_only_num_draft_tokens") else None,
            acceptance_per_pos=w.acceptance_per_pos, conditional_per_pos=w.conditional_per_pos,
            tokens_per_s=w.tokens_per_s, plain_tokens_per_s=plain,
            speedup=w.tokens_per_s / plain if plain and w.tokens_per_s else None,
            concurrency=w.concurrency,
            latency_p50_s=w.latency_quantile("request_latency_seconds", 0.5),
            latency_p95_s=w.latency_quantile("request_latency_seconds", 0.95),
            time_per_output_token_p50_s=w.latency_quantile("time_per_output_token_seconds", 0.5),
            cost_per_million=cost_per_million_tokens(w.tokens_per_s, price) if price and w.tokens_per_s else None,
            baseline_per_pos=baseline.acceptance_per_pos if baseline else None,
            drift=drift, recommendation=rec, resets=w.resets, schedule=proposal,
            per_pos_estimated=w.per_pos_estimated, missing_iterations=w.count("missing_iterations"), note=w.note)
