"""The monitor's schedule proposal: windows per concurrency bucket, E(k) from conditional acceptance, the draft length
per batch size from known costs (an exact expected schedule), the gate's threshold, and `--apply`'s choice between a
schedule change and a k change. Synthetic windows and a hand-made baseline: no server, milliseconds."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trtspec.contracts.baseline import Baseline, StepCostsRecord
from trtspec.contracts.control import KChange, ScheduleChange, ServedSpeculation
from trtspec.contracts.metrics import AcceptanceStats
from trtspec.contracts.schedule import SpecSchedule
from trtspec.ops.buckets import BucketWindows, bucket_of
from trtspec.ops.monitor import Monitor
from trtspec.ops.recommend import expected_tokens_by_k
from trtspec.ops.schedule import compress, expected_tokens, propose_schedule
from trtspec.ops.scrape import Histogram, ModelCounters, ModelId, Sample
from trtspec.ops.window import WindowStats

MODEL = ModelId("tensorrt_llm", "1", "draft_target")
# Extra target tokens per sequence cost s x a one-token forward at batch size b (a compute-bound GPU's shape, made
# exact), and the proposer is free: speedup(k) = E(k) / (1 + s_b k).
GROWTH = {1: 0.0, 2: 0.1, 3: 0.5, 4: 0.6, 5: 0.9, 6: 1.2, 7: 1.5, 8: 2.0}


def baseline() -> Baseline:
    costs = [StepCostsRecord(batch_size=b, target_s={n: 0.01 * (1 + s * (n - 1)) for n in range(1, 6)})
             for b, s in GROWTH.items()]
    return Baseline(model="tiny", draft="tiny-draft", method="draft_target", temperature=0.0, suites=["code"], k=2,
                    max_k=4, drafts_per_pos=[100] * 4, accepted_per_pos=[100, 50, 0, 0],
                    rejections_per_pos=[0, 50, 50, 0], tokens_per_step_by_k={2: 2.5}, plain_tokens_per_s={1: 100.0},
                    costs=costs)


def window(accepted: list[float], rejected: list[float], *, concurrency: float = 3.0, seconds: float = 10.0,
           k: int = 2) -> WindowStats:
    """A window whose drafts accepted and rejected at each position as given, at a mean `concurrency`."""
    drafts = accepted[0] + rejected[0]
    return WindowStats(MODEL, seconds, counts={"num_drafts": drafts, "num_emitted_tokens": 10.0 * drafts},
                       per_pos={"num_accepted_tokens_per_pos": accepted, "num_rejections_per_pos": rejected},
                       histograms={"request_latency_seconds": Histogram({float("inf"): 10.0}, concurrency * seconds,
                                                                        10.0)}, k=k)


# every draft accepts its first token, half the second, never the third: E(1) = 2, E(2) = 2.5, E(3) = E(4) = 2.5
HALF = window([100.0, 50.0, 0.0, 0.0], [0.0, 50.0, 50.0, 0.0])


def test_buckets_are_powers_of_two_at_geometric_midpoints():
    assert [bucket_of(c) for c in (0.0, 0.4, 1.0, 1.4, 1.5, 2.0, 2.8, 2.9, 5.6, 5.7, 11.0, 12.0)] == [
        1, 1, 1, 1, 2, 2, 2, 4, 4, 8, 8, 16]
    assert [bucket_of(b) for b in range(1, 13)] == [1, 2, 4, 4, 4, 8, 8, 8, 8, 8, 8, 16]


def test_bucket_windows_merge_the_intervals_of_each_bucket_and_forget_old_ones():
    buckets = BucketWindows(window_s=10.0)
    buckets.add(MODEL, 1.0, window([10.0], [0.0], concurrency=1.0, seconds=1.0))  # expires at 11
    buckets.add(MODEL, 5.0, window([20.0], [5.0], concurrency=3.6, seconds=1.0))
    buckets.add(MODEL, 6.0, window([30.0], [5.0], concurrency=4.4, seconds=1.0))
    buckets.add(MODEL, 7.0, WindowStats(MODEL, 1.0))  # no request ended: no concurrency, no bucket
    got = buckets.of(MODEL)
    assert sorted(got) == [1, 4]
    assert got[4].num_drafts == 60.0 and got[4].seconds == 2.0 and got[4].concurrency == pytest.approx(4.0)
    assert got[4].tokens_per_s == pytest.approx(300.0)  # 600 tokens over the 2 s spent at this load
    buckets.add(MODEL, 11.0, window([40.0], [0.0], concurrency=16.0, seconds=1.0))
    assert sorted(buckets.of(MODEL)) == [4, 16]


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.lists(st.integers(0, 6), min_size=30, max_size=80))
def test_conditional_expected_tokens_equal_the_unconditional_for_one_draft_length(k, accepts):
    stats = AcceptanceStats()
    for a in accepts:
        stats.observe(k, min(a, k))
    w = window(list(stats.num_accepted_tokens_per_pos), list(stats.num_rejections_per_pos))
    got, _ = expected_tokens(w.accepted_per_pos, w.rejections_per_pos, k, min_trials=0)
    want = expected_tokens_by_k(w.acceptance_per_pos, 0.0, k)
    assert [got[i] for i in range(1, k + 1)] == pytest.approx([want[i] for i in range(1, k + 1)])


def test_conditional_expected_tokens_are_right_when_draft_lengths_differ():
    """Half the drafts propose 1 token, half 4, every token accepted: a schedule mixes lengths like this. E(4) is 5;
    the unconditional per-position rates (accepted / drafts) would say 1 + 1 + 0.5 * 3 = 3.5."""
    stats = AcceptanceStats()
    for k in [1, 4] * 50:
        stats.observe(k, k)
    tokens, extrapolated = expected_tokens(stats.num_accepted_tokens_per_pos, stats.num_rejections_per_pos, 4)
    assert tokens[4] == pytest.approx(5.0) and not extrapolated
    tokens, extrapolated = expected_tokens([100.0, 50.0], [0.0, 50.0], 4)  # positions 2, 3 never reached
    assert extrapolated and tokens[4] == pytest.approx(1 + 1 + 0.5 + 0.5 * 0.75 + 0.5 * 0.75 ** 2)  # alpha 150/200


def test_the_proposal_is_the_best_k_per_batch_size_compressed():
    """speedup(k) = E(k) / (1 + s k): k = 2 while s < 1/3, k = 1 while s < 1, then k = 0 (each by >= 3%)."""
    plan = propose_schedule(HALF, {}, baseline())
    assert plan.ks == (2, 2, 1, 1, 1, 0, 0, 0)
    assert plan.action == "change" and plan.default_k == 2
    assert plan.schedule == SpecSchedule(draft_len=((1, 2), (3, 1)), max_concurrency=5)
    assert plan.schedule.to_parameters() == {"draft_len_schedule": "1:2,3:1", "max_concurrency": "5"}
    rows = {r.batch_size: r for r in plan.buckets}
    assert sorted(rows) == [1, 2, 4, 8] and {r.acceptance for r in rows.values()} == {"pooled"}
    assert rows[4].k == 1 and rows[4].speedup == pytest.approx(2 / 1.6) and rows[4].served_k == 2
    assert rows[8].k == 0 and rows[8].speedup == 1.0 and rows[8].served_speedup == pytest.approx(2.5 / 5)
    assert "batch 8: k=0" in plan.message and "schedule not known" in plan.message


def test_a_bucket_with_enough_drafts_uses_its_own_acceptance():
    """Batch size 1's bucket accepts every token (E(4) = 5): k = 4 there; the rest use the pooled window."""
    best = window([100.0] * 4, [0.0] * 4, concurrency=1.0)
    few = window([20.0, 20.0, 20.0, 20.0], [0.0] * 4, concurrency=8.0)  # 20 drafts: too few to count alone
    plan = propose_schedule(HALF, {1: best, 8: few}, baseline())
    assert plan.ks == (4, 2, 1, 1, 1, 0, 0, 0)
    assert plan.schedule.draft_len == ((1, 4), (2, 2), (3, 1)) and plan.default_k == 4
    rows = {r.batch_size: r for r in plan.buckets}
    assert (rows[1].acceptance, rows[1].drafts, rows[1].speedup) == ("window", 100.0, 5.0)
    assert (rows[8].acceptance, rows[8].drafts) == ("pooled", 20.0)


