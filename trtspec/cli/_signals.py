"""Stop signals for the commands that run servers until told to stop (`trtspec serve`, Triton or Dynamo).

One helper, one behaviour: while a server runs, SIGINT, SIGTERM and SIGHUP go to the command's `handle(signum,
count)` (count: how many arrived so far, this one included), which may raise `Stopped` to leave what the main thread
is doing (a server still starting); the previous handlers come back afterwards. The exit code of a stop by signal is
128 + the signal's number (`exit_code`), as a shell reports a process killed by it.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


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
