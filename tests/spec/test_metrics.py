"""The acceptance definitions of contracts/metrics.py: the pure functions and AcceptanceStats agree."""

from __future__ import annotations

import pytest

from trtspec.contracts.metrics import AcceptanceStats, acceptance_rate, mean_acceptance_length


def test_mean_acceptance_length_and_rate_from_counters():
    stats = AcceptanceStats()
    for drafted, accepted in ((4, 4), (4, 1), (2, 0)):
        stats.observe(drafted, accepted)
    # 3 drafts, 10 draft tokens, 5 accepted: 1 + 5/3 tokens per target forward, 5/10 accepted
    assert mean_acceptance_length(3, 5) == pytest.approx(1 + 5 / 3) == stats.mean_acceptance_length
    assert acceptance_rate(10, 5) == 0.5 == stats.acceptance_rate


def test_nothing_drafted_is_one_token_per_forward_and_rate_zero():
    assert mean_acceptance_length(0, 0) == 1.0 == AcceptanceStats().mean_acceptance_length
    assert acceptance_rate(0, 0) == 0.0 == AcceptanceStats().acceptance_rate
