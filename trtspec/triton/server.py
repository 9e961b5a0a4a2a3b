"""Start a real tritonserver on a model repository: plan the launch (pure), then run it as a context manager.

The binary is NVIDIA's (`/opt/tritonserver`, in the TensorRT-LLM containers) when present, else the one bundled in
nvidia-pytriton. The bundled one needs three things set up, all done here without touching the installed package:
a backend directory whose `python/` holds the Python-backend stub built for *this* interpreter's version, the
bundled libraries on LD_LIBRARY_PATH, and this interpreter's own libpython directory (sysconfig LIBDIR) first on
LD_LIBRARY_PATH so the stub does not pick up a system libpython of another patch version. Only 127.0.0.1 and free
ports are used unless asked otherwise. Imports nothing heavy.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from trtspec.contracts.repository import RepoRecord
from trtspec.errors import ServerError, ToolNotFoundError, UsageError
from trtspec.ports import HOST, check_ports_free, free_ports, port_owner, process_group
from trtspec.supervise import LOG_NAME, kept_log

POLL_INTERVAL_S = 0.25  # readiness polling while tritonserver starts
EXIT_TIMEOUT_S = 10.0  # tritonserver --exit-timeout-secs: how long it drains in-flight requests when asked to stop
STOP_TIMEOUT_S = EXIT_TIMEOUT_S + 2.0  # then it is killed: past its exit timeout it drains nothing more
PROBE_TIMEOUT_S = 2.0  # one readiness probe (HTTP /v2/health/ready)
STOP_MARGIN_S = 5.0  # past the supervisor's own stop timeout, its whole process group is killed

# Log fragments after which tritonserver keeps running but never becomes ready (strict readiness).
FATAL_LOG_MARKERS = ("failed to load", "Failed to preinitialize", "failed to initialize", "Traceback (most recent")


@dataclass(frozen=True)
class Ports:
    grpc: int = 8001
    http: int = 8000
    metrics: int = 8002

    def check_free(self, host: str = HOST) -> None:
        """Refuse ports another process listens on, naming the port and its owner (before anything starts)."""
        check_ports_free({"--grpc-port": self.grpc, "--http-port": self.http, "--metrics-port": self.metrics}, host)

    @classmethod
    def free(cls) -> Ports:
        """Three distinct free ports on 127.0.0.1 (held open together while choosing, then released)."""
        grpc, http, metrics = free_ports(3)
        return cls(grpc=grpc, http=http, metrics=metrics)


@dataclass(frozen=True)
class LaunchPlan:
    """The exact command, and the directories to prepend to environment variables (LD_LIBRARY_PATH, PATH)."""

    argv: list[str]
    env_prepend: dict[str, list[str]] = field(default_factory=dict)
    env_set: dict[str, str] = field(default_factory=dict)
    world_size: int = 1
    note: str = ""

    def environment(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """`base` (default os.environ) with the plan's additions applied."""
        env = dict(os.environ if base is None else base)
        for name, dirs in self.env_prepend.items():
            env[name] = os.pathsep.join([*dirs, *([env[name]] if env.get(name) else [])])
        return {**env, **self.env_set}

    def shell(self) -> str:
        """A copy-pasteable shell line (environment additions first)."""
        parts = [f"{k}={shlex.quote(v)}" for k, v in self.env_set.items()]
        parts += [f"{k}={shlex.quote(os.pathsep.join(dirs))}:${k}" for k, dirs in self.env_prepend.items()]
        return " ".join([*parts, shlex.join(self.argv)])


def find_tritonserver() -> Path | None:
    """A tritonserver binary: on PATH / NVIDIA's container first, else the one bundled in nvidia-pytriton."""
    for candidate in (shutil.which("tritonserver"), "/opt/tritonserver/bin/tritonserver"):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    try:
        spec = importlib.util.find_spec("pytriton")
    except (ImportError, ValueError):
        spec = None
    if spec and spec.submodule_search_locations:
        binary = Path(next(iter(spec.submodule_search_locations))) / "tritonserver" / "bin" / "tritonserver"
        if binary.is_file():
            return binary
    return None


def pytriton_root() -> Path | None:
    """The `pytriton` package directory, or None when nvidia-pytriton is not installed."""
    import importlib.util

    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def is_bundled(binary: Path) -> bool:
    root = pytriton_root()
    return root is not None and root.resolve() in binary.resolve().parents  # a venv reached through a symlink too


