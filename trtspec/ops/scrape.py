"""Scrape metrics pages into typed samples: the `trtspec.contracts.series` counters of every served model.

A `Sample` is one scrape: a timestamp and, per model, the cumulative counters, per-position counters, requests by
finish reason, latency histograms and the served k. Parsing uses prometheus-client's text parser; fetching is one
HTTP GET per page. Nothing here keeps state between scrapes (that is `window.py`).

One page is Triton's metrics port (every served model of one server). A NVIDIA Dynamo deployment publishes the
series on each worker's system port (`trtspec serve --dynamo N`; the frontend's /metrics has none of them): the
scraper reads every page given, and each model's counters stay apart per page (`ModelId.source`), so a worker that
dies or restarts is one instance gone or reset, never a drop in a sum; the monitor adds the instances up per model
(`window.pool`).

A page that is JSON is trtllm-serve's `/metrics` (TensorRT-LLM's iteration statistics, drained by each GET): its rows
are added into totals per URL (`ops.iterations.IterationPage`), under the model its `/v1/models` names.
"""

from __future__ import annotations

import copy
import http.client
import math
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import replace
from urllib.parse import urlsplit

from trtspec.contracts.series import COUNTERS, PER_POSITION, PREFIX, SERIES
from trtspec.errors import ServerError, UsageError, shown_text
from trtspec.ops.iterations import IterationPage, looks_like_json
from trtspec.ops.sample import MAX_PAGE_BYTES, Histogram, ModelCounters, ModelId, Sample
from trtspec.ops.tap import TapFile, is_tap
from trtspec.textfile import size_text

HISTOGRAMS = tuple(key for key, s in SERIES.items() if s.kind == "histogram")
# TensorRT-LLM's MetricsCollector families (a Dynamo TensorRT-LLM worker's /metrics with --publish-metrics; names and
# meanings in trtspec/targets/serving-observability.json, forms.dynamo_trtllm) read as the trtspec series they mean:
# totals over iterations (accepted draft tokens, the bonus not counted), per-position counts at request finish.
DRAFTED = "num_drafted_tokens_per_pos"
TRTLLM_FAMILIES = {
    "trtllm_spec_decode_num_draft_tokens": "num_draft_tokens",
    "trtllm_spec_decode_num_accepted_tokens": "num_accepted_tokens",
    "trtllm_spec_decode_accepted_tokens": "num_accepted_tokens_per_pos",  # label token_position
    "trtllm_spec_decode_drafted_tokens": "num_drafted_tokens_per_pos",  # -> drafts and rejections
    "trtllm_request_success": "requests",  # label finished_reason
    "trtllm_e2e_request_latency_seconds": "request_latency_seconds",
    "trtllm_time_per_output_token_seconds": "time_per_output_token_seconds",
}
# a line without its `# TYPE ... counter` keeps the `_total` suffix in the family's name
_KEY_OF = ({s.name: key for key, s in SERIES.items()} | TRTLLM_FAMILIES
           | {f"{name}_total": key for name, key in TRTLLM_FAMILIES.items() if not name.endswith("_seconds")})
# The largest draft position (and served k) a page may report: a `position` label or k gauge past it is not a count
# any engine publishes (and a list of that many positions would be the monitor's whole memory).
MAX_POSITIONS = 4096


def metrics_url(url: str) -> str:
    """A full metrics URL from `host:port`, `http://host:port` or a URL with a path (kept as given)."""
    text = url.strip()
    if "://" not in text:
        text = f"http://{text}"
    hint = ("give Triton's metrics endpoint (e.g. --metrics localhost:8002) or each Dynamo worker's system port "
            "(e.g. --metrics localhost:8081,localhost:8082)")
    try:
        parts = urlsplit(text)
        port = parts.port  # ValueError: not a number, or outside 0-65535
    except ValueError as exc:
        raise UsageError(f"--metrics {shown_text(url)} is not a URL: {exc}", hint=hint) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--metrics {shown_text(url)} is not an http(s) URL or host:port", hint=hint)
    if port == 0:
        raise UsageError(f"--metrics {shown_text(url)}: port 0 is not a port a server listens on", hint=hint)
    return text if parts.path not in ("", "/") else f"{parts.scheme}://{parts.netloc}/metrics"


