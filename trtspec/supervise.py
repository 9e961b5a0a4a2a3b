"""The supervisor between `trtspec serve` (or any TritonServer user) and tritonserver: nothing is left behind.

`python -m trtspec.supervise --workdir DIR --stop-timeout S -- ARGV...` runs ARGV (tritonserver) as its
child, in the process group the launcher gave it (its own session). It guarantees, whatever happens to the launcher:
- the launcher dies, even by SIGKILL: Linux delivers SIGTERM here (`PR_SET_PDEATHSIG`), and the supervisor stops the
  server as if asked to; the supervisor itself dies (SIGKILL): Linux delivers SIGTERM to the server the same way;
- SIGTERM, SIGINT or SIGHUP: forwarded to tritonserver as SIGTERM (Triton drains in-flight requests); whatever of the
  process group is still running after the stop timeout (tritonserver, its backend stubs) is killed;
- a drained server is not waited for: tritonserver 2.51 unloads its models, then its gRPC shutdown waits for every
  open client stream, even an idle one, until killed. Once the Python backend stubs it had when the stop began have
  all exited (the drain and the unload are done), it gets DRAINED_GRACE_S to exit, then it is killed and the stop
  counts as clean (exit 0);
- when the launcher is gone (nobody waits for the drain; the ports must come free for a restart) the whole stop is
  capped at ORPHAN_STOP_S;
- the work directory (prepared backends, the default log) is removed once the server is gone; when the server
  exited by itself (a crash: nobody asked it to stop), its log is kept first, at `kept_log(DIR)` (DIR + ".log").
It exits with tritonserver's exit code. Pure standard library: it starts in a fraction of a second.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

PR_SET_PDEATHSIG = 1  # linux/prctl.h
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
WAKE_S = 1.0  # the longest sleep between checks when no signal comes (a stop timeout is met to 0.05 s)
STOPPING_WAKE_S = 0.25  # ... and while a stop is under way (the stubs are watched)
DRAINED_GRACE_S = 2.0  # a server whose stubs have exited normally exits within ~1 s (Triton checks once a second)
ORPHAN_STOP_S = 6.0  # the stop timeout when the launcher died
STUB = "triton_python_backend_stub"  # the executable of Triton's Python backend, one process per model instance
LOG_NAME = "tritonserver.log"  # the server's default log, inside the work directory (TritonServer writes it there)


def set_parent_death_signal(signum: int = signal.SIGTERM) -> bool:
    """Ask Linux to send `signum` to this process when its parent dies; False where that is not available."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def group_members(pgid: int) -> list[int]:
    """PIDs of the live processes in process group `pgid` (Linux /proc; [] elsewhere)."""
    pids = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()  # after "pid (comm)": state ppid pgrp ...
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            pids.append(int(entry))
    return pids


def backend_stubs(pgid: int) -> set[int]:
    """PIDs of the live Python backend stubs in process group `pgid`."""
    out = set()
    for pid in group_members(pgid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if STUB.encode() in f.read().split(b"\0", 1)[0]:
                    out.add(pid)
        except OSError:
            continue
    return out


def kill_group_except(pgid: int, keep: int) -> None:
    for pid in group_members(pgid):
        if pid != keep:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def kept_log(workdir: str) -> str:
    """Where the log of a server that exited by itself is kept (beside the removed work directory)."""
    return workdir.rstrip("/") + ".log"


def run(argv: Sequence[str], workdir: str | None, stop_timeout: float, parent: int) -> int:
    # 1. die with the launcher (it may already be gone: then stop at once)
    stop_requested = False

    def request_stop(_signum: int, _frame: object) -> None:
        nonlocal stop_requested
        stop_requested = True

    for signum in STOP_SIGNALS:
        signal.signal(signum, request_stop)
    set_parent_death_signal(signal.SIGTERM)
    if os.getppid() != parent:
        stop_requested = True
    # 2. run the server; forward a stop request once, then escalate after the timeout
    # the server stops with its supervisor too, even when the supervisor is SIGKILLed
    child = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, preexec_fn=set_parent_death_signal)
    # Asleep until something happens: the stop signals and SIGCHLD are blocked (after the child started, so it does not
    # inherit the mask) and taken by sigtimedwait. Popen.wait(timeout) polls instead (~100 wake-ups a second: 1-2% of
    # a core beside the server, measured by scripts/bench.py --section ensemble).
    sleeper = hasattr(signal, "sigtimedwait")
    if sleeper:
        signal.pthread_sigmask(signal.SIG_BLOCK, {*STOP_SIGNALS, signal.SIGCHLD})
    deadline = None
    stubs: set[int] = set()  # the server's backend stubs when the stop began
    drained = False  # they have all exited: only the server's transport shutdown is left
    while child.poll() is None:
        if stop_requested and deadline is None:
            child.send_signal(signal.SIGTERM)
            orphan = os.getppid() != parent
            deadline = time.monotonic() + (min(stop_timeout, ORPHAN_STOP_S) if orphan else stop_timeout)
            stubs = backend_stubs(os.getpgrp())
        if deadline is not None and stubs and not drained and not stubs & backend_stubs(os.getpgrp()):
            drained = True
            deadline = min(deadline, time.monotonic() + DRAINED_GRACE_S)
        if deadline is not None and time.monotonic() > deadline:
            child.kill()
        if sleeper:
            wait = WAKE_S if deadline is None else min(STOPPING_WAKE_S, max(0.05, deadline - time.monotonic()))
            info = signal.sigtimedwait({*STOP_SIGNALS, signal.SIGCHLD}, wait)
            stop_requested = stop_requested or (info is not None and info.si_signo in STOP_SIGNALS)
            continue
        try:
            child.wait(timeout=0.1)
        except subprocess.TimeoutExpired:
            pass
    # 3. nothing of the group survives the server (backend stubs), and the work directory goes
    kill_group_except(os.getpgrp(), keep=os.getpid())
    if workdir:
        log = os.path.join(workdir, LOG_NAME)
        if not stop_requested and os.path.isfile(log):
            print(f"trtspec supervise: tritonserver exited by itself with code {child.returncode}; log kept at "
                  f"{kept_log(workdir)}", file=sys.stderr, flush=True)
            shutil.copyfile(log, kept_log(workdir))
        shutil.rmtree(workdir, ignore_errors=True)
    if drained and child.returncode == -signal.SIGKILL:
        print("trtspec supervise: tritonserver had drained and unloaded its models; it was killed in its transport "
              "shutdown (an open client stream holds it)", file=sys.stderr, flush=True)
        return 0
    return child.returncode if child.returncode >= 0 else 128 - child.returncode


def main(args: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trtspec.supervise")
    parser.add_argument("--workdir", help="directory to remove once the server is gone")
    parser.add_argument("--stop-timeout", type=float, default=20.0)
    parser.add_argument("--parent", type=int, default=None, help="the launcher's PID (stop at once if it is gone)")
    parser.add_argument("argv", nargs="+")
    ns = parser.parse_args(args)
    return run(ns.argv, ns.workdir, ns.stop_timeout, ns.parent if ns.parent is not None else os.getppid())


if __name__ == "__main__":
    sys.exit(main())
