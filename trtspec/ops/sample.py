"""What one scrape holds: per served model (`ModelId`), its cumulative counters (`ModelCounters`), at one time
(`Sample`). Every metrics source of the monitor produces these (ops/scrape.py: Prometheus pages and trtllm-serve's
iteration statistics, ops/iterations.py; client-side taps, ops/tap.py); ops/window.py diffs them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

# The most of one metrics page read: Triton's page for a few dozen models, or a Dynamo worker's, is tens of KiB; a
# larger page is not one (and would take seconds and hundreds of MB to parse), so it is refused after this many bytes.
MAX_PAGE_BYTES = 4 << 20


@dataclass(frozen=True)
class ModelId:
    """A served model as its series label it: name, version, speculation method; and which page it came from
    (`source`: the metrics URL when several are scraped, one per Dynamo worker; empty for one page)."""

    model: str
    version: str = "1"
    method: str = ""
    source: str = ""

    def __str__(self) -> str:
        return f"{self.model}/{self.version}"

    @property
    def pooled(self) -> ModelId:
        """The model without its page: what the instances serving it are summed under."""
        return replace(self, source="")


@dataclass
class Histogram:
    """Cumulative bucket counts (upper bound -> observations <= it, +Inf included), their sum and count."""

    buckets: dict[float, float] = field(default_factory=dict)
    sum: float = 0.0
    count: float = 0.0


@dataclass
class ModelCounters:
    """One model's cumulative series at one scrape (values as Triton reported them, counts since the model loaded)."""

    counters: dict[str, float] = field(default_factory=dict)  # COUNTERS key -> value
    per_pos: dict[str, list[float]] = field(default_factory=dict)  # PER_POSITION key -> [position]
    requests: dict[str, float] = field(default_factory=dict)  # finish_reason -> ended requests
    histograms: dict[str, Histogram] = field(default_factory=dict)  # HISTOGRAMS key -> histogram
    k: float | None = None  # the served default k (gauge)
    note: str = ""  # what the source lacks, in one line (iteration statistics without rows or speculation)


@dataclass(frozen=True)
class Sample:
    """One scrape: when (seconds on a monotonic clock) and every model's counters."""

    time: float
    models: dict[ModelId, ModelCounters]
