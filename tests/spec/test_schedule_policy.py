"""The speculation schedule as a policy, without a model: caps by batch size and max_concurrency, the acceptance gate
(closes only on a full window below the threshold, one probe at a time while closed, backing off while probes lose,
reopens; probe_every 0 never reopens)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from trtspec.contracts.metrics import AcceptanceStats
from trtspec.contracts.schedule import SpecSchedule
from trtspec.spec.schedule_policy import MAX_PROBE_BACKOFF, GateState, SchedulePolicy


def gate(window: int = 3, threshold: float = 1.0, probe_every: int | None = 2, **extra) -> SchedulePolicy:
    return SchedulePolicy(SpecSchedule(acceptance_window=window, acceptance_length_threshold=threshold,
                                       probe_every=probe_every, **extra))


def stats(length: float, drafts: int = 9) -> AcceptanceStats:
    """A request of 10 target forwards (its prompt pass and `drafts` drafting steps) that emitted 10 x `length`
    tokens: TensorRT-LLM 1.2.1's gate records `length` - 1 accepted draft tokens per iteration."""
    return AcceptanceStats(num_drafts=drafts, num_target_forwards=10, num_emitted_tokens=round(10 * length))


def finish(policy: SchedulePolicy, request_id: int, length: float) -> None:
    """A request that drafted with `length` tokens per target forward (`stats`)."""
    policy.admit(request_id, drafts=True)
    policy.finish(request_id, stats(length))


def test_caps_follow_the_schedule_by_batch_size_and_stop_above_max_concurrency():
    policy = SchedulePolicy(SpecSchedule(draft_len=((1, 4), (4, 2), (16, 0)), max_concurrency=8))
    assert policy.caps(1, [0], [4]) == [4]
    assert policy.caps(3, [0, 1, 2], [4, 1, 3]) == [4, 1, 3]  # min(k, schedule[1])
    assert policy.caps(4, [0, 1, 2, 3], [4, 1, 3, 0]) == [2, 1, 2, 0]  # batch size >= 4: 2
    assert policy.caps(8, [0] * 8, [4] * 8) == [2] * 8
    assert policy.caps(9, [0] * 9, [4] * 9) == [0] * 9  # above max_concurrency
    unscheduled = SchedulePolicy(SpecSchedule(max_concurrency=2))
    assert unscheduled.caps(2, [0, 1], [5, 3]) == [5, 3] and unscheduled.caps(3, [0, 1, 2], [5, 3, 1]) == [0, 0, 0]
    assert not unscheduled.gated and unscheduled.state == GateState()
    unscheduled.finish(0, stats(1.0))  # no gate: finished requests change nothing
    assert unscheduled.state == GateState()


def test_gate_closes_only_on_a_full_window_below_the_threshold():
    policy = gate(window=3, threshold=1.0)
    finish(policy, 0, 1.0)
    finish(policy, 1, 1.0)
    assert policy.state.open and policy.state.window_fill == 2 and policy.state.window_mean == 0.0  # not full yet
    policy.admit(9, drafts=True)
    policy.finish(9, stats(1.0, drafts=0))  # finished without drafting: not in the window
    assert policy.state.window_fill == 2 and policy.state.open
    finish(policy, 2, 3.4)  # full: mean (0 + 0 + 2.4) / 3 = 0.8 < 1
    assert not policy.state.open and policy.state.closes == 1
    assert abs(policy.state.window_mean - 0.8) < 1e-9
    assert policy.caps(1, [5], [4]) == [0]  # a request admitted before the close stops drafting too

    at_threshold = gate(window=2, threshold=1.0)
    finish(at_threshold, 0, 1.5)
    finish(at_threshold, 1, 2.5)  # mean 1.0: not below
    assert at_threshold.state.open


