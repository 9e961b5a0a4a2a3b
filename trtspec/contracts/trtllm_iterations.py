"""trtllm-serve's iteration statistics (`GET /metrics`): the JSON rows TensorRT-LLM's PyTorch backend publishes, written
from the reference engine's `IterationStats` and read back into typed rows, both with the key names and meanings of
`trtspec/targets/iteration-stats.json` (each fact with its source; 1.2.1 and 1.3.0rc29).

A page is a JSON array of rows, the iterations since the previous GET (each GET drains). A row's `specDecodingStats`
is null without speculation, else sums over the requests that verified a draft in that iteration:
`numDraftTokens` (their draft lengths), `numAcceptedTokens` (accepted draft tokens, the bonus token not counted),
`numRequestsWithDraftTokens`, `acceptanceLength` = (accepted + requests) / requests (0.0 without requests),
`iterLatencyMS` (drafting) and `draftOverhead` (drafting / the row's latency). 1.3.0rc29 adds `attentionDpRank` to
every row: one row per attention-DP rank, rank 0's speculation copied into each (readers keep rank 0).

The reference engine drafts in a request's first (context) step too; TensorRT-LLM counts generation requests only.
The rows trtspec writes count what its engine verified. Pure Python.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from trtspec.contracts.iteration import IterationStats
from trtspec.contracts.metrics import mean_acceptance_length

FACTS_FILE = "iteration-stats.json"
RELEASES = ("1.2.1", "1.3.0rc29")
SPEC = "specDecodingStats"
SPEC_KEYS = ("numDraftTokens", "numAcceptedTokens", "numRequestsWithDraftTokens")  # the counts readers need
MAX_ROWS = 100_000  # more rows on one page is not a trtllm-serve page (its buffers hold 1000 by default)


class IterationFormatError(ValueError):
    """A page that is not trtllm-serve's iteration statistics: the message names the row and what is wrong."""


@cache
def facts() -> dict[str, Any]:
    """The facts file (key names, meanings, sources) per release."""
    text = resources.files("trtspec.targets").joinpath(FACTS_FILE).read_text(encoding="utf-8")
    return json.loads(text)


def row_keys(release: str) -> dict[str, list[str]]:
    """The release's key names: `top` (every row), `spec`, `inflight` (inflightBatchingStats), `kv` (kvCacheStats)."""
    if release not in RELEASES:
        raise ValueError(f"no iteration-statistics facts for TensorRT-LLM {release} (known: {', '.join(RELEASES)})")
    base = facts()["releases"]["1.2.1"]["iteration_json"]
    top = list(base["top_level_keys"])
    inflight = list(base["inflightBatchingStats_keys"])
    if release == "1.3.0rc29":
        rc = facts()["releases"]["1.3.0rc29"]["iteration_json"]
        top.append("attentionDpRank")
        inflight += rc["inflightBatchingStats_added_keys"]
    return {"top": top, "spec": list(base["specDecodingStats_keys"]), "inflight": inflight,
            "kv": list(base["kvCacheStats_keys"])}


def iteration_row(stats: IterationStats, *, release: str = "1.2.1", speculative: bool = True) -> dict[str, Any]:
    """One row as the release's /metrics serialises it, from one engine step (values the reference engine has no
    counterpart for, e.g. GPU memory or KV-cache blocks, are 0; `speculative` False: specDecodingStats null)."""
    keys = row_keys(release)
    latency_ms = stats.latency_s * 1000.0
    requests = stats.num_requests_with_draft_tokens
    draft_ms = stats.draft_latency_s * 1000.0 if stats.num_draft_tokens else 0.0
    spec = {"numDraftTokens": stats.num_draft_tokens, "numAcceptedTokens": stats.num_accepted_tokens,
            "numRequestsWithDraftTokens": requests,
            "acceptanceLength": mean_acceptance_length(requests, stats.num_accepted_tokens) if requests else 0.0,
            "iterLatencyMS": draft_ms, "draftOverhead": draft_ms / latency_ms if latency_ms > 0 else 0.0}
    inflight = {key: 0 for key in keys["inflight"]}
    inflight.update(numScheduledRequests=stats.num_active_requests, numContextRequests=stats.num_context_requests,
                    numGenRequests=stats.num_generation_requests, numCtxTokens=stats.num_context_tokens,
                    avgNumDecodedTokensPerIter=0.0)  # always 0 on the PyTorch path (the facts' value_notes)
    values = {"timestamp": _timestamp(stats.timestamp), "iter": stats.iteration, "iterLatencyMS": latency_ms,
              "newActiveRequestsQueueLatencyMS": 0.0, "numNewActiveRequests": stats.num_context_requests,
              "numActiveRequests": stats.num_active_requests, "numQueuedRequests": stats.num_queued_requests,
              "numCompletedRequests": stats.num_completed_requests, "kvCacheStats": {key: 0 for key in keys["kv"]},
              "staticBatchingStats": None, "inflightBatchingStats": inflight,
              SPEC: {key: spec[key] for key in keys["spec"]} if speculative else None, "attentionDpRank": 0}
    return {key: values.get(key, 0) for key in sorted(keys["top"])}  # nlohmann::json writes keys sorted


