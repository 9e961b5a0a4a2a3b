"""EngineLoop: concurrent submitters get exactly their own greedy outputs, cancellation frees KV, errors reach the
request they belong to, and shutdown drains or aborts."""

from __future__ import annotations

import threading

import pytest

from tests.spec.conftest import hf_greedy
from trtspec.errors import ConfigError, OverloadedError, ServerError, SinkClosed
from trtspec.spec.engine import SpecEngine
from trtspec.spec.params import SamplingParams, SpecParams
from trtspec.spec.scheduler import SchedulerConfig
from trtspec.spec.serving import EngineLoop

PROMPTS = [[5, 9, 3, 7, 5, 9, 3, 2, 11], [4], [17, 30, 2, 8, 41, 8, 41, 8, 63, 12, 30, 2, 8], [6, 6, 7, 50, 3]]
SPECS = [SpecParams("draft_target", 4), SpecParams("none", 0), SpecParams("lookahead", 3),
         SpecParams("ngram", 2, adaptive=True)]


@pytest.fixture(scope="module")
def engine(random_pair, near_draft):
    return SpecEngine.from_pretrained(random_pair[0], near_draft, max_k=8)


def test_concurrent_submitters_get_their_own_outputs(engine, hf_target):
    reference = [hf_greedy(hf_target, p, 16) for p in PROMPTS]
    results: dict[tuple[int, int], list[int]] = {}
    with EngineLoop(engine) as loop:
        def client(c: int) -> None:
            for i in range(len(PROMPTS)):
                j = (i + c) % len(PROMPTS)
                results[(c, j)] = loop.submit(PROMPTS[j], SamplingParams(max_new_tokens=16), SPECS[j]).token_ids()

        threads = [threading.Thread(target=client, args=(c,)) for c in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    assert len(results) == 12
    for (_, j), tokens in results.items():
        assert tokens == reference[j]
    assert not engine.has_unfinished() and engine.cache.num_free_slots == engine.cache.max_slots


def test_stream_text_and_cancel_frees_kv(engine):
    with EngineLoop(engine) as loop:
        stream = loop.submit(PROMPTS[0], SamplingParams(max_new_tokens=200, ignore_eos=True),
                             SpecParams("draft_target", 2))
        deltas = iter(stream)
        first = next(deltas)
        assert first.token_ids and not first.finished
        assert stream.cancel()
        rest = list(deltas)
        assert rest[-1].finished and rest[-1].finish_reason == "abort"
        assert sum(len(d.token_ids) for d in [first, *rest]) < 200
        # the loop thread aborted it: nothing runs, the KV slot and the draft state are free
        assert loop.submit(PROMPTS[1], SamplingParams(max_new_tokens=2)).token_ids()
    assert engine.cache.num_free_slots == engine.cache.max_slots and not engine.proposers["draft_model"].states


def test_errors_reach_the_right_request(engine):
    with EngineLoop(engine) as loop:
        good = loop.submit(PROMPTS[2], SamplingParams(max_new_tokens=8), SpecParams("ngram", 3))
        bad = loop.submit([], SamplingParams(max_new_tokens=8))
        worse = loop.submit(PROMPTS[2], SamplingParams(top_p=0.0))
        with pytest.raises(ConfigError, match="prompt"):
            bad.token_ids()
        with pytest.raises(ConfigError, match="top_p"):
            worse.token_ids()
        assert len(good.token_ids()) == 8


def test_overload_and_step_failure_are_per_request(random_pair, near_draft):
    engine = SpecEngine.from_pretrained(random_pair[0], near_draft,
                                        scheduler=SchedulerConfig(max_num_seqs=1, max_queue_len=1))
    with EngineLoop(engine) as loop:
        first = loop.submit(PROMPTS[0], SamplingParams(max_new_tokens=30, ignore_eos=True))
        second = loop.submit(PROMPTS[1], SamplingParams(max_new_tokens=4))
        with pytest.raises(OverloadedError, match="overloaded"):
            second.token_ids()
        assert len(first.token_ids()) == 30
        calls = {"n": 0}
        real_step = engine.step

        def flaky_step():
            calls["n"] += 1
            if calls["n"] == 2:
                raise RuntimeError("boom")
            return real_step()

        engine.step = flaky_step
        failing = loop.submit(PROMPTS[0], SamplingParams(max_new_tokens=30, ignore_eos=True))
        with pytest.raises(ServerError, match="boom"):
            failing.token_ids()
        assert len(loop.submit(PROMPTS[1], SamplingParams(max_new_tokens=3, ignore_eos=True)).token_ids()) == 3
    assert not engine.has_unfinished()


def test_shutdown_drains_or_aborts(engine):
    loop = EngineLoop(engine)
    drained = loop.submit(PROMPTS[0], SamplingParams(max_new_tokens=12, ignore_eos=True))
    loop.shutdown(drain=True)
    assert len(drained.token_ids()) == 12
    with pytest.raises(ServerError, match="shut down"):
        loop.submit(PROMPTS[0])
    loop = EngineLoop(engine)
    aborted = loop.submit(PROMPTS[0], SamplingParams(max_new_tokens=500, ignore_eos=True))
    next(iter(aborted))
    loop.shutdown()
    with pytest.raises(ServerError, match="shut down"):
        aborted.token_ids()
    assert not engine.has_unfinished()


class ListSink:
    """A push Sink that records what the loop delivered."""

    def __init__(self, raise_on: int | None = None, error: type[Exception] = ConnectionError) -> None:
        self.deltas: list = []
        self._error = error
        self.errors: list[BaseException] = []
        self.done = threading.Event()
        self._raise_on = raise_on

    def deliver(self, delta) -> None:
        self.deltas.append(delta)
        if delta.finished:
            self.done.set()
        if self._raise_on is not None and len(self.deltas) == self._raise_on:
            raise self._error("client went away")

    def fail(self, error: BaseException) -> None:
        self.errors.append(error)
        self.done.set()

    def token_ids(self) -> list[int]:
        return [t for d in self.deltas for t in d.token_ids]


@pytest.mark.parametrize("error", [SinkClosed, ConnectionError])
def test_push_sinks_get_their_own_outputs_and_a_raising_sink_loses_only_its_request(engine, hf_target, error):
    """A sink whose deliver() raises loses only its request, aborted at once: SinkClosed (its request has already
    ended) tells it nothing more; any other error fails it (sink.fail), so its client gets an answer."""
    with EngineLoop(engine) as loop:
        sinks = [ListSink() for _ in PROMPTS]
        for prompt, spec, sink in zip(PROMPTS, SPECS, sinks, strict=True):
            loop.submit_to(sink, prompt, SamplingParams(max_new_tokens=16), spec)
        broken = ListSink(raise_on=1, error=error)
        loop.submit_to(broken, PROMPTS[0], SamplingParams(max_new_tokens=200, ignore_eos=True))
        for sink in sinks:
            assert sink.done.wait(120)
        assert [s.token_ids() for s in sinks] == [hf_greedy(hf_target, p, 16) for p in PROMPTS]
        assert len(loop.submit(PROMPTS[1], SamplingParams(max_new_tokens=3, ignore_eos=True)).token_ids()) == 3
    assert len(broken.deltas) == 1  # aborted at once: no more deltas, no more steps for it
    assert [type(e) for e in broken.errors] == ([] if error is SinkClosed else [ConnectionError])
    assert not engine.has_unfinished() and engine.cache.num_free_slots == engine.cache.max_slots


def test_is_cancelled_is_polled_and_aborts(engine):
    gone = threading.Event()
    with EngineLoop(engine) as loop:
        sink = ListSink()
        loop.submit_to(sink, PROMPTS[0], SamplingParams(max_new_tokens=400, ignore_eos=True),
                       SpecParams("draft_target", 2), is_cancelled=gone.is_set)
        while not sink.deltas:
            sink.done.wait(0.01)
        gone.set()
        assert sink.done.wait(60)
    assert sink.deltas[-1].finish_reason == "abort" and len(sink.token_ids()) < 400
    assert not engine.has_unfinished() and not engine.proposers["draft_model"].states


def test_drain_times_out_then_aborts(engine):
    loop = EngineLoop(engine)
    sink = ListSink()
    loop.submit_to(sink, PROMPTS[0], SamplingParams(max_new_tokens=100_000, ignore_eos=True))
    while not sink.deltas:
        sink.done.wait(0.01)
    # far shorter than the request (it runs to the model's context, ~250 tokens): the drain must time out
    loop.shutdown(drain=True, timeout=0.02)
    assert not any(d.finished for d in sink.deltas), "the request finished before the drain timed out"
    assert sink.errors and "shut down" in str(sink.errors[0]) and not engine.has_unfinished()


def test_log_probs_and_controls_travel_through_the_loop(engine):
    sampling = SamplingParams(max_new_tokens=16, return_log_probs=True, repetition_penalty=1.4, bad_words=((30,),),
                              stop_words=((16, 2),))
    spec = SpecParams("draft_target", 4)
    full = engine.generate([PROMPTS[0]], sampling, spec)[0]
    with EngineLoop(engine) as loop:
        deltas = list(loop.submit(PROMPTS[0], sampling, spec))
    assert [t for d in deltas for t in d.token_ids] == full.token_ids
    assert [x for d in deltas for x in d.log_probs] == pytest.approx(full.log_probs)
    assert deltas[-1].cum_log_prob == pytest.approx(full.cum_log_prob) and deltas[-1].finish_reason == full.finish_reason
