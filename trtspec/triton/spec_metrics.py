"""SpecMetrics: a served engine model's requests -> the Prometheus series of `trtspec.contracts.series` (Triton custom
metrics). The series are defined there once; this module only turns AcceptanceStats and request timings into them."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from trtspec.contracts.metrics import AcceptanceStats
from trtspec.contracts.series import TritonSeries


class SpecMetrics:
    """Counters, the mean-acceptance gauge, latency histograms and the acceptance gate of one engine model (labels:
    MODEL_LABELS). `gate` returns the engine's gate state (`SpecEngine.gate_state`: None without a gate); it only
    changes when a request finishes, so the gauge is set then."""

    def __init__(self, pb_utils: Any, labels: dict[str, str], *, default_k: int | None = None,
                 gate: Callable[[], Any] | None = None) -> None:
        self.series = TritonSeries(pb_utils, labels)
        self._total = AcceptanceStats()  # every finished request's, merged: the gauge's one definition
        self._lock = threading.Lock()
        self._gate = gate
        if default_k is not None:
            self.series.set("k", default_k)
        self.update_gate()

    def update_gate(self) -> None:
        """Set the gate_closed gauge from the engine's gate (nothing without a gate)."""
        state = self._gate() if self._gate is not None else None
        if state is not None:
            self.series.set("gate_closed", 0.0 if state.open else 1.0)

    def finished(self, finish_reason: str, stats: AcceptanceStats | None = None, *, latency_s: float | None = None,
                 time_per_output_token_s: float | None = None) -> None:
        """Count one ended engine request; add its AcceptanceStats when it ran to the end, and its timings.

        Args:
            latency_s: arrival to last token. time_per_output_token_s: (last - first token) / (tokens - 1).
        """
        self.series.finished(finish_reason)
        self.update_gate()
        if latency_s is not None:
            self.series.observe("request_latency_seconds", latency_s)
        if time_per_output_token_s is not None:
            self.series.observe("time_per_output_token_seconds", time_per_output_token_s)
        if stats is None:
            return
        self.series.add({"num_drafts": stats.num_drafts, "num_draft_tokens": stats.num_draft_tokens,
                         "num_accepted_tokens": stats.num_accepted_tokens,
                         "num_emitted_tokens": stats.num_emitted_tokens,
                         "num_target_forwards": stats.num_target_forwards},
                        {"num_accepted_tokens_per_pos": stats.num_accepted_tokens_per_pos,
                         "num_rejections_per_pos": stats.num_rejections_per_pos})
        with self._lock:
            self._total.merge(stats)
            self.series.set("mean_acceptance_length", self._total.mean_acceptance_length)

    def close(self) -> None:
        self.series.close()
