"""Drift detection: a one-sided Bernoulli CUSUM per draft position against the deploy-time baseline.

The events: every draft that reaches position i accepts or rejects its token there, a Bernoulli trial with
probability c_i (conditional acceptance, `trtspec.contracts.metrics`). Under the baseline c_i = p0; the alternative is a
drop to p1 = p0 - shift. Each scrape adds the log-likelihood ratio of its x accepts in n trials,
    llr = x log(p1 / p0) + (n - x) log((1 - p1) / (1 - p0)),
divided by `dispersion` (> 1 discounts trials that are not independent: tokens of one request share a prompt),
and S_i = max(0, S_i + llr) (Page's CUSUM). Position i alarms when S_i >= h.

False alarms (stated, and measured in docs/operations.md): with independent trials at p0, the likelihood ratio from
any start is a nonnegative martingale, so by Ville's inequality it reaches e^h with probability <= e^-h; an alarm
needs that from one of at most H scrape boundaries, at one of m positions. So
    P(any false alarm within H scrapes) <= m * H * e^-h,   h = log(m * H / alpha).
Defaults: alpha = 0.01 over a horizon of 10 minutes of 1 s scrapes (H = 600), m = the baseline's positions.
Positions with fewer than `min_trials` baseline trials, or a baseline p0 of 0 or 1, are not tested.

A source that publishes totals only (TensorRT-LLM's iteration statistics: drafts, draft tokens, accepted tokens) has no
per-position trials; `RateDetector` runs the same CUSUM on its acceptance rate instead: the trials are the draft
tokens, p0 the baseline's acceptance rate at the scrape's mean draft length k, p0 = (r_0 + ... + r_{k-1}) / k with
r_i = c_0 ... c_i from the baseline's conditional acceptance (a draft's length does not change its tokens' odds),
p1 = p0 - shift. A draft's tokens are not independent (every token after the
first rejection is rejected too), so each scrape's llr is divided by `dispersion` times the design effect
var(A) / (k p0 (1 - p0)) of the baseline's accepted-length distribution, P(A >= j) = r_{j-1}; m = 1 test.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from trtspec.contracts.observability import DEFAULT_ALPHA

DEFAULT_HORIZON = 600  # scrapes the false-alarm bound covers (10 minutes at 1 s)
DEFAULT_SHIFT = 0.1  # the drop in conditional acceptance the test is tuned for (absolute)
DEFAULT_DISPERSION = 2.0  # trials per request are correlated; measured in docs/operations.md


@dataclass(frozen=True)
class DriftConfig:
    """The test's parameters (see the module docstring for the bound they give)."""

    alpha: float = DEFAULT_ALPHA
    horizon: int = DEFAULT_HORIZON
    shift: float = DEFAULT_SHIFT
    dispersion: float = DEFAULT_DISPERSION
    min_trials: int = 20

    def threshold(self, positions: int) -> float:
        """h = log(m * H / alpha) for m tested positions."""
        return math.log(max(positions, 1) * self.horizon / self.alpha)


@dataclass(frozen=True)
class PositionDrift:
    """One position's state after the latest update."""

    position: int
    baseline: float  # p0: conditional acceptance at deploy time
    observed: float | None  # the window's conditional acceptance (None: no trials in the window)
    trials: float  # in the window
    statistic: float  # S_i
    alarm: bool


@dataclass(frozen=True)
class DriftStatus:
    """The detector's verdict: which positions alarmed, the statistics and the threshold, the stated bound."""

    positions: tuple[PositionDrift, ...]
    threshold: float
    alpha: float
    horizon: int
    test: str = "per_position"  # per_position | acceptance_rate (one entry: the rate over every position)

    @property
    def drifted(self) -> bool:
        return any(p.alarm for p in self.positions)

    @property
    def alarmed_positions(self) -> list[int]:
        return [p.position for p in self.positions if p.alarm]


def llr(accepted: float, trials: float, p0: float, p1: float) -> float:
    """Log-likelihood ratio of `accepted` in `trials` Bernoulli trials, drop (p1) vs baseline (p0)."""
    return accepted * math.log(p1 / p0) + (trials - accepted) * math.log((1 - p1) / (1 - p0))


