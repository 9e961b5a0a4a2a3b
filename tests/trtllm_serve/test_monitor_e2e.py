"""The operations loop against trtllm-serve's format, end to end on CPU: `trtspec serve --trtllm-serve` runs the
embedded pair (draft_target, k = 4) and publishes the same traffic twice, as TensorRT-LLM's iteration statistics
(`/metrics`, JSON, drained per GET) and as trtspec's own series (`/trtspec/metrics`, Prometheus).

- Over a window that starts and ends with the server idle, the monitor reports the same mean acceptance length,
  acceptance rate and draft count from either source (the iteration rows are counted per step, the series per
  finished request: equal once every request has finished).
- Traffic that shifts from the baseline's code (greedy) to prose at temperature 1 is flagged as drift from either
  source (per position from the series; on the acceptance rate from the iteration totals), and steady code traffic
  is flagged by neither. The baseline is a sweep of the same pair on the code suite (greedy, k = 4).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from tests.tiers import starts_processes
from tests.trtllm_serve.serving import Served, serving
from trtspec.ops.drift import DriftConfig
from trtspec.ops.scrape import scraper

K, MAX_TOKENS, PROMPT_TOKENS, CONCURRENCY, LOAD = 4, 32, 64, 4, 8  # LOAD: clients of the drift run
STEADY_S, SHIFT_LIMIT_S = 6.0, 120.0
DRIFT = DriftConfig(shift=0.05)  # temperature-1 prose costs the tiny pair ~0.06 of conditional acceptance


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    from trtspec.sweep.baseline import baseline_for
    from trtspec.sweep.grid import SweepSpec
    from trtspec.sweep.runner import run_sweep

    results = tmp_path_factory.mktemp("baseline") / "results.jsonl"
    run_sweep(SweepSpec.build(model="tiny", methods=["draft_target"], drafts=["tiny-draft"], k=[0, K],
                              temperatures=[0.0], suites=["code"], concurrency=[CONCURRENCY], num_prompts=16,
                              max_new_tokens=MAX_TOKENS, prompt_tokens=PROMPT_TOKENS,
                              calibration_batch_sizes=[1, CONCURRENCY], calibration_repeats=1, max_draft_len=K),
              results, show_progress=False)
    return baseline_for(results, method="draft_target", k=K, temperature=0.0)


@pytest.fixture(scope="module")
@starts_processes
def server() -> Iterator[Served]:
    with serving() as served:
        yield served


def _prompts(suite: str) -> list[str]:
    from trtspec.sweep.prompts import load_suite

    return list(load_suite(suite, 16).prompts)


class Load:
    """`clients` OpenAI clients sending completions back to back (prompts round-robin) until stopped; `switch`
    changes the prompts and temperature of every later request. Failed requests are kept."""

    def __init__(self, url: str, prompts: list[str], temperature: float, clients: int = CONCURRENCY) -> None:
        from openai import OpenAI

        self.client = OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)
        self.prompts, self.temperature = prompts, temperature
        self.sent, self.failed, self.done = 0, [], threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(clients)]

    def switch(self, prompts: list[str], temperature: float) -> None:
        with self.lock:
            self.prompts, self.temperature = prompts, temperature

    def _run(self) -> None:
        while not self.done.is_set():
            with self.lock:
                prompt = self.prompts[self.sent % len(self.prompts)]
                temperature, seed = self.temperature, self.sent
                self.sent += 1
            try:
                self.client.completions.create(model="tiny", prompt=prompt, max_tokens=MAX_TOKENS,
                                               temperature=temperature, seed=seed)
            except Exception as exc:  # noqa: BLE001 - counted, asserted empty
                self.failed.append(repr(exc))

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        for thread in self.threads:
            thread.join(timeout=120)


def test_both_sources_report_the_same_window(server):
    from trtspec.ops.monitor import Monitor

    monitors = {path: Monitor(600.0) for path in ("/metrics", "/trtspec/metrics")}
    scrapes = {path: scraper(server.url + path) for path in monitors}
    for path, monitor in monitors.items():  # the window starts idle
        monitor.observe(scrapes[path]())
    with Load(server.url, _prompts("code")[:6], 0.0) as load:
        while load.sent < 12:
            time.sleep(0.05)
    time.sleep(0.3)  # the last requests' final deltas are counted before the window ends
    for path, monitor in monitors.items():
        monitor.observe(scrapes[path]())
    assert not load.failed, load.failed[:3]
    (rows,), (series,) = (monitors[p].reports() for p in monitors)
    assert rows.num_drafts > 0 and rows.num_drafts == series.num_drafts
    assert rows.mean_acceptance_length == pytest.approx(series.mean_acceptance_length, abs=1e-9)
    assert rows.acceptance_rate == pytest.approx(series.acceptance_rate, abs=1e-9)
    assert rows.per_pos_estimated and not series.per_pos_estimated  # totals vs counts per position, labelled
    assert rows.k == series.k == K and rows.missing_iterations == 0


def test_drift_to_temperature_one_prose_is_flagged_from_either_source(server, baseline):
    from trtspec.ops.monitor import Monitor

    monitors = {path: Monitor(60.0, baseline, drift=DRIFT) for path in ("/metrics", "/trtspec/metrics")}
    scrapes = {path: scraper(server.url + path) for path in monitors}
    alarms: dict[str, dict[str, float]] = {"steady": {}, "shifted": {}}

    def tick(phase: str, start: float) -> None:
        for path, monitor in monitors.items():
            monitor.observe(scrapes[path]())
            report = next(iter(monitor.reports()), None)
            if report is not None and report.drift is not None and report.drift.drifted:
                alarms[phase].setdefault(path, time.monotonic() - start)

    with Load(server.url, _prompts("code"), 0.0, clients=LOAD) as load:
        start = time.monotonic()
        while time.monotonic() - start < STEADY_S:
            time.sleep(0.5)
            tick("steady", start)
        load.switch(_prompts("prose"), 1.0)
        start = time.monotonic()
        while len(alarms["shifted"]) < 2 and time.monotonic() - start < SHIFT_LIMIT_S:
            time.sleep(0.5)
            tick("shifted", start)
    assert not load.failed, load.failed[:3]
    assert alarms["steady"] == {}, alarms
    assert set(alarms["shifted"]) == set(monitors), alarms
    reports = {path: monitor.reports()[0] for path, monitor in monitors.items()}
    assert reports["/metrics"].drift.test == "acceptance_rate"
    assert reports["/trtspec/metrics"].drift.test == "per_position"
