"""The README as a test (tests/test_readme_commands.py, tests/test_readme_demos.py): every command of its quick tour
(the ```bash block after "## Quick tour", the operate steps included) runs as written, in order, and must exit 0.

- Parsing: `\\` continuations joined, comments dropped (shlex), one command a line, README order. `NEEDS_TRTLLM` names
  the only commands skipped (they need TensorRT-LLM or a GPU); a command added to the README runs by default.
- Where: a temp directory holding copies of build_configs/ and scripts/ (so relative outputs, and the scripts' own
  `out/` default, land in it, not in the checkout); `trtspec` and `python` are this environment's. The demo scripts
  (`python scripts/...`: each builds, sweeps, deploys and serves on its own, on free ports, in its own --work) depend
  on no command before them and none after them reads what they write: tests/test_readme_demos.py runs them in a
  temp directory of their own, so that pytest-xdist runs them beside the rest of the tour (test_readme_commands.py).
- How: `trtspec ...` runs in-process (tests/cli_checks.run_cli: no interpreter and torch import per command), a
  `> FILE` redirection writes its stdout to FILE. Everything else (curl, python scripts, pipelines) runs in bash with
  `pipefail`, and curl with `--fail-with-body`, so an HTTP error answer fails as it should.
- Servers: `trtspec serve ...` starts in the background and is ready when it prints its ready line; a later server
  that needs one of its ports stops it first (what a user does with Ctrl-C in the other terminal). `trtspec monitor`
  without --once/--duration runs until Ctrl-C: it gets SIGINT after its first refresh. Each is stopped by its PID
  (SIGINT, then SIGKILL of the process group the test started) at the module's end, also when a command failed.
- Ports: the README's fixed ports (8000-8002, Dynamo's 8081 and up) are used as written; no other test module binds
  ports below 10000 (tests/servers.py and trtspec/ports.py pick free ephemeral ports, the Dynamo tests random ports
  in 10000-32767). A file lock in the system temp directory keeps two README runs on one machine (two checkouts'
  `make test`) apart: the run that does not get it, and any run that finds a README port taken by another process,
  moves those servers to free ports and rewrites the commands' `localhost:PORT` (`port_rewrite`).
- After a failure the rest of the module's commands are skipped naming the failed one (they run in order; the run is
  red). Each module writes what every command cost (wall, CPU with the children it waited for) to its temp
  directory's readme-spent.txt and prints it (`pytest -s`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import resource
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# The only commands not run here: they need TensorRT-LLM (or a GPU), which no CPU machine has.
NEEDS_TRTLLM = {
    "trtspec build CONFIG --only engines": "trtllm-build runs only in the target's TensorRT-LLM container",
}
OPERATORS = ("|", ">")
SERVER_READY = re.compile(r"^(tritonserver ready|Dynamo ready): ", re.MULTILINE)
COMMAND_LIMIT_S = 300.0  # one command (a server: until ready)
STOP_LIMIT_S = 30.0  # a server's stop after SIGINT, before its process group is killed
TRITON_PORTS = {"--http-port": 8000, "--grpc-port": 8001, "--metrics-port": 8002}
DYNAMO_PORTS = {"--http-port": 8000, "--system-port": 8081}  # worker i: --system-port + i
LOCK = Path(tempfile.gettempdir()) / "trtspec-readme-ports.lock"
CTRL_C_EXITS = (0, 128 + signal.SIGINT)  # docs/guarantees.md: a server stops with 0, a watch is `Aborted.` (130)


def ctrl_c_default() -> None:
    """In a started command: SIGINT as in a terminal. A process started in the background by a non-interactive shell
    (as CI may start pytest) ignores SIGINT, and a Python started with it ignored never raises KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def quick_tour(text: str) -> list[list[str]]:
    """The commands of the README's quick tour block: each a token list (`|` and `>` are tokens of their own)."""
    after = re.split(r"^## Quick tour\n", text, maxsplit=1, flags=re.MULTILINE)[1]
    block = after.split("```bash\n", 1)[1].split("\n```", 1)[0]
    commands = []
    for line in block.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars="|>")
        lexer.whitespace_split = True  # words as the shell splits them; `#` starts a comment
        tokens = list(lexer)
        if tokens:
            commands.append(tokens)
    return commands


def spelled(tokens: list[str]) -> str:
    """The command as a shell line (operators unquoted)."""
    return " ".join(t if t in OPERATORS else shlex.quote(t) for t in tokens)


