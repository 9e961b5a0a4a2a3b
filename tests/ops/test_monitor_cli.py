"""`trtspec monitor` and `trtspec deploy --baseline` on bad input: one line, the documented exit code, and nothing
started or written. And the monitor against a live metrics page served by prometheus-client's own HTTP server."""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests import cli_checks

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "sweep" / "results.jsonl"


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """`trtspec ARGS` in this process (tests/cli_checks.py), as a CompletedProcess."""
    code, out, err = cli_checks.run_cli(list(args), limit=timeout)
    return subprocess.CompletedProcess(["trtspec", *args], code, out, err)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _one_error_line(proc: subprocess.CompletedProcess, code: int, needle: str) -> None:
    assert proc.returncode == code, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines[0].startswith("Error: ") and needle in lines[0], proc.stderr
    assert len(lines) <= 2 and "Traceback" not in proc.stderr


def test_unreachable_metrics_url_is_one_line_exit_1():
    port = _free_port()
    _one_error_line(run_cli("monitor", "--metrics", f"127.0.0.1:{port}", "--once"), 1,
                    f"cannot read metrics from http://127.0.0.1:{port}/metrics")


def test_not_a_url_is_exit_2():
    _one_error_line(run_cli("monitor", "--metrics", "ftp://x/metrics", "--once"), 2, "is not an http(s) URL")


def test_repository_without_baseline_is_one_line_exit_2(tmp_path):
    (tmp_path / "trtspec-repo.json").write_text(json.dumps({"backend": "torch", "baseline": None}))
    _one_error_line(run_cli("monitor", "--metrics", "127.0.0.1:1", "--repo", str(tmp_path), "--once"), 2,
                    "has no baseline")


def test_apply_needs_the_grpc_url_and_refuses_before_scraping(tmp_path):
    from trtspec.sweep.baseline import from_results

    path = from_results(RESULTS, method="draft_target", k=4, max_k=8, temperature=0.0).write(
        tmp_path / "b.json")
    proc = run_cli("monitor", "--metrics", "127.0.0.1:1", "--baseline", str(path), "--apply", "--once")
    assert proc.returncode == 2 and "--apply needs --url" in proc.stderr, proc.stderr
    proc = run_cli("monitor", "--metrics", "127.0.0.1:1", "--baseline", str(path), "--apply", "--url",
                   "127.0.0.1:1", "--once")
    if importlib.util.find_spec("trtspec.triton.control") is None:
        _one_error_line(proc, 3, "trtspec.triton.control")
    else:  # the live k change exists: the unreachable metrics URL is what fails, before anything is reloaded
        _one_error_line(proc, 1, "cannot read metrics")


@pytest.mark.parametrize("args, code, needle", [
    (["--window", "0s"], 2, "--window"), (["--window", "soon"], 2, "not a duration"),
    (["--false-alarm-rate", "2"], 2, "--false-alarm-rate"),
])
def test_bad_options_are_usage_errors(args, code, needle):
    proc = run_cli("monitor", "--metrics", "127.0.0.1:1", *args)
    assert proc.returncode == code and needle in proc.stderr, proc.stderr


def test_deploy_baseline_with_two_temperatures_names_the_choice(tmp_path, random_pair):
    from tests.triton.helpers import torch_bundle

    target, draft = random_pair
    bundle = torch_bundle(tmp_path / "bundle", target, draft)
    out = tmp_path / "repo"
    proc = run_cli("deploy", "--backend", "torch", "--build", str(bundle), "--out", str(out), "--baseline",
                   str(RESULTS))
    _one_error_line(proc, 2, "temperatures [0.0, 1.0]")
    assert "--baseline-temperature" in proc.stderr and not out.exists()
    proc = run_cli("deploy", "--backend", "torch", "--build", str(bundle), "--out", str(out), "--baseline",
                   str(RESULTS), "--baseline-temperature", "0", "--baseline-suite", "code")
    assert proc.returncode == 0, proc.stderr
    record = json.loads((out / "trtspec-repo.json").read_text())
    assert record["baseline"] == "trtspec-baseline.json" and (out / "trtspec-baseline.json").is_file()


@pytest.mark.slow
def test_monitor_reads_a_live_metrics_page(tmp_path):
    """prometheus-client's HTTP server exposing the series (as any Prometheus client would): `--once --json`."""
    script = f"""
import sys, time
sys.path.insert(0, {str(ROOT)!r})
from prometheus_client import CollectorRegistry, start_http_server
from tests.ops.test_window import exposition, stats_of
from prometheus_client.parser import text_string_to_metric_families
import prometheus_client.core as core

class Replay:
    def __init__(self):
        self.t0 = time.monotonic()
    def collect(self):
        n = int((time.monotonic() - self.t0) * 10) + 1  # 10 drafts per second, forever
        yield from text_string_to_metric_families(exposition(stats_of([(4, 3)] * n)))

registry = CollectorRegistry()
registry.register(Replay())
start_http_server({{port}}, addr="127.0.0.1", registry=registry)
print("ready", flush=True)
time.sleep(60)
"""
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-c", script.replace("{port}", str(port))], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert server.stdout.readline().strip() == "ready"
        proc = run_cli("monitor", "--metrics", f"127.0.0.1:{port}", "--once", "--window", "3s", "--json",
                       "--price-per-hour", "3.6")
        assert proc.returncode == 0, proc.stderr
        (report,) = json.loads(proc.stdout)
        assert report["model"] == "tensorrt_llm/1" and report["k"] == 4
        assert report["mean_acceptance_length"] == pytest.approx(4.0)  # every draft accepted 3 of 4
        assert report["conditional_per_pos"] == pytest.approx([1.0, 1.0, 1.0, 0.0])
        assert report["cost_per_million"] == pytest.approx(3.6 / (report["tokens_per_s"] * 3600) * 1e6)
        assert 25 <= report["num_drafts"] <= 45  # ~3 s at 10 drafts/s
    finally:
        server.kill()
