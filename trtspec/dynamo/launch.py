"""A local NVIDIA Dynamo deployment: Dynamo's OpenAI frontend plus N trtspec workers on one machine.

`plan_deployment` is pure (the commands and environment, printable with --dry-run); `DynamoDeployment` runs the plan.
Local mode needs no etcd and no NATS: every process gets `--discovery-backend file --request-plane tcp --event-plane
zmq`, the file store lives in a private TMPDIR (so deployments and tests never see each other), and every Dynamo
socket is bound and advertised on 127.0.0.1 (`DYN_*_HOST`). Each worker serves its health and `/metrics` on its
own system port (`DYN_SYSTEM_PORT`, from --system-port upwards).

Processes are supervised like tritonserver (trtspec/supervise.py, one supervisor per process, its own
session): SIGTERM drains (Dynamo's worker unregisters, finishes what runs, then cleans up), whatever is left after
the stop timeout is killed, and if the launcher dies, even by SIGKILL, Linux tells each supervisor to stop its
process; the frontend's supervisor removes the private TMPDIR. A worker that fails to start is reported (its log
tail) while the frontend and the other workers keep serving; the start fails only when no worker is ready.
"""

from __future__ import annotations

import json
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
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from trtspec.contracts.engine import EngineConfig, PromptLog
from trtspec.contracts.engine_args import engine_argv
from trtspec.contracts.openai import served_name
from trtspec.contracts.prompt_log import WORKER_PREFIX
from trtspec.dynamo.worker import DYNAMO_HINT, LOCAL_PLANES, WorkerOptions
from trtspec.errors import ServerError, ToolNotFoundError, UsageError
from trtspec.ports import HOST, check_ports_free
from trtspec.supervise import group_members, kill_group_except

POLL_INTERVAL_S = 0.25
PROBE_TIMEOUT_S = 2.0
STOP_MARGIN_S = 5.0
MAX_SYSTEM_PORT = 32767  # Dynamo 1.6.1 parses DYN_SYSTEM_PORT as an i16 ("expected i16 for key SYSTEM_PORT")
ROUTER_MODES = ("round-robin", "random", "least-loaded", "kv")
# Dynamo binds and advertises these on the machine's address unless told; local deployments stay on loopback.
LOOPBACK_ENV = {"DYN_TCP_RPC_HOST": HOST, "DYN_EVENT_PLANE_HOST": HOST, "DYN_TCP_RESPONSE_STREAM_HOST": HOST,
                "DYN_SYSTEM_HOST": HOST}


@dataclass(frozen=True)
class ProcessPlan:
    name: str  # "frontend", "worker-0", ...
    argv: list[str]
    env: dict[str, str]  # added to the environment (TMPDIR comes at start)
    ready_url: str  # polled until it answers as ready


@dataclass(frozen=True)
class DeploymentPlan:
    """What `trtspec serve --dynamo N` runs."""

    model: str  # the served (OpenAI) model name
    http_port: int
    system_ports: list[int]  # one per worker
    processes: list[ProcessPlan] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.http_port}/v1"

    def ports(self) -> dict[str, int]:
        return {"--http-port": self.http_port,
                **{f"--system-port (worker {i})": port for i, port in enumerate(self.system_ports)}}

    def shell(self) -> str:
        """Copy-pasteable lines, one process each (with TMPDIR=<a private directory> set for all of them)."""
        lines = ["export TMPDIR=$(mktemp -d)  # the file-discovery store: one per deployment"]
        for p in self.processes:
            env = " ".join(f"{k}={shlex.quote(v)}" for k, v in p.env.items())
            lines.append(f"{env} {shlex.join(p.argv)} &  # {p.name}")
        return "\n".join(lines)


