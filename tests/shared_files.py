"""Session artefacts made once per test run: under `make test` (pytest-xdist) every process shares the files the first
one made (a random checkpoint, a trained drafter), instead of each making its own copy.

`made_once(tmp_path_factory, name, make)` returns a directory under the run's shared temp root; the first process to
ask calls `make(directory)` while holding a file lock, the others wait for it and reuse the result. Only for files
that a deterministic recipe makes and that no test changes."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest


def shared_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run's temp root every xdist process sees (a process's own base temp is a child of it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def made_once(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], object]) -> Path:
    """`root/shared/name`, made by `make(path)` in the first process that asks (the others wait on its lock)."""
    from filelock import FileLock

    folder = shared_root(tmp_path_factory) / "shared"
    folder.mkdir(exist_ok=True)
    path, done = folder / name, folder / f"{name}.done"
    with FileLock(str(folder / f"{name}.lock")):
        if not done.exists():
            shutil.rmtree(path, ignore_errors=True)  # a half-made copy of a process that failed
            path.mkdir()
            make(path)
            done.touch()
    return path
