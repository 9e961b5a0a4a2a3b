"""trtllm-serve's `/metrics` (iteration statistics, JSON) as a metrics source of the monitor: each page's rows added
into cumulative counters, so the window, drift and recommendations read them as they read Prometheus counters.

A GET drains the server's buffer (`trtspec.contracts.trtllm_iterations`): the rows of a page are the iterations since
the previous GET, so one `IterationPage` per URL keeps totals since the monitor started, and never counts an iteration
twice:
- 1.3.0rc29 writes one row per attention-DP rank with rank 0's speculation copied into each: only rank 0's rows
  count; an iteration inside a page whose ranks are not 0..N-1 once each is a layout that does not add up (refused;
  the first and last iterations of a page may be cut);
- a row whose `iter` and `timestamp` were already counted (a page read twice, a proxy's retry) is skipped;
- any other row whose `iter` is not past the newest counted is a restarted server's: the totals keep growing (so no
  window loses or double-counts across it) and the restart is noted;
- a jump in `iter` means rows this reader never saw: another reader of /metrics drained them, or more than the
  buffer holds arrived between two GETs (`missing_iterations`, shown by the monitor).

Counters (keys of `contracts.series` where the meaning is the same): num_drafts (numRequestsWithDraftTokens),
num_draft_tokens, num_accepted_tokens, num_target_forwards (requests per iteration), num_emitted_tokens (estimated:
one token per request per iteration plus its accepted draft tokens; stop strings that cut a draft are not seen),
requests{completed}, iterations (num_target_forwards / iterations: the mean batch, the window's concurrency; not the
latencies, which span two loops under the overlap scheduler) and missing_iterations. The served k is the largest
draft length per drafting request of the page (TensorRT-LLM counts the draft budget, max_draft_len, per request; for
a tree, its node count, so the rate and its drift test then compare draft budgets, not the paths a trtspec baseline
counts: docs/operations.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trtspec.contracts.metrics import draft_length
from trtspec.contracts.trtllm_iterations import IterationFormatError, IterationRow, parse_page
from trtspec.errors import ServerError
from trtspec.ops.sample import ModelCounters, ModelId

SEEN_LIMIT = 1 << 16  # iteration numbers kept to skip a row counted before (newest first)
ENABLE_HINT = ("set `enable_iter_perf_stats: true` in the LLM-API options (--extra_llm_api_options / model.yaml) and "
               "restart trtllm-serve")


def looks_like_json(text: str) -> bool:
    """Whether a metrics page is JSON (trtllm-serve's /metrics) rather than Prometheus text."""
    head = text.lstrip()[:1]
    return head in ("[", "{")


@dataclass
class IterationPage:
    """One trtllm-serve /metrics URL: totals since the monitor started (see the module docstring)."""

    url: str
    model: ModelId
    counters: ModelCounters = field(default_factory=ModelCounters)
    newest: int | None = None  # the newest iteration counted
    seen: dict[int, str | None] = field(default_factory=dict)  # iteration -> its timestamp
    rows: int = 0  # rows counted since the start
    speculative_rows: int = 0
    restarts: int = 0
    lost_pages: int = 0  # GETs too large to read (their rows are lost: the server drained them)
    _page_k: int = 0  # the largest draft length per drafting request on the page being read

    def feed(self, text: str) -> ModelCounters:
        """Add one page; returns the totals. ServerError (one line, naming the URL) for a page that is not iteration
        statistics or whose rank layout does not add up."""
        try:
            rows = parse_page(text)
        except IterationFormatError as exc:
            raise ServerError(f"the metrics page {self.url} is not trtllm-serve's iteration statistics: {exc}",
                              hint="point --metrics at trtllm-serve's /metrics (JSON), Triton's metrics port or a "
                                   "Dynamo worker's system port") from None
        self._page_k = 0
        for row in self._rank_zero(rows):
            self._add(row)
        if self._page_k:
            self.counters.k = float(self._page_k)
        self.counters.note = self._note()
        return self.counters

    def _note(self) -> str:
        """What the totals lack or what happened to them, in one line naming the URL (empty when all is well)."""
        restarted = f"{self.url} restarted {self.restarts} time(s) while watched" if self.restarts else ""
        lost = (f"{self.lost_pages} page(s) of {self.url} were larger than the monitor reads: their rows are lost "
                "(scrape more often)") if self.lost_pages else ""
        return "; ".join(part for part in (self._lacks(), restarted, lost) if part)

    def _lacks(self) -> str:
        if not self.rows:
            return (f"{self.url} answered no iteration rows yet: the server is idle, or {ENABLE_HINT} (it answers [] "
                    "without it)")
        if not self.speculative_rows:
            return (f"{self.url}: the iteration rows carry no specDecodingStats: the server runs without speculation; "
                    "set speculative_config in the LLM-API options (`trtspec build` writes it)")
        return ""


    def _rank_zero(self, rows: list[IterationRow]) -> list[IterationRow]:
        """Rank 0's rows (all rows where there are no ranks). N ranks = the page's largest rank + 1; the first and
        last iterations of a page may be cut (a GET between two rank rows, the buffer's oldest rows dropped): a cut
        iteration without its rank 0 counts as missing. Refused: a row without a rank beside ranked rows, a rank
        twice in one iteration, or an iteration inside the page without all N ranks."""
        if all(row.rank is None for row in rows):
            return rows
        ranks: dict[int, list[int]] = {}
        for row in rows:
            if row.rank is None:
                raise ServerError(f"the metrics page {self.url}: iteration {row.iteration} has a row without "
                                  "attentionDpRank beside rows with one: not one server's attention-DP layout",
                                  hint="point --metrics at one trtllm-serve")
            ranks.setdefault(row.iteration, []).append(row.rank)
        size = max(max(got) for got in ranks.values()) + 1
        order = list(ranks)
        for position, iteration in enumerate(order):
            got = sorted(ranks[iteration])
            edge = position in (0, len(order) - 1)
            if len(set(got)) != len(got) or (not edge and got != list(range(size))):
                raise ServerError(f"the metrics page {self.url}: iteration {iteration} has attentionDpRank {got}, "
                                  f"not 0..{size - 1} once each: the rank layout does not add up",
                                  hint="TensorRT-LLM 1.3 writes one row per attention-DP rank per iteration; check "
                                       "that one server answers --metrics")
        return [row for row in rows if row.rank == 0]

    def _add(self, row: IterationRow) -> None:
        if row.timestamp is not None and self.seen.get(row.iteration) == row.timestamp:
            return  # counted already (the same row read twice)
        if self.newest is not None and row.iteration <= self.newest:
            self._restart()
        elif self.newest is not None and row.iteration > self.newest + 1:
            self._inc("missing_iterations", row.iteration - self.newest - 1)
        self.newest = row.iteration if self.newest is None else max(self.newest, row.iteration)
        self.seen[row.iteration] = row.timestamp
        if len(self.seen) > SEEN_LIMIT:
            self.seen = {i: t for i, t in self.seen.items() if i > self.newest - SEEN_LIMIT // 2}
        self.rows += 1
        self._inc("iterations", 1)
        self._inc("num_target_forwards", row.num_active_requests)
        self.counters.requests["completed"] = self.counters.requests.get("completed", 0.0) + row.num_completed_requests
        accepted = row.num_accepted_tokens or 0
        self._inc("num_emitted_tokens", row.num_active_requests + accepted)
        if not row.speculative:
            return
        self.speculative_rows += 1
        drafts = row.num_requests_with_draft_tokens or 0
        self._inc("num_drafts", drafts)
        self._inc("num_draft_tokens", row.num_draft_tokens or 0)
        self._inc("num_accepted_tokens", accepted)
        if drafts:
            self._page_k = max(self._page_k, draft_length(row.num_draft_tokens or 0, drafts))

    def lost_backlog(self) -> ModelCounters:
        """A GET whose rows were too many to read (more than the read bound): drained by the server, lost here;
        counted and noted. Returns the totals, unchanged."""
        self.lost_pages += 1
        self.counters.note = self._note()
        return self.counters

    def _restart(self) -> None:
        """The server restarted (its iterations start again at 0): the totals keep growing (a window that spans the
        restart counts both servers' iterations), the restart is counted and noted."""
        self.restarts += 1
        self.newest, self.seen = None, {}

    def _inc(self, key: str, amount: float) -> None:
        self.counters.counters[key] = self.counters.counters.get(key, 0.0) + amount