def plan_deployment(params: EngineConfig, *, workers: int, http_port: int = 8000, system_port: int | Sequence[int] = 8081,
                    router_mode: str = "round-robin", migration_limit: int = 3, threads: int | None = 1,
                    served_model_name: str | None = None, python: str | None = None) -> DeploymentPlan:
    """The frontend and `workers` worker processes serving `params` (pure: nothing is checked or started). Worker i
    serves its health and metrics on `system_port + i` (or `system_port[i]` when a list is given); with prompt logging
    on, it logs to `<log_prompts>/worker-i` with its share of the size bound (one log: contracts/prompt_log.py)."""
    if workers < 1:
        raise UsageError(f"--dynamo={workers}: at least one worker", hint="e.g. --dynamo 2")
    if router_mode not in ROUTER_MODES:
        raise UsageError(f"--router-mode={router_mode!r}: not one of {', '.join(ROUTER_MODES)}",
                         hint="round-robin spreads requests evenly; kv follows the workers' KV events and load")
    python = python or sys.executable
    name = served_model_name or served_name(params.target)
    planes = [arg for key, value in LOCAL_PLANES.items() for arg in (f"--{key.replace('_', '-')}", value)]
    frontend = ProcessPlan(
        "frontend",
        [python, "-m", "dynamo.frontend", "--http-host", HOST, "--http-port", str(http_port), "--router-mode",
         router_mode, "--migration-limit", str(migration_limit), *planes],
        dict(LOOPBACK_ENV), f"http://{HOST}:{http_port}/v1/models")
    ports = [system_port + i for i in range(workers)] if isinstance(system_port, int) else list(system_port)
    if len(ports) != workers:
        raise UsageError(f"--system-port: {len(ports)} ports for {workers} workers", hint="give one port per worker")
    if max(ports) > MAX_SYSTEM_PORT:
        raise UsageError(f"--system-port={ports[0]}: worker ports up to {max(ports)}, but Dynamo 1.6.1 reads "
                         f"DYN_SYSTEM_PORT as a 16-bit signed integer (at most {MAX_SYSTEM_PORT})",
                         hint=f"pick a first port of at most {MAX_SYSTEM_PORT - workers + 1}")
    procs = [frontend]
    for i, port in enumerate(ports):
        log = params.prompt_log
        config = params if log is None else replace(params, prompt_log=PromptLog(
            str(Path(log.directory) / f"{WORKER_PREFIX}{i}"), sample_rate=log.sample_rate, max_mb=log.max_mb / workers))
        argv = [python, "-m", "trtspec.dynamo.worker", *engine_argv(config), "--served-model-name", name, *planes]
        if threads is not None:
            argv += ["--threads", str(threads)]
        procs.append(ProcessPlan(f"worker-{i}", argv, {**LOOPBACK_ENV, "DYN_SYSTEM_PORT": str(port)},
                                 f"http://{HOST}:{port}/health"))
    return DeploymentPlan(model=name, http_port=http_port, system_ports=ports, processes=procs)


def check_dynamo() -> None:
    """ToolNotFoundError (exit 3) naming the fix when Dynamo's frontend or runtime does not import here."""
    import importlib.util

    for module in ("dynamo.frontend", "dynamo.llm"):
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise ToolNotFoundError(f"NVIDIA Dynamo is not installed here ({module} does not import)",
                                    hint=DYNAMO_HINT)


