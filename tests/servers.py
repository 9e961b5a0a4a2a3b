"""Test servers that stop in the background: `running(repo)` starts a TritonServer for a fixture and, when the fixture
ends, asks it to stop without waiting (Triton takes ~3 s to unload its models and exit, time the next module's work
can use); `reap()` (at the end of the session, tests/conftest.py) waits for every one of them and cleans up."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from trtspec.triton.server import TritonServer

_stopping: list[TritonServer] = []


@contextmanager
def running(repo: Path, **options: object) -> Iterator[TritonServer]:
    """A started TritonServer for `repo` (TritonServer's keyword options); stopped without waiting on exit."""
    for stopped in [s for s in _stopping if s.process is None or s.process.poll() is not None]:
        _stopping.remove(stopped)
        stopped.join()  # exited: clean up now
    server = TritonServer(repo, **options).start()  # type: ignore[arg-type]
    try:
        yield server
    finally:
        server.stop(wait=False)
        _stopping.append(server)


def reap() -> None:
    """Wait for every server `running` stopped (each is killed past its stop timeout) and remove their work dirs."""
    while _stopping:
        _stopping.pop().join()