def option(tokens: list[str], name: str, default: int) -> int:
    return int(tokens[tokens.index(name) + 1]) if name in tokens else default


def server_ports(tokens: list[str]) -> dict[str, list[int]]:
    """A `trtspec serve` command's ports by option (the system ports of every Dynamo worker)."""
    if "--dynamo" in tokens:
        workers = option(tokens, "--dynamo", 1)
        system = option(tokens, "--system-port", DYNAMO_PORTS["--system-port"])
        return {"--http-port": [option(tokens, "--http-port", DYNAMO_PORTS["--http-port"])],
                "--system-port": list(range(system, system + workers))}
    return {name: [option(tokens, name, default)] for name, default in TRITON_PORTS.items()}


def is_server(tokens: list[str]) -> bool:
    return tokens[:2] == ["trtspec", "serve"] and "--dry-run" not in tokens


def runs_until_stopped(tokens: list[str]) -> bool:
    """`trtspec monitor` watches until Ctrl-C unless told to stop."""
    return tokens[:2] == ["trtspec", "monitor"] and "--once" not in tokens and "--duration" not in tokens


def port_rewrite(commands: list[list[str]], moved: dict[int, int]) -> list[list[str]]:
    """The commands with README ports moved (`moved`: README port -> free port): a server gets the option for each of
    its moved ports, every `localhost:PORT` names the new port."""
    out = []
    for tokens in commands:
        tokens = [re.sub(r"\blocalhost:(\d+)\b", lambda m: f"localhost:{moved.get(int(m[1]), int(m[1]))}", t)
                  for t in tokens]
        if is_server(tokens):
            for name, ports in server_ports(tokens).items():
                if ports[0] in moved and name not in tokens:
                    tokens += [name, str(moved[ports[0]])]
        out.append(tokens)
    return out


def is_free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_run(count: int) -> int:
    """The first of `count` consecutive free ports below 32768 (Dynamo's system ports are 16-bit signed)."""
    from trtspec.ports import free_ports

    while True:
        first = free_ports(1, below=32768 - count)[0]
        if all(is_free(first + i) for i in range(count)):
            return first


def moved_ports(commands: list[list[str]], owned: bool) -> dict[int, int]:
    """README port -> free port for each server's ports that are taken (all of them when `owned` is False: another
    README run holds the lock and may take them any moment). A Dynamo deployment's system ports move together."""
    moved: dict[int, int] = {}
    for tokens in filter(is_server, commands):
        for ports in server_ports(tokens).values():
            if ports[0] in moved or (owned and all(map(is_free, ports))):
                continue
            first = free_run(len(ports))
            moved |= {port: first + i for i, port in enumerate(ports)}
    return moved


