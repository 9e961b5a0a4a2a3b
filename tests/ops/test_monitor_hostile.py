"""`trtspec monitor` on hostile input (issue 29, items 2 and 3): metrics pages (NaN, Inf, negative and decreasing
counters, bad labels, 50 MB, binary, HTML, no trtspec series) and baselines (/dev/zero, 1 GiB, binary, nested JSON).

Every run goes through the CLI in its own process, all of them side by side (a few seconds in all), against pages a
local http.server serves: a failure is one `Error:` line (and a hint) with the documented exit code and no traceback,
a success prints its JSON, and the monitor's peak RSS stays under 300 MB (`run_all`). The edge cases that need no
page (a URL with a bad port, --window, the baseline hint, a histogram going backwards) run in-process."""

from __future__ import annotations

import http.server
import importlib.util
import itertools
import json
import random
import re
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.cli_checks import assert_clean_failure, run_cli
from tests.ops.test_window import exposition, stats_of

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "sweep" / "results.jsonl"
MAX_RSS_BYTES = 300 * 1000 * 1000
ONCE = ["--once", "--json", "--window", "0.4s", "--interval", "0.2s"]
SERIES_LINE = r'^({name}\{{[^}}]*\}}) \S+$'


def page(drafts: int = 100, *, latencies: int = 5) -> str:
    """A page as a trtspec server publishes it: `drafts` drafts of k = 4 with 3 accepted, `latencies` requests."""
    return exposition(stats_of([(4, 3)] * drafts), latencies=[0.3] * latencies)


def with_value(text: str, name: str, value: str) -> str:
    """`text` with every sample of series `name` set to `value` (as written on the page: NaN, +Inf, -5)."""
    out, n = re.subn(SERIES_LINE.format(name=re.escape(name)), rf"\g<1> {value}", text, flags=re.M)
    assert n, name
    return out


def with_label(text: str, label: str, value: str) -> str:
    out, n = re.subn(rf'{label}="[^"]*"', f'{label}="{value}"', text)
    assert n, label
    return out


GOOD = page()
DRAFTS = "trtspec_spec_decode_num_drafts_total"
K = "trtspec_spec_decode_k"
BIG_LINE = b'nv_inference_count{model="m",version="1"} 1.0\n'
_SCRAPES = itertools.count()


def decreasing() -> bytes:
    """Every scrape shows fewer events than the last (counters and histograms going backwards, no reload)."""
    n = next(_SCRAPES)
    return page(max(1, 900 - 100 * n), latencies=max(1, 50 - 5 * n)).encode()


