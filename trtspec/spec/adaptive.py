"""Adaptive speculation: choose each step's draft lengths from acceptance estimates, the batch, and step costs.

For a candidate draft cap K, every adaptive request drafts k_i = min(K, its cap) and emits on average
E_i(k_i) = (1 - alpha_i^(k_i + 1)) / (1 - alpha_i) tokens (Leviathan et al.; alpha_i = the request's per-token
acceptance estimate, an EMA over its verified drafts, starting from its method's running estimate). One step costs
    T_target(rows x width) + K * T_draft_step(draft rows) + host overhead
where width = the widest row (rows are right-padded: one long row makes short rows' drafts nearly free). The policy
picks the K with the highest predicted output tokens per second; K = 0 (plain decoding) is always a candidate, and
wins at large batches where every draft token costs target compute. Greedy outputs do not depend on k; a seeded
sampled output does (k decides which random draws are made), so fixed k stays the reproducible mode.

Costs: per decode batch size, an online least-squares line of the whole measured step time (target + draft + host
overhead, which also grows with k) against K, fitted on the engine's own decode steps with forgetting; its prior
comes from global fits of target forward time vs padded tokens and draft step time vs rows. Measured
`trtspec.sweep.costmodel.StepCosts` replace the prior when given (duck-typed: trtspec.sweep is never imported).
Every `explore_every`-th step at a batch size tries a neighbouring K, so the line stays identified and a noisy
measurement (shared CPUs) cannot lock the policy into a bad K.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trtspec.spec.metrics import expected_tokens_per_step as expected_tokens


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


class AdaptiveK:
    """Per-step draft lengths from acceptance EMAs and a step-cost model (see module docstring).

    Args:
        prior_alpha: acceptance assumed for a method before any of its drafts were verified.
        ema: weight of the newest draft in a request's acceptance estimate.
        step_costs: optional {batch size: trtspec.sweep.costmodel.StepCosts} measured by a sweep; replaces the
            online target / draft cost fits (the nearest measured batch size is used).
    """

    def __init__(self, *, prior_alpha: float = 0.6, ema: float = 0.2,
                 step_costs: Mapping[int, Any] | None = None, explore_every: int = 8) -> None:
        self.prior_alpha, self.ema = prior_alpha, ema
        self.target_cost = OnlineLinearCost(2e-3, 2e-4)  # x = padded target tokens (rows x width)
        self.draft_cost = OnlineLinearCost(1e-3, 1e-4)  # x = draft rows, per draft step
        self.overhead_s = 0.0  # EMA of host time per step
        self.by_rows: dict[int, OnlineLinearCost] = {}  # +-decode rows (+ when drafting) -> step seconds vs K
        self.explore_every = explore_every
        self._steps: dict[int, int] = {}  # decode rows -> choices made
        self.step_costs = dict(step_costs) if step_costs else None
        self._request: dict[int, list[float]] = {}  # request id -> [accepted EMA, trials EMA]
        self._method: dict[str, list[float]] = {}

    # -- estimates -----------------------------------------------------------------------------------------------
    def alpha(self, request_id: int, method: str) -> float:
        accepted, trials = self._request.get(request_id) or self._method.get(method) or (self.prior_alpha, 1.0)
        return accepted / trials if trials > 0 else self.prior_alpha

    def observe_draft(self, request_id: int, method: str, num_draft_tokens: int, num_accepted: int) -> None:
        """One verified draft: num_accepted Bernoulli successes, then a failure unless all were accepted."""
        trials = num_accepted + (num_accepted < num_draft_tokens)
        for key, table in ((request_id, self._request), (method, self._method)):
            if key not in table:
                table[key] = list(self._method.get(method) or (self.prior_alpha, 1.0))  # type: ignore[arg-type]
            acc = table[key]
            acc[0] = (1 - self.ema) * acc[0] + self.ema * num_accepted
            acc[1] = (1 - self.ema) * acc[1] + self.ema * trials

    def observe_step(self, *, rows: int, width: int, target_s: float, draft_steps: int, draft_rows: int,
                     draft_s: float, overhead_s: float, decode_only: bool, max_k: int) -> None:
        """One step's timings. decode_only: no row prefilled (every row had one uncached token)."""
        if decode_only:
            self._line(rows, draft_rows > 0).observe(max_k, target_s + draft_s + overhead_s)
            self.target_cost.observe(rows * width, target_s)
        if draft_steps > 0 and draft_rows > 0:
            self.draft_cost.observe(draft_rows, draft_s / draft_steps)
        self.overhead_s = 0.8 * self.overhead_s + 0.2 * overhead_s if self.overhead_s else overhead_s

    def forget(self, request_id: int) -> None:
        self._request.pop(request_id, None)

    # -- choice --------------------------------------------------------------------------------------------------
    def choose(self, batch: Sequence[KRequest]) -> list[int]:
        """Draft tokens per request this step: fixed requests keep their cap; adaptive ones share the best cap K."""
        adaptive_caps = [r.cap for r in batch if r.adaptive]
        if not adaptive_caps or max(adaptive_caps) == 0:
            return [r.cap for r in batch]
        alphas = [self.alpha(r.request_id, r.method) for r in batch]
        best_k, best_rate = 0, -1.0
        top = max(adaptive_caps)
        for cap in range(top + 1):
            ks = [min(cap, r.cap) if r.adaptive else r.cap for r in batch]
            tokens = sum(expected_tokens(a, k) for a, k in zip(alphas, ks, strict=True))
            rate = tokens / self.step_seconds(batch, ks)
            if rate > best_rate * 1.0001:  # ties go to the smaller k
                best_k, best_rate = cap, rate
        rows = sum(r.pending == 1 for r in batch)
        n = self._steps[rows] = self._steps.get(rows, 0) + 1
        if self.explore_every and n % self.explore_every == 0:  # try a neighbour (alternating up / down)
            best_k = min(top, best_k + 1) if (n // self.explore_every) % 2 or best_k == 0 else best_k - 1
        return [min(best_k, r.cap) if r.adaptive else r.cap for r in batch]

    def step_seconds(self, batch: Sequence[KRequest], ks: Sequence[int]) -> float:
        """Predicted seconds of one step with draft lengths `ks`.

        Prefilling rows run as their own forward (model.forward_grouped), so they add a cost that does not depend on
        the decode rows' k; the decode rows' part is their batch size's measured line in K.
        """
        decode = [(r, k) for r, k in zip(batch, ks, strict=True) if r.pending == 1]
        prefill = [r.pending + k for r, k in zip(batch, ks, strict=True) if r.pending > 1]
        prefill_s = self.target_cost(len(prefill) * max(prefill)) if prefill else 0.0
        if not decode:
            return prefill_s + self.overhead_s
        max_k = max(k for _, k in decode)
        drafting = any(r.uses_draft_model and k > 0 for r, k in decode)
        return self._line(len(decode), drafting)(max_k) + prefill_s

    def _line(self, rows: int, drafting: bool) -> OnlineLinearCost:
        """Step seconds vs K at `rows` decode rows, created with a prior from the global fits (or a sweep's costs)."""
        key = rows if drafting else -rows  # a draft model adds a per-step cost: separate lines
        if key not in self.by_rows:
            if self.step_costs is not None:  # a sweep's StepCosts at the nearest measured batch size
                costs = self.step_costs[min(self.step_costs, key=lambda b: abs(b - rows))]
                fixed = costs.target(1)
                slope = costs.target(2) - costs.target(1) + (costs.draft_s if drafting else 0.0)
            else:
                target_fixed, target_slope = self.target_cost.coefficients()
                fixed = target_fixed + target_slope * rows
                slope = target_slope * rows + (self.draft_cost(rows) if drafting else 0.0)
            self.by_rows[key] = OnlineLinearCost(fixed + self.overhead_s, slope, prior_x=8.0, prior_weight=0.3)
        return self.by_rows[key]
