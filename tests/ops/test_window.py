"""Scrape parsing and windows: exposition text written by prometheus-client parses into the series, increments over
a window equal the events that happened in it (counter resets included), and derived numbers use the one formula."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trtspec.contracts.metrics import AcceptanceStats
from trtspec.contracts.series import SERIES, name
from trtspec.ops.scrape import ModelCounters, ModelId, Sample, metrics_url, parse
from trtspec.ops.window import Ring, increments

LABELS = {"model": "tensorrt_llm", "version": "1", "method": "draft_target"}


def exposition(stats: AcceptanceStats, *, latencies: list[float] = ()) -> str:
    """The series as a Prometheus client would expose them (prometheus-client's own registry and text format)."""
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

    registry = CollectorRegistry()
    keys = list(LABELS)

    def counter(key: str, extra: tuple[str, ...] = ()) -> Counter:
        return Counter(name(key), SERIES[key].description, keys + list(extra), registry=registry)

    for key, value in (("num_drafts", stats.num_drafts), ("num_draft_tokens", stats.num_draft_tokens),
                       ("num_accepted_tokens", stats.num_accepted_tokens),
                       ("num_emitted_tokens", stats.num_emitted_tokens),
                       ("num_target_forwards", stats.num_target_forwards)):
        counter(key).labels(**LABELS).inc(value)
    for key, values in (("num_accepted_tokens_per_pos", stats.num_accepted_tokens_per_pos),
                        ("num_rejections_per_pos", stats.num_rejections_per_pos)):
        family = counter(key, ("position",))
        for pos, value in enumerate(values):
            family.labels(**LABELS, position=str(pos)).inc(value)
    Gauge(name("k"), "k", keys, registry=registry).labels(**LABELS).set(4)
    hist = Histogram(name("request_latency_seconds"), "latency", keys, registry=registry,
                     buckets=SERIES["request_latency_seconds"].buckets)
    for seconds in latencies:
        hist.labels(**LABELS).observe(seconds)
    return generate_latest(registry).decode()


def stats_of(drafts: list[tuple[int, int]]) -> AcceptanceStats:
    stats = AcceptanceStats()
    for k, accepted in drafts:
        stats.observe(k, accepted)
        stats.num_target_forwards += 1
        stats.num_emitted_tokens += accepted + 1
    return stats


def test_parse_reads_every_series_of_a_model():
    stats = stats_of([(4, 4), (4, 1), (4, 0), (3, 2)])
    sample = parse(exposition(stats, latencies=[0.3, 0.7, 4.0]), when=10.0)
    counters = sample.models[ModelId("tensorrt_llm", "1", "draft_target")]
    assert counters.counters["num_drafts"] == stats.num_drafts
    assert counters.counters["num_accepted_tokens"] == stats.num_accepted_tokens
    assert counters.per_pos["num_accepted_tokens_per_pos"] == stats.num_accepted_tokens_per_pos
    assert counters.per_pos["num_rejections_per_pos"] == stats.num_rejections_per_pos
    assert counters.k == 4
    hist = counters.histograms["request_latency_seconds"]
    assert hist.count == 3 and hist.sum == pytest.approx(5.0) and hist.buckets[float("inf")] == 3


def test_window_numbers_use_the_metric_formulas():
    stats = stats_of([(4, 4), (4, 1), (4, 0), (3, 2), (4, 3)])
    w = increments(ModelId("m"), parse(exposition(stats), 5.0).models[ModelId("tensorrt_llm", "1", "draft_target")],
                   None, 5.0)
    assert w.mean_acceptance_length == pytest.approx(stats.mean_acceptance_length)
    assert w.acceptance_rate == pytest.approx(stats.acceptance_rate)
    assert w.acceptance_per_pos == pytest.approx(stats.acceptance_rate_per_pos)
    assert w.conditional_per_pos == pytest.approx(stats.conditional_acceptance_per_pos)
    assert w.tokens_per_s == pytest.approx(stats.num_emitted_tokens / 5.0)
    # every draft that reached a position accepted or rejected there
    assert sum(w.rejections_per_pos) == stats.num_rejections


def test_latency_quantile_and_concurrency_from_the_histogram():
    stats = stats_of([(2, 1)])
    latencies = [0.2] * 50 + [3.0] * 50
    counters = parse(exposition(stats, latencies=latencies), 0.0).models[ModelId("tensorrt_llm", "1", "draft_target")]
    w = increments(ModelId("m"), counters, None, 10.0)
    assert 0.1 <= w.latency_quantile("request_latency_seconds", 0.25) <= 0.25  # inside the (0.1, 0.25] bucket
    assert 2.5 <= w.latency_quantile("request_latency_seconds", 0.9) <= 5.0
    assert w.concurrency == pytest.approx(sum(latencies) / 10.0)  # Little's law


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.lists(st.tuples(st.integers(1, 4), st.integers(0, 4)), max_size=6), st.booleans()),
                min_size=2, max_size=12),
       st.integers(1, 30))
