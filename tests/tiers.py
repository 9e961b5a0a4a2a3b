"""The two test tiers. `make test` runs every test; `make check` runs the unit tests, `-m "not process and not slow"`:
in-process and quick, for the edit loop.

A test is in the `process` tier when it starts trtspec in a child process: a server (tritonserver and Dynamo through
`python -m trtspec.supervise`, `trtspec serve --trtllm-serve`), a `python -m trtspec ...` command, a `python
scripts/*.py` job, a `trtspec`, `tritonserver` or `trtllm-serve` executable, or a forked build or sweep
(tests/forked.py): seconds each. A short `python -c` child (the import checks of tests/fresh_imports.py), a shell,
promtool or a stand-in script is not that: a unit test may start one, and is marked `slow` if it takes seconds. How a
test gets the marker:

- `@pytest.mark.process` on the test, or `pytestmark = pytest.mark.process` on a module whose every test starts one;
  `triton` and `dynamo` (a real tritonserver, a real Dynamo) imply it.
- `@starts_processes` under a fixture's `@pytest.fixture`: every test that requests the fixture, directly or through
  another fixture, is marked (`mark_process_tests`, called by tests/conftest.py before `-m` deselects).
- The guard (`guard`, installed by tests/conftest.py in every run): a test outside the tier that starts such a child
  fails there, before the child starts, naming the fixture or the test to mark. `make test` (CI) runs every test
  under it, so a missing marker fails the build rather than `make check` quietly starting a server.
"""

from __future__ import annotations

import multiprocessing.process
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import pytest

F = TypeVar("F", bound=Callable[..., object])

# Markers that put a test in the `process` tier besides `process` itself (pyproject.toml [tool.pytest.ini_options]).
PROCESS_MARKERS = ("process", "triton", "dynamo")
EXECUTABLES = frozenset({"trtspec", "tritonserver", "trtllm-serve"})
SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def starts_processes(fixture: F) -> F:
    """Declare a fixture that starts trtspec in a child process (put it under `@pytest.fixture`): every test that
    requests the fixture is in the `process` tier."""
    fixture.starts_processes = True  # type: ignore[attr-defined]
    return fixture


def in_process_tier(item: pytest.Item) -> bool:
    return any(item.get_closest_marker(name) for name in PROCESS_MARKERS)


def mark_process_tests(items: list[pytest.Item]) -> None:
    """Mark `process` every test with a `triton` or `dynamo` marker or a `@starts_processes` fixture in its closure."""
    for item in items:
        if item.get_closest_marker("process"):
            continue
        if in_process_tier(item) or _process_fixtures(item):
            item.add_marker(pytest.mark.process)


def _process_fixtures(item: pytest.Item) -> list[str]:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return []
    return [name for name, defs in info.name2fixturedefs.items()
            if defs and getattr(getattr(defs[-1].func, "__func__", defs[-1].func), "starts_processes", False)]


def trtspec_child(argv: object) -> str | None:
    """`argv` (a Popen argument) as one line if it starts trtspec (see the module's docstring), else None."""
    if isinstance(argv, (str, bytes, os.PathLike)):
        args = [os.fsdecode(argv)]
    else:
        args = [os.fsdecode(a) for a in argv]  # type: ignore[union-attr]
    if not args:
        return None
    line = " ".join(args)[:200]
    if os.path.basename(args[0]) in EXECUTABLES:
        return line
    if args[0] != sys.executable or len(args) < 2:
        return None
    if "-m" in args[1:-1]:
        module = args[args.index("-m", 1) + 1]
        if module == "trtspec" or module.startswith("trtspec."):
            return line
    if args[1].endswith(".py") and Path(args[1]).resolve().parent == SCRIPTS:
        return line  # scripts/demo_serve.py and the like: trtspec's jobs end to end
    return None


class Guard:
    """Fails a test that is not in the `process` tier when it (or a fixture it set up) starts trtspec in a child."""

    def __init__(self) -> None:
        self.item: pytest.Item | None = None
        self.fixture: str | None = None

    def check(self, what: str) -> None:
        item = self.item
        if item is None or in_process_tier(item):
            return  # collection, the session's end, or a test that may
        if self.fixture:
            hint = (f"fixture `{self.fixture}` starts it: put @starts_processes (tests/tiers.py) under its "
                    f"@pytest.fixture")
        else:
            hint = "mark the test @pytest.mark.process"
        pytest.fail(f"{item.nodeid} is a unit test (not marked `process`) and started trtspec in a child process: "
                    f"{what}. `make check` runs no such test: {hint}.", pytrace=False)

    @contextmanager
    def running(self, item: pytest.Item) -> Iterator[None]:
        self.item = item
        try:
            yield
        finally:
            self.item = None

    @contextmanager
    def setting_up(self, fixture: str) -> Iterator[None]:
        outer, self.fixture = self.fixture, fixture
        try:
            yield
        finally:
            self.fixture = outer

    def install(self) -> None:
        """Watch subprocess.Popen (subprocess.run, asyncio's subprocesses) and multiprocessing's Process.start."""
        popen_init = subprocess.Popen.__init__
        process_start = multiprocessing.process.BaseProcess.start

        def guarded_popen_init(popen: subprocess.Popen, args: object, *rest: object, **options: object) -> None:
            what = trtspec_child(args)
            if what:
                popen._child_created = False  # type: ignore[attr-defined]  # Popen.__del__ of one that never started
                self.check(what)
            popen_init(popen, args, *rest, **options)  # type: ignore[arg-type]

        def guarded_start(process: multiprocessing.process.BaseProcess) -> None:
            self.check(f"a multiprocessing child ({process.name}: a forked build or sweep, tests/forked.py)")
            process_start(process)

        subprocess.Popen.__init__ = guarded_popen_init  # type: ignore[method-assign]
        multiprocessing.process.BaseProcess.start = guarded_start  # type: ignore[method-assign]


guard = Guard()
