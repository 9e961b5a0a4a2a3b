"""Sources that publish totals only (TensorRT-LLM's iteration statistics): the constant-alpha inverse, the window's
estimated per-position numbers, and the acceptance-rate drift test (false alarms within the bound on baseline
traffic, a drop flagged, the design effect doing its job: a mutation that drops it must fail)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trtspec.contracts.metrics import alpha_from_totals, expected_tokens_per_step
from trtspec.ops.drift import DriftConfig, RateDetector
from trtspec.ops.scrape import ModelId
from trtspec.ops.window import WindowStats

BASE = [0.9, 0.72, 0.576, 0.4896]  # r_i: P(first i+1 accepted) at conditional acceptance 0.9, 0.8, 0.8, 0.85
BASE_ALPHA = 0.83
CONDITIONAL = [0.9, 0.8, 0.8, 0.85]


@given(alpha=st.floats(0.0, 1.0), k=st.integers(1, 12), drafts=st.integers(1, 10_000))
@settings(max_examples=200, deadline=None)
def test_alpha_from_totals_inverts_the_expected_accepted_tokens(alpha, k, drafts):
    accepted = drafts * (expected_tokens_per_step(alpha, k) - 1.0)
    assert alpha_from_totals(drafts, drafts * k, accepted) == pytest.approx(alpha, abs=1e-6)


def test_alpha_from_totals_without_drafts_is_zero():
    assert alpha_from_totals(0, 0, 0) == 0.0


def test_a_window_of_totals_estimates_per_position_numbers_that_keep_its_totals():
    alpha = 0.7
    drafts, k = 200.0, 4
    accepted = drafts * (expected_tokens_per_step(alpha, k) - 1.0)
    w = WindowStats(ModelId("m"), seconds=10.0, counts={"num_drafts": drafts, "num_draft_tokens": drafts * k,
                                                        "num_accepted_tokens": accepted})
    assert w.per_pos_estimated
    assert sum(w.accepted_per_pos) == pytest.approx(accepted)
    assert w.acceptance_per_pos == pytest.approx([alpha ** (i + 1) for i in range(k)], abs=1e-6)
    assert w.conditional_per_pos == pytest.approx([alpha] * k, abs=1e-6)
    assert w.mean_acceptance_length == pytest.approx(1 + accepted / drafts)  # the measured numbers stay measured
    counted = WindowStats(ModelId("m"), counts={"num_drafts": 1.0, "num_draft_tokens": 4.0},
                          per_pos={"num_accepted_tokens_per_pos": [0.0], "num_rejections_per_pos": [1.0]})
    assert not counted.per_pos_estimated and counted.accepted_per_pos == [0.0]


def _totals(rng: random.Random, conditional: list[float], drafts: int) -> tuple[float, float, float]:
    """One scrape's totals: `drafts` chains of len(conditional), position i accepted with conditional[i] until the
    first rejection."""
    accepted = 0
    for _ in range(drafts):
        for p in conditional:
            if rng.random() >= p:
                break
            accepted += 1
    return float(accepted), float(drafts * len(conditional)), float(drafts)


def _first_alarm(detector: RateDetector, rng: random.Random, conditional: list[float], scrapes: int,
                 drafts: int = 25) -> int | None:
    for t in range(scrapes):
        if detector.update(*_totals(rng, conditional, drafts)).drifted:
            return t
    return None




def test_rate_test_false_alarms_stay_below_alpha_on_baseline_traffic():
    """Chains at the baseline's conditional acceptance for the whole horizon, 100 times: alarms <= alpha with
    dispersion 1 (the design effect alone accounts for a draft's correlated tokens)."""
    rng = random.Random(0)
    config = DriftConfig(alpha=0.05, horizon=300, dispersion=1.0)
    alarms = sum(_first_alarm(RateDetector(CONDITIONAL, 1000, BASE_ALPHA, config), rng, CONDITIONAL, config.horizon)
                 is not None for _ in range(100))
    assert alarms / 100 <= config.alpha


def test_without_the_design_effect_the_rate_test_alarms_falsely():
    """The mutation that must fail: treating a draft's tokens as independent trials (design effect 1) breaks the
    stated bound on baseline traffic with a small shift."""
    class Independent(RateDetector):
        def design_effect(self, k: int) -> float:
            return 1.0

    rng = random.Random(0)
    config = DriftConfig(alpha=0.05, horizon=300, dispersion=1.0, shift=0.02)
    honest = sum(_first_alarm(RateDetector(CONDITIONAL, 1000, BASE_ALPHA, config), rng, CONDITIONAL, 300) is not None
                 for _ in range(40))
    broken = sum(_first_alarm(Independent(CONDITIONAL, 1000, BASE_ALPHA, config), rng, CONDITIONAL, 300) is not None
                 for _ in range(40))
    assert honest / 40 <= config.alpha < broken / 40


def test_rate_test_flags_a_drop_and_keeps_the_alarm():
    rng = random.Random(1)
    detector = RateDetector(CONDITIONAL, 1000, BASE_ALPHA)
    delay = _first_alarm(detector, rng, [0.75, 0.6, 0.5, 0.8], 600)
    assert delay is not None and delay < 40
    detector.update(100.0, 100.0, 25.0)
    assert detector.status().drifted and detector.status().test == "acceptance_rate"
    detector.reset()
    assert not detector.status().drifted


def test_rate_test_is_off_without_enough_baseline_drafts():
    detector = RateDetector(CONDITIONAL, 5, BASE_ALPHA, DriftConfig(min_trials=20))
    assert _first_alarm(detector, random.Random(2), [0.1] * 4, 50) is None
    assert detector.status().positions == ()


def test_p0_follows_the_served_draft_length():
    detector = RateDetector(CONDITIONAL, 1000, BASE_ALPHA)
    assert detector.reach(4) == pytest.approx(BASE, abs=5e-3)  # c_0 ... c_i
    assert detector.p0(2) == pytest.approx((0.9 + 0.72) / 2)
    r = BASE + [BASE[-1] * BASE_ALPHA, BASE[-1] * BASE_ALPHA ** 2]
    assert detector.p0(6) == pytest.approx(sum(r) / 6, abs=5e-3)
    assert detector.p0(3.5) == pytest.approx((0.9 + 0.72 + 0.576 + 0.5 * 0.4896) / 3.5)  # half the drafts reach 4
    assert detector.design_effect(4) > 1.0
