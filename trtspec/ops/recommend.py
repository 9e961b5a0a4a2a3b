"""What k should be now: the cost model (trtspec.contracts.costmodel) at the window's acceptance, as a typed object.

E(k') for the candidates k' = 1..max_k comes from the window's per-position acceptance r_i (unconditional, so the
first k' positions of today's drafts give E(k') = 1 + sum r_i for every k' <= the served k); positions the served k
does not reach are extrapolated geometrically with the window's per-token acceptance alpha (labelled so). Step costs
and host overheads come from the baseline's calibration at the window's concurrency. The best k' is the one with the
highest predicted speedup over plain decoding; when even that is below 1.0, the draft no longer pays at any k: the
recommendation is to retrain it (and to serve k = 0 meanwhile).

Acting on it is not this module's: `trtspec monitor --apply` passes `recommended_k` to
`trtspec.triton.control.set_default_k` (the live reload through Triton's model control, as `trtspec set-k`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from trtspec.contracts import costmodel
from trtspec.contracts.baseline import Baseline
from trtspec.ops.window import WindowStats

Action = Literal["keep", "reduce_k", "increase_k", "retrain_draft", "no_data"]
MIN_GAIN = 0.03  # recommend a different k only when it predicts at least 3% more throughput
MIN_DRAFTS = 50  # fewer drafts in the window: no recommendation


@dataclass(frozen=True)
class Recommendation:
    """The recommended k for one served model and the predictions behind it (speedups vs plain decoding)."""

    model: str
    action: Action
    current_k: int
    recommended_k: int
    predicted_speedup: float | None  # at recommended_k, today's acceptance
    current_speedup: float | None  # at current_k, today's acceptance (the cost model's "now")
    baseline_speedup: float | None  # at current_k, the baseline's acceptance
    measured_speedup: float | None  # the window's tokens/s over the baseline's plain tokens/s (same concurrency)
    batch_size: float  # the concurrency the prediction is for
    extrapolated: bool  # some candidate k needed positions beyond the served k (geometric alpha)
    message: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def expected_tokens_by_k(acceptance_per_pos: list[float], alpha: float, max_k: int) -> dict[int, float]:
    """E(k) for k = 1..max_k: measured positions first, then r_i extended by alpha per extra position."""
    out, total, last = {}, 1.0, 1.0
    for k in range(1, max_k + 1):
        i = k - 1
        last = acceptance_per_pos[i] if i < len(acceptance_per_pos) else last * alpha
        total += last
        out[k] = total
    return out


def recommend(window: WindowStats, baseline: Baseline, *, current_k: int | None = None,
              max_k: int | None = None) -> Recommendation:
    """The k that maximises predicted throughput at the window's acceptance (see the module docstring)."""
    k_now = int(current_k if current_k is not None else window.k if window.k is not None else baseline.k)
    max_k = max_k or baseline.max_k
    batch = window.concurrency or min(c.batch_size for c in baseline.costs)
    plain = baseline.plain_tokens_per_s_at(batch)
    measured = window.tokens_per_s / plain if plain and window.tokens_per_s else None
    name = str(window.model)
    if window.num_drafts < MIN_DRAFTS:  # k = 0 drafts nothing: today's acceptance is unknown
        return Recommendation(name, "no_data", k_now, k_now, None, None, None, measured, batch, False,
                              f"{int(window.num_drafts)} drafts in the window (< {MIN_DRAFTS}): no recommendation yet")
    costs = baseline.step_costs(batch)
    accepted = sum(window.accepted_per_pos)
    trials = accepted + sum(window.rejections_per_pos)
    alpha = accepted / trials if trials else 0.0
    today = window.acceptance_per_pos
    e_now = expected_tokens_by_k(today, alpha, max_k)
    e_base = expected_tokens_by_k(baseline.acceptance_per_pos, baseline_alpha(baseline), max_k)

    def speedup(k: int, e: dict[int, float]) -> float:
        return predicted_speedup(k, e, baseline, batch, costs)

    by_k = {k: speedup(k, e_now) for k in range(1, max_k + 1)}
    best_k = max(by_k, key=lambda k: (by_k[k], -k))
    current = speedup(k_now, e_now) if k_now <= max_k else None
    base = speedup(k_now, e_base) if k_now <= max_k else None
    extrapolated = max_k > len(today)
    common = dict(model=name, current_k=k_now, current_speedup=current, baseline_speedup=base,
                  measured_speedup=measured, batch_size=batch, extrapolated=extrapolated)
    now = f"now {current:.2f}x" if current is not None else "now unknown"
    if by_k[best_k] < 1.0:
        return Recommendation(**common, action="retrain_draft", recommended_k=0, predicted_speedup=1.0,
                              message=f"retrain the draft: even the best k={best_k} predicts {by_k[best_k]:.2f}x "
                                      f"({now}); serve k=0 (1.00x) until a new draft rolls out")
    if current is not None and (best_k == k_now or by_k[best_k] < current * (1 + MIN_GAIN)):
        return Recommendation(**common, action="keep", recommended_k=k_now, predicted_speedup=current,
                              message=f"keep k={k_now}: predicted {current:.2f}x (best k={best_k}: "
                                      f"{by_k[best_k]:.2f}x)")
    action: Action = "reduce_k" if best_k < k_now else "increase_k"
    verb = "reduce" if best_k < k_now else "raise"
    return Recommendation(**common, action=action, recommended_k=best_k, predicted_speedup=by_k[best_k],
                          message=f"{verb} k {k_now} -> {best_k}: predicted {by_k[best_k]:.2f}x, {now}")


def predicted_speedup(k: int, tokens_by_k: dict[int, float], baseline: Baseline, batch: float,
                      costs: costmodel.StepCosts | None = None) -> float:
    """The cost model's speedup over plain decoding of draft length k at batch size `batch`: E(k) from
    `tokens_by_k`, the baseline's calibrated step costs (`costs`: already looked up for `batch`) and host overheads."""
    if k == 0:
        return 1.0
    return costmodel.predict(k, tokens_by_k[k], costs or baseline.step_costs(batch),
                             overhead_base_s=baseline.overhead_at(0, batch),
                             overhead_spec_s=baseline.overhead_at(k, batch)).speedup


def baseline_alpha(baseline: Baseline) -> float:
    """The baseline's per-token acceptance: accepted / (accepted + rejected) over its positions."""
    accepted, trials = sum(baseline.accepted_per_pos), sum(baseline.trials_per_pos)
    return accepted / trials if trials else 0.0
