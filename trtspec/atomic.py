"""Atomic directory outputs: a finished staging directory replaces the output in one rename (stdlib only)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def replace_dir(staging: Path, out: Path) -> None:
    """Rename the finished `staging` directory to `out`. An earlier `out` is first renamed aside (so `out` is at every
    instant the old or the new directory, never a mix) and removed after the swap."""
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.replace(out, old)
    os.replace(staging, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
