"""The drift test: its false-alarm rate on independent trials at the baseline stays under the stated bound, it
detects a drop quickly, and untested positions (too few baseline trials, p0 of 0 or 1) never alarm."""

from __future__ import annotations

import math
import random

import pytest

from trtspec.ops.drift import CusumDetector, DriftConfig, llr

P0 = [0.9, 0.8, 0.8, 0.85]
TRIALS = [1000, 900, 700, 550]


def _stream(rng: random.Random, rates: list[float], drafts: int) -> tuple[list[float], list[float]]:
    """One scrape's increments: `drafts` chains, each accepting position i with probability rates[i] until the
    first rejection (the engine's events)."""
    accepted, rejected = [0.0] * len(rates), [0.0] * len(rates)
    for _ in range(drafts):
        for i, p in enumerate(rates):
            if rng.random() < p:
                accepted[i] += 1
            else:
                rejected[i] += 1
                break
    return accepted, rejected


def _first_alarm(detector: CusumDetector, rng: random.Random, rates: list[float], scrapes: int,
                 drafts: int = 25) -> int | None:
    for t in range(scrapes):
        if detector.update(*_stream(rng, rates, drafts)).drifted:
            return t
    return None


def test_threshold_is_the_stated_bound():
    config = DriftConfig(alpha=0.01, horizon=600)
    assert config.threshold(4) == pytest.approx(math.log(4 * 600 / 0.01))


def test_llr_is_zero_at_no_information_and_signs_follow_the_data():
    assert llr(0, 0, 0.8, 0.7) == 0
    assert llr(80, 100, 0.8, 0.7) < 0 < llr(60, 100, 0.8, 0.7)


@pytest.mark.slow
def test_false_alarms_on_baseline_traffic_stay_below_alpha():
    """Independent trials at p0 for the whole horizon, 200 times: alarms <= alpha (the bound is conservative, so
    with dispersion 1 none are expected)."""
    rng = random.Random(0)
    config = DriftConfig(alpha=0.05, horizon=300, dispersion=1.0)
    alarms = sum(_first_alarm(CusumDetector(P0, TRIALS, config), rng, P0, config.horizon) is not None
                 for _ in range(200))
    assert alarms / 200 <= config.alpha


def test_a_drop_is_flagged_within_seconds():
    rng = random.Random(1)
    config = DriftConfig()  # defaults: alpha 0.01 over 600 scrapes, shift 0.1, dispersion 2
    dropped = [0.75, 0.6, 0.5, 0.8]  # a suite the draft knows less well
    delays = [_first_alarm(CusumDetector(P0, TRIALS, config), rng, dropped, 600) for _ in range(20)]
    assert all(d is not None for d in delays)
    assert max(delays) < 30  # scrapes of 25 drafts each


def test_a_rise_never_alarms_and_alarms_are_sticky():
    rng = random.Random(2)
    detector = CusumDetector(P0, TRIALS)
    assert _first_alarm(detector, rng, [0.99, 0.95, 0.95, 0.95], 300) is None
    assert _first_alarm(detector, rng, [0.5, 0.5, 0.5, 0.5], 300) is not None
    detector.update([100.0] * 4, [0.0] * 4)  # good news afterwards does not clear an alarm
    assert detector.status().drifted
    detector.reset()
    assert not detector.status().drifted and max(detector.statistics) == 0


def test_untested_positions_never_alarm():
    detector = CusumDetector([0.9, 1.0, 0.8], [500, 500, 5], DriftConfig(min_trials=20))
    assert [p.position for p in detector.status().positions] == [0]  # p0 = 1 and 5 trials are not tested
    for _ in range(50):
        status = detector.update([100.0, 0.0, 0.0], [0.0, 100.0, 100.0])  # positions 1, 2 collapse; 0 is perfect
    assert not status.drifted
