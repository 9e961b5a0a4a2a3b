"""`trtspec monitor` on a Dynamo deployment's pages, without Dynamo: each worker's series (contracts/prom_series.py
`WorkerMetrics`, with the labels Dynamo adds at scrape time) parse into the served model, and the workers' pages are
summed per model, a worker that dies or restarts included. The live deployment: test_deployment.py."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.ops.test_window import stats_of
from trtspec.contracts.metrics import AcceptanceStats
from trtspec.contracts.prom_series import WorkerMetrics
from trtspec.errors import ServerError, UsageError
from trtspec.ops.monitor import Monitor
from trtspec.ops.scrape import ModelId, Sample, parse, scraper

DYNAMO_LABELS = {"dynamo_namespace": "dynamo", "dynamo_component": "trtspec", "dynamo_endpoint": "generate",
                 "model": "/models/tiny", "model_name": "tiny"}  # what Dynamo 1.6.1 adds to a worker's series


def stats(accepted: list[int], k: int = 4) -> AcceptanceStats:
    """A request's acceptance: one draft of k tokens per entry, with that many accepted."""
    return stats_of([(k, a) for a in accepted])


def worker(worker_id: str) -> WorkerMetrics:
    return WorkerMetrics({"method": "draft_target", **DYNAMO_LABELS, "worker_id": worker_id}, default_k=4)


def test_a_workers_page_parses_into_the_served_model_and_its_counts():
    page = worker("a")
    request = stats([4, 2, 0])
    page.finished("length", request, latency_s=0.3, time_per_output_token_s=0.01)
    sample = parse(page.exposition(), 1.0)
    ((model, counters),) = sample.models.items()
    assert model == ModelId("tiny", "1", "draft_target")  # the served name, not the model's path
    assert counters.counters["num_drafts"] == request.num_drafts == 3
    assert counters.counters["num_accepted_tokens"] == request.num_accepted_tokens == 6
    assert counters.per_pos["num_accepted_tokens_per_pos"] == request.num_accepted_tokens_per_pos
    assert counters.requests == {"length": 1.0} and counters.k == 4
    assert counters.histograms["request_latency_seconds"].count == 1


def test_workers_are_summed_per_model_through_a_death_and_a_restart():
    a, b = worker("a"), worker("b")
    state = Monitor(3600.0)

    def scrape(t: float, *pages: tuple[str, WorkerMetrics]) -> None:
        models = {}
        for url, page in pages:
            models.update(parse(page.exposition(), t, source=url).models)
        state.observe(Sample(t, models))

    scrape(0.0, ("a", a), ("b", b))
    a.finished("stop", stats([4, 4]))
    b.finished("stop", stats([1]))
    scrape(1.0, ("a", a), ("b", b))
    b.finished("stop", stats([0, 3]))
    scrape(2.0, ("b", b))  # worker a died: its page is gone, b's counts go on
    a = worker("a")  # a restarted: its counters start at 0 again
    a.finished("length", stats([2]))
    scrape(3.0, ("a", a), ("b", b))
    (report,) = state.reports()
    assert report.model == "tiny/1" and report.method == "draft_target" and report.k == 4
    assert report.num_drafts == 6 and report.requests == 4
    assert report.acceptance_rate == pytest.approx((4 + 4 + 1 + 0 + 3 + 2) / (6 * 4))
    assert report.window_s == pytest.approx(3.0)  # side by side: the window's length, not the workers' sum
    assert state.steps[ModelId("tiny", "1", "draft_target")].num_drafts == 1  # the last step: a's restart only


class _Pages(ThreadingHTTPServer):
    """Serves /metrics with whatever `text` holds."""

    def __init__(self, text: str) -> None:
        self.text = text

        class Handler(BaseHTTPRequestHandler):
            def do_GET(handler) -> None:  # noqa: N805 - the handler's self
                body = self.text.encode()
                handler.send_response(200)
                handler.send_header("Content-Length", str(len(body)))
                handler.end_headers()
                handler.wfile.write(body)

            def log_message(handler, *args: object) -> None:  # noqa: N805
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.server_address[1]}"

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


def test_scraper_over_several_pages_fails_first_then_skips_a_dead_one():
    a, b = worker("a"), worker("b")
    a.finished("stop", stats([3]))
    b.finished("stop", stats([1, 1]))
    page_a, page_b = _Pages(a.exposition()), _Pages(b.exposition())
    dead = _Pages("")
    dead_url = dead.url
    dead.stop()
    try:
        with pytest.raises(ServerError, match=f"cannot read metrics from http://{dead_url}/metrics"):
            scraper([page_a.url, dead_url])()  # at start every page must answer
        scrape = scraper(f"{page_a.url},{page_b.url}".split(","))
        first = scrape()
        assert {m.source for m in first.models} == {f"http://{page_a.url}/metrics", f"http://{page_b.url}/metrics"}
        assert sum(c.counters["num_drafts"] for c in first.models.values()) == 3
        page_a.stop()  # a worker dies: later scrapes go on with the others
        (model,) = scrape().models
        assert model.source == f"http://{page_b.url}/metrics"
        page_b.stop()
        with pytest.raises(ServerError):
            scrape()  # none answers
    finally:
        for page in (page_a, page_b):
            page.server_close()


def test_the_frontends_page_is_refused_naming_the_workers_ports():
    frontend = _Pages("# TYPE dynamo_frontend_requests_total counter\ndynamo_frontend_requests_total 3\n")
    try:
        with pytest.raises(UsageError, match="Dynamo frontend's page") as info:
            scraper(frontend.url)()
        assert "localhost:8081,localhost:8082" in str(info.value.hint)
    finally:
        frontend.stop()


def test_cli_unreachable_worker_port_is_one_line_exit_1_and_a_missing_results_baseline_exit_2(tmp_path):
    from tests.ops.test_monitor_cli import _one_error_line, run_cli

    page = worker("a")
    page.finished("stop", stats([3]))
    live, dead = _Pages(page.exposition()), _Pages("")
    dead_url = dead.url
    dead.stop()
    try:
        _one_error_line(run_cli("monitor", "--metrics", live.url, "--metrics", dead_url, "--once"), 1,
                        f"cannot read metrics from http://{dead_url}/metrics")
        _one_error_line(run_cli("monitor", "--metrics", live.url, "--baseline", str(tmp_path / "no.jsonl"),
                                "--once"), 2, "no.jsonl is not a file")
    finally:
        live.stop()
