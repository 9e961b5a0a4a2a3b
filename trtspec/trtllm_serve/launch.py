"""Run the trtllm-serve server as a supervised child: `plan_server` (pure: the command, printable with --dry-run),
`TrtllmServer` (start, wait until ready, stop).

The server runs under trtspec's supervisor (trtspec/supervise.py, its own session) as tritonserver does: SIGTERM
drains (the port closes, running requests get the configuration's drain_timeout_s), whatever of its process group is
left after the stop timeout is killed, and if the launcher dies, even by SIGKILL, Linux tells the supervisor to stop
the server. Its log goes to a file in a private work directory the supervisor removes once the server is gone (kept
beside it, `supervise.kept_log`, when the server exited by itself), or to --log-file.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from trtspec.contracts.engine import EngineConfig
from trtspec.contracts.engine_args import engine_argv
from trtspec.contracts.openai import served_name
from trtspec.errors import ServerError
from trtspec.ports import HOST, check_ports_free
from trtspec.supervise import LOG_NAME, kept_log, kill_group_except
from trtspec.trtllm_serve.server import IterStatsOptions

POLL_INTERVAL_S = 0.1
PROBE_TIMEOUT_S = 2.0
STOP_MARGIN_S = 5.0


@dataclass(frozen=True)
class ServerPlan:
    """What `trtspec serve --trtllm-serve` runs."""

    model: str  # the served (OpenAI) model name
    host: str
    port: int
    argv: list[str]  # the server process (python -m trtspec.trtllm_serve ...)

    @property
    def url(self) -> str:
        return f"http://{HOST if self.host in ('', '0.0.0.0') else self.host}:{self.port}"

    def ports(self) -> dict[str, int]:
        return {"--http-port": self.port}

    def shell(self) -> str:
        return shlex.join(self.argv)


def plan_server(config: EngineConfig, *, port: int = 8000, host: str = HOST, release: str,
                iter_stats: IterStatsOptions, served_model_name: str | None = None, threads: int | None = None,
                python: str | None = None) -> ServerPlan:
    """The server command for `config` (pure: nothing is checked or started)."""
    name = served_model_name or served_name(config.target)
    argv = [python or sys.executable, "-m", "trtspec.trtllm_serve", *engine_argv(config), "--host", host, "--port",
            str(port), "--served-model-name", name, "--release", release, *iter_stats.argv()]
    if threads is not None:
        argv += ["--threads", str(threads)]
    return ServerPlan(model=name, host=host, port=port, argv=argv)


class TrtllmServer:
    """Run a ServerPlan; a context manager (start / stop)."""

    def __init__(self, plan: ServerPlan, *, startup_timeout: float = 120.0, stop_timeout: float = 40.0,
                 log_path: Path | None = None) -> None:
        self.plan, self.startup_timeout, self.stop_timeout = plan, startup_timeout, stop_timeout
        self.log_path = log_path
        self.workdir: Path | None = None
        self.process: subprocess.Popen[bytes] | None = None  # the supervisor (its pid is the process group)

    def start(self) -> TrtllmServer:
        """Spawn the supervised server and wait until /health answers; ServerError (and the server stopped) when it
        exits or is not ready in time."""
        self.spawn()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def spawn(self) -> TrtllmServer:
        """Start without waiting (call from the main thread: see trtspec/supervise.py)."""
        check_ports_free(self.plan.ports(), self.plan.host)
        self.workdir = Path(tempfile.mkdtemp(prefix="trtspec-trtllm-serve-"))
        log = self.log_path or self.workdir / LOG_NAME
        supervisor = [sys.executable, "-m", "trtspec.supervise", "--workdir", str(self.workdir), "--stop-timeout",
                      str(self.stop_timeout), "--parent", str(os.getpid()), "--", *self.plan.argv]
        with open(log, "ab") as out:
            self.process = subprocess.Popen(supervisor, stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        return self

    def wait_ready(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerError(f"the trtllm-serve server exited with code {self.process.returncode} while starting:"
                                  f"\n{self.log_tail()}", hint="read the log above (a bad flag, or a model that "
                                                               "does not load)")
            if self.ready():
                return
            time.sleep(POLL_INTERVAL_S)
        raise ServerError(f"the trtllm-serve server was not ready after {self.startup_timeout:.0f} s:\n"
                          f"{self.log_tail()}", hint="raise --startup-timeout, or read the log above")

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.plan.url}/health", timeout=PROBE_TIMEOUT_S) as response:
                return response.status == 200
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            return False

    def log_tail(self, lines: int = 20) -> str:
        candidates = [self.log_path] if self.log_path else []
        if self.workdir is not None:
            candidates += [self.workdir / LOG_NAME, Path(kept_log(str(self.workdir)))]
        for path in candidates:
            if path is not None and path.is_file():
                text = path.read_text(encoding="utf-8", errors="replace")
                return "\n".join(text.splitlines()[-lines:])
        return ""

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def wait(self) -> int:
        """Block until the server exits (a stop signal to this process stops it via stop()); returns its code."""
        assert self.process is not None
        return self.process.wait()

    def terminate(self) -> None:
        """Ask the server to stop (SIGTERM to its supervisor) without waiting; safe in a signal handler."""
        if self.alive():
            assert self.process is not None
            self.process.send_signal(signal.SIGTERM)

    def stop(self) -> int | None:
        """SIGTERM (the server drains), SIGKILL whatever is left after the stop timeout; the work directory and a
        kept log go. Returns the exit code. Idempotent."""
        code = None
        if self.process is not None:
            self.terminate()
            try:
                code = self.process.wait(timeout=self.stop_timeout + STOP_MARGIN_S)
            except subprocess.TimeoutExpired:
                code = None
            kill_group_except(self.process.pid, keep=-1)  # past the timeout, or its supervisor was killed
            if code is None:
                code = self.process.wait()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            Path(kept_log(str(self.workdir))).unlink(missing_ok=True)
            self.workdir = None
        return code

    def __enter__(self) -> TrtllmServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
