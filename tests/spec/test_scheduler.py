"""Continuous batching: arrivals during decoding, mixed k / methods, preemption under a tiny KV budget, cancellation,
overload, fairness, and the scheduler's budgets on their own (fake requests)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from tests.spec.conftest import hf_greedy
from trtspec.errors import ConfigError, OverloadedError
from trtspec.spec.engine import SpecEngine
from trtspec.spec.params import SamplingParams, SpecParams
from trtspec.spec.scheduler import Scheduler, SchedulerConfig

PROMPTS = [[5, 9, 3, 7, 5, 9, 3, 2, 11], [4], [17, 30, 2, 8, 41, 8, 41, 8, 63, 12, 30, 2, 8], [6, 6, 7, 50, 3],
           [22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42]]
SPECS = [SpecParams("none", 0), SpecParams("draft_target", 3), SpecParams("ngram", 2), SpecParams("draft_target", 6),
         SpecParams("lookahead", 3)]
MAX_NEW = [24, 10, 20, 16, 22]


@pytest.fixture(scope="module")
def reference(hf_target):
    return [hf_greedy(hf_target, p, n) for p, n in zip(PROMPTS, MAX_NEW, strict=True)]


def make_engine(random_pair, near_draft, **config) -> SpecEngine:
    return SpecEngine.from_pretrained(random_pair[0], near_draft, max_k=8,
                                      scheduler=SchedulerConfig(**config) if config else None)


def run_with_arrivals(engine: SpecEngine, arrivals: dict[int, list[tuple]]) -> tuple[dict[int, list[int]], list[int]]:
    """Add requests at the given step numbers; returns (generated tokens per arrival index, finish order)."""
    ids: dict[int, int] = {}
    out: dict[int, list[int]] = {}
    finish_order: list[int] = []
    step = 0
    while step <= max(arrivals) or engine.has_unfinished():
        for prompt, sampling, spec, index in arrivals.get(step, []):
            ids[engine.add_request(prompt, sampling, spec)] = index
            out[index] = []
        for delta in engine.step():
            out[ids[delta.request_id]].extend(delta.token_ids)
            if delta.finished:
                finish_order.append(ids[delta.request_id])
        step += 1
    return out, finish_order


def arrivals_plan(specs=SPECS, sampling=None) -> dict[int, list[tuple]]:
    """Two requests at step 0, the others while those decode."""
    steps = [0, 0, 2, 3, 5]
    plan: dict[int, list[tuple]] = {}
    for i, (prompt, spec, n, step) in enumerate(zip(PROMPTS, specs, MAX_NEW, steps, strict=True)):
        s = sampling(i) if sampling else SamplingParams(max_new_tokens=n)
        plan.setdefault(step, []).append((prompt, s, spec, i))
    return plan


def test_continuous_arrivals_mixed_methods_equal_alone_and_transformers(random_pair, near_draft, reference):
    engine = make_engine(random_pair, near_draft)
    together, _ = run_with_arrivals(engine, arrivals_plan())
    assert [together[i] for i in range(len(PROMPTS))] == reference
    for i in (1, 4):  # alone (a fresh engine) == in the continuous batch
        alone = make_engine(random_pair, near_draft).generate([PROMPTS[i]], SamplingParams(max_new_tokens=MAX_NEW[i]),
                                                              SPECS[i])[0]
        assert alone.token_ids == together[i]


def test_preemption_under_tiny_kv_budget_keeps_greedy_outputs(random_pair, near_draft, reference):
    engine = make_engine(random_pair, near_draft, max_num_seqs=4, kv_block_size=4, num_kv_blocks=14)
    together, _ = run_with_arrivals(engine, arrivals_plan())
    assert engine.scheduler.num_preemptions > 0  # the budget really forced recompute
    assert [together[i] for i in range(len(PROMPTS))] == reference
    assert engine.cache.num_free_slots == engine.cache.max_slots and not engine.proposers["draft_model"].states


def test_token_budget_trims_drafts_and_delays_admission(random_pair, near_draft, reference):
    engine = make_engine(random_pair, near_draft, max_num_seqs=3, max_num_batched_tokens=12)
    together, _ = run_with_arrivals(engine, arrivals_plan())
    assert [together[i] for i in range(len(PROMPTS))] == reference


def test_seeded_sampling_does_not_depend_on_batch_mates(random_pair, near_draft):
    def sampling(i):
        return SamplingParams(temperature=1.0, top_p=0.9, seed=100 + i, max_new_tokens=MAX_NEW[i], ignore_eos=True)

    plan = arrivals_plan(sampling=sampling)
    together, _ = run_with_arrivals(make_engine(random_pair, near_draft), plan)
    preempting, _ = run_with_arrivals(make_engine(random_pair, near_draft, max_num_seqs=4, kv_block_size=4,
                                                  num_kv_blocks=14), plan)
    for i in range(len(PROMPTS)):
        alone = make_engine(random_pair, near_draft).generate([PROMPTS[i]], sampling(i), SPECS[i])[0].token_ids
        assert together[i] == alone, i
        assert alone == preempting[i], i


def test_cancel_mid_decode_frees_kv_immediately(random_pair, near_draft):
    engine = make_engine(random_pair, near_draft, max_num_seqs=2)
    free = engine.cache.num_free_slots
    a = engine.add_request(PROMPTS[0], SamplingParams(max_new_tokens=40), SpecParams("draft_target", 4))
    b = engine.add_request(PROMPTS[2], SamplingParams(max_new_tokens=40), SpecParams("ngram", 2))
    c = engine.add_request(PROMPTS[3], SamplingParams(max_new_tokens=40), SpecParams("draft_target", 2))  # waits
    engine.step()
    engine.step()
    assert engine.cache.num_free_slots == free - 2 and len(engine.proposers["draft_model"].states) == 1
    assert engine.abort(a)
    assert engine.cache.num_free_slots == free - 1 and not engine.proposers["draft_model"].states
    assert engine.abort(c) and not engine.abort(c)  # a waiting request is cancelled too, once
    deltas = engine.step()
    assert {d.request_id for d in deltas} == {b}
    assert engine.abort(b) and not engine.has_unfinished() and engine.cache.num_free_slots == free


def test_overload_is_rejected_not_dropped(random_pair, near_draft):
    engine = make_engine(random_pair, near_draft, max_num_seqs=1, max_queue_len=2)
    first = engine.add_request(PROMPTS[0], SamplingParams(max_new_tokens=4), SpecParams("none", 0))
    engine.add_request(PROMPTS[1], SamplingParams(max_new_tokens=4), SpecParams("none", 0))
    with pytest.raises(OverloadedError, match="overloaded"):
        engine.add_request(PROMPTS[2], SamplingParams(max_new_tokens=4), SpecParams("none", 0))
    with pytest.raises(OverloadedError, match="overloaded"):
        engine.generate([PROMPTS[3]], SamplingParams(max_new_tokens=4))
    assert len(engine.scheduler) == 2  # the rejected ones were not queued; the accepted ones still run
    finished = set()
    while engine.has_unfinished():
        finished |= {d.request_id for d in engine.step() if d.finished}
    assert len(finished) == 2 and first in finished


def test_fifo_fairness_early_request_is_not_starved(random_pair, near_draft):
    """A stream of newcomers under a tight KV budget: the oldest request runs every step and is never preempted."""
    engine = make_engine(random_pair, near_draft, max_num_seqs=3, kv_block_size=4, num_kv_blocks=12)
    first = engine.add_request(PROMPTS[0], SamplingParams(max_new_tokens=30, ignore_eos=True),
                               SpecParams("draft_target", 4))
    steps_with_first, newcomers, finished = 0, [], []
    while engine.has_unfinished():
        if len(newcomers) < 8:
            newcomers.append(engine.add_request(PROMPTS[3], SamplingParams(max_new_tokens=12, ignore_eos=True),
                                                SpecParams("ngram", 2)))
        deltas = engine.step()
        if first not in finished:
            steps_with_first += 1
            assert first in {d.request_id for d in deltas}  # scheduled every step
        finished += [d.request_id for d in deltas if d.finished]
    assert engine.scheduler.num_preemptions > 0  # the budget was tight enough to preempt newcomers
    assert finished.index(first) < len(newcomers) // 2  # done early, not after the stream
    assert [r for r in finished if r != first] == sorted(newcomers)  # newcomers finish in arrival order


# -- the scheduler on its own ------------------------------------------------------------------------------------


@dataclass
class FakeRequest:
    request_id: int
    n: int
    slot: int | None = None
    cached: int = 0
    log: list[str] = field(default_factory=list)

    @property
    def token_ids(self) -> list[int]:
        return [0] * self.n


def fake_scheduler(**config) -> Scheduler:
    def allocate(r):
        r.slot, r.cached = 0, 0

    def release(r):
        r.slot, r.cached = None, 0

    return Scheduler(SchedulerConfig(**config), allocate=allocate, release=release, num_cached=lambda r: r.cached)


def test_scheduler_budgets():
    sched = fake_scheduler(max_num_seqs=3, max_num_batched_tokens=20)
    for i in range(3):
        sched.add(FakeRequest(i, 8))
    s = sched.schedule(lambda r: 2)  # prefill 8 + 2 draft tokens each: two fit in 20
    assert [r.request_id for r in s.requests] == [0, 1] and s.admitted == [0, 1] and s.ks == [2, 2]
    assert sched.allot_draft_tokens(s, [1, 5]) == [1, 2] and s.tokens_left == 1  # lowered, never raised
    for r in s.requests:
        r.cached = r.n - 1  # decoding now: one uncached token each
    s = sched.schedule(lambda r: 2)  # 2 x (1 + 2) + (8 + 2) = 16 <= 20
    assert s.admitted == [2] and s.ks == [2, 2, 2] and s.tokens_left == 4
    alone = fake_scheduler(max_num_seqs=2, max_num_batched_tokens=10)
    alone.add(FakeRequest(0, 9))
    s = alone.schedule(lambda r: 4)  # over the budget on its own: runs, with the drafts trimmed
    assert s.admitted == [0] and s.ks == [1] and s.tokens_left == 0


def test_scheduler_prefers_oldest_and_preempts_newest():
    sched = fake_scheduler(max_num_seqs=4, kv_block_size=4, num_kv_blocks=5)
    reqs = [FakeRequest(i, 8) for i in range(3)]
    for r in reqs:
        sched.add(r)
    s = sched.schedule(lambda r: 0)
    assert s.admitted == [0, 1]  # 2 blocks each; the third would need 2 more than the 5
    reqs[0].n = reqs[1].n = 12  # both grew to 3 blocks each > 5: the newest running one goes back to waiting
    s = sched.schedule(lambda r: 0)
    assert s.preempted == [1] and [r.request_id for r in sched.running] == [0]
    assert [r.request_id for r in sched.waiting] == [1, 2]  # re-queued ahead of newer arrivals
    assert reqs[1].slot is None


def test_scheduler_config_validation():
    with pytest.raises(ConfigError, match="max_num_batched_tokens"):
        SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=4).validate()
    with pytest.raises(ConfigError, match="max_queue_len"):
        SchedulerConfig(max_queue_len=0).validate()
