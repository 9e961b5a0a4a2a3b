"""trtllm-serve's iteration statistics: the rows trtspec writes carry the release's keys and meanings and read back
the same; NVIDIA's own payloads (tests/data/trtllm_serve_metrics_examples.json, each with its source) parse as their
notes say; a reader never counts an iteration twice however the GETs split the rows, notes what it missed, keeps
rank 0 of an attention-DP layout and refuses one that does not add up."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trtspec.contracts.iteration import IterationStats
from trtspec.contracts.trtllm_iterations import (
    IterationFormatError,
    facts,
    iteration_row,
    parse_page,
    row_keys,
)
from trtspec.errors import ServerError
from trtspec.ops.iterations import IterationPage, looks_like_json
from trtspec.ops.scrape import ModelId

EXAMPLES = {e["id"]: e for e in json.loads(
    (Path(__file__).parents[1] / "data" / "trtllm_serve_metrics_examples.json").read_text())["examples"]}


def stats(i: int, *, drafting: int = 2, k: int = 4, accepted: int = 5, active: int = 3) -> IterationStats:
    return IterationStats(iteration=i, timestamp=1_796_000_000.25, latency_s=0.02, draft_latency_s=0.005,
                          num_active_requests=active, num_queued_requests=1, num_context_requests=1,
                          num_context_tokens=12, num_generation_requests=active - 1, num_completed_requests=1,
                          num_requests_with_draft_tokens=drafting, num_draft_tokens=drafting * k,
                          num_accepted_tokens=min(accepted, drafting * k), num_emitted_tokens=active + accepted)


@pytest.mark.parametrize("release", ["1.2.1", "1.3.0rc29"])
def test_a_written_row_has_the_release_keys_and_the_spec_formulas(release):
    row = iteration_row(stats(7), release=release)
    assert list(row) == sorted(row_keys(release)["top"])  # every key, sorted as nlohmann::json writes them
    assert ("attentionDpRank" in row) == (release == "1.3.0rc29")
    spec = row["specDecodingStats"]
    assert set(spec) == set(facts()["releases"]["1.2.1"]["iteration_json"]["specDecodingStats_keys"])
    assert spec["numAcceptedTokens"] == 5 and spec["numDraftTokens"] == 8 and spec["numRequestsWithDraftTokens"] == 2
    assert spec["acceptanceLength"] == pytest.approx((5 + 2) / 2)  # bonus token included here, as the facts say
    assert spec["draftOverhead"] == pytest.approx(5.0 / 20.0)
    assert iteration_row(stats(7), release=release, speculative=False)["specDecodingStats"] is None
    assert iteration_row(stats(7, drafting=0, accepted=0))["specDecodingStats"]["acceptanceLength"] == 0.0


def test_written_rows_read_back_the_same_counts():
    page = json.dumps([iteration_row(stats(i, accepted=i), release="1.2.1") for i in range(5)])
    rows = parse_page(page)
    assert [r.iteration for r in rows] == list(range(5))
    assert [r.num_accepted_tokens for r in rows] == list(range(5))
    assert all(r.num_draft_tokens == 8 and r.num_requests_with_draft_tokens == 2 and r.rank is None for r in rows)


def test_nvidia_docs_example_is_a_row_without_speculation():
    """The trtllm-serve docs' example (its '...' line, NVIDIA's elision, taken out): a row the reader takes, and
    no specDecodingStats."""
    example = EXAMPLES["trtllm_serve_doc_metrics_example"]
    text = "\n".join(line for line in example["payload_text"].splitlines() if line.strip() != "...")
    (row,) = parse_page(text)
    assert row.iteration == 154 and row.num_active_requests == 1 and not row.speculative
    page = IterationPage("http://h/metrics", ModelId("m"))
    page.feed(text)
    assert "no specDecodingStats" in page.counters.note and "speculative_config" in page.counters.note


def test_nvidia_examples_parse_or_are_refused_as_their_notes_say():
    by_form = {e["id"]: e for e in EXAMPLES.values() if e.get("payload") is not None}
    handled = 0
    for example in by_form.values():
        payload = example["payload"]
        if isinstance(payload, list) and all("attentionDpRank" in row for row in payload):  # PR #13649's rank rows
            assert [row["attentionDpRank"] for row in payload] == [0, 1]  # one row per rank, as the reader expects
            with pytest.raises(IterationFormatError, match="row 0 has no iter"):  # trimmed by NVIDIA: no iter
                parse_page(json.dumps(payload))
            rows = parse_page(json.dumps([{**row, "iter": 3, "numActiveRequests": 1} for row in payload]))
            assert [r.rank for r in rows] == [0, 1] and [r.num_context_requests for r in rows] == [1, 3]
            handled += 1
            continue
        if isinstance(payload, dict) and "specDecodingStats" in payload:  # the collector's synthetic fixture
            with pytest.raises(IterationFormatError, match="not the array"):
                parse_page(json.dumps(payload))
            with pytest.raises(IterationFormatError, match="numRequestsWithDraftTokens"):
                parse_page(json.dumps([payload]))
            handled += 1
    assert handled == 2  # PR #13649's rank rows and the collector's fixture (the docs' example: the test above)


@pytest.mark.parametrize(("text", "match"), [
    ("<html>oops</html>", "not JSON"), ('{"a": 1}', "not the array"), ("[1]", "row 0 is a JSON int"),
    ('[{"iter": -1, "iterLatencyMS": 1, "numActiveRequests": 1}]', "iter = -1"),
    ('[{"iter": 1, "iterLatencyMS": NaN, "numActiveRequests": 1}]', "not JSON"),
    ('[{"iter": 1, "numActiveRequests": 1}]', "no iterLatencyMS"),
    ('[{"iter": 1, "iterLatencyMS": 1, "numActiveRequests": 1, "specDecodingStats": {"numDraftTokens": 1, '
     '"numAcceptedTokens": 2, "numRequestsWithDraftTokens": 1}}]', "more than numDraftTokens"),
])
def test_pages_that_are_not_iteration_rows_are_refused_in_one_line(text, match):
    with pytest.raises(IterationFormatError, match=match) as info:
        parse_page(text)
    assert "\n" not in str(info.value)
    page = IterationPage("http://h:8000/metrics", ModelId("m"))
    with pytest.raises(ServerError, match="http://h:8000/metrics"):
        page.feed(text)


def _page(rows: list[dict]) -> str:
    return json.dumps(rows)


@given(splits=st.lists(st.integers(0, 30), max_size=6), repeat=st.booleans())
@settings(max_examples=60, deadline=None)
def test_totals_do_not_depend_on_how_the_gets_split_the_rows(splits, repeat):
    rows = [iteration_row(stats(i, accepted=i % 7), release="1.2.1") for i in range(30)]
    cuts = sorted(set([0, *splits, 30]))
    page = IterationPage("u", ModelId("m"))
    for a, b in zip(cuts, cuts[1:], strict=False):
        page.feed(_page(rows[a:b]))
        if repeat:  # a page read twice (a retry) never counts twice
            page.feed(_page(rows[a:b]))
    counters = page.counters.counters
    assert counters["num_accepted_tokens"] == sum(i % 7 for i in range(30))
    assert counters["num_drafts"] == 60 and counters["num_draft_tokens"] == 240
    assert counters.get("missing_iterations", 0) == 0 and page.restarts == 0
    assert page.counters.k == 4


def test_missed_rows_are_counted_and_a_restart_keeps_the_totals_growing():
    page = IterationPage("u", ModelId("m"))
    page.feed(_page([iteration_row(stats(i)) for i in range(3)]))
    page.feed(_page([iteration_row(stats(i)) for i in range(7, 9)]))  # 3..6 went to another reader
    assert page.counters.counters["missing_iterations"] == 4
    restarted = [{**iteration_row(stats(i)), "timestamp": "12-07-2026 23:59:00.000000"} for i in range(0, 2)]
    page.feed(_page(restarted))  # the server restarted: its iterations start at 0 again, at a later time
    assert page.restarts == 1 and page.counters.counters["num_drafts"] == 7 * 2  # 5 rows before, 2 after
    assert "restarted 1 time(s)" in page.counters.note


def test_rows_without_timestamps_after_a_restart_are_counted():
    page = IterationPage("u", ModelId("m"))
    bare = [{k: v for k, v in iteration_row(stats(i)).items() if k != "timestamp"} for i in range(3)]
    page.feed(_page(bare))
    page.feed(_page(bare))  # no timestamp: the same iter again can only be a restarted server's
    assert page.counters.counters["num_drafts"] == 2 * 6 and page.restarts == 1


def ranked(i: int, rank: int) -> dict:
    return {**iteration_row(stats(i), release="1.3.0rc29"), "attentionDpRank": rank}


def test_attention_dp_rows_count_rank_zero_once():
    page = IterationPage("u", ModelId("m"))
    page.feed(_page([ranked(i, r) for i in range(4) for r in range(2)]))
    assert page.counters.counters["num_drafts"] == 4 * 2  # rank 0's rows only (speculation is copied per rank)


def test_an_iteration_cut_at_either_end_of_a_page_is_taken():
    """A GET between two rank rows, or the buffer's oldest rows dropped: the first and last iterations of a page may
    lack ranks; one without its rank 0 is not counted (missing), the next page carries on."""
    page = IterationPage("u", ModelId("m"))
    page.feed(_page([ranked(0, 2), ranked(0, 3)] + [ranked(1, r) for r in range(4)] + [ranked(2, 0), ranked(2, 1)]))
    assert page.counters.counters["num_drafts"] == 2 * 2  # iterations 1 and 2 (rank 0 present)
    page.feed(_page([ranked(2, 2), ranked(2, 3)] + [ranked(3, r) for r in range(4)]))
    assert page.counters.counters["num_drafts"] == 3 * 2 and page.counters.counters.get("missing_iterations", 0) == 0


@pytest.mark.parametrize("layout", [[(5, 0), (5, 0)], [(4, 0), (4, 1), (5, 0), (6, 0), (6, 1)]])
def test_a_rank_layout_that_does_not_add_up_is_refused(layout):
    page = IterationPage("u", ModelId("m"))
    with pytest.raises(ServerError, match="does not add up"):
        page.feed(_page([ranked(i, r) for i, r in layout]))


def test_an_empty_page_names_the_option_to_set():
    page = IterationPage("http://h:8000/metrics", ModelId("m"))
    page.feed("[]")
    assert "enable_iter_perf_stats: true" in page.counters.note
    assert looks_like_json(" [") and not looks_like_json("# HELP x\n")


class _Server:
    """An HTTP server answering `pages[path]` (bytes, or a callable returning bytes) for the scraper tests."""

    def __init__(self, pages: dict) -> None:
        import http.server
        import threading

        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                body = outer.pages.get(self.path.split("?")[0], b"")
                body = body() if callable(body) else body
                self.send_response(200 if self.path in outer.pages else 404)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.pages = pages
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_one_model_from_two_kinds_of_source_is_refused(tmp_path):
    """A trtllm-serve /metrics and a tap that name one model describe the same traffic: refused before counting."""
    from trtspec.contracts.acceptance_tap import TapRecord, TapWriter
    from trtspec.errors import UsageError
    from trtspec.ops.scrape import scraper

    server = _Server({"/metrics": b"[]", "/v1/models": json.dumps({"data": [{"id": "tiny"}]}).encode()})
    tap = tmp_path / "tap.jsonl"
    TapWriter(tap).append(TapRecord(time=1.0, model="tiny", output_tokens=3, total_draft_tokens=4,
                                    total_accepted_draft_tokens=1))
    try:
        read = scraper([f"{server.url}/metrics", f"tap:{tap}"])
        read()  # the tap is read from its end: no model from it yet
        TapWriter(tap).append(TapRecord(time=2.0, model="tiny", output_tokens=3, total_draft_tokens=4,
                                        total_accepted_draft_tokens=1))
        with pytest.raises(UsageError, match="'tiny' is published by .*counted twice"):
            read()
        assert scraper(f"{server.url}/metrics")().models  # one source is fine
    finally:
        server.close()


def test_a_backlog_too_large_to_read_is_noted_not_fatal():
    from trtspec.ops import scrape

    rows = [iteration_row(stats(i)) for i in range(3)]
    state = {"big": False}

    def page() -> bytes:
        if state["big"]:
            return b"[" + b" " * (5 << 20) + b"]"  # over the 4 MiB read bound
        return json.dumps(rows).encode()

    server = _Server({"/metrics": page, "/v1/models": json.dumps({"data": [{"id": "tiny"}]}).encode()})
    try:
        read = scrape.scraper(f"{server.url}/metrics")
        first = read()
        state["big"] = True
        second = read()
        (counters,) = second.models.values()
        assert counters.counters == next(iter(first.models.values())).counters
        assert "larger than the monitor reads" in counters.note
    finally:
        server.close()
