"""Adaptive speculation: each step's draft cap K from measured step costs, measured admission costs and acceptance.

Objective: the engine's long-run output tokens per second, at the current load level (running requests, bucketed by
`load_bucket`). Under a cap K every adaptive request drafts k_i = min(K, its cap), and
    rate(K) = T(K) / S(K)
    T(K) = sum_i E(alpha_i, k_i)             tokens per step; E(alpha, k) = (1 - alpha^(k+1)) / (1 - alpha)
    S(K) = D(K) + a(K > 0) * T(K) / L        seconds per step
  alpha_i  request i's per-token acceptance: its own forgotten counts of accepted tokens and trials (a rejection
           ends a draft's trials), shrunk towards its method's estimate by PRIOR_TRIALS pseudo-trials; the counts
           also age on every step the request does not draft (evidence ages per token: K = 0 yields no new trials,
           so a dip that made K = 0 win would otherwise keep it there);
  D(K)     MEASURED seconds of a decode step at this load with step cap K (target + draft + host) AT THE MACHINE'S
           CURRENT SPEED: K's cost relative to the other arms from differences between steps run next to each
           other (`trtspec.spec.paired_costs.PairedCosts`: an explored step against the incumbent's steps just before it),
           times the current speed level from the latest steps. A shared CPU's speed drifts by 30-40% over seconds
           while consecutive steps run at nearly the same speed, so only costs measured close together in time are
           comparable; noise is one-sided (another process only ever adds time), so the estimates are low
           quantiles. Drafting arms are priced on a curve in K (`PairedCosts.curve`) whose steps pool every
           difference around them and are never negative (D(K) does not fall as K grows), inside the span of K
           measured; beyond it, extended from the nearer edge by the load's line. The choice then takes D(K) no
           cheaper than the largest D of a smaller drafting K plus the measured least cost of the extra draft tokens
           (one more draft-model forward over the rows per token, from the steps' own draft seconds), whatever
           priced each (`predicted_rates`, `draft_token_seconds`). Until the curve exists (LINE_MIN differences), and for
           arms off it, an arm's relative cost from its best pair, priced no cheaper than a low quantile of its own
           last WINDOW steps (measured at whatever speed the machine had then) until that pair has MIN_SAMPLES
           differences;
  a(s)     MEASURED seconds per admitted request beyond the decode step it rode in (the target's and the draft's
           prompt passes, the extra forward of a split batch), separately for steps that speculated (s) or not,
           the same low quantile over the last admission steps;
  L        MEASURED output tokens per finished request, so T(K) / L admissions fall on each step.
K = 0 (plain decoding) is always a candidate; a larger K must be predicted `larger_k_margin` better per extra draft
token than a smaller one (near the top rate(K) is flat within the estimates' error, and when the estimate is wrong a
smaller K loses less: fewer rejected tokens drafted and verified, shorter steps), and the last choice at a load level is
kept unless another K is predicted `switch_margin` better (hysteresis: flapping desynchronises the batch).
Steps with prefill rows use the same choice as a decode step of the same batch: their prompt passes cost the same
whatever K is (sunk), and dividing by a sunk cost would make large K look free.

Every number that decides is measured where it is used; a line in K per load (prior: the global fits, or a sweep's
measured `trtspec.contracts.costmodel.StepCosts`, duck-typed so trtspec.sweep is never imported) only ranks arms not yet
measured, shifted to pass through the nearest measured arm of the same load.

Exploration (cheap): every `explore_every / 2`-th choice at a load level tries a neighbour of the best K
(alternating up / down) that is unmeasured (fewer than MIN_SAMPLES steps, or a relative cost resting on fewer than
MIN_SAMPLES adjacent-step differences: a first difference may be a spike), and every `explore_every`-th one a
neighbour that is stale (not measured in `stale_after` choices) or predicted within `explore_margin` of the best; a
clearly worse neighbour is re-measured only when stale. So the policy hill-climbs on measured arms (rate(K) is
unimodal: T is concave in K, D about linear), settles, and at K = 0 still drafts now and then, which keeps the
acceptance estimates fresh for when load drops or acceptance recovers.

Why adjacent steps: a low quantile of an arm's own recent steps keeps the machine's speed of whenever that arm last
ran, while the incumbent's follows the machine, so arms measured at different speeds would be compared; a difference
between two steps a few milliseconds apart cancels the speed, and the level that prices all arms at once comes from
the latest steps.

Clock: a CPU engine times steps in process CPU time while torch runs one thread (`cpu_clock`): on a CPU shared
with other processes, wall time mostly measures them, CPU time measures the step. Elsewhere the engine's
synchronised wall time.

The measurements and the investigation behind these choices (issue 15): docs/history/adaptive-k.md.

Greedy outputs do not depend on k; a seeded sampled output does (k decides which random draws are made), so fixed k
stays the reproducible mode.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trtspec.contracts.metrics import expected_tokens_per_step as expected_tokens
from trtspec.spec.paired_costs import PairedCosts, low_quantile

WINDOW = 24  # decode steps remembered per (load, K, draft model) arm
MIN_SAMPLES = 3  # an arm with fewer steps is explored like an unmeasured one (one unlucky step must not bury it)
METHOD_DECAY = 0.995  # forgetting per trial of a method's acceptance counts (remembers ~200 trials)
REQUEST_DECAY = 0.9  # the same for one request's counts (~10 trials)
PRIOR_TRIALS = 4.0  # weight of the method's estimate in a request's, in trials
LENGTH_EMA = 0.1  # weight of the newest finished request in L


def cpu_clock() -> float:
    """Process CPU seconds while torch runs one intra-op thread, else wall seconds: the clock of a CPU engine.

    With one thread a step's CPU time is its cost without the time other processes took the core (on an idle
    machine the two agree); with several, CPU time would add up threads (and their spin-waits), so wall time.
    """
    import torch

    return time.process_time() if torch.get_num_threads() == 1 else time.perf_counter()


def _axis(arm: tuple[int, bool]) -> int | None:
    """An arm's place on the curve of decode seconds vs K (`PairedCosts.curve`): K for arms that run a draft model
    (a target forward K + 1 tokens wide and K draft forwards); None for the others (plain decoding, draft-free
    methods), priced through their differences to the curve."""
    k, drafting = arm
    return k if drafting else None


def load_bucket(rows: int) -> int:
    """Running requests -> the load level whose costs they share: exact up to 8, then four levels per doubling
    (10, 11, 13, 16, 19, 23, 27, 32, ...), so 15-17 running requests use the costs measured at 16."""
    if rows <= 8:
        return max(rows, 1)
    return round(8 * 2 ** (round(4 * math.log2(rows / 8)) / 4))


class OnlineLinearCost:
    """seconds ~ fixed + slope * x, fitted by least squares over exponentially forgotten observations.

    Two prior pseudo-observations (at x = 1 and x = prior_x) keep the fit defined before data varies in x.
    """

    def __init__(self, fixed_s: float, slope_s: float, *, prior_x: float = 64.0, prior_weight: float = 0.5,
                 decay: float = 0.98) -> None:
        self.decay = decay
        self._prior = [(1.0, fixed_s + slope_s, prior_weight), (prior_x, fixed_s + slope_s * prior_x, prior_weight)]
        self._n = self._sx = self._sy = self._sxx = self._sxy = 0.0

    def observe(self, x: float, seconds: float) -> None:
        d = self.decay
        self._n, self._sx, self._sy = d * self._n + 1, d * self._sx + x, d * self._sy + seconds
        self._sxx, self._sxy = d * self._sxx + x * x, d * self._sxy + x * seconds

    def coefficients(self) -> tuple[float, float]:
        n, sx, sy, sxx, sxy = self._n, self._sx, self._sy, self._sxx, self._sxy
        for x, y, w in self._prior:
            n, sx, sy, sxx, sxy = n + w, sx + w * x, sy + w * y, sxx + w * x * x, sxy + w * x * y
        var = n * sxx - sx * sx
        slope = max(0.0, (n * sxy - sx * sy) / var) if var > 1e-12 else 0.0
        return max(0.0, (sy - slope * sx) / n), slope

    def __call__(self, x: float) -> float:
        fixed, slope = self.coefficients()
        return fixed + slope * x


@dataclass
class KRequest:
    """What the policy needs to know about one scheduled request."""

    request_id: int
    method: str
    cap: int  # the most draft tokens it may get this step (its reservation)
    adaptive: bool  # False: keeps `cap` (fixed k)
    pending: int  # uncached context tokens in its row (1 when decoding, the context when prefilling)
    uses_draft_model: bool  # drafting runs draft-model forwards (costs per draft step)


def _window() -> deque:
    return deque(maxlen=WINDOW)


@dataclass
class _Arm:
    """The latest steps at one (load, K, draft model ran) arm."""

    decode: deque[float] = field(default_factory=_window)  # seconds of decode steps
    mixed: deque[tuple[float, int]] = field(default_factory=_window)  # (seconds, admitted) of admitting steps
    last: int = 0  # the load level's choice count at the latest observation


@dataclass
class _Load:
    """What the policy knows at one load level."""

    choices: int = 0
    best: int | None = None  # the latest exploiting choice (hysteresis)
    arms: dict[tuple[int, bool], _Arm] = field(default_factory=dict)  # (K, draft model ran) -> its steps
    paired: PairedCosts = field(default_factory=PairedCosts)  # decode steps compared at the same machine speed
    lines: dict[bool, OnlineLinearCost] = field(default_factory=dict)  # draft model ran -> seconds vs K (priors)
    admission: dict[bool, deque[float]] = field(default_factory=dict)  # speculated -> seconds per admitted request


class AdaptiveK:
    """Per-step draft cap from measured costs and acceptance estimates (see module docstring).

    Args:
        prior_alpha: acceptance assumed for a method before any of its drafts were verified.
        step_costs: optional {batch size: trtspec.contracts.costmodel.StepCosts} measured by a sweep; the prior of arms
            not measured yet (the nearest measured batch size is used).
        explore_every: every n-th choice at a load level may try a neighbouring K (0 = never explore).
        stale_after: choices at a load level after which an arm's measurement is re-taken.
        explore_margin: a measured neighbour predicted at least this share of the best rate is explored.
        switch_margin: another K must be predicted this much better to replace the latest choice.
        larger_k_margin: a larger K must be predicted this much better per extra draft token than a smaller one.
        clock: times a step from `choose` to `observe_step` (e.g. `cpu_clock` on a CPU); None = the seconds the
            engine reports (draft + target + host, synchronised on a GPU).
    """

    def __init__(self, *, prior_alpha: float = 0.6, step_costs: Mapping[int, Any] | None = None,
                 explore_every: int = 8, stale_after: int = 64, explore_margin: float = 0.9,
                 switch_margin: float = 0.02, larger_k_margin: float = 0.02,
                 clock: Callable[[], float] | None = None) -> None:
        self.prior_alpha = prior_alpha
        self.explore_every, self.stale_after = explore_every, stale_after
        self.explore_margin, self.switch_margin, self.larger_k_margin = explore_margin, switch_margin, larger_k_margin
        self.step_costs = dict(step_costs) if step_costs else None
        self.clock = clock
        self._step_start: float | None = None  # clock() when the current step's choice was made
        self.steps = 0  # steps observed: the time base of adjacent-step comparisons
        self.target_cost = OnlineLinearCost(2e-3, 2e-4)  # x = padded target tokens (rows x width); prior of lines
        self.draft_cost = OnlineLinearCost(1e-3, 1e-4)  # x = draft rows, per draft step; prior of lines
        self.overhead_s = 0.0  # EMA of host time per step; prior of lines
        self.loads: dict[int, _Load] = {}  # load_bucket(running requests) -> costs measured there
        self.request_tokens: float | None = None  # L: EMA of output tokens per finished request
        self._admission: dict[bool, deque[float]] = {}  # speculated -> seconds per admitted request, all loads
        self._request: dict[int, list[float]] = {}  # request id -> forgotten [accepted, trials]
        self._method: dict[str, list[float]] = {}  # method -> forgotten [accepted, trials]

    # -- acceptance ----------------------------------------------------------------------------------------------
    def alpha(self, request_id: int, method: str) -> float:
        """The request's per-token acceptance: its counts shrunk towards its method's estimate."""
        accepted, trials = self._method.get(method, (0.0, 0.0))
        prior = accepted / trials if trials > 0 else self.prior_alpha
        accepted, trials = self._request.get(request_id, (0.0, 0.0))
        return (accepted + PRIOR_TRIALS * prior) / (trials + PRIOR_TRIALS)

    def observe_draft(self, request_id: int, method: str, num_draft_tokens: int, num_accepted: int) -> None:
        """One verified draft: num_accepted Bernoulli successes, then a failure unless all were accepted."""
        trials = num_accepted + (num_accepted < num_draft_tokens)
        for table, key, decay in ((self._request, request_id, REQUEST_DECAY), (self._method, method, METHOD_DECAY)):
            acc = table.setdefault(key, [0.0, 0.0])  # type: ignore[arg-type]
            forget = decay**trials  # memory counted in trials: a long draft is not worth more than its trials
            acc[0] = forget * acc[0] + num_accepted
            acc[1] = forget * acc[1] + trials

    def forget(self, request_id: int, output_tokens: int | None = None) -> None:
        """A request left; `output_tokens` when it finished (not aborted) updates L."""
        self._request.pop(request_id, None)
        if output_tokens:
            old = self.request_tokens
            self.request_tokens = output_tokens if old is None else (1 - LENGTH_EMA) * old + LENGTH_EMA * output_tokens

    # -- costs ---------------------------------------------------------------------------------------------------
    def observe_step(self, *, rows: int, width: int, target_s: float, draft_steps: int, draft_rows: int,
                     draft_s: float, overhead_s: float, prefill_rows: int, max_k: int) -> None:
        """One step's timings: `rows` requests, of which `prefill_rows` ran prompt passes; max_k = the step's cap."""
        seconds = target_s + draft_s + overhead_s
        if self.clock is not None and self._step_start is not None:
            seconds, self._step_start = self.clock() - self._step_start, None
        drafting = draft_rows > 0
        load = self._load(rows)
        arm = load.arms.setdefault((max_k, drafting), _Arm())
        arm.last = load.choices
        self.steps += 1
        if prefill_rows == 0:  # a decode step: a direct observation of D at (load, K)
            arm.decode.append(seconds)
            load.paired.observe((max_k, drafting), seconds, self.steps)
            self._line(load, rows, drafting).observe(max_k, seconds)
            self.target_cost.observe(rows * width, target_s)
        else:
            # admissions: what the step cost beyond a decode step of as many rows (a new row drafts and is verified
            # like the others), learned only where that decode step was measured directly (else D and a would
            # feed each other)
            decode = self._measured_seconds(rows, load, (max_k, drafting))
            if arm.decode and decode is not None:
                excess = max(0.0, seconds - decode) / prefill_rows
                for table in (load.admission, self._admission):
                    table.setdefault(max_k > 0, _window()).append(excess)
            arm.mixed.append((seconds, prefill_rows))
            per_admission = self.admission_seconds(rows, max_k > 0)
            if per_admission and seconds > 2 * prefill_rows * per_admission:  # mostly decode: compared like one
                load.paired.observe((max_k, drafting), seconds - prefill_rows * per_admission, self.steps)
        if draft_steps > 0 and draft_rows > 0:
            self.draft_cost.observe(draft_rows, draft_s / draft_steps)
        self.overhead_s = 0.8 * self.overhead_s + 0.2 * overhead_s if self.overhead_s else overhead_s

    def decode_seconds(self, rows: int, k: int, drafting: bool) -> float:
        """D(K): the arm's measured seconds (`_measured_seconds`), else the load's line shifted through its nearest
        measured arm."""
        drafting = drafting and k > 0
        load = self._load(rows)
        seconds = self._measured_seconds(rows, load, (k, drafting))
        if seconds is not None:
            return seconds
        line = self._line(load, rows, drafting)
        measured = [(abs(j - k), j) for (j, d), a in load.arms.items() if d == drafting and (a.decode or a.mixed)]
        if not measured:
            return line(k)
        _, j = min(measured)
        return max(0.0, self._measured_seconds(rows, load, (j, drafting)) + line(k) - line(j))  # type: ignore[operator]

    def _measured_seconds(self, rows: int, load: _Load, key: tuple[int, bool]) -> float | None:
        """The arm's decode-step seconds at the machine's current speed. Drafting arms: the curve in K whose steps
        pool every adjacent-step difference around them (`PairedCosts.curve`) inside its measured span, beyond it
        extended from the nearer edge by the load's line. Other arms (plain decoding): through their differences to
        the curve, else alone (`_arm_seconds`). None when it never ran here."""
        curve = load.paired.curve(_axis)
        if curve is not None and key[1]:
            inside = curve.seconds(key[0])
            if inside is not None:
                return inside
            # beyond the span: extended from its nearer edge by the load's line (the arm's own steps may date from
            # another speed, and a flat extension would make every larger K look free)
            line, edge = self._line(load, rows, True), min(max(key[0], min(curve.on)), max(curve.on))
            return max(0.0, curve.on[edge] + line(key[0]) - line(edge))
        if curve is not None and key in curve.off:
            return curve.off[key]
        return self._arm_seconds(rows, load, key)

    def _arm_seconds(self, rows: int, load: _Load, key: tuple[int, bool]) -> float | None:
        """The arm alone: through its best pair of adjacent steps (`PairedCosts.seconds`) when that rests on
        MIN_SAMPLES differences, else no cheaper than a low quantile of its own steps; None when it never ran here."""
        paired = load.paired.seconds(key)
        if paired is not None and load.paired.support(key) >= MIN_SAMPLES:
            return paired
        arm = load.arms.get(key)
        if arm is None or not (arm.decode or arm.mixed):
            return paired
        per_admission = self.admission_seconds(rows, key[0] > 0)
        own = low_quantile([*arm.decode, *(max(0.0, s - n * per_admission) for s, n in arm.mixed)])
        # few differences (one may be a spike at the arm it was measured through): never cheaper than its own steps
        return own if paired is None else max(paired, own)

    def draft_token_seconds(self, rows: int) -> float:
        """The least one more draft token per row adds to a drafting step of `rows` requests: one more draft-model
        forward over the rows (the line fitted on every step's own draft seconds per draft forward). The target's
        extra token per row is not counted: its marginal cost is ~0 on a memory-bound GPU, so it is no sure floor."""
        return self.draft_cost(rows)

    def admission_seconds(self, rows: int, speculated: bool) -> float:
        """a(s): seconds per admitted request at this load, else over all loads, from at least MIN_SAMPLES admitting
        steps; until then the other kind's (so no difference is charged before both were measured), else 0."""
        load = self._load(rows)
        for table, key in ((load.admission, speculated), (self._admission, speculated),
                           (load.admission, not speculated), (self._admission, not speculated)):
            if len(table.get(key, ())) >= MIN_SAMPLES:
                return low_quantile(table[key])
        return 0.0

    # -- choice --------------------------------------------------------------------------------------------------
    def predicted_rates(self, batch: Sequence[KRequest], top: int,
                        alphas: Sequence[float] | None = None) -> list[float]:
        """rate(K) of the module docstring for this batch under every adaptive cap K = 0..top: tokens per second.

        The drafting arms' D(K) rise with K at least by `draft_token_seconds` per extra draft token (each no cheaper
        than the largest D below it plus that): a step drafting more tokens runs one more draft forward, and an
        arm priced apart from the others (its own steps, from another second of a drifting machine; a fixed-k run
        long ago) or through a few noisy differences must not look cheaper by noise (at concurrency 16 a fixed k = 6
        run measured in a fast second made D(6) < D(5) and the choice jumped to K = 6; a curve with D(3) = D(2) at
        16 rows made K = 3-4 the choice where fixed k = 2 ran 10% faster)."""
        alphas = alphas if alphas is not None else [self.alpha(r.request_id, r.method) for r in batch]
        # seconds per admitted request, speculating or not: the same for every K (looked up once per choice)
        admission = {s: self.admission_seconds(len(batch), s) for s in (False, True)} if self.request_tokens else {}
        per_token = self.draft_token_seconds(len(batch))
        rates, below = [], None  # below: (K, D(K)) of the largest drafting K so far
        for cap in range(top + 1):
            ks = [min(cap, r.cap) if r.adaptive else r.cap for r in batch]
            tokens = sum(expected_tokens(a, k) for a, k in zip(alphas, ks, strict=True))
            step_k, drafting = self._arm_key(batch, ks)
            seconds = self.decode_seconds(len(batch), step_k, drafting)
            if drafting:
                if below is not None:
                    seconds = max(seconds, below[1] + (step_k - below[0]) * per_token)
                below = (step_k, seconds)
            if self.request_tokens:
                seconds += admission[step_k > 0] * tokens / self.request_tokens
            rates.append(tokens / seconds if seconds > 0 else math.inf)
        return rates

    def choose(self, batch: Sequence[KRequest]) -> list[int]:
        """Draft tokens per request this step: fixed requests keep their cap; adaptive ones share the best cap K."""
        if self.clock is not None:
            self._step_start = self.clock()
        adaptive_caps = [r.cap for r in batch if r.adaptive]
        if not adaptive_caps or max(adaptive_caps) == 0:
            return [r.cap for r in batch]
        top = max(adaptive_caps)
        alphas = [self.alpha(r.request_id, r.method) for r in batch]
        rates = self.predicted_rates(batch, top, alphas)
        best = 0
        for cap in range(1, top + 1):
            if rates[cap] > rates[best] * (1 + self.larger_k_margin) ** (cap - best):  # (module docstring)
                best = cap
        load = self._load(len(batch))
        if load.best is not None and load.best <= top and rates[load.best] * (1 + self.switch_margin) >= rates[best]:
            best = load.best  # hysteresis
        if load.best is None or load.best <= top or best < top:  # (a choice capped by requests near their end
            load.best = best  # does not replace the load's preferred K)
        load.choices += 1
        k = best
        if self.explore_every and load.choices % max(1, self.explore_every // 2) == 0:
            k = self._explore(load, batch, best, rates)
        ks = [min(k, r.cap) if r.adaptive else r.cap for r in batch]
        for r, k in zip(batch, ks, strict=True):
            if r.adaptive and k == 0 and r.request_id in self._request:
                # a step without a draft still moves the request on by a token: its acceptance evidence ages per
                # token, not per trial, so a dip (one early rejection) that made K = 0 win does not freeze there
                # (no drafts, no new evidence) but relaxes towards its method's estimate
                acc = self._request[r.request_id]
                acc[0], acc[1] = REQUEST_DECAY * acc[0], REQUEST_DECAY * acc[1]
        return ks

    def settled_k(self, rows: int) -> int | None:
        """The latest exploiting choice at the load level of `rows` running requests (None before any)."""
        return self._load(rows).best

    def _explore(self, load: _Load, batch: Sequence[KRequest], best: int, rates: list[float]) -> int:
        """A neighbour of `best` that is unmeasured (every explore_every / 2 choices), stale or close to it (every
        explore_every choices); else `best`."""
        regular = load.choices % self.explore_every == 0
        up_first = (load.choices // max(1, self.explore_every // 2)) % 2 == 1 or best == 0
        for cap in ((best + 1, best - 1) if up_first else (best - 1, best + 1)):
            if not 0 <= cap < len(rates):
                continue
            ks = [min(cap, r.cap) if r.adaptive else r.cap for r in batch]
            key = self._arm_key(batch, ks)
            arm = load.arms.get(key)
            if arm is None or len(arm.decode) + len(arm.mixed) < MIN_SAMPLES or load.paired.support(key) < MIN_SAMPLES:
                return cap  # unmeasured: too few steps, or too few next to another arm's
            if regular and (load.choices - arm.last >= self.stale_after
                            or rates[cap] >= self.explore_margin * rates[best]):
                return cap
        return best

    @staticmethod
    def _arm_key(batch: Sequence[KRequest], ks: Sequence[int]) -> tuple[int, bool]:
        """(the step's cap, whether a draft model runs) for draft lengths `ks`."""
        step_k = max(ks, default=0)
        return step_k, step_k > 0 and any(r.uses_draft_model and k > 0 for r, k in zip(batch, ks, strict=True))

    def _load(self, rows: int) -> _Load:
        bucket = load_bucket(rows)
        if bucket not in self.loads:  # (not setdefault: a _Load is not free to build on every call)
            self.loads[bucket] = _Load()
        return self.loads[bucket]

    def _line(self, load: _Load, rows: int, drafting: bool) -> OnlineLinearCost:
        """Decode-step seconds vs K at this load, with a prior from the global fits (or a sweep's costs)."""
        if drafting not in load.lines:
            if self.step_costs is not None:  # a sweep's StepCosts at the nearest measured batch size
                costs = self.step_costs[min(self.step_costs, key=lambda b: abs(b - rows))]
                fixed = costs.target(1)
                slope = costs.target(2) - costs.target(1) + (costs.draft_s if drafting else 0.0)
            else:
                target_fixed, target_slope = self.target_cost.coefficients()
                fixed = target_fixed + target_slope * rows
                slope = target_slope * rows + (self.draft_cost(rows) if drafting else 0.0)
            load.lines[drafting] = OnlineLinearCost(fixed + self.overhead_s, slope, prior_x=8.0, prior_weight=0.3)
        return load.lines[drafting]
