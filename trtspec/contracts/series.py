"""The Prometheus series of speculation: names, kinds, labels and buckets, defined once, and their Triton emitter.

Every served engine publishes these on Triton's metrics port (custom metrics of the Python backend): the torch
flavour's engine models (`trtspec.triton.spec_metrics`), and on the TensorRT-LLM flavour the `tensorrt_llm_bls`
model from the per-request perf outputs (the C++ backend publishes no acceptance series). `trtspec monitor`, the
Prometheus rules and the Grafana dashboard read them by these names.

Names follow vLLM's spec-decode metrics (see trtspec.contracts.metrics for what each word means). Counters count since
the model was loaded; a reload starts them at 0 again (readers handle the reset).

Standard library only: `trtspec deploy` copies this file next to the BLS's model.py, so it also runs in NVIDIA's
TensorRT-LLM container where trtspec is not installed.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

PREFIX = "trtspec_spec_decode"
MODEL_LABELS = ("model", "version", "method")  # on every series: which served model, and its speculation method
# Histogram buckets (seconds): whole requests, and the time per output token after the first.
REQUEST_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
TOKEN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


@dataclass(frozen=True)
class Series:
    """One metric family: `key` is the short name code uses, `name` the exported one."""

    key: str
    kind: str  # counter | gauge | histogram
    description: str
    label: str | None = None  # an extra label besides MODEL_LABELS (position, finish_reason)
    buckets: tuple[float, ...] | None = None  # histograms only

    @property
    def name(self) -> str:
        return f"{PREFIX}_{self.key}"


SERIES: dict[str, Series] = {s.key: s for s in (
    Series("num_drafts", "counter", "Verified drafts (one per sequence per speculative step)"),
    Series("num_draft_tokens", "counter", "Draft tokens proposed"),
    Series("num_accepted_tokens", "counter", "Draft tokens accepted by the verifier"),
    Series("num_accepted_tokens_per_pos", "counter",
           "Drafts whose first position+1 tokens were all accepted", label="position"),
    Series("num_rejections_per_pos", "counter", "Drafts whose first rejected token was at this position",
           label="position"),
    Series("num_emitted_tokens", "counter", "Tokens emitted (accepted + recovered/bonus)"),
    Series("num_target_forwards", "counter", "Target forwards (one per sequence per engine step)"),
    Series("requests", "counter", "Ended requests by finish_reason (stop, length, abort)", label="finish_reason"),
    Series("mean_acceptance_length", "gauge", "1 + accepted / drafts, over all requests since the model loaded"),
    Series("k", "gauge", "Draft tokens per request when a request does not say (the served default k)"),
    Series("gate_closed", "gauge", "1 while the acceptance gate has turned speculation off (probes aside), else 0; "
           "only engines with a gate (acceptance_window or acceptance_rate_window_size)"),
    Series("request_latency_seconds", "histogram", "Seconds from a request's arrival to its last token",
           buckets=REQUEST_BUCKETS),
    Series("time_per_output_token_seconds", "histogram",
           "Seconds per output token after the first, per request", buckets=TOKEN_BUCKETS),
)}  # fmt: skip
COUNTERS = ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_emitted_tokens", "num_target_forwards")
PER_POSITION = ("num_accepted_tokens_per_pos", "num_rejections_per_pos")


def name(key: str) -> str:
    """The exported name of series `key` (KeyError for a name that is not defined here)."""
    return SERIES[key].name


class TritonSeries:
    """The series of one served model, made with Triton's custom-metrics API (`pb_utils.MetricFamily`).

    Args:
        pb_utils: the Python backend's module. labels: values of MODEL_LABELS.
    """

    def __init__(self, pb_utils: Any, labels: Mapping[str, str]) -> None:
        family = pb_utils.MetricFamily
        kinds = {"counter": family.COUNTER, "gauge": family.GAUGE, "histogram": getattr(family, "HISTOGRAM", None)}
        self._labels = dict(labels)
        self._families = {s.key: family(name=s.name, description=s.description, kind=kinds[s.kind])
                          for s in SERIES.values() if kinds[s.kind] is not None}  # histograms need Triton >= 24.11
        self._metrics: dict[tuple[str, str], Any] = {}  # (key, extra label value) -> metric, made on first use
        self._lock = threading.Lock()

    def _metric(self, key: str, value: str = "") -> Any:
        if (key, value) not in self._metrics:
            series = SERIES[key]
            labels = {**self._labels, series.label: value} if series.label else self._labels
            extra = {"buckets": list(series.buckets)} if series.buckets else {}
            self._metrics[key, value] = self._families[key].Metric(labels=labels, **extra)
        return self._metrics[key, value]

    def add(self, counts: Mapping[str, float], per_pos: Mapping[str, list[int]] | None = None) -> None:
        """Increment counters: `counts` by key (COUNTERS), `per_pos` key -> counts by position (PER_POSITION)."""
        with self._lock:
            for key, amount in counts.items():
                if amount:
                    self._metric(key).increment(amount)
            for key, values in (per_pos or {}).items():
                for pos, amount in enumerate(values):  # a position at 0 is a series too (rates of it are 0)
                    metric = self._metric(key, str(pos))
                    if amount:
                        metric.increment(amount)

    def finished(self, finish_reason: str) -> None:
        """Count one ended request."""
        with self._lock:
            self._metric("requests", finish_reason).increment(1)

    def set(self, key: str, value: float) -> None:
        """Set a gauge."""
        with self._lock:
            self._metric(key).set(value)

    def observe(self, key: str, seconds: float) -> None:
        """Add one observation to a histogram (a no-op on a Triton without histograms)."""
        if key not in self._families:
            return
        with self._lock:
            self._metric(key).observe(seconds)

    def close(self) -> None:
        """Drop the metrics, then their families (the backend refuses the reverse order)."""
        with self._lock:
            self._metrics.clear()
            self._families.clear()
