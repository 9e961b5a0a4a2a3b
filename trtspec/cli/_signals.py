"""Stop signals for the commands that run servers until told to stop (`trtspec serve`, Triton or Dynamo).

One helper, one behaviour: while a server runs, SIGINT, SIGTERM and SIGHUP go to the command's `handle(signum,
count)` (count: how many arrived so far, this one included), which may raise `Stopped` to leave what the main thread
is doing (a server still starting); the previous handlers come back afterwards. The exit code of a stop by signal is
128 + the signal's number (`exit_code`), as a shell reports a process killed by it. `run_supervised` is the one
start / serve / stop-on-signal block of the modes that run a supervised child (`serve --dynamo`,
`serve --trtllm-serve`).
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator
from typing import TypeVar

from trtspec.errors import ServerError

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
T = TypeVar("T")


class Stopped(Exception):
    """A stop signal arrived while the server was starting (raised from the signal handler)."""


@contextlib.contextmanager
def stop_signals(handle: Callable[[int, int], None]) -> Iterator[list[int]]:
    """For the block: each stop signal is recorded, then handed to `handle(signum, count)`. Yields the signals."""
    received: list[int] = []

    def handler(signum: int, _frame: object) -> None:
        received.append(signum)
        handle(signum, len(received))

    previous = {s: signal.signal(s, handler) for s in STOP_SIGNALS}
    try:
        yield received
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def exit_code(received: list[int]) -> int:
    """The exit status of a command stopped by the first of `received`."""
    return 128 + received[0]


def run_supervised(start: Callable[[], object], serve: Callable[[], int | None],
                   stop: Callable[[], T]) -> tuple[int | None, T]:
    """Start a supervised server, serve until it exits or a stop signal arrives, and stop it either way.

    A stop signal while `start()` runs leaves it: the server is stopped and the command exits with `exit_code`
    (SystemExit); a ServerError from `start()` is raised after the stop. `serve()` (the ready lines, then the wait)
    returns the server's exit code; the first stop signal ends it instead (code None), and later ones do not interrupt
    the stop. Returns (that code, what `stop()` returned); `stop` must be idempotent."""

    def handle(signum: int, count: int) -> None:
        if count == 1:  # later signals must not interrupt the stop
            raise Stopped

    code = None
    with stop_signals(handle) as received:
        try:
            try:
                start()
            except (Stopped, ServerError):
                stop()
                if not received:
                    raise
                raise SystemExit(exit_code(received)) from None
            code = serve()
        except Stopped:
            code = None
        finally:
            stopped = stop()
    return code, stopped
