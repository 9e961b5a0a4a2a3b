"""trtspec's spec-decode series (trtspec.contracts.series `SERIES`, the names the Triton models export too) in a
prometheus_client registry, fed from each finished request: one emitter for every server that is not Triton.

- a Dynamo worker (trtspec/dynamo/worker.py) bridges the registry into Dynamo's `/metrics` (the worker's system port,
  `DYN_SYSTEM_PORT`; Dynamo adds its namespace/component/endpoint/worker labels at scrape time);
- the trtllm-serve server (trtspec/trtllm_serve) shows it at `/trtspec/metrics` beside trtllm-serve's own `/metrics`.

prometheus_client exposes a counter `X` as `X_total` (the Prometheus convention); Triton's custom metrics show `X`.
`trtspec monitor` reads both (prometheus-client's parser names the family `X` either way). prometheus_client is
imported when a WorkerMetrics is made, not with this module (no torch either: a torch-free contract).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from trtspec.contracts.metrics import AcceptanceStats
from trtspec.contracts.series import SERIES


class WorkerMetrics:
    """Counters of ended requests and their acceptance; the mean acceptance length over all of them; latency
    histograms; the served default k; whether the acceptance gate is closed.

    Args:
        labels: constant labels (the worker passes `method`, the deployment's speculative method; Dynamo adds
            `model` = the model's path and `model_name` = the served name, which `trtspec monitor` reads).
        default_k: the k every request runs unless it asks otherwise (the `k` gauge).
        gate: returns the engine's gate state (`SpecEngine.gate_state`; None without a gate or before the engine
            starts); read when a request ends (the only time it changes) and on `update_gate`.
    """

    def __init__(self, labels: dict[str, str] | None = None, *, default_k: int | None = None,
                 gate: Callable[[], Any] | None = None) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        self._labels = dict(labels or {})
        names = tuple(self._labels)
        self._series: dict[str, Any] = {}
        for key, series in SERIES.items():
            labelnames = names + ((series.label,) if series.label else ())
            if series.kind == "histogram":
                self._series[key] = Histogram(series.name, series.description, labelnames=labelnames,
                                              buckets=series.buckets, registry=self.registry)
            else:
                cls = Counter if series.kind == "counter" else Gauge
                self._series[key] = cls(series.name, series.description, labelnames=labelnames,
                                        registry=self.registry)
        self._total = AcceptanceStats()  # every finished request's, merged: the gauge's one definition
        self._lock = threading.Lock()
        self._gate = gate
        if default_k is not None:
            self._metric("k").set(default_k)
        self.update_gate()

    def update_gate(self) -> None:
        """Set the gate_closed gauge from the engine's gate (nothing without one)."""
        state = self._gate() if self._gate is not None else None
        if state is not None:
            self._metric("gate_closed").set(0.0 if state.open else 1.0)

    def _metric(self, key: str, **extra: str) -> Any:
        labels = {**self._labels, **extra}
        return self._series[key].labels(**labels) if labels else self._series[key]

    def finished(self, finish_reason: str, stats: AcceptanceStats | None = None, *, latency_s: float | None = None,
                 time_per_output_token_s: float | None = None) -> None:
        """Count one ended request; add its AcceptanceStats when it ran to the end, and its timings (as the Triton
        models' `SpecMetrics.finished`: arrival to last token; (last - first token) / (tokens - 1))."""
        self.update_gate()
        with self._lock:
            self._metric("requests", finish_reason=finish_reason).inc()
            if latency_s is not None:
                self._metric("request_latency_seconds").observe(latency_s)
            if time_per_output_token_s is not None:
                self._metric("time_per_output_token_seconds").observe(time_per_output_token_s)
            if stats is None:
                return
            for key in ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_emitted_tokens",
                        "num_target_forwards"):
                self._metric(key).inc(getattr(stats, key))
            for key, values in (("num_accepted_tokens_per_pos", stats.num_accepted_tokens_per_pos),
                                ("num_rejections_per_pos", stats.num_rejections_per_pos)):
                for pos, count in enumerate(values):
                    self._metric(key, position=str(pos)).inc(count)
            self._total.merge(stats)
            self._metric("mean_acceptance_length").set(self._total.mean_acceptance_length)

    def exposition(self) -> str:
        """The registry in Prometheus text format (what /metrics shows of it)."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry).decode()