def fetch(url: str, *, timeout_s: float = 5.0, max_bytes: int = MAX_PAGE_BYTES) -> str:
    """The text of the metrics page; ServerError (one line, exit 1) when it cannot be read within `timeout_s`, is
    larger than `max_bytes` (refused after reading max_bytes + 1), or is not UTF-8 text. Never echoes the page."""
    deadline = time.monotonic() + timeout_s
    chunks: list[bytes] = []
    size = 0
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 - http(s) checked above
            while size <= max_bytes and (chunk := response.read1(min(1 << 16, max_bytes + 1 - size))):
                chunks.append(chunk)
                size += len(chunk)
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the page took longer than {timeout_s:g} s")
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException, OverflowError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise ServerError(f"cannot read metrics from {url}: {_printable(str(reason))}",
                          hint="is the server running? `trtspec serve REPO` prints Triton's metrics port (default "
                               "8002), `trtspec serve --dynamo N` its workers' (default 8081, 8082, ...)") from None
    if size > max_bytes:
        raise ServerError(f"the metrics page {url} is larger than {size_text(max_bytes)}, the most the monitor reads",
                          hint="point --metrics at Triton's metrics port (default 8002) or a Dynamo worker's system "
                               "port: their pages are far smaller; trtllm-serve's /metrics holds every iteration "
                               "since the last GET: scrape it more often (--interval)")
    raw = b"".join(chunks)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ServerError(f"the metrics page {url} is not Prometheus text: not UTF-8 (byte 0x{raw[exc.start]:02x} "
                          f"at offset {exc.start})", hint=_NOT_METRICS) from None
    if "\0" in text:
        raise ServerError(f"the metrics page {url} is not Prometheus text: it holds NUL bytes (offset "
                          f"{text.index(chr(0))})", hint=_NOT_METRICS)
    return text


_NOT_METRICS = "point --metrics at Triton's metrics port (default 8002), not its HTTP port"


def _printable(text: str) -> str:
    """Text a server chose (a reason, a status line), short and printable: non-printable characters escaped."""
    return shown_text(text)[1:-1]


def parse(text: str, when: float, *, source: str = "", url: str | None = None) -> Sample:
    """The trtspec series of a metrics page (other families, e.g. Triton's nv_* or Dynamo's dynamo_*, are ignored).

    The model is its `model` label; on a Dynamo worker's page, where `model` is the model's path, the served name
    (`model_name`). `source` is kept in each ModelId (see the module docstring). A page that does not parse, or a
    trtspec sample no trtspec server publishes (a count that is negative, NaN or infinite, a k that is no whole
    number, a `position` or `le` label that is no number), refuses the whole page: ServerError naming the page (`url`,
    else `source`) and the sample, shown short and printable."""
    from prometheus_client.parser import text_string_to_metric_families

    page = url or source or "the metrics page"
    models: dict[ModelId, ModelCounters] = {}
    try:
        for family in text_string_to_metric_families(text):  # one family at a time: a large page is never held parsed
            key = _KEY_OF.get(family.name)
            if key is None:
                continue
            for sample in family.samples:
                labels = dict(sample.labels)
                if "token_position" in labels:
                    labels["position"] = labels.pop("token_position")
                if "finished_reason" in labels:
                    labels["finish_reason"] = labels.pop("finished_reason")
                name = labels.pop("model_name", None) or labels.get("model", "?")
                labels.pop("model", None)
                model = ModelId(name, labels.pop("version", "1"), labels.pop("method", ""), source)
                counters = models.setdefault(model, ModelCounters())
                problem = _add(counters, key, sample.name, labels, float(sample.value))
                if problem:
                    raise ServerError(f"the metrics page {page}: {sample.name}{shown_text(dict(sample.labels))} = "
                                      f"{sample.value}: {problem}",
                                      hint="no trtspec server publishes that: check what serves --metrics")
    except ValueError as exc:  # the parser's: a line that is not Prometheus text
        raise ServerError(f"the metrics page {page} does not parse as Prometheus text ({shown_text(str(exc))})",
                          hint=_NOT_METRICS) from None
    for counters in models.values():
        _drafts_from_positions(counters)
    return Sample(when, models)


