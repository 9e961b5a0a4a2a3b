"""`trtspec serve --dynamo 1` as a user runs it: ready line, then killed with SIGKILL: no process is left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.processes import alive, descendants
from trtspec.dynamo.launch import MAX_SYSTEM_PORT
from trtspec.ports import free_ports

pytestmark = pytest.mark.dynamo
if not os.environ.get("CI"):
    pytest.importorskip("dynamo.frontend", reason="NVIDIA Dynamo is not installed (make install)")


def test_sigkill_of_serve_leaves_no_process(tmp_path):
    http, system = free_ports(2, below=MAX_SYSTEM_PORT)
    env = {**os.environ, "DYN_GRACEFUL_SHUTDOWN_GRACE_PERIOD_SECS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "trtspec", "serve", "--dynamo", "1", "--method", "ngram",
                             "--http-port", str(http), "--system-port", str(system), "--log-dir", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()  # blocks until ready (or the command failed)
        assert line.startswith("Dynamo ready:"), line + proc.stderr.read()
        below = descendants(proc.pid)
        assert len(below) == 4  # two supervisors, the frontend, the worker
        argvs = [Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0") for p in below]
        workdir = next(Path(a[a.index(b"--workdir") + 1].decode()) for a in argvs if b"--workdir" in a)
        assert workdir.is_dir()  # the private TMPDIR (file discovery store)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 60
        while any(alive(p) for p in below) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not any(alive(p) for p in below), [p for p in below if alive(p)]
        assert not workdir.exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