def prepare_bundled_backends(dest: Path) -> Path:
    """A backend directory for pytriton's tritonserver: `python/` = its backend + the stub for this Python.

    Symlinks only; the installed package is left untouched. Returns `dest`.
    """
    root = pytriton_root()
    if root is None:
        raise ToolNotFoundError("nvidia-pytriton is not installed", hint="pip install nvidia-pytriton")
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = root / "tritonserver" / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.is_file():
        raise ToolNotFoundError(f"nvidia-pytriton has no Python-backend stub for Python {version} ({stub})",
                                hint="use a Python version pytriton ships a stub for (3.8-3.13)")
    python_dir = dest / "python"
    python_dir.mkdir(parents=True, exist_ok=True)
    for src in [*(root / "tritonserver" / "backends" / "python").iterdir(), stub]:
        if src.is_file():
            link = python_dir / src.name
            if not link.exists():
                link.symlink_to(src)
    return dest


def bundled_env_prepend() -> dict[str, list[str]]:
    """What the bundled binary needs first on LD_LIBRARY_PATH (this interpreter's libpython dir, pytriton's
    libraries) and PATH (this interpreter's bin: the stub's embedded Python finds this environment through it)."""
    root = pytriton_root()
    libs = [str(sysconfig.get_config_var("LIBDIR") or "")]
    if root is not None:
        libs.append(str(root.parent / "nvidia_pytriton.libs"))
    return {"LD_LIBRARY_PATH": [p for p in libs if p], "PATH": [str(Path(sys.executable).parent)]}


def plan_launch(
    repo: Path,
    *,
    ports: Ports,
    binary: Path | None = None,
    backend_dir: Path | None = None,
    load_models: Sequence[str] | None = None,
    host: str = HOST,
    log_verbose: int = 0,
    record: RepoRecord | None = None,
) -> LaunchPlan:
    """The tritonserver command for `repo` (reads only the repository's trtspec-repo.json and locates the binary).

    Args:
        load_models: load only these (others, e.g. tensorrt_llm on CPU, stay unloaded); None = all (`--load-model=*`).
            Either way the server runs in explicit model-control mode, so models can be reloaded while it serves.
        backend_dir: where the bundled binary's backends are prepared (see `prepare_bundled_backends`).
        record: the repository's record (read from `repo` when None; a repository without one is launched as is).
    """
    binary = binary or find_tritonserver()
    if binary is None:
        raise ToolNotFoundError("no tritonserver binary found",
                                hint="pip install nvidia-pytriton, or run inside nvcr.io/nvidia/tritonserver:*-trtllm-*")
    record = read_repo_record(repo) if record is None else record
    argv = [str(binary), f"--model-repository={Path(repo).resolve()}",
            f"--http-address={host}", f"--http-port={ports.http}",
            f"--grpc-address={host}", f"--grpc-port={ports.grpc}",
            f"--metrics-address={host}", f"--metrics-port={ports.metrics}",
            "--allow-metrics=true", f"--exit-timeout-secs={EXIT_TIMEOUT_S:g}", f"--log-verbose={log_verbose}"]
    # Explicit model control always: every model of the repository (`*`) unless asked for some, and the
    # model-control API (load with a config override, new versions) stays open: `trtspec set-k`, `rollout-draft`.
    argv += ["--model-control-mode=explicit", *(f"--load-model={m}" for m in (["*"] if load_models is None else load_models))]
    env_prepend: dict[str, list[str]] = {}
    # The Python-backend stubs inherit this environment; without a UTF-8 locale their open()/read_text() default to
    # ASCII and fail on tokenizer files.
    env_set: dict[str, str] = {"PYTHONUTF8": "1"}
    notes = []
    if is_bundled(binary):
        env_prepend = bundled_env_prepend()
        if backend_dir is not None:
            argv.append(f"--backend-directory={backend_dir}")
        else:
            notes.append("nvidia-pytriton's binary also needs --backend-directory=DIR whose python/ holds the stub "
                         "for this Python; `trtspec serve` prepares one")
    loads_engines = load_models is None or "tensorrt_llm" in load_models
    tensorrtllm = record is not None and record.backend == "tensorrtllm"
    world_size = record.world_size if record is not None and loads_engines else 1
    if tensorrtllm and world_size > 1:
        # Leader mode: one tritonserver per MPI rank; rank 0 serves, the other ranks only load the TRT-LLM models.
        ranks = [argv + ["--backend-config=python,shm-region-prefix-name=prefix0_"]]
        for rank in range(1, world_size):
            ranks.append([str(binary), f"--model-repository={Path(repo).resolve()}", "--model-control-mode=explicit",
                          "--load-model=tensorrt_llm", "--disable-auto-complete-config",
                          f"--backend-config=python,shm-region-prefix-name=prefix{rank}_"])
        mpi = ["mpirun", "--allow-run-as-root"]
        for i, rank_argv in enumerate(ranks):
            mpi += ([":"] if i else []) + ["-n", "1", *rank_argv]
        argv = mpi
        notes.append(f"TensorRT-LLM engines with world size {world_size} (TP x PP): one tritonserver per rank via "
                     "mpirun")
    elif tensorrtllm and loads_engines and "tensorrt_llm_draft" in record.models:
        env_set["TRTLLM_ORCHESTRATOR"] = "1"  # draft + target engines in one server: orchestrator mode
        notes.append("draft-target: orchestrator mode (TRTLLM_ORCHESTRATOR=1) serves both engines from one process")
    return LaunchPlan(argv=argv, env_prepend=env_prepend, env_set=env_set, world_size=world_size,
                      note="; ".join(notes))