def test_closed_gate_probes_one_request_at_a_time_and_reopens():
    policy = gate(window=2, threshold=1.0, probe_every=3, draft_len=((1, 4), (2, 1)))
    finish(policy, 0, 1.0)
    finish(policy, 1, 1.0)
    assert not policy.state.open
    for rid in range(10, 19):
        policy.admit(rid, drafts=True)
    policy.admit(30, drafts=False)  # a request that would not draft is never a probe, nor counted
    policy.admit(12, drafts=True)  # admitted again (after a preemption): counted once
    ids = [*range(10, 19), 30]
    caps = policy.caps(1, ids, [4] * len(ids))
    assert [rid for rid, cap in zip(ids, caps, strict=True) if cap] == [12]  # the 3rd; none more while it runs
    assert policy.caps(2, [12], [4]) == [1]  # a probe follows the schedule's caps
    assert policy.state.probes == 1
    policy.finish(12, stats(4.0))  # probe: 3.0 accepted per iteration; window (0, 3), mean 1.5 >= 1: reopens
    assert policy.state.open and policy.state.opens == 1 and policy.state.closes == 1
    assert policy.caps(1, [10, 11], [4, 3]) == [4, 3]  # everyone drafts again
    finish(policy, 40, 1.0)  # window (3, 0): 1.5, open
    finish(policy, 41, 1.0)  # (0, 0): closes a second time; the countdown starts again
    assert not policy.state.open and policy.state.closes == 2
    for rid in (50, 51, 52):
        policy.admit(rid, drafts=True)
    assert policy.caps(1, [50, 51, 52], [4, 4, 4]) == [0, 0, 4]


def test_losing_probes_back_off_geometrically_and_a_winning_probe_restores_the_interval():
    policy = gate(window=4, threshold=1.0, probe_every=2)
    for rid in range(4):
        finish(policy, rid, 1.0)
    assert not policy.state.open
    next_id = 100

    def next_probe() -> tuple[int, int]:
        """Admit drafting requests until one is a probe: (its id, admissions it took)."""
        nonlocal next_id
        for admissions in range(1, 1000):
            rid, next_id = next_id, next_id + 1
            policy.admit(rid, drafts=True)
            if policy.caps(1, [rid], [4]) == [4]:
                return rid, admissions
        raise AssertionError("no probe in 1000 admissions")

    gaps = []
    for _ in range(7):
        probe, gap = next_probe()
        gaps.append(gap)
        policy.finish(probe, stats(1.0))  # a losing probe: 0 accepted
    cap = MAX_PROBE_BACKOFF * 2
    assert gaps == [2, 4, 8, 16, 32, 32, 32] and cap == 32  # doubled per losing probe, up to the cap
    probe, gap = next_probe()
    policy.forget(probe)  # aborted: its countdown starts again at the same interval
    probe, gap = next_probe()
    assert gap == 32 and not policy.state.open
    policy.finish(probe, stats(1.0))  # losing: the interval stays at the cap
    probe, _ = next_probe()
    policy.finish(probe, stats(3.0))  # a winning probe (2.0): window (0, 0, 0, 2) mean 0.5, still closed
    assert not policy.state.open
    probe, gap = next_probe()
    assert gap == 2  # back to probe_every
    policy.finish(probe, stats(3.0))  # (0, 0, 2, 2): 1.0, reopens
    assert policy.state.open and policy.state.opens == 1 and policy.state.probes == 11


def test_probe_every_zero_is_tensorrt_llms_permanent_gate():
    policy = gate(window=2, threshold=1.0, probe_every=0)
    finish(policy, 0, 1.0)
    finish(policy, 1, 1.0)
    assert not policy.state.open
    for rid in range(10, 60):
        policy.admit(rid, drafts=True)
    assert policy.caps(1, list(range(10, 60)), [4] * 50) == [0] * 50 and policy.state.probes == 0
    policy.finish(10, stats(5.0))  # a request that drafted before the close, finishing well: still closed
    policy.finish(11, stats(5.0))
    assert policy.state.window_mean == 4.0 and not policy.state.open and policy.state.opens == 0


