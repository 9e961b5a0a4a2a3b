"""Child processes for the tests that SIGKILL a trtspec run (tests/build/test_crash.py, tests/sweep/test_sweep_kill.py).

Each child is forked from one multiprocessing forkserver per test process, which has imported torch and transformers
(and a few small third-party packages) before any fork, and has run nothing: a child costs its own work, not an
interpreter start and a torch import (~4 s of CPU each). Nothing of trtspec is imported before the fork, so every child
imports and patches it fresh, as `python -c CODE` would. A SIGKILL ends a child as it ends any process: no cleanup,
no atexit, no flush.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from multiprocessing.context import ForkServerContext
from multiprocessing.process import BaseProcess
from pathlib import Path

PRELOAD = ["torch", "transformers", "transformers.tokenization_utils_fast", "safetensors.torch", "yaml", "pydantic",
           "click",
           # what trtspec's import pulls in besides (pydantic's lazily imported model machinery, rich's progress
           # display, zoneinfo): ~0.2 s of CPU a child, none of it trtspec's
           "pydantic.main", "pydantic.fields", "pydantic.dataclasses", "pydantic.json_schema", "pydantic.types",
           "pydantic.functional_validators", "rich.progress", "rich.live", "rich.table", "zoneinfo", "sysconfig",
           "fractions"]
_context: list[ForkServerContext] = []


def _forkserver() -> ForkServerContext:
    if not _context:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(PRELOAD)
        _context.append(context)
    return _context[0]


def _run(code: str, argv: list[str], cwd: str, env: dict[str, str], stderr: str) -> None:
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    sys.path[:0] = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    with open(os.devnull, "wb") as null, open(stderr, "wb") as err:
        os.dup2(null.fileno(), 1)
        os.dup2(err.fileno(), 2)
    sys.argv = ["-c", *argv]
    exec(compile(code, "<child>", "exec"), {"__name__": "__main__"})


def start(code: str, argv: list[str], *, cwd: Path, env: dict[str, str], stderr: Path) -> BaseProcess:
    """`python -c CODE ARGV` in `cwd` with exactly `env`, stdout discarded and stderr written to `stderr`, started.
    `.kill()` sends SIGKILL; after `.join()`, `.exitcode` is the exit code, or -N for signal N; `.stderr` is the
    path of its stderr."""
    proc = _forkserver().Process(target=_run, args=(code, argv, str(cwd), env, str(stderr)))
    proc.start()
    proc.stderr = stderr
    return proc