def test_what_is_served_stays_unless_another_k_is_3_percent_better():
    served = ServedSpeculation("tensorrt_llm", 2, 4, SpecSchedule(((1, 2), (3, 1)), 5))
    plan = propose_schedule(HALF, {}, baseline(), served=served)
    assert plan.action == "keep" and plan.schedule == served.schedule and plan.default_k == 2
    # batch 1 at k = 3 predicts what k = 2 does (E(3) = E(2)): the served 3 stays, though the best alone would be 2
    served = ServedSpeculation("tensorrt_llm", 3, 4, SpecSchedule(((1, 3), (2, 2), (3, 1)), 5))
    plan = propose_schedule(HALF, {}, baseline(), served=served)
    assert plan.action == "keep" and plan.ks[:3] == (3, 2, 1) and plan.default_k == 3
    # batch 5 at k = 2: 2.5 / 2.8 = 0.89x, k = 1: 1.05x; served k = 1 up to 8 (no limit): kept where k = 1 is within 3%
    served = ServedSpeculation("tensorrt_llm", 2, 4, SpecSchedule(((1, 2), (3, 1))))
    plan = propose_schedule(HALF, {}, baseline(), served=served)
    assert plan.action == "change" and plan.schedule == SpecSchedule(((1, 2), (3, 1)), 5)
    # one k everywhere and nothing else: no schedule, that k (what set-k does)
    flat = {b: 0.0 for b in GROWTH}
    plan = propose_schedule(HALF, {}, baseline().model_copy(update={"costs": [
        StepCostsRecord(batch_size=b, target_s={n: 0.01 for n in range(1, 6)}) for b in flat]}))
    assert plan.ks == (2,) * 8 and plan.action == "keep" and plan.single_k and plan.default_k == 2


