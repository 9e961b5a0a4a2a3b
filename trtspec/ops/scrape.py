"""Scrape metrics pages into typed samples: the `trtspec.contracts.series` counters of every served model.

A `Sample` is one scrape: a timestamp and, per model, the cumulative counters, per-position counters, requests by
finish reason, latency histograms and the served k. Parsing uses prometheus-client's text parser; fetching is one
HTTP GET per page. Nothing here keeps state between scrapes (that is `window.py`).

One page is Triton's metrics port (every served model of one server). A NVIDIA Dynamo deployment publishes the
series on each worker's system port (`trtspec serve --dynamo N`; the frontend's /metrics has none of them): the
scraper reads every page given, and each model's counters stay apart per page (`ModelId.source`), so a worker that
dies or restarts is one instance gone or reset, never a drop in a sum; the monitor adds the instances up per model
(`window.pool`).
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

from trtspec.contracts.series import COUNTERS, PER_POSITION, PREFIX, SERIES
from trtspec.errors import ServerError, UsageError

HISTOGRAMS = tuple(key for key, s in SERIES.items() if s.kind == "histogram")
_KEY_OF = {s.name: key for key, s in SERIES.items()}


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


@dataclass(frozen=True)
class Sample:
    """One scrape: when (seconds on a monotonic clock) and every model's counters."""

    time: float
    models: dict[ModelId, ModelCounters]


def metrics_url(url: str) -> str:
    """A full metrics URL from `host:port`, `http://host:port` or a URL with a path (kept as given)."""
    text = url.strip()
    if "://" not in text:
        text = f"http://{text}"
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--metrics {url!r} is not an http(s) URL or host:port",
                         hint="give Triton's metrics endpoint (e.g. --metrics localhost:8002) or each Dynamo "
                              "worker's system port (e.g. --metrics localhost:8081,localhost:8082)")
    return text if parts.path not in ("", "/") else f"{parts.scheme}://{parts.netloc}/metrics"


def fetch(url: str, *, timeout_s: float = 5.0) -> str:
    """The text of the metrics page; ServerError (one line, exit 1) when it cannot be read."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 - http(s) checked above
            return response.read().decode("utf-8", errors="replace")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise ServerError(f"cannot read metrics from {url}: {reason}",
                          hint="is the server running? `trtspec serve REPO` prints Triton's metrics port (default "
                               "8002), `trtspec serve --dynamo N` its workers' (default 8081, 8082, ...)") from None


def parse(text: str, when: float, *, source: str = "") -> Sample:
    """The trtspec series of a metrics page (other families, e.g. Triton's nv_* or Dynamo's dynamo_*, are ignored).

    The model is its `model` label; on a Dynamo worker's page, where `model` is the model's path, the served name
    (`model_name`). `source` is kept in each ModelId (see the module docstring)."""
    from prometheus_client.parser import text_string_to_metric_families

    models: dict[ModelId, ModelCounters] = {}
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError as exc:
        raise ServerError(f"the metrics page does not parse as Prometheus text: {exc}",
                          hint="point --metrics at Triton's metrics port (default 8002), not its HTTP port") from None
    for family in families:
        key = _KEY_OF.get(family.name)
        if key is None:
            continue
        for sample in family.samples:
            labels = dict(sample.labels)
            name = labels.pop("model_name", None) or labels.get("model", "?")
            labels.pop("model", None)
            model = ModelId(name, labels.pop("version", "1"), labels.pop("method", ""), source)
            counters = models.setdefault(model, ModelCounters())
            _add(counters, key, sample.name, labels, float(sample.value))
    return Sample(when, models)


def _add(counters: ModelCounters, key: str, sample_name: str, labels: dict[str, str], value: float) -> None:
    if key in COUNTERS:
        counters.counters[key] = value
    elif key in PER_POSITION:
        pos = int(labels.get("position", "0"))
        values = counters.per_pos.setdefault(key, [])
        values.extend([0.0] * (pos + 1 - len(values)))
        values[pos] = value
    elif key == "requests":
        counters.requests[labels.get("finish_reason", "")] = value
    elif key == "k":
        counters.k = value
    elif key in HISTOGRAMS:
        hist = counters.histograms.setdefault(key, Histogram())
        if sample_name.endswith("_bucket"):
            hist.buckets[float(labels["le"])] = value
        elif sample_name.endswith("_sum"):
            hist.sum = value
        elif sample_name.endswith("_count"):
            hist.count = value


def scraper(urls: str | Sequence[str], *, timeout_s: float = 5.0,
            clock: Callable[[], float] = time.monotonic) -> Callable[[], Sample]:
    """A function that scrapes every page of `urls` once per call (checks the URLs' form first).

    The first call fails (ServerError, one line) when any page cannot be read, and (UsageError) when a page is a
    Dynamo frontend's, which has no trtspec series. Later calls skip a page that cannot be read (a worker that died:
    its instances drop out of the sample) and fail only when none can be read."""
    fulls = list(dict.fromkeys(metrics_url(u) for u in ([urls] if isinstance(urls, str) else urls)))
    if not fulls:
        raise UsageError("no metrics URL given", hint="pass --metrics HOST:PORT")
    first = True

    def scrape() -> Sample:
        nonlocal first
        models: dict[ModelId, ModelCounters] = {}
        failed: list[ServerError] = []
        texts = {}
        for full in fulls:
            try:
                texts[full] = fetch(full, timeout_s=timeout_s)
            except ServerError as exc:
                if first:
                    raise
                failed.append(exc)
        if not texts:
            raise failed[0]
        when = clock()
        for full, text in texts.items():
            if first and not has_series(text) and "dynamo_frontend_" in text:
                raise UsageError(f"--metrics {full} is a Dynamo frontend's page: the trtspec series are on each "
                                 "worker's system port", hint="pass the workers' ports, e.g. --metrics "
                                 "localhost:8081,localhost:8082 (`trtspec serve --dynamo N` prints them)")
            models.update(parse(text, when, source=full if len(fulls) > 1 else "").models)
        first = False
        return Sample(when, models)

    return scrape


def has_series(text: str) -> bool:
    """Whether a metrics page holds any trtspec series (a server without speculation models has none)."""
    return PREFIX in text
