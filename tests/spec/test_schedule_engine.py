"""The engine runs a speculation schedule (contracts/schedule.py, spec/schedule_policy.py): under continuous batching
the batch size crosses schedule keys while requests run, so a request's k changes mid-request, and greedy outputs
stay token-for-token those of plain decoding; the acceptance gate closing mid-run keeps them too; sampled requests
under a changing schedule finish with valid output."""

from __future__ import annotations

import pytest

from trtspec.contracts.engine import EngineConfig
from trtspec.contracts.schedule import SpecSchedule
from trtspec.spec.engine import SpecEngine
from trtspec.spec.params import SamplingParams, SpecParams
from trtspec.spec.schedule_policy import SchedulePolicy

PROMPTS = ["def fibonacci(n):\n", "The quick brown fox", "import numpy as np\n", "class Stack:\n    def",
           "Once upon a time", "for i in range(10):\n", "The capital of France is", "def main():\n    args ="]
MAX_NEW = [24, 12, 14, 16, 18, 20, 12, 14]
# request i arrives at step ARRIVALS[i]: batch sizes 1, 3, 6 (above max_concurrency), then falling as they finish
ARRIVALS = [0, 2, 2, 4, 4, 4, 20, 20]
STAGGERED = SpecSchedule(draft_len=((1, 4), (2, 3), (3, 2), (4, 1)), max_concurrency=5)


@pytest.fixture(scope="module")
def engine(embedded_pair) -> SpecEngine:
    return SpecEngine.from_pretrained(*embedded_pair, max_k=4)


@pytest.fixture(scope="module")
def plain(engine) -> list[list[int]]:
    """Greedy decoding without speculation (k = 0) of every prompt."""
    engine.schedule_policy = None
    return [o.token_ids for o in engine.generate(PROMPTS, [SamplingParams(max_new_tokens=n) for n in MAX_NEW],
                                                 SpecParams(k=0))]


def run(engine: SpecEngine, schedule: SpecSchedule, sampling=None,
        gate_open: list[list[bool]] | None = None) -> tuple[list[list[int]], list[list[int]]]:
    """Requests arriving at ARRIVALS under `schedule`; their outputs and each one's draft length per step (and
    whether the gate was open at each of those steps, into `gate_open`)."""
    engine.schedule_policy = SchedulePolicy(schedule)
    drafted: dict[int, list[int]] = {}
    opened: dict[int, list[bool]] = {}
    propose = engine._propose

    def recording(batch, ks):
        for request, k in zip(batch, ks, strict=True):
            drafted.setdefault(request.request_id, []).append(k)
            opened.setdefault(request.request_id, []).append(engine.gate_state is None or engine.gate_state.open)
        return propose(batch, ks)

    engine._propose = recording
    ids, outputs, step = [], {}, 0
    try:
        while len(ids) < len(PROMPTS) or engine.has_unfinished():
            for i in (i for i, at in enumerate(ARRIVALS) if at == step):
                ids.append(engine.add_request(PROMPTS[i], sampling[i] if sampling else
                                              SamplingParams(max_new_tokens=MAX_NEW[i]), SpecParams(k=4)))
            for delta in engine.step():
                outputs.setdefault(delta.request_id, []).extend(delta.token_ids)
            step += 1
    finally:
        del engine._propose
    if gate_open is not None:
        gate_open.extend(opened[rid] for rid in ids)
    return [outputs[rid] for rid in ids], [drafted[rid] for rid in ids]


def test_k_changes_mid_request_and_greedy_outputs_are_plain_decodings(engine, plain):
    outputs, drafted = run(engine, STAGGERED)
    assert outputs == plain
    # batch size 1 -> k 4; 3 -> 2; 6 -> 0 (above max_concurrency); falling again as requests finish -> 1, 2, 3
    assert drafted[0][:2] == [4, 4] and drafted[0][2] == 2
    assert 0 in drafted[0] and 0 in drafted[3]
    changed = [d for d in drafted if len({k for k in d if k}) >= 2 and 0 in d]
    assert len(changed) >= 4, drafted  # most requests ran at several draft lengths and at none
    assert max(max(d) for d in drafted[1:6]) < 4  # never alone: never the full k