def test_a_served_gate_gets_the_break_even_threshold_and_keeps_its_window():
    """At the window's concurrency (3) the proposal runs k = 1 at s = 0.5: speculation breaks even at E = 1.5 tokens
    per target forward, 0.5 accepted draft tokens per iteration in TensorRT-LLM 1.2.1's unit, and a rate of 0.5 in
    1.3's (k = 1)."""
    served = ServedSpeculation("tensorrt_llm", 2, 4, SpecSchedule(((1, 2), (3, 1)), 5, 32, 1.0, 0))
    plan = propose_schedule(HALF, {}, baseline(), served=served)
    assert plan.action == "change" and "gate threshold 1.0 -> 0.5" in plan.message
    assert plan.schedule == SpecSchedule(((1, 2), (3, 1)), 5, 32, 0.5, 0)
    near = ServedSpeculation("tensorrt_llm", 2, 4, SpecSchedule(((1, 2), (3, 1)), 5, 32, 0.53, 0))
    assert propose_schedule(HALF, {}, baseline(), served=near).action == "keep"  # within 10%: left as served
    rate = SpecSchedule(((1, 2), (3, 1)), 5, acceptance_rate_window_size=64, acceptance_rate_threshold=0.9,
                        controls="trtllm-1.3.0rc29")
    plan = propose_schedule(HALF, {}, baseline(), served=ServedSpeculation("tensorrt_llm", 2, 4, rate))
    assert plan.schedule == SpecSchedule(((1, 2), (3, 1)), 5, acceptance_rate_window_size=64,
                                         acceptance_rate_threshold=0.5, controls="trtllm-1.3.0rc29")


@pytest.mark.parametrize("ks, served_limit, want", [
    ((4, 4, 4), None, (None, None, 4)),
    ((4, 2, 0), None, (((1, 4), (2, 2)), 2, 4)),
    ((0, 0, 0), None, (None, None, 0)),
    ((4, 0, 0), None, (None, 1, 4)),
    ((4, 0, 2), None, (((1, 4), (2, 0), (3, 2)), None, 4)),
    ((4, 3, 3), 32, (((1, 4), (2, 3)), 32, 4)),  # a served limit past the batch sizes covered is kept
    ((4, 3, 0), 32, (((1, 4), (2, 3)), 2, 4)),
])
def test_compress(ks, served_limit, want):
    assert compress(ks, served_limit) == want
    draft_len, limit, default_k = want
    schedule = SpecSchedule(draft_len, limit)  # the rules hold for every compressed form
    assert [schedule.draft_len_at(b, default_k) for b in range(1, len(ks) + 1)] == list(ks)


def counters(total: AcceptanceStats, latency_sum: float, ended: float) -> ModelCounters:
    return ModelCounters(
        counters={"num_drafts": total.num_drafts, "num_accepted_tokens": total.num_accepted_tokens,
                  "num_draft_tokens": total.num_draft_tokens, "num_emitted_tokens": total.num_emitted_tokens},
        per_pos={"num_accepted_tokens_per_pos": list(total.num_accepted_tokens_per_pos),
                 "num_rejections_per_pos": list(total.num_rejections_per_pos)},
        histograms={"request_latency_seconds": Histogram({float("inf"): ended}, latency_sum, ended)}, k=4)