@dataclass
class CusumDetector:
    """Page's CUSUM per position; feed it each scrape's increments with `update`, read `status`.

    Args:
        baseline: p0 per position (conditional acceptance at deploy time).
        baseline_trials: how many trials measured each p0 (positions with fewer than min_trials are not tested).
    """

    baseline: Sequence[float]
    baseline_trials: Sequence[float]
    config: DriftConfig = field(default_factory=DriftConfig)
    statistics: list[float] = field(init=False)
    alarmed: list[bool] = field(init=False)
    last: list[tuple[float, float]] = field(init=False)  # (accepted, trials) of the latest update

    def __post_init__(self) -> None:
        self.tested = [i for i, (p0, n) in enumerate(zip(self.baseline, self.baseline_trials, strict=True))
                       if 0.0 < p0 < 1.0 and n >= self.config.min_trials]
        self.statistics = [0.0] * len(self.baseline)
        self.alarmed = [False] * len(self.baseline)
        self.last = [(0.0, 0.0)] * len(self.baseline)
        self.h = self.config.threshold(len(self.tested))

    def p1(self, position: int) -> float:
        return max(self.baseline[position] - self.config.shift, 1e-3)

    def update(self, accepted_per_pos: Sequence[float], rejections_per_pos: Sequence[float]) -> DriftStatus:
        """Add one scrape's increments (accepted and rejected tokens per position); alarms are sticky."""
        for i in self.tested:
            accepted = accepted_per_pos[i] if i < len(accepted_per_pos) else 0.0
            trials = accepted + (rejections_per_pos[i] if i < len(rejections_per_pos) else 0.0)
            self.last[i] = (accepted, trials)
            if trials <= 0:
                continue
            step = llr(accepted, trials, self.baseline[i], self.p1(i)) / self.config.dispersion
            self.statistics[i] = max(0.0, self.statistics[i] + step)
            self.alarmed[i] = self.alarmed[i] or self.statistics[i] >= self.h
        return self.status()

    def status(self, window: tuple[Sequence[float], Sequence[float]] | None = None) -> DriftStatus:
        """The current verdict; `window` (accepted, rejections per position) sets each position's observed rate."""
        out = []
        for i in self.tested:
            if window is not None:
                acc = window[0][i] if i < len(window[0]) else 0.0
                trials = acc + (window[1][i] if i < len(window[1]) else 0.0)
            else:
                acc, trials = self.last[i]
            out.append(PositionDrift(i, self.baseline[i], acc / trials if trials else None, trials,
                                     self.statistics[i], self.alarmed[i]))
        return DriftStatus(tuple(out), self.h, self.config.alpha, self.config.horizon)

    def reset(self) -> None:
        """Start over (after the operator acted: k changed, a new draft rolled out)."""
        self.statistics = [0.0] * len(self.baseline)
        self.alarmed = [False] * len(self.baseline)


@dataclass
class RateDetector:
    """Page's CUSUM on the acceptance rate, for sources without per-position counts (see the module docstring).

    Args:
        baseline: c_i, the baseline's conditional acceptance per position (P(token i accepted | the first i were),
            whatever the draft's length); positions past the baseline's repeat its per-token alpha.
        baseline_drafts: the drafts that measured it (fewer than min_trials: not tested).
        baseline_alpha: the baseline's per-token acceptance.
    """

    baseline: Sequence[float]
    baseline_drafts: float
    baseline_alpha: float
    config: DriftConfig = field(default_factory=DriftConfig)
    statistic: float = field(init=False, default=0.0)
    alarmed: bool = field(init=False, default=False)
    last: tuple[float, float, float] = field(init=False, default=(0.0, 0.0, 0.0))  # (accepted, draft tokens, p0)

    def __post_init__(self) -> None:
        self.tested = self.baseline_drafts >= self.config.min_trials
        self.h = self.config.threshold(1)

    def reach(self, k: int) -> list[float]:
        """r_0 .. r_{k-1} of a draft of length k: r_i = c_0 ... c_i (alpha past the baseline's positions)."""
        out, run = [], 1.0
        for i in range(k):
            run *= self.baseline[i] if i < len(self.baseline) else self.baseline_alpha
            out.append(run)
        return out

    def p0(self, mean_k: float) -> float:
        """The expected acceptance rate of drafts of mean length `mean_k` (a fractional length is read as the mix
        of its two neighbours, in proportion)."""
        whole = math.floor(mean_k)
        reach = self.reach(whole + 1)
        expected = sum(reach[:whole]) + (mean_k - whole) * reach[whole]
        return expected / mean_k

    def design_effect(self, k: int) -> float:
        """var(accepted per draft) over the binomial variance k p0 (1 - p0), at least 1."""
        reach = self.reach(k)
        mean = sum(reach)
        second = sum((2 * j + 1) * r for j, r in enumerate(reach))  # E[A^2] = sum_j (2j - 1) P(A >= j), j from 1
        p0 = mean / k
        binomial = k * p0 * (1.0 - p0)
        return max(1.0, (second - mean * mean) / binomial) if binomial > 0 else 1.0

    def update(self, accepted: float, draft_tokens: float, drafts: float) -> DriftStatus:
        """Add one scrape's totals; the alarm is sticky."""
        if self.tested and drafts > 0 and draft_tokens > 0:
            mean_k = max(1.0, draft_tokens / drafts)
            p0 = self.p0(mean_k)
            self.last = (accepted, draft_tokens, p0)
            if 0.0 < p0 < 1.0:
                p1 = max(p0 - self.config.shift, 1e-3)
                effect = self.design_effect(max(1, round(mean_k)))
                step = llr(accepted, draft_tokens, p0, p1) / (self.config.dispersion * effect)
                self.statistic = max(0.0, self.statistic + step)
                self.alarmed = self.alarmed or self.statistic >= self.h
        return self.status()

    def status(self, window: tuple[float, float] | None = None) -> DriftStatus:
        """The current verdict; `window` (accepted, draft tokens) sets the observed rate."""
        accepted, trials, p0 = self.last
        if window is not None:
            accepted, trials = window
        entry = PositionDrift(0, p0, accepted / trials if trials else None, trials, self.statistic, self.alarmed)
        return DriftStatus((entry,) if self.tested else (), self.h, self.config.alpha, self.config.horizon,
                           test="acceptance_rate")

    def reset(self) -> None:
        self.statistic, self.alarmed = 0.0, False
