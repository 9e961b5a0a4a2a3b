"""PairedCosts: arms compared through adjacent steps, so a drifting machine speed cancels and spikes do not stick."""

from __future__ import annotations

import math

from trtspec.spec.paired_costs import PAIR_GAP, PairedCosts, _difference


def test_costs_follow_the_machine_speed_while_only_the_incumbent_runs():
    costs = PairedCosts()
    for step, (arm, seconds) in enumerate([(0, 0.020), (0, 0.020), (1, 0.030)], start=1):
        costs.observe(arm, seconds, step)
    for step in range(4, 30):  # the machine is 40% slower from here on; arm 1 never runs again
        costs.observe(0, 0.028, step)
    assert math.isclose(costs.seconds(0), 0.028) and math.isclose(costs.seconds(1), 0.042)
    assert costs.support(1) == 1 and costs.support(0) > 1


def test_a_spike_at_the_tried_step_or_in_one_base_step_does_not_move_the_relative_cost():
    costs, step = PairedCosts(), 0
    for tried_s, base_s in [(0.030 * 4, (0.020, 0.020)), (0.030, (0.020, 0.020 * 4)), (0.030, (0.020, 0.020)),
                            (0.030, (0.020, 0.020))]:
        for seconds in base_s:
            step += 1
            costs.observe(0, seconds, step)
        step += 1
        costs.observe(1, tried_s, step)
    step += 1
    costs.observe(0, 0.020, step)
    assert math.isclose(costs.seconds(1) / costs.seconds(0), 1.5)
    assert costs.support(1) == 4


def test_steps_further_apart_than_the_gap_are_not_compared():
    costs = PairedCosts()
    costs.observe(0, 0.020, 1)
    costs.observe(0, 0.020, 2)
    costs.observe(1, 0.030, 2 + PAIR_GAP + 1)  # admitting steps (or other load levels) ran in between
    assert costs.seconds(0) is None and math.isclose(costs.seconds(1), 0.030)
    assert costs.support(0) == 0


def test_a_pairs_estimate_weighs_each_difference_by_the_direction_its_noise_goes():
    spiked = math.log(4)
    only_b_tried = [(0.4, True), (0.4 + spiked, True), (0.4, True)]
    only_a_tried = [(0.4, False), (0.4 - spiked, False), (0.4, False)]
    assert _difference(only_b_tried) == _difference(only_a_tried) == 0.4
    assert _difference([*only_b_tried, *only_a_tried]) == 0.4


def on_axis(arm):
    """Arms are (K, draft model ran), as in AdaptiveK: drafting arms on the curve at x = K, plain decoding off it."""
    k, drafting = arm
    return k if drafting else None


def tried_after_two(costs: PairedCosts, step: int, base, base_s: float, tried, tried_s: float) -> int:
    """Two steps at `base`, then the first step at `tried` (one adjacent-step difference); returns the next step."""
    costs.observe(base, base_s, step)
    costs.observe(base, base_s, step + 1)
    costs.observe(tried, tried_s, step + 2)
    return step + 3


def test_the_curve_pools_differences_so_a_lone_bad_pair_does_not_make_a_larger_k_cheaper():
    """Issue 15 at concurrency 4: an arm priced through one difference (here K = 5 tried in a fast moment right
    after K = 4 measured in a slow one) came out cheaper than K = 4. The tree keeps that; the curve's steps pool the
    differences around them, are never negative, and keep the well-measured ratios."""
    def seconds(k: int) -> float:
        return 0.020 + 0.004 * k

    costs, step = PairedCosts(), 1
    for _ in range(3):
        step = tried_after_two(costs, step, (2, True), seconds(2), (3, True), seconds(3))
        step = tried_after_two(costs, step, (3, True), seconds(3), (4, True), seconds(4))
    step = tried_after_two(costs, step, (4, True), 1.3 * seconds(4), (5, True), seconds(5))  # the machine sped up
    assert costs.seconds((5, True)) < costs.seconds((4, True))  # the tree: K = 5 cheaper than K = 4
    curve = costs.curve(on_axis)
    assert [curve.seconds(k) is None for k in (1, 2, 5, 6)] == [True, False, False, True]  # the measured span only
    assert curve.seconds(5) >= curve.seconds(4) > curve.seconds(3) > curve.seconds(2)
    assert math.isclose(curve.seconds(3) / curve.seconds(2), seconds(3) / seconds(2))
    assert math.isclose(curve.seconds(4) / curve.seconds(3), seconds(4) / seconds(3))
    for _ in range(3):  # differences spanning two steps count for each step they span (per unit of K)
        step = tried_after_two(costs, step, (3, True), seconds(3), (5, True), seconds(5))
    curve = costs.curve(on_axis)
    assert curve.seconds(5) > curve.seconds(4)  # the lone bad difference is outvoted
    assert math.isclose(curve.seconds(5) / curve.seconds(3), seconds(5) / seconds(3))


def test_the_curve_prices_arms_off_its_axis_through_their_differences_and_needs_enough_of_them():
    costs, step = PairedCosts(), 1
    step = tried_after_two(costs, step, (1, True), 0.024, (2, True), 0.028)
    step = tried_after_two(costs, step, (2, True), 0.028, (1, True), 0.024)
    assert costs.curve(on_axis) is None  # two differences on the axis: not yet
    step = tried_after_two(costs, step, (1, True), 0.024, (2, True), 0.028)
    for _ in range(3):
        assert (0, False) not in costs.curve(on_axis).off  # fewer than LINE_MIN differences to the axis
        step = tried_after_two(costs, step, (1, True), 0.024, (0, False), 0.016)
    curve = costs.curve(on_axis)
    assert math.isclose(curve.off[(0, False)], 0.016) and math.isclose(curve.seconds(2), 0.028)