def test_gate_closing_mid_run_keeps_greedy_outputs_and_probes(engine, plain):
    # no request reaches 5 tokens per drafting step: the gate closes once the first 2 drafting requests finished
    schedule = SpecSchedule(acceptance_window=2, acceptance_length_threshold=5.0, probe_every=2)
    gate_open: list[list[bool]] = []
    outputs, drafted = run(engine, schedule, gate_open=gate_open)
    assert outputs == plain
    state = engine.gate_state
    assert state is not None and not state.open and state.closes == 1 and state.opens == 0
    # requests 6 and 7 arrive after the close: the 2nd of them is a probe and drafts, the 1st never does
    assert set(drafted[6]) == {0} and max(drafted[7]) == 4 and state.probes == 1
    # the gate closed mid-run: requests running then drafted before it and stopped from the next step on
    stopped = [i for i in range(6) if True in gate_open[i] and False in gate_open[i]]
    assert stopped, gate_open
    for i in stopped:
        assert any(k for k, is_open in zip(drafted[i], gate_open[i], strict=True) if is_open), drafted[i]
        assert all(k == 0 for k, is_open in zip(drafted[i], gate_open[i], strict=True) if not is_open), drafted[i]


def test_sampled_requests_under_a_changing_schedule_finish_with_valid_output(engine):
    lengths = [n // 2 for n in MAX_NEW]
    sampling = [SamplingParams(temperature=0.9, top_p=0.95, seed=i, max_new_tokens=n, ignore_eos=True)
                for i, n in enumerate(lengths)]
    schedule = SpecSchedule(draft_len=((1, 4), (3, 1)), max_concurrency=4, acceptance_window=3,
                            acceptance_length_threshold=1.5, probe_every=2)
    outputs, drafted = run(engine, schedule, sampling)
    assert [len(o) for o in outputs] == lengths
    assert all(0 <= t < engine.vocab_size for o in outputs for t in o)
    assert any(len({k for k in d if k}) >= 2 for d in drafted)


def test_engine_from_config_runs_its_schedule(embedded_pair):
    schedule = SpecSchedule(draft_len=((1, 3), (2, 1)), acceptance_window=4, acceptance_length_threshold=1.2)
    config = EngineConfig(target=str(embedded_pair[0]), draft=str(embedded_pair[1]), max_k=4, schedule=schedule)
    engine = SpecEngine.from_config(config)
    assert engine.schedule_policy is not None and engine.schedule_policy.schedule == schedule
    assert engine.gate_state is not None and engine.gate_state.open
    assert SpecEngine.from_config(EngineConfig(target=str(embedded_pair[0]))).schedule_policy is None


def test_adaptive_requests_and_a_callers_draft_are_capped_too(engine, plain):
    engine.schedule_policy = SchedulePolicy(SpecSchedule(draft_len=((1, 4), (2, 1))))
    drafted: list[tuple[int, int]] = []  # (batch size, draft length) of each request's steps
    propose = engine._propose
    engine._propose = lambda batch, ks: drafted.extend((len(batch), k) for k in ks) or propose(batch, ks)
    try:
        adaptive = engine.generate(PROMPTS[:3], [SamplingParams(max_new_tokens=n) for n in MAX_NEW[:3]],
                                   SpecParams(k=4, adaptive=True))
        assert [o.token_ids for o in adaptive] == plain[:3]
        # adaptive k chooses within the caps (what it chooses depends on measured step costs, so only the bound)
        assert max(k for b, k in drafted if b >= 2) <= 1 and max(k for b, k in drafted if b == 1) <= 4
        own = engine.generate([plain[0][:6], plain[1][:6]], SamplingParams(max_new_tokens=4),
                              SpecParams(method="none", k=0, draft_token_ids=(1, 2, 3, 4)))
    finally:
        del engine._propose
    assert [o.stats.num_draft_tokens for o in own] == [1, 1]  # 4 drafted tokens given, 1 verified at batch size 2