def fifty_megabytes(wfile) -> None:
    """50 MB of Prometheus text (a valid page, far too large), streamed without a Content-Length."""
    chunk = BIG_LINE * ((1 << 20) // len(BIG_LINE))
    for _ in range(50 * 1000 * 1000 // len(chunk) + 1):
        wfile.write(chunk)


PAGES: dict[str, bytes] = {
    "good": GOOD.encode(),
    "nan-counter": with_value(GOOD, DRAFTS, "NaN").encode(),
    "inf-counter": with_value(GOOD, "trtspec_spec_decode_num_accepted_tokens_total", "+Inf").encode(),
    "negative-counter": with_value(GOOD, DRAFTS, "-5").encode(),
    "nan-k": with_value(GOOD, K, "NaN").encode(),
    "inf-k": with_value(GOOD, K, "+Inf").encode(),
    "fractional-k": with_value(GOOD, K, "2.5").encode(),
    "position-not-a-number": with_label(GOOD, "position", "first").encode(),
    "position-huge": with_label(GOOD, "position", "123456789012").encode(),
    "position-of-6000-digits": with_label(GOOD, "position", "9" * 6000).encode(),
    "nan-le": with_label(GOOD, "le", "NaN").encode(),
    "binary": random.Random(29).randbytes(4096) + b"\0\0\0",
    "html": b"<!DOCTYPE html>\n<html><head><title>Triton</title></head><body>HTTP port, not metrics</body></html>\n",
    "no-series": b'# TYPE nv_inference_count counter\nnv_inference_count{model="m",version="1"} 3\n',
}
STREAMED = ("decreasing", "fifty-megabytes")  # made per request


class Pages(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        name = self.path.strip("/").split("/")[0]
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        try:
            if name == "fifty-megabytes":
                fifty_megabytes(self.wfile)
            else:
                self.wfile.write(decreasing() if name == "decreasing" else PAGES[name])
        except (BrokenPipeError, ConnectionResetError):
            pass  # the monitor stopped reading: what it should do with a page this large

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def pages():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Pages)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def baseline_json(tmp_path_factory) -> Path:
    from trtspec.sweep.baseline import from_results

    return from_results(RESULTS, method="draft_target", k=4, max_k=8, temperature=0.0).write(
        tmp_path_factory.mktemp("baseline") / "trtspec-baseline.json")


@dataclass
class Run:
    code: int
    out: str
    err: str
    max_rss: int  # bytes: at most the monitor process's peak RSS


# One interpreter imports the monitor once, then forks a child per run, all side by side (an interpreter start per
# run would take most of the time). Each child runs `trtspec ARGV` through the CLI's main with its output in files,
# its address space capped at 2 GiB (a runaway read fails there, never the machine) and 60 s to finish. Its peak RSS
# is its ru_maxrss (wait4) plus the parent's RSS at the fork: an upper bound, since the pages it shares with the
# parent count once or not at all in its own.
HARNESS = """
import importlib, json, os, re, resource, signal, sys
from trtspec.cli.main import main

for module in ("trtspec.cli.monitor", "trtspec.ops.monitor", "trtspec.ops.dashboard", "trtspec.sweep.baseline",
               "prometheus_client.parser", "rich.live"):  # what every run imports: once, before the forks
    importlib.import_module(module)

runs, workdir = json.loads(sys.argv[1]), sys.argv[2]
base_kib = int(re.search(r"VmRSS:\\s+(\\d+)", open("/proc/self/status").read()).group(1))
children = {}
for name, argv in runs.items():
    pid = os.fork()
    if pid == 0:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
        signal.alarm(60)
        for fd, ext in ((1, "out"), (2, "err")):
            os.dup2(os.open(os.path.join(workdir, name + "." + ext), os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
        code = 0
        try:
            main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        except BaseException:
            import traceback
            traceback.print_exc()
            code = 99
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    children[pid] = name
done = {}
while children:
    pid, status, usage = os.wait4(-1, 0)
    done[children.pop(pid)] = [os.waitstatus_to_exitcode(status), (usage.ru_maxrss + base_kib) * 1024]
print(json.dumps(done))
"""


def run_all(argvs: dict[str, list[str]], workdir: Path) -> dict[str, Run]:
    """`trtspec ARGV` for every entry, each in its own process, side by side: exit code, output, peak RSS."""
    names = {name: f"run{i}" for i, name in enumerate(argvs)}
    proc = subprocess.run([sys.executable, "-c", HARNESS, json.dumps({names[n]: a for n, a in argvs.items()}),
                           str(workdir)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    done = json.loads(proc.stdout)
    return {name: Run(done[key][0], (workdir / f"{key}.out").read_text(errors="replace"),
                      (workdir / f"{key}.err").read_text(errors="replace"), done[key][1])
            for name, key in names.items()}


@pytest.fixture(scope="module")
def hostile_files(tmp_path_factory) -> dict[str, Path]:
    files = tmp_path_factory.mktemp("hostile")
    paths = {"1gib.json": files / "1gib.json", "1gib.jsonl": files / "1gib.jsonl",
             "binary.json": files / "binary.json", "binary.jsonl": files / "binary.jsonl",
             "nested.json": files / "nested.json"}
    for name in ("1gib.json", "1gib.jsonl"):
        with open(paths[name], "wb") as fh:
            fh.truncate(1 << 30)  # sparse: 1 GiB of NUL bytes that take no disk
    paths["binary.json"].write_bytes(random.Random(1).randbytes(4096))
    paths["binary.jsonl"].write_bytes(random.Random(2).randbytes(4096))
    paths["nested.json"].write_text("[" * 1_000_000)
    paths["dev-zero"] = Path("/dev/zero")
    return paths


@pytest.fixture(scope="module")
def runs(pages, baseline_json, hostile_files, tmp_path_factory) -> dict[str, Run]:
    """Every hostile run of this module, started together."""
    argvs = {f"page:{name}": ["monitor", "--metrics", f"{pages}/{name}/metrics", *ONCE]
             for name in [*PAGES, *STREAMED]}
    argvs["page:good --model nosuch"] = ["monitor", "--metrics", f"{pages}/good/metrics", "--model", "nosuch", *ONCE]
    for name, path in hostile_files.items():
        argvs[f"baseline:{name}"] = ["monitor", "--metrics", f"{pages}/good/metrics", "--baseline", str(path), *ONCE]
    argvs["apply:unreachable"] = ["monitor", "--metrics", f"{pages}/good/metrics", "--baseline", str(baseline_json),
                                  "--apply", "--url", "127.0.0.1:1", *ONCE]
    return run_all(argvs, tmp_path_factory.mktemp("runs"))


def assert_one_line(run: Run, code: int, *needles: str) -> None:
    assert_clean_failure(run.code, run.err, frozenset({code}))
    line = run.err[run.err.index("Error: "):].splitlines()[0]
    for needle in needles:
        assert needle in line, (needle, run.err)
    assert all(ch.isprintable() for ch in run.err.replace("\n", "")), repr(run.err[:400])  # no NUL, no raw bytes
    assert run.out == "", run.out[:400]


def test_every_hostile_run_stays_under_300_mb(runs):
    over = {name: run.max_rss // 10**6 for name, run in runs.items() if run.max_rss >= MAX_RSS_BYTES}
    assert not over, f"peak RSS in MB: {over}"


def test_a_good_page_is_read(runs):
    run = runs["page:good"]
    assert run.code == 0, run.err
    (report,) = json.loads(run.out)
    assert report["model"] == "tensorrt_llm/1" and report["k"] == 4


@pytest.mark.parametrize("name, what", [
    ("nan-counter", "nan"), ("inf-counter", "inf"), ("negative-counter", "-5"), ("nan-k", "nan"), ("inf-k", "inf"),
    ("fractional-k", "2.5"), ("position-not-a-number", "first"), ("position-huge", "123456789012"),
    ("position-of-6000-digits", "999..."), ("nan-le", "NaN"),
])
def test_a_bad_sample_refuses_the_page_in_one_line(runs, pages, name, what):
    """Non-finite or negative counts, a k that is no whole number, a position or bucket bound that is no number:
    the page is not what a trtspec server publishes; exit 1 as for any page that cannot be read (mid-run: the
    scrape is skipped), naming the page and the sample."""
    assert_one_line(runs[f"page:{name}"], 1, f"{pages}/{name}/metrics", what)


def test_a_fifty_megabyte_page_is_refused_unread(runs, pages):
    assert_one_line(runs["page:fifty-megabytes"], 1, f"{pages}/fifty-megabytes/metrics", "4 MiB")


def test_a_binary_page_is_named_not_echoed(runs, pages):
    assert_one_line(runs["page:binary"], 1, f"{pages}/binary/metrics", "not Prometheus text")
    assert len(runs["page:binary"].err) < 600


def test_an_html_page_is_not_prometheus_text(runs, pages):
    assert_one_line(runs["page:html"], 1, f"{pages}/html/metrics", "does not parse as Prometheus text")


def test_a_window_without_trtspec_series_says_so(runs, pages):
    """Not `[]` with exit 0: a page with no acceptance series is exit 1 (the server publishes none); a --model the
    pages do not show is exit 2 naming the models they show."""
    assert_one_line(runs["page:no-series"], 1, f"{pages}/no-series/metrics", "hold no acceptance")
    assert_one_line(runs["page:good --model nosuch"], 2, "--model nosuch", "tensorrt_llm")


def test_counters_that_go_backwards_are_restarts(runs):
    """Every scrape shows fewer events than the one before, with no reload in between: each decrease is a restart
    (Prometheus' rate() rule), counted in `resets`, and no number goes negative."""
    run = runs["page:decreasing"]
    assert run.code == 0, run.err
    (report,) = json.loads(run.out)
    assert report["resets"] >= 1
    numbers = [v for v in report.values() if isinstance(v, (int, float))]
    numbers += [v for key in ("acceptance_per_pos", "conditional_per_pos") for v in report[key]]
    assert all(v >= 0 for v in numbers), report
    assert report["concurrency"] is None or report["concurrency"] >= 0


@pytest.mark.parametrize("name, code, needle", [
    ("dev-zero", 2, "is a character device, not a regular file"), ("1gib.json", 2, "larger than 4 MiB"),
    ("1gib.jsonl", 2, "larger than 64 MiB"), ("binary.json", 2, "not UTF-8"), ("binary.jsonl", 2, "not a JSON record"),
    ("nested.json", 2, "not JSON"),
])
def test_a_hostile_baseline_is_one_line(runs, hostile_files, name, code, needle):
    assert_one_line(runs[f"baseline:{name}"], code, str(hostile_files[name]), needle)


def test_apply_checks_the_server_before_watching(runs):
    """`--apply --url` at an address where no Triton server answers: exit 1 naming it, before any window (3 where
    tritonclient is not installed)."""
    if importlib.util.find_spec("tritonclient") is None:
        assert_one_line(runs["apply:unreachable"], 3, "tritonclient")
    else:
        assert_one_line(runs["apply:unreachable"], 1, "127.0.0.1:1")


# in-process: what fails before anything is scraped ------------------------------------------------------------------


@pytest.mark.parametrize("url, needle", [("http://[::1]:notaport/", "notaport"), ("localhost:99999", "99999"),
                                         ("http://[::1/metrics", "[::1")])
def test_a_url_with_a_bad_port_is_one_line_exit_2(url, needle):
    code, _, err = run_cli(["monitor", "--metrics", url, "--once"], limit=20)
    assert_clean_failure(code, err, frozenset({2}))
    assert needle in err and "--metrics" in err, err


@pytest.mark.parametrize("window, interval", [("1ms", "1s"), ("1s", "0.6s"), ("1.9s", "1s")])
def test_a_window_needs_two_scrape_intervals(window, interval):
    code, _, err = run_cli(["monitor", "--metrics", "127.0.0.1:1", "--window", window, "--interval", interval,
                            "--once"], limit=20)
    assert_clean_failure(code, err, frozenset({2}))
    assert "--window" in err and "--interval" in err, err


def test_a_window_of_two_scrape_intervals_is_accepted():
    code, _, err = run_cli(["monitor", "--metrics", "127.0.0.1:1", "--window", "2s", "--interval", "1s", "--once"],
                           limit=20)
    assert code == 1 and "cannot read metrics" in err, err  # the unreachable page is what fails


def test_the_hint_of_results_without_the_method_names_a_k_range():
    from trtspec.errors import UsageError
    from trtspec.sweep.baseline import from_results

    with pytest.raises(UsageError, match="no medusa cases") as info:
        from_results(RESULTS, method="medusa", k=3)
    assert "--k 0-3" in info.value.hint and "None" not in info.value.hint


def test_a_histogram_that_goes_backwards_is_a_restart():
    """Only the latency histogram's sum and a bucket went down (its count did not): that is a decrease too, so the
    model restarted (Prometheus' rule), and no increment is negative."""
    from trtspec.ops.scrape import Histogram, ModelCounters, ModelId
    from trtspec.ops.window import increments

    def counters(drafts: float, bucket: float, total: float) -> ModelCounters:
        hist = Histogram({1.0: bucket, float("inf"): 5.0}, total, 5.0)
        return ModelCounters(counters={"num_drafts": drafts}, histograms={"request_latency_seconds": hist})

    step = increments(ModelId("m"), counters(12.0, 3.0, 7.0), counters(10.0, 4.0, 9.0), 1.0)
    assert step.resets == 1 and step.num_drafts == 12.0
    hist = step.histograms["request_latency_seconds"]
    assert hist.sum == 7.0 and min(hist.buckets.values()) >= 0 and step.concurrency == 7.0


def test_the_apply_check_refuses_what_it_could_not_change(monkeypatch):
    """`check_server` (TritonControl.check, run by `monitor --apply` before it watches) against a fake gRPC client:
    a server that is not ready and a model not ready there are exit 1; a model that is not a trtspec engine model,
    or runs method none, exit 2; a speculating engine model passes."""
    from trtspec.contracts.engine import EngineConfig
    from trtspec.errors import ServerError, UsageError
    from trtspec.triton import client as client_module
    from trtspec.triton.control import check_server

    def params(engine: EngineConfig) -> dict:
        return {"parameters": {key: {"string_value": value} for key, value in engine.to_parameters().items()}}

    configs = {"tensorrt_llm": params(EngineConfig(target="tiny", draft="tiny-draft", method="draft_target")),
               "tensorrt_llm_draft": params(EngineConfig(target="tiny-draft", method="none")),
               "ensemble": {"parameters": {}}}

    class FakeClient:
        server_is_ready = True

        def __init__(self, url: str, model: str | None = "ensemble", *, timeout_s: float = 60.0) -> None:
            assert model is None  # the check names no model to connect with

        def __enter__(self):
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def server_ready(self) -> bool:
            return self.server_is_ready

        def ready(self, model: str) -> bool:
            return model in configs

        def model_config(self, model: str) -> dict:
            return configs[model]

    monkeypatch.setattr(client_module, "TritonClient", FakeClient)
    check_server("h:8001", ["tensorrt_llm"])
    check_server("h:8001", [])
    for models, error, needle in ((["nosuch"], ServerError, "'nosuch' is not ready"),
                                  (["ensemble"], UsageError, "not a trtspec engine model"),
                                  (["tensorrt_llm_draft"], UsageError, "method none")):
        with pytest.raises(error, match=needle) as info:
            check_server("h:8001", models)
        assert "h:8001" in info.value.message
    FakeClient.server_is_ready = False
    with pytest.raises(ServerError, match="not ready"):
        check_server("h:8001", ["tensorrt_llm"])
