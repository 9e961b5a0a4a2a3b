"""Start `trtspec serve --trtllm-serve` as a user does (the CLI, a supervised child) for a test module, and stop it
with SIGTERM even when a test fails, leaving no process behind; read its /metrics and /trtspec/metrics."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from tests.processes import alive, descendants
from trtspec.ports import free_ports

READY = "trtllm-serve ready:"
EMBEDDED = ("--model", "tiny", "--draft", "tiny-draft", "--method", "draft_target", "--k", "4")


class Served:
    def __init__(self, proc: subprocess.Popen[str], url: str) -> None:
        self.proc, self.url = proc, url

    def get(self, path: str) -> str:
        with urllib.request.urlopen(self.url + path, timeout=30) as response:
            return response.read().decode()

    def iterations(self) -> list[dict]:
        return json.loads(self.get("/metrics"))

    def counters(self) -> dict[str, float]:
        """trtspec's spec-decode counters (and aborted requests) on /trtspec/metrics."""
        from prometheus_client.parser import text_string_to_metric_families

        out: dict[str, float] = {}
        for family in text_string_to_metric_families(self.get("/trtspec/metrics")):
            for sample in family.samples:
                if sample.name.endswith("_total") and "position" not in sample.labels:
                    key = sample.name.removeprefix("trtspec_spec_decode_").removesuffix("_total")
                    if "finish_reason" in sample.labels:
                        key += ":" + sample.labels["finish_reason"]
                    out[key] = out.get(key, 0.0) + sample.value
        return out


@contextmanager
def serving(*flags: str, engine: Sequence[str] = EMBEDDED) -> Iterator[Served]:
    """The server of `engine` flags (default: the embedded pair, draft_target k=4) and `flags`, until the block ends."""
    (port,) = free_ports(1)
    argv = [sys.executable, "-m", "trtspec", "serve", "--trtllm-serve", *engine, "--http-port", str(port), *flags]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = []
        for line in proc.stdout:  # blocks until ready (or the command failed and closed its output)
            lines.append(line)
            if line.startswith(READY):
                break
        assert lines and lines[-1].startswith(READY), "".join(lines)
        yield Served(proc, f"http://127.0.0.1:{port}")
    finally:
        below = descendants(proc.pid)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for pid in below:  # the supervisor stops the server once trtspec serve is gone; never leave one behind
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