@dataclass
class Background:
    """A command the tour left running: its process (own process group) and output file."""

    tokens: list[str]
    process: subprocess.Popen
    log: Path
    ports: set[int] = field(default_factory=set)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.is_file() else ""

    def stop(self) -> int | None:
        """SIGINT (Ctrl-C), then SIGKILL of its process group past STOP_LIMIT_S; its exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                return self.process.wait(STOP_LIMIT_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
        return self.process.wait()


@dataclass
class Tour:
    """The temp directory the tour runs in, what it left running, and what it spent."""

    work: Path
    env: dict[str, str]
    moved: dict[int, int]
    running: list[Background] = field(default_factory=list)
    failed: str | None = None
    spent: list[tuple[str, float, float]] = field(default_factory=list)  # (command, wall s, CPU s incl. children)

    def run(self, tokens: list[str]) -> None:
        if is_server(tokens):
            self.serve(tokens)
        elif runs_until_stopped(tokens):
            self.watch_then_stop(tokens)
        elif tokens[0] == "trtspec" and "|" not in tokens:
            self.in_process(tokens)
        else:
            self.shell(tokens)

    def in_process(self, tokens: list[str]) -> None:
        from tests.cli_checks import run_cli

        argv, target = (tokens[1:-2], tokens[-1]) if tokens[-2:-1] == [">"] else (tokens[1:], None)
        before = os.getcwd()
        os.chdir(self.work)
        try:
            code, out, err = run_cli(argv, limit=COMMAND_LIMIT_S)
        finally:
            os.chdir(before)
        if target is not None:
            (self.work / target).write_text(out)
        self.check(tokens, code, out + err)

    def shell(self, tokens: list[str]) -> None:
        line = 'curl() { command curl --fail-with-body "$@"; }; ' + spelled(tokens)
        proc = subprocess.run(["bash", "-o", "pipefail", "-c", line], cwd=self.work, env=self.env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=COMMAND_LIMIT_S)
        self.check(tokens, proc.returncode, proc.stdout)

    def start(self, tokens: list[str], name: str) -> Background:
        log = self.work / f".readme-{name}-{len(self.spent)}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(tokens, cwd=self.work, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                       start_new_session=True, preexec_fn=ctrl_c_default)
        job = Background(tokens, process, log)
        self.running.append(job)
        return job

    def serve(self, tokens: list[str]) -> None:
        ports = {p for group in server_ports(tokens).values() for p in group}
        for job in [j for j in self.running if j.ports & ports]:  # Ctrl-C in the other terminal
            self.stop(job)
        job = self.start(tokens, "server")
        job.ports = ports
        deadline = time.monotonic() + COMMAND_LIMIT_S
        while not SERVER_READY.search(job.output()):
            if job.process.poll() is not None or time.monotonic() > deadline:
                code = job.process.poll()
                self.stop(job)
                self.check(tokens, 1 if code in (None, 0) else code, f"{job.output()}\n(not ready)")
            time.sleep(0.2)

    def watch_then_stop(self, tokens: list[str]) -> None:
        """Until its first refresh, then Ctrl-C: click's `Aborted.`, exit 130, is how it stops."""
        job = self.start(tokens, "watch")
        deadline = time.monotonic() + COMMAND_LIMIT_S
        while not job.output().strip() and job.process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        running = job.process.poll() is None
        code = job.stop()
        self.running.remove(job)
        self.check(tokens, 0 if running and code in CTRL_C_EXITS else code or 1, job.output())

    def stop(self, job: Background) -> None:
        code = job.stop()
        self.running.remove(job)
        assert code in CTRL_C_EXITS, f"{spelled(job.tokens)} exited {code} on Ctrl-C:\n{job.output()[-4000:]}"

    def check(self, tokens: list[str], code: int | None, output: str) -> None:
        if code != 0:
            self.failed = spelled(tokens)
            pytest.fail(f"README command failed (exit {code}): {spelled(tokens)}\n{output[-6000:]}", pytrace=False)


def cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def all_commands() -> list[list[str]]:
    return quick_tour(README.read_text())


def is_demo(tokens: list[str]) -> bool:
    """A demo script: self-contained (its own build, sweeps, servers on free ports, --work), run apart."""
    return tokens[0] == "python" and len(tokens) > 1 and tokens[1].startswith("scripts/")


@contextlib.contextmanager
def tour_in(tmp_path_factory: pytest.TempPathFactory, name: str,
            commands: list[list[str]]) -> Iterator[Tour]:
    """A Tour in a fresh temp directory with copies of build_configs/ and scripts/, holding the README ports' lock
    (or with `commands`' servers moved to free ports); stops what is left running at the end."""
    work = tmp_path_factory.mktemp(name)
    for folder in ("build_configs", "scripts"):
        shutil.copytree(ROOT / folder, work / folder, ignore=shutil.ignore_patterns("__pycache__"))
    env = dict(os.environ, PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    with LOCK.open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            owned = True
        except BlockingIOError:
            owned = False
        state = Tour(work, env, moved_ports(commands, owned))
        try:
            yield state
        finally:
            for job in reversed(state.running):
                job.stop()
            summary = "\n".join(f"{wall:7.1f} s {cpu:7.1f} cpu-s  {line}" for line, wall, cpu in state.spent)
            (work / "readme-spent.txt").write_text(summary + "\n")
            print(f"\nREADME quick tour ({name}), per command (wall, CPU with children):\n{summary}")


def run_command(tour: Tour, commands: list[list[str]], index: int) -> None:
    """README command `index` of `commands` (its ports moved as the tour's are), or its skip."""
    tokens = port_rewrite(commands, tour.moved)[index]
    line = " ".join(commands[index])
    if line in NEEDS_TRTLLM:
        pytest.skip(f"needs TensorRT-LLM: {NEEDS_TRTLLM[line]}")
    if tour.failed:
        pytest.skip(f"the tour runs in order and `{tour.failed}` failed")
    wall, cpu = time.monotonic(), cpu_seconds()
    try:
        tour.run(tokens)
    except BaseException:
        tour.failed = tour.failed or spelled(tokens)
        raise
    finally:
        tour.spent.append((spelled(tokens), time.monotonic() - wall, cpu_seconds() - cpu))