def _timestamp(seconds: float) -> str:
    """%m-%d-%Y %H:%M:%S.%f in local time, as the C++ executor stamps a row."""
    whole = int(seconds)
    return time.strftime("%m-%d-%Y %H:%M:%S", time.localtime(whole)) + f".{int((seconds - whole) * 1e6):06d}"


@dataclass(frozen=True)
class IterationRow:
    """What a reader needs of one row (`spec` None: the server runs without speculation)."""

    iteration: int
    timestamp: str | None  # as the server wrote it (a restarted server's iteration numbers repeat, its times do not)
    rank: int | None  # attentionDpRank (1.3.0rc29), None where the row has none (1.2.1)
    latency_ms: float
    num_active_requests: int
    num_completed_requests: int
    num_context_requests: int | None  # inflightBatchingStats, None where absent
    num_generation_requests: int | None
    num_draft_tokens: int | None  # specDecodingStats; None without speculation
    num_accepted_tokens: int | None
    num_requests_with_draft_tokens: int | None

    @property
    def speculative(self) -> bool:
        return self.num_draft_tokens is not None


def parse_page(text: str) -> list[IterationRow]:
    """The rows of one /metrics page. IterationFormatError (one line, naming the row and the key) for a page that is
    not a JSON array of iteration rows, a row without `iter` / `iterLatencyMS` / `numActiveRequests`, a count that is
    not a whole number >= 0, or speculation counts that do not add up (accepted > drafted)."""
    try:
        data = json.loads(text, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as exc:
        raise IterationFormatError(f"not JSON ({_short(exc)})") from None
    if not isinstance(data, list):
        raise IterationFormatError(f"a JSON {type(data).__name__}, not the array of iteration rows trtllm-serve answers")
    if len(data) > MAX_ROWS:
        raise IterationFormatError(f"{len(data)} rows (more than {MAX_ROWS}): not one drain of trtllm-serve's buffer")
    return [_row(i, row) for i, row in enumerate(data)]


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number")


def _row(index: int, row: Any) -> IterationRow:
    if not isinstance(row, dict):
        raise IterationFormatError(f"row {index} is a JSON {type(row).__name__}, not an iteration object")
    where = f"row {index}"
    spec = row.get(SPEC)
    if spec is not None and not isinstance(spec, dict):
        raise IterationFormatError(f"{where}: {SPEC} is a JSON {type(spec).__name__}, not an object or null")
    inflight = row.get("inflightBatchingStats")
    inflight = inflight if isinstance(inflight, dict) else {}
    counts = {key: _count(spec, key, where, SPEC) for key in SPEC_KEYS} if spec is not None else {}
    if spec is not None and counts["numAcceptedTokens"] > counts["numDraftTokens"]:
        raise IterationFormatError(f"{where}: {SPEC}.numAcceptedTokens {counts['numAcceptedTokens']} is more than "
                                   f"numDraftTokens {counts['numDraftTokens']}")
    rank = row.get("attentionDpRank")
    return IterationRow(
        iteration=_count(row, "iter", where), timestamp=_short(row["timestamp"]) if "timestamp" in row else None,
        rank=None if rank is None else _count(row, "attentionDpRank", where),
        latency_ms=_number(row, "iterLatencyMS", where), num_active_requests=_count(row, "numActiveRequests", where),
        num_completed_requests=_count(row, "numCompletedRequests", where, default=0),
        num_context_requests=_count(inflight, "numContextRequests", where, "inflightBatchingStats", default=None),
        num_generation_requests=_count(inflight, "numGenRequests", where, "inflightBatchingStats", default=None),
        num_draft_tokens=counts.get("numDraftTokens"), num_accepted_tokens=counts.get("numAcceptedTokens"),
        num_requests_with_draft_tokens=counts.get("numRequestsWithDraftTokens"))


_MISSING = object()


def _count(obj: dict[str, Any], key: str, where: str, parent: str = "", *, default: Any = _MISSING) -> Any:
    name = f"{parent}.{key}" if parent else key
    value = obj.get(key, _MISSING)
    if value is _MISSING or value is None:
        if default is not _MISSING:
            return default
        raise IterationFormatError(f"{where} has no {name}")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < 0 or value != int(value) or value > 1 << 53:
        raise IterationFormatError(f"{where}: {name} = {_short(value)} is not a whole number >= 0")
    return int(value)


def _number(obj: dict[str, Any], key: str, where: str) -> float:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise IterationFormatError(f"{where}: {key} = {_short(value)} is not a number >= 0" if key in obj
                                   else f"{where} has no {key}")
    return float(value)


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value) if not isinstance(value, Exception) else str(value)
    text = text.encode("ascii", "backslashreplace").decode()
    return text if len(text) <= 60 else text[:57] + "..."
