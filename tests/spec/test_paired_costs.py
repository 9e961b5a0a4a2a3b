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