class DynamoDeployment:
    """Run a DeploymentPlan; a context manager (start / stop). `failed` names the workers that did not start."""

    def __init__(self, plan: DeploymentPlan, *, startup_timeout: float = 180.0, stop_timeout: float = 20.0,
                 log_dir: Path | None = None) -> None:
        self.plan = plan
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.tmpdir: Path | None = None
        self.log_dir = log_dir
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.failed: dict[str, str] = {}  # process name -> why (with its log tail)

    # -- start ---------------------------------------------------------------------------------------------------
    def start(self) -> DynamoDeployment:
        """Spawn every process, then wait until the deployment serves (`spawn` + `wait_ready`); stops it on failure."""
        self.spawn()
        return self.wait_ready()

    def spawn(self) -> DynamoDeployment:
        """Start every process without waiting for it (call from the main thread: see trtspec/supervise.py)."""
        check_dynamo()
        check_ports_free(self.plan.ports())
        self.tmpdir = Path(tempfile.mkdtemp(prefix="trtspec-dynamo-"))
        self.log_dir = Path(self.log_dir or self.tmpdir / "logs")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        try:
            for proc in self.plan.processes:
                self._spawn(proc)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ready(self) -> DynamoDeployment:
        """Until the frontend lists the model and every worker that started is registered; ServerError (and the
        deployment stopped) when none serves."""
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn(self, proc: ProcessPlan) -> None:
        assert self.tmpdir is not None and self.log_dir is not None
        workdir = ["--workdir", str(self.tmpdir)] if proc.name == "frontend" else []
        supervisor = [sys.executable, "-m", "trtspec.supervise", *workdir, "--stop-timeout",
                      str(self.stop_timeout), "--parent", str(os.getpid()), "--", *proc.argv]
        env = {**os.environ, **proc.env, "TMPDIR": str(self.tmpdir)}
        with open(self.log_dir / f"{proc.name}.log", "wb") as log:
            self.processes[proc.name] = subprocess.Popen(supervisor, env=env, stdout=log, stderr=subprocess.STDOUT,
                                                         stdin=subprocess.DEVNULL, start_new_session=True)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        pending = {p.name: p for p in self.plan.processes}
        workers = [p.name for p in self.plan.processes if p.name != "frontend"]
        while pending and time.monotonic() < deadline:
            for name, proc in list(pending.items()):
                if self.processes[name].poll() is not None:
                    self.failed[name] = f"exited with code {self.processes[name].returncode}:\n{self.log_tail(name)}"
                    del pending[name]
                elif self._ready(proc):
                    del pending[name]
            if "frontend" in self.failed:
                raise ServerError(f"the Dynamo frontend {self.failed['frontend']}",
                                  hint="read the log above; `trtspec doctor` checks the installation")
            if all(w in self.failed for w in workers):
                break  # no worker left to wait for: the frontend will never list the model
            time.sleep(POLL_INTERVAL_S if pending else 0)
        for name in pending:
            self.failed.setdefault(name, f"was not ready after {self.startup_timeout:.0f} s:\n{self.log_tail(name)}")
        if "frontend" in pending or all(w in self.failed for w in workers):
            first = next(iter(self.failed.items()))
            raise ServerError(f"no Dynamo worker is serving: {first[0]} {first[1]}",
                              hint="fix the worker's arguments or model (see its log above)")
        self._wait_registered(len(workers) - len(self.failed), deadline)

    def _ready(self, proc: ProcessPlan) -> bool:
        try:
            with urllib.request.urlopen(proc.ready_url, timeout=PROBE_TIMEOUT_S) as response:
                body = json.loads(response.read() or b"{}")
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError, ValueError):
            return False
        if proc.name == "frontend":
            return any(m.get("id") == self.plan.model for m in body.get("data", []))
        return body.get("status") == "ready"

    def _wait_registered(self, count: int, deadline: float) -> None:
        """Until the discovery store lists `count` worker instances (what the frontend routes to)."""
        assert self.tmpdir is not None
        store = self.tmpdir / "dynamo_store_kv" / "v1" / "instances"
        while time.monotonic() < deadline:
            if len(self.instances(store)) >= count:
                return
            time.sleep(POLL_INTERVAL_S)

    @staticmethod
    def instances(store: Path) -> list[str]:
        endpoint = f"{WorkerOptions.namespace}%2F{WorkerOptions.component}%2F{WorkerOptions.endpoint}%2F"
        return sorted(p.name for p in store.glob(f"{endpoint}*")) if store.is_dir() else []

    # -- run -----------------------------------------------------------------------------------------------------
    def log_tail(self, name: str, lines: int = 20) -> str:
        path = (self.log_dir or Path()) / f"{name}.log"
        if not path.is_file():
            return ""
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])

    def alive(self) -> dict[str, bool]:
        return {name: p.poll() is None for name, p in self.processes.items()}

    def worker_pids(self) -> dict[str, int]:
        """The worker processes themselves (the supervisors' children), for a kill test or a look with ps."""
        out = {}
        for name, p in self.processes.items():
            members = [pid for pid in group_members(p.pid) if pid != p.pid]
            if members:
                out[name] = min(members)
        return out

    def wait(self) -> int:
        """Block until the frontend exits (a signal to this process stops it via stop()); returns its code."""
        return self.processes["frontend"].wait()

    # -- stop ----------------------------------------------------------------------------------------------------
    def stop(self) -> dict[str, int | None]:
        """Stop the workers (SIGTERM: each unregisters, drains what it runs through the still-running frontend,
        then cleans up), then the frontend; SIGKILL whatever is left after the stop timeout; remove the private
        TMPDIR. Returns each process's exit code. Idempotent."""
        codes: dict[str, int | None] = {}
        workers = [n for n in self.processes if n != "frontend"]
        for group in (workers, [n for n in self.processes if n == "frontend"]):
            for name in group:
                if self.processes[name].poll() is None:
                    self.processes[name].send_signal(signal.SIGTERM)
            deadline = time.monotonic() + self.stop_timeout + STOP_MARGIN_S
            for name in group:
                proc = self.processes[name]
                try:
                    codes[name] = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    codes[name] = None
                # whatever of its process group is left (past the timeout, or its supervisor was killed)
                kill_group_except(proc.pid, keep=-1)
                if codes[name] is None:
                    codes[name] = proc.wait()
        if self.tmpdir is not None:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = None
        return codes

    def __enter__(self) -> DynamoDeployment:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