def test_the_monitor_keeps_windows_per_bucket_and_reports_the_proposal():
    """Scrapes at concurrency 1 whose drafts accept everything, then at concurrency 8 accepting half the second token:
    the report's proposal prices each bucket at its own acceptance."""
    monitor = Monitor(60.0, baseline(), served={"tensorrt_llm": ServedSpeculation("tensorrt_llm", 4, 4)})
    total, latency, ended = AcceptanceStats(), 0.0, 0.0
    for t in range(12):
        concurrency = 1.0 if t < 6 else 8.0
        for _ in range(30):
            total.observe(4, 4 if t < 6 else [1, 2][_ % 2])
        total.num_emitted_tokens += 100
        latency, ended = latency + concurrency, ended + 1  # one request of `concurrency` s per second: Little's law
        monitor.observe(Sample(float(t), {MODEL: counters(total, latency, ended)}))
    (report,) = monitor.reports()
    plan = report.schedule
    rows = {r.batch_size: r for r in plan.buckets}
    assert (rows[1].acceptance, rows[1].drafts, rows[1].k) == ("window", 150.0, 4)  # the first scrape has no interval
    assert rows[8].acceptance == "window" and rows[8].drafts == 180.0 and rows[8].concurrency == pytest.approx(8.0)
    assert rows[2].acceptance == "pooled" and rows[8].k == 0
    assert plan.served.default_k == 4 and plan.action == "change" and plan.ks[0] == 4
    assert rows[1].measured_speedup == pytest.approx(1.0)  # 100 tokens/s at concurrency 1; the baseline's plain 100
    assert report.to_dict()["schedule"]["buckets"][0]["batch_size"] == 1
    from trtspec.ops.dashboard import to_text

    text = " ".join(to_text([report], source="m", width=400).split())
    assert f"schedule served k=4 propose {plan.text()}" in text
    assert "by batch size 1: k=4 5.00x (measured 1.00x; 150 drafts)" in text and "8: k=0 1.00x (now k=4" in text


class Control:
    """The control interface as the monitor sees it (trtspec.contracts.control.ServerControl)."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def set_default_k(self, model: str, k: int) -> KChange:
        self.calls.append(("k", model, k))
        return KChange(model, 2, k, None)

    def set_schedule(self, model: str, schedule: SpecSchedule | None, *, default_k: int | None = None) -> ScheduleChange:
        self.calls.append(("schedule", model, schedule, default_k))
        return ScheduleChange(model, None, schedule, 2, default_k, None)


def test_apply_sets_a_schedule_and_keeps_single_k_proposals_as_set_k():
    from trtspec.ops.recommend import Recommendation

    def report(plan, drifted=True, recommended=3):
        rec = Recommendation("tensorrt_llm/1", "increase_k", 2, recommended, 1.2, 1.0, 1.2, None, 1.0, False, "why")
        return SimpleNamespace(model="tensorrt_llm/1", recommendation=rec, schedule=plan,
                               drift=SimpleNamespace(drifted=drifted))

    monitor, control = Monitor(60.0, baseline()), Control()
    plan = propose_schedule(HALF, {}, baseline())
    assert monitor.apply([report(plan, drifted=False)], control) == [] and control.calls == []
    (line,) = monitor.apply([report(plan)], control)
    assert control.calls == [("schedule", "tensorrt_llm", plan.schedule, 2)]
    assert "k=2 -> k=2 draft_len_schedule=1:2,3:1 max_concurrency=5" in line
    assert monitor.served["tensorrt_llm"].schedule == plan.schedule  # the next proposal starts from it
    # one k everywhere and no schedule served: the recommendation's k, as before schedules existed
    control.calls.clear()
    single = propose_schedule(HALF, {}, baseline(), served=ServedSpeculation("tensorrt_llm", 2, 4))
    single = SimpleNamespace(**{**vars(single), "single_k": True, "schedule": None})
    monitor.apply([report(single)], control)
    assert control.calls == [("k", "tensorrt_llm", 3)]
    # a served schedule that should go: cleared (None) with the k, in one reload
    control.calls.clear()
    served = ServedSpeculation("tensorrt_llm", 2, 4, SpecSchedule(((1, 2), (3, 1)), 5))
    clear = SimpleNamespace(action="change", single_k=True, schedule=None, default_k=3, served=served, message="m")
    monitor.apply([report(clear)], control)
    assert control.calls == [("schedule", "tensorrt_llm", None, 3)]
