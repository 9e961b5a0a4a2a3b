"""Steady closed-loop traffic against a served engine model, with a switch of prompt suite (the drift scenario).

`Traffic(url, prompts, concurrency)` runs `concurrency` client threads; each sends one request at a time, the next
prompt of the current suite (round-robin), token ids in, to the engine model (`tensorrt_llm`), and counts successes
and failures. `switch(prompts)` changes the suite for every request sent afterwards. Text prompts are tokenized by
the served repository's `preprocessing` model (a prompt given as token ids is sent as is) and cut to their last
`prompt_tokens` tokens, as the sweep does; no end_id is sent, so each request runs to `max_tokens` (as the sweep's:
EOS ignored). A scenario's ticks follow the newest version of the watched model (a draft rollout moves it to N+1).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from trtspec.sweep.prompts import last_tokens

Prompts = Sequence[str | Sequence[int]]  # text, or token ids


@dataclass
class TrafficCounts:
    """Requests that ended, by outcome; errors keep their first messages."""

    ok: int = 0
    failed: int = 0
    tokens: int = 0
    errors: list[str] = field(default_factory=list)


class Traffic:
    """Closed-loop load: `concurrency` requests in flight, from `start()` to `stop()`."""

    def __init__(self, url: str, prompts: Prompts, *, concurrency: int = 4, max_tokens: int = 48,
                 prompt_tokens: int | None = 64, model: str = "tensorrt_llm", temperature: float = 0.0) -> None:
        self.url, self.model, self.concurrency = url, model, concurrency
        self.max_tokens, self.prompt_tokens, self.temperature = max_tokens, prompt_tokens, temperature
        self.counts = TrafficCounts()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._cache: dict[str, list[int]] = {}
        self.switch(prompts)

    def switch(self, prompts: Prompts) -> None:
        """Send these prompts from now on (round-robin, shared by the threads)."""
        if not prompts:
            raise ValueError("no prompts to send")
        with self._lock:
            self._prompts = itertools.cycle(list(prompts))

    def _next(self) -> str | Sequence[int]:
        with self._lock:
            return next(self._prompts)

    def _ids(self, client: object, text: str | Sequence[int]) -> list[int]:
        if not isinstance(text, str):
            return last_tokens(list(text), self.prompt_tokens)
        if text not in self._cache:
            ids, _ = client.tokenize(text)  # type: ignore[attr-defined]
            self._cache[text] = last_tokens(ids, self.prompt_tokens)
        return self._cache[text]

    def _worker(self) -> None:
        from trtspec.triton.client import TritonClient

        with TritonClient(self.url, model=self.model) as client:
            while not self._stop.is_set():
                try:
                    out = client.generate(self._ids(client, self._next()), max_tokens=self.max_tokens,
                                          temperature=self.temperature)
                except Exception as exc:  # noqa: BLE001 - every failure is counted and kept, the load goes on
                    with self._lock:
                        self.counts.failed += 1
                        if len(self.counts.errors) < 5:
                            self.counts.errors.append(str(exc))
                    time.sleep(0.1)
                    continue
                with self._lock:
                    self.counts.ok += 1
                    self.counts.tokens += len(out.token_ids)

    def start(self) -> Traffic:
        for i in range(self.concurrency):
            thread = threading.Thread(target=self._worker, name=f"traffic-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self, timeout_s: float = 60.0) -> TrafficCounts:
        """Stop sending; wait for the requests in flight to end."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout_s)
        return self.counts

    def __enter__(self) -> Traffic:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass(frozen=True)
class Tick:
    """One scrape of a scenario: when, which phase, the served model's report and the scrape's own increments."""

    t: float  # seconds since the scenario started
    phase: str
    report: object | None  # trtspec.ops.monitor.ModelReport of the watched model (None before its first window)
    accepted_per_pos: list[float]  # this scrape's increments (the recorded accept stream)
    rejections_per_pos: list[float]


def run_phases(grpc_url: str, scrape: object, monitor: object, phases: Sequence[tuple[str, Prompts, float]],
               *, concurrency: int = 4, max_tokens: int = 48, prompt_tokens: int | None = 64,
               interval_s: float = 1.0, model: str = "tensorrt_llm",
               on_tick: object = None, stop_when: object = None) -> tuple[list[Tick], TrafficCounts]:
    """Traffic through `phases` (name, prompts, seconds) while the monitor scrapes every `interval_s`.

    Args:
        scrape: a no-argument function returning a Sample (trtspec.ops.scrape.scraper).
        monitor: a trtspec.ops.monitor.Monitor; on_tick: called with each Tick as it is recorded.
        stop_when: a predicate on a Tick of the last phase that ends the scenario early (e.g. drift flagged).
    """
    ticks: list[Tick] = []
    monitor.observe(scrape())  # type: ignore[attr-defined]
    traffic = Traffic(grpc_url, phases[0][1], concurrency=concurrency, max_tokens=max_tokens,
                      prompt_tokens=prompt_tokens, model=model)
    start = time.monotonic()
    with traffic:
        for name, prompts, seconds in phases:
            traffic.switch(prompts)
            phase_end = time.monotonic() + seconds
            while time.monotonic() < phase_end:
                time.sleep(max(0.0, min(interval_s, phase_end - time.monotonic())))
                monitor.observe(scrape())  # type: ignore[attr-defined]
                report = max((r for r in monitor.reports() if r.model.split("/")[0] == model),  # type: ignore[attr-defined]
                             key=lambda r: _version(r.model.split("/")[-1]), default=None)
                step = max(((m, s) for m, s in monitor.steps.items() if m.model == model),  # type: ignore[attr-defined]
                           key=lambda ms: _version(ms[0].version), default=(None, None))[1]
                tick = Tick(time.monotonic() - start, name, report,
                            list(step.accepted_per_pos) if step else [], list(step.rejections_per_pos) if step else [])
                ticks.append(tick)
                if callable(on_tick):
                    on_tick(tick)
                if callable(stop_when) and name == phases[-1][0] and stop_when(tick):
                    return ticks, traffic.stop()
    return ticks, traffic.counts


def _version(version: str) -> tuple[int, str]:
    """Order of Triton model versions (numeric; anything else first)."""
    return (int(version), version) if version.isdigit() else (-1, version)