def test_default_probe_every_is_the_contracts():
    assert gate(probe_every=None).schedule.probes == 16


schedules = st.dictionaries(st.integers(2, 64), st.integers(0, 8), max_size=5).flatmap(
    lambda rest: st.integers(0, 8).map(lambda first: tuple(sorted({1: first, **rest}.items()))))


@given(schedules, st.one_of(st.none(), st.integers(0, 70)), st.integers(1, 80), st.integers(0, 8))
def test_caps_stay_in_0_k_and_are_monotone(draft_len, max_concurrency, batch_size, k):
    schedule = SpecSchedule(draft_len=draft_len, max_concurrency=max_concurrency)
    policy = SchedulePolicy(schedule)
    cap = policy.caps(batch_size, [0], [k])[0]
    assert 0 <= cap <= k
    assert cap <= policy.caps(batch_size, [0], [k + 1])[0]  # more asked, never fewer given
    if max_concurrency is not None and batch_size > max_concurrency:
        assert cap == 0
    values = [value for _, value in draft_len]
    if all(a >= b for a, b in zip(values, values[1:], strict=False)):  # a schedule that falls with load
        assert policy.caps(batch_size + 1, [0], [k])[0] <= cap


def test_exact_release_controls_run_the_releases_gate():
    """`speculation_controls trtllm-1.2.1`: NVIDIA's gate (checked from the window-th request on, closed for good, no
    probes); a request that finishes while the batch does not speculate is not recorded (TensorRT-LLM records only
    while speculation is on)."""
    policy = SchedulePolicy(SpecSchedule(acceptance_window=2, acceptance_length_threshold=1.0,
                                         controls="trtllm-1.2.1", max_concurrency=4))
    assert policy.schedule.probes == 0
    policy.caps(5, list(range(5)), [4] * 5)  # above max_concurrency: speculation off in this step
    policy.finish(0, stats(1.0))
    assert policy.state.window_fill == 0
    policy.caps(1, [1], [4])
    policy.finish(1, stats(1.5))
    policy.finish(2, stats(1.5))  # window (0.5, 0.5): 0.5 < 1: closed for good
    assert not policy.state.open and policy.state.closes == 1
    for rid in range(10, 100):
        policy.admit(rid, drafts=True)
    assert policy.caps(1, list(range(10, 100)), [4] * 90) == [0] * 90
    policy.finish(10, stats(9.0))
    assert not policy.state.open and policy.state.window_mean == 0.5  # nothing recorded once disabled


def test_the_rate_gate_samples_each_step_that_drafted():
    """`acceptance_rate_threshold` (TensorRT-LLM 1.3): one sample per step, accepted / drafted over the batch."""
    policy = SchedulePolicy(SpecSchedule(acceptance_rate_window_size=3, acceptance_rate_threshold=0.5,
                                         controls="trtllm-1.3.0rc29"))
    policy.step(0, 0)  # nothing drafted: no sample
    policy.step(8, 6)
    policy.step(8, 2)
    assert policy.state.open and policy.state.window_fill == 2
    policy.step(8, 3)  # (0.75 + 0.25 + 0.375) / 3 = 0.458 < 0.5
    assert not policy.state.open and abs(policy.state.window_mean - 0.4583333) < 1e-6
    policy.finish(0, stats(1.0))  # a per-iteration gate ignores finished requests
    assert policy.state.window_fill == 3


def test_exact_controls_record_a_request_finishing_in_a_speculating_batch_whatever_its_own_k():
    """A request in its last step reserves no draft tokens; the batch still speculates (TensorRT-LLM's
    enable_spec_decode is per iteration), so 1.2.1 records it."""
    policy = SchedulePolicy(SpecSchedule(acceptance_window=1, acceptance_length_threshold=0.5,
                                         controls="trtllm-1.2.1"))
    policy.caps(1, [0], [0])  # its own k is 0 this step
    policy.finish(0, stats(1.0))
    assert not policy.state.open and policy.state.window_fill == 1