def read_repo_record(repo: Path) -> RepoRecord | None:
    """`trtspec-repo.json` written by `trtspec deploy` (None for a repository trtspec did not render)."""
    return RepoRecord.read(repo)


def check_repository(repo: Path, record: RepoRecord | None, load_models: Sequence[str] | None = None) -> None:
    """Refuse a repository tritonserver would fail to load: a model its record lists, or one asked for with
    --load-model, without a `config.pbtxt`."""
    wanted = list(load_models) if load_models else list(record.models if record is not None else ())
    for name in wanted:
        if not (Path(repo) / name / "config.pbtxt").is_file():
            option = "--load-model" if load_models else "model"
            raise UsageError(f"{option} {name}: {Path(repo) / name / 'config.pbtxt'} does not exist",
                             hint="re-render the repository with `trtspec deploy --force`, or name a model it has")


class TritonServer:
    """A tritonserver process serving `repo`: `with TritonServer(repo) as server: server.grpc_url ...`.

    Starts on free 127.0.0.1 ports unless `ports` is given (given ports are checked first: a busy one is refused with
    its owner), waits until /v2/health/ready answers 200 from *this* launch's server (the port's owner is in its
    process group), or raises ServerError with the log tail. tritonserver runs under `supervise` (own process group,
    dies with this process even on SIGKILL, removes its work dir); on exit SIGTERM, then SIGKILL after
    `stop_timeout` seconds. Start it from the main thread: Linux ties the parent-death signal to the starting thread.
    """

    def __init__(self, repo: Path, *, ports: Ports | None = None, load_models: Sequence[str] | None = None,
                 binary: Path | None = None, startup_timeout: float = 180.0, stop_timeout: float = STOP_TIMEOUT_S,
                 log_path: Path | None = None, log_verbose: int = 0, env: dict[str, str] | None = None,
                 host: str = HOST) -> None:
        self.repo = Path(repo).resolve()
        self.host = host
        self.ports = ports or Ports.free()
        self.load_models = load_models
        self.binary = binary
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.log_verbose = log_verbose
        self.extra_env = env or {}
        self._workdir: Path | None = None
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None
        self.plan: LaunchPlan | None = None
        self._stop_deadline: float | None = None  # monotonic time from which a stopping server is killed

    @property
    def grpc_url(self) -> str:
        return f"{self._client_host}:{self.ports.grpc}"

    @property
    def http_url(self) -> str:
        return f"http://{self._client_host}:{self.ports.http}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self._client_host}:{self.ports.metrics}/metrics"

    @property
    def _client_host(self) -> str:
        return HOST if self.host in ("0.0.0.0", "") else self.host

    def start(self) -> TritonServer:
        self.ports.check_free(self.host)
        self._workdir = work = Path(tempfile.mkdtemp(prefix="trtspec-triton-"))
        backend_dir = None
        binary = self.binary
        if binary is None:
            binary = find_tritonserver()
        if binary is not None and is_bundled(binary):
            backend_dir = prepare_bundled_backends(work / "backends")
        self.plan = plan_launch(self.repo, ports=self.ports, binary=binary, backend_dir=backend_dir,
                                load_models=self.load_models, log_verbose=self.log_verbose, host=self.host)
        self.log_path = self.log_path or work / LOG_NAME
        log = open(self.log_path, "wb")  # noqa: SIM115 - the child owns it for its lifetime
        env = {**self.plan.environment(), **self.extra_env}
        # The supervisor (own session = own process group) stops tritonserver and its stubs and removes the work dir
        # when asked, and when this process dies, even by SIGKILL (see trtspec/supervise.py).
        supervisor = [sys.executable, "-m", "trtspec.supervise", "--workdir", str(work), "--stop-timeout",
                      str(self.stop_timeout), "--parent", str(os.getpid()), "--", *self.plan.argv]
        self.process = subprocess.Popen(supervisor, env=env, stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        process = self._started()
        while time.monotonic() < deadline:
            if process.poll() is not None:
                tail = self.log_tail()
                self._cleanup()
                raise ServerError(f"tritonserver exited with code {process.returncode} before it was ready:\n"
                                  f"{tail}", hint="read the log above; `trtspec doctor` checks the installation")
            if self.ready() and self._owns(self.ports.http):
                return
            fatal = self._fatal_log_lines()
            if fatal:
                self.stop()
                raise ServerError("a model failed to load:\n" + "\n".join(fatal),
                                  hint="fix the model (see the lines above); `trtspec doctor` checks the installation")
            time.sleep(POLL_INTERVAL_S)
        tail = self.log_tail()
        self.stop()
        raise ServerError(f"tritonserver was not ready after {self.startup_timeout:.0f} s:\n{tail}",
                          hint="a model failed to load or is slow to start; see the log")

    def _started(self) -> subprocess.Popen[bytes]:
        if self.process is None:
            raise ServerError("tritonserver has not been started", hint="call start() (or use `with TritonServer(...)`)")
        return self.process

    def _fatal_log_lines(self) -> list[str]:
        """Log lines that mean the server will never become ready (a model failed to load or initialize)."""
        if self.log_path is None or not Path(self.log_path).is_file():
            return []
        text = Path(self.log_path).read_text(encoding="utf-8", errors="replace")
        return [line.strip() for line in text.splitlines() if any(m in line for m in FATAL_LOG_MARKERS)]

    def _owns(self, port: int) -> bool:
        """Whether the process listening on `port` is this launch's tritonserver (its process group is ours)."""
        owner = port_owner(port)
        return owner is None or process_group(owner[0]) == self._started().pid  # None: /proc unreadable, trust it

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.http_url}/v2/health/ready", timeout=PROBE_TIMEOUT_S) as response:
                return response.status == 200
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            return False

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        if self.log_path is None or not Path(self.log_path).is_file():
            return ""
        return "\n".join(Path(self.log_path).read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])

    def stop(self, *, wait: bool = True) -> int | None:
        """SIGTERM (Triton drains in-flight requests), then SIGKILL after stop_timeout. Returns the exit code.

        `wait=False` only asks: Triton takes a few seconds to unload its models and exit, which a caller with other
        work (a test run starting its next server) need not wait for; `join()` then waits and cleans up (None)."""
        if self.process is not None and self.process.poll() is not None and self._workdir is not None:
            self._report_crash(self.process.returncode)
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)  # the supervisor: SIGTERM to tritonserver, SIGKILL after timeout
            self._stop_deadline = time.monotonic() + self.stop_timeout + STOP_MARGIN_S
        return self.join() if wait else None

    def join(self) -> int | None:
        """After stop(wait=False): wait for the supervisor (SIGKILL to its group past the stop timeout), clean up,
        and return the exit code."""
        code = None
        if self.process is not None:
            deadline = self._stop_deadline
            try:
                code = self.process.wait(timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                code = self.process.wait()
        self._cleanup()
        return code

    def _report_crash(self, code: int) -> None:
        """The server exited before anyone stopped it: say so with where its log was kept (a warning, so a test
        run's summary shows it even when the test that noticed only saw a refused connection)."""
        import warnings

        kept = Path(kept_log(str(self._workdir)))
        log = kept if kept.is_file() else self.log_path
        warnings.warn(f"tritonserver (repository {self.repo}) exited by itself with code {code}; its log: {log}",
                      RuntimeWarning, stacklevel=3)

    def _cleanup(self) -> None:
        """Remove the work dir (prepared backends; the default log lives there too, so read it before). The
        supervisor removes it too, when the server is gone."""
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    def wait(self) -> int:
        """Block until the server exits (it stops on SIGTERM to `process`, the supervisor); clean up after it."""
        process = self._started()
        try:
            return process.wait()
        finally:
            self._cleanup()

    def __enter__(self) -> TritonServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
