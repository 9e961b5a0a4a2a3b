"""A Dynamo worker's acceptance series: trtspec's spec-decode metrics (spec.metrics.SERIES, the names the Triton
models export too) in a prometheus_client registry, which the worker bridges into Dynamo's `/metrics` (the worker's
system port, `DYN_SYSTEM_PORT`; Dynamo adds its namespace/component/endpoint/worker labels at scrape time).

prometheus_client exposes a counter `X` as `X_total` (the Prometheus convention); Triton's custom metrics show `X`.
"""

from __future__ import annotations

import threading
from typing import Any

from trtspec.spec.metrics import SERIES, AcceptanceStats

LABELS = {"per_pos": ("position",), "requests": ("finish_reason",)}


class WorkerMetrics:
    """Counters of ended requests and their acceptance; the mean acceptance length over all of them."""

    def __init__(self, labels: dict[str, str] | None = None) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge

        self.registry = CollectorRegistry()
        self._labels = dict(labels or {})
        names = tuple(self._labels)
        self._series: dict[str, Any] = {}
        for key, (name, kind, description) in SERIES.items():
            cls = Counter if kind == "counter" else Gauge
            self._series[key] = cls(name, description, labelnames=names + LABELS.get(key, ()),
                                    registry=self.registry)
        self._total = AcceptanceStats()  # every finished request's, merged: the gauge's one definition
        self._lock = threading.Lock()

    def _metric(self, key: str, **extra: str) -> Any:
        labels = {**self._labels, **extra}
        return self._series[key].labels(**labels) if labels else self._series[key]

    def finished(self, finish_reason: str, stats: AcceptanceStats | None = None) -> None:
        """Count one ended request; add its AcceptanceStats when it ran to the end."""
        with self._lock:
            self._metric("requests", finish_reason=finish_reason).inc()
            if stats is None:
                return
            self._metric("num_drafts").inc(stats.num_drafts)
            self._metric("num_draft_tokens").inc(stats.num_draft_tokens)
            self._metric("num_accepted_tokens").inc(stats.num_accepted_tokens)
            self._metric("num_emitted_tokens").inc(stats.num_emitted_tokens)
            for pos, count in enumerate(stats.num_accepted_tokens_per_pos):
                self._metric("per_pos", position=str(pos)).inc(count)
            self._total.merge(stats)
            self._metric("mean").set(self._total.mean_acceptance_length)

    def exposition(self) -> str:
        """The registry in Prometheus text format (what /metrics shows of it)."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry).decode()