def _drafts_from_positions(counters: ModelCounters) -> None:
    """TensorRT-LLM's per-position counters as trtspec's: drafts = drafted at position 0, draft and accepted tokens
    their sums; rejected at i = the drafts that reached i (drafted there and accepted up to i - 1) less those that
    accepted i. Without them, TensorRT-LLM's totals have no draft count: the window then shows the acceptance rate
    only."""
    drafted = counters.per_pos.pop(DRAFTED, None)
    if not drafted:
        if "num_draft_tokens" in counters.counters and "num_drafts" not in counters.counters:
            counters.note = ("TensorRT-LLM's spec-decode totals without its per-position counters "
                             "(trtllm_spec_decode_drafted_tokens_total): no draft count, so the acceptance rate only")
        return
    accepted = counters.per_pos.get("num_accepted_tokens_per_pos", [])
    accepted = accepted + [0.0] * (len(drafted) - len(accepted))
    counters.counters["num_drafts"] = drafted[0]
    # the per-position counters move when a request finishes, the totals every iteration: every figure from the
    # former, so a window's drafts and tokens are the same requests'
    counters.counters["num_draft_tokens"] = sum(drafted)
    counters.counters["num_accepted_tokens"] = sum(accepted)
    reached = [drafted[0]] + [min(accepted[i - 1], drafted[i]) for i in range(1, len(drafted))]
    counters.per_pos["num_rejections_per_pos"] = [max(0.0, r - a) for r, a in zip(reached, accepted, strict=False)]


def _add(counters: ModelCounters, key: str, sample_name: str, labels: dict[str, str], value: float) -> str | None:
    """Put one sample into `counters`; the problem (a value or label no trtspec server publishes), else None."""
    if key == "k":
        if not (math.isfinite(value) and value == int(value) and 0 <= value <= MAX_POSITIONS):
            return f"k must be a whole number from 0 to {MAX_POSITIONS}"
        counters.k = value
        return None
    if not math.isfinite(value) or value < 0:
        return "a count must be a finite number >= 0"
    if key in COUNTERS or key in ("num_draft_tokens", "num_accepted_tokens"):
        counters.counters[key] = value
    elif key in PER_POSITION or key == DRAFTED:
        text = labels.get("position", "0")
        if not (text.isascii() and text.isdigit() and len(text) <= 9 and int(text) < MAX_POSITIONS):
            return f"its position is not a whole number below {MAX_POSITIONS}"
        pos = int(text)
        values = counters.per_pos.setdefault(key, [])
        values.extend([0.0] * (pos + 1 - len(values)))
        values[pos] = value
    elif key == "requests":
        counters.requests[labels.get("finish_reason", "")] = value
    elif key in HISTOGRAMS:
        hist = counters.histograms.setdefault(key, Histogram())
        if sample_name.endswith("_bucket"):
            try:
                bound = float(labels["le"])
            except (KeyError, ValueError):
                bound = math.nan
            if math.isnan(bound):
                return "a bucket's le label must be a number or +Inf"
            hist.buckets[bound] = value
        elif sample_name.endswith("_sum"):
            hist.sum = value
        elif sample_name.endswith("_count"):
            hist.count = value
    return None