def test_window_sums_the_events_it_covers_across_resets(scrapes, window_scrapes):
    """Counters since load, reset to 0 at random reloads: the window's increments are the events of its scrapes.
    (A reload is observable when the drafts counter went down: fewer drafts since the reload than before it.)"""
    ring = Ring(window_s=window_scrapes - 0.5)
    total = AcceptanceStats()  # since the current load
    truth: list[AcceptanceStats] = []
    for t, (drafts, reload) in enumerate(scrapes):
        events = stats_of([(k, min(a, k)) for k, a in drafts])
        reload = reload and events.num_drafts < total.num_drafts
        total = AcceptanceStats().merge(events) if reload else total.merge(events)
        truth.append(events)
        counters = ModelCounters(
            counters={"num_drafts": total.num_drafts, "num_accepted_tokens": total.num_accepted_tokens,
                      "num_draft_tokens": total.num_draft_tokens, "num_emitted_tokens": total.num_emitted_tokens},
            per_pos={"num_accepted_tokens_per_pos": list(total.num_accepted_tokens_per_pos),
                     "num_rejections_per_pos": list(total.num_rejections_per_pos)})
        ring.push(Sample(float(t), {ModelId("m"): counters}))
    window = ring.window()
    covered = [s.time for s in ring.samples][1:]  # the window's increments come from these scrapes
    want = AcceptanceStats()
    for t in covered:
        want.merge(truth[int(t)])
    got = window.get(ModelId("m"))
    if got is None:
        assert len(ring.samples) < 2
        return
    assert got.count("num_drafts") == want.num_drafts
    assert got.count("num_accepted_tokens") == want.num_accepted_tokens
    assert got.accepted_per_pos[:len(want.num_accepted_tokens_per_pos)] == want.num_accepted_tokens_per_pos
    assert sum(got.rejections_per_pos) == want.num_rejections
    assert got.seconds == pytest.approx(ring.span_s) and ring.span_s <= window_scrapes


@pytest.mark.parametrize("given_url, full", [("localhost:8002", "http://localhost:8002/metrics"),
                                             ("http://h:9/metrics", "http://h:9/metrics"),
                                             ("https://h/x/metrics", "https://h/x/metrics")])
def test_metrics_url_forms(given_url, full):
    assert metrics_url(given_url) == full


def test_apply_hands_only_drifted_changes_to_the_control_and_restarts_the_drift_test():
    """The operations loop acts through the control interface (trtspec.contracts.control), never a server module."""
    from types import SimpleNamespace

    from trtspec.contracts.control import KChange
    from trtspec.ops.monitor import Monitor
    from trtspec.ops.recommend import Recommendation

    class Control:
        def __init__(self) -> None:
            self.calls: list[tuple[str, int]] = []

        def set_default_k(self, model: str, k: int) -> KChange:
            self.calls.append((model, k))
            return KChange(model, 4, k, None)

    def report(action: str, current: int, recommended: int, drifted: bool) -> SimpleNamespace:
        rec = Recommendation("tensorrt_llm/1", action, current, recommended, 1.1, 0.9, 1.2, None, 4.0, False, "why")
        return SimpleNamespace(model="tensorrt_llm/1", recommendation=rec, schedule=None,
                               drift=SimpleNamespace(drifted=drifted))

    monitor, control = Monitor(60.0), Control()
    resets: list[object] = []
    monitor.reset_drift = lambda model=None: resets.append(model)  # type: ignore[method-assign]
    reports = [report("reduce_k", 4, 2, True), report("reduce_k", 4, 2, False), report("keep", 4, 4, True),
               report("increase_k", 4, 4, True)]
    assert monitor.apply(reports, control) == ["applied: tensorrt_llm k 4 -> 2 (why)"]
    assert control.calls == [("tensorrt_llm", 2)] and resets == [None]