def scraper(urls: str | Sequence[str], *, timeout_s: float = 5.0,
            clock: Callable[[], float] = time.monotonic) -> Callable[[], Sample]:
    """A function that scrapes every page of `urls` once per call (checks the URLs' form first).

    The first call fails (ServerError, one line) when any page cannot be read or is refused (`fetch`, `parse`), and
    (UsageError) when a page is a Dynamo frontend's, which has no trtspec series. Later calls skip such a page (a
    worker that died: its instances drop out of the sample) and fail only when none can be read."""
    given = [urls] if isinstance(urls, str) else list(urls)
    taps = [TapFile.of(u) for u in dict.fromkeys(u for u in given if is_tap(u))]
    fulls = list(dict.fromkeys(metrics_url(u) for u in given if not is_tap(u)))
    if not fulls and not taps:
        raise UsageError("no metrics URL given", hint="pass --metrics HOST:PORT")
    several = len(fulls) + len(taps) > 1
    first = True
    pages: dict[str, IterationPage] = {}

    def scrape() -> Sample:
        nonlocal first
        models: dict[ModelId, ModelCounters] = {}
        failed: list[ServerError] = []
        parsed = 0  # sources read
        for tap in taps:  # client-side taps: lines appended since the last read
            try:
                for model, counters in tap.read().items():
                    models[replace(model, source=str(tap.path)) if several else model] = copy.deepcopy(counters)
                parsed += 1
            except ServerError as exc:
                if first:
                    raise
                failed.append(exc)
        texts = {}
        for full in fulls:
            try:
                texts[full] = fetch(full, timeout_s=timeout_s)
            except ServerError as exc:
                if full in pages and "is larger than" in exc.message:  # a drained backlog too large to read
                    models[pages[full].model if several else pages[full].model.pooled] = copy.deepcopy(
                        pages[full].lost_backlog())
                    parsed += 1
                    continue
                if first:
                    raise
                failed.append(exc)
        when = clock()
        for full, text in texts.items():
            if looks_like_json(text):  # trtllm-serve's iteration statistics: totals kept per URL
                try:
                    page = pages.get(full) or IterationPage(full, ModelId(trtllm_serve_model(full, timeout_s), source=full))
                    models[page.model if several else page.model.pooled] = copy.deepcopy(page.feed(text))
                    pages[full] = page
                    parsed += 1
                except ServerError as exc:
                    if first:
                        raise
                    failed.append(exc)
                continue
            if first and not has_series(text) and "dynamo_frontend_" in text:
                raise UsageError(f"--metrics {full} is a Dynamo frontend's page: the trtspec series are on each "
                                 "worker's system port", hint="pass the workers' ports, e.g. --metrics "
                                 "localhost:8081,localhost:8082 (`trtspec serve --dynamo N` prints them)")
            try:
                models.update(parse(text, when, source=full if several else "", url=full).models)
                parsed += 1
            except ServerError as exc:  # a page no trtspec server publishes: refused as one that cannot be read
                if first:
                    raise
                failed.append(exc)
        if not parsed:
            raise failed[0]
        _refuse_mixed_sources(models, {str(t.path) for t in taps}, set(pages))
        first = False
        return Sample(when, models)

    return scrape


def _refuse_mixed_sources(models: dict[ModelId, ModelCounters], taps: set[str], pages: set[str]) -> None:
    """UsageError when one model is published by sources of different kinds (trtspec's or TensorRT-LLM's series, a
    trtllm-serve /metrics, a tap): they describe the same traffic, and the window would count it twice. Several
    sources of one kind (a Dynamo deployment's workers) are instances to add up."""
    kinds: dict[str, dict[str, str]] = {}
    for model in models:
        kind = "a tap" if model.source in taps else "trtllm-serve /metrics" if model.source in pages else "series"
        kinds.setdefault(model.model, {}).setdefault(kind, model.source)
    for name, by_kind in kinds.items():
        if len(by_kind) > 1:
            shown = ", ".join(f"{kind} ({source})" for kind, source in by_kind.items())
            raise UsageError(f"--metrics: model {name!r} is published by {shown}: the same traffic would be counted "
                             "twice", hint="give one source per model (e.g. only trtllm-serve's /metrics, or only the "
                                           "tap)")


def trtllm_serve_model(url: str, timeout_s: float = 5.0) -> str:
    """The model a trtllm-serve answers for (the first id of its /v1/models, on the metrics URL's host), else
    "trtllm-serve" (its iteration statistics name no model)."""
    import json

    parts = urlsplit(url)
    try:
        data = json.loads(fetch(f"{parts.scheme}://{parts.netloc}/v1/models", timeout_s=timeout_s, max_bytes=1 << 16))
        name = data["data"][0]["id"]
    except (ServerError, ValueError, KeyError, IndexError, TypeError):
        return "trtllm-serve"
    return shown_text(name)[1:-1][:128] if isinstance(name, str) and name else "trtllm-serve"


def has_series(text: str) -> bool:
    """Whether a metrics page holds any trtspec series, or TensorRT-LLM's speculation families (a server without
    speculation models has neither)."""
    return PREFIX in text or "trtllm_spec_decode_" in text
