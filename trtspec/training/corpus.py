"""The offline corpus: the running interpreter's own standard-library source (PSF License v2).

No download: every machine with this Python has it. Files are sorted by relative path; every `HOLDOUT_EVERY`-th
file is held out for prompts and evaluation and never trained on.
"""

from __future__ import annotations

import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

HOLDOUT_EVERY = 25
SKIP_DIRS = {"site-packages", "__pycache__", "test", "tests", "idlelib", "lib2to3", "turtledemo", "ensurepip"}
EOS = "<|endoftext|>"


@dataclass(frozen=True)
class Corpus:
    root: Path
    train_files: list[Path]
    heldout_files: list[Path]

    @property
    def source(self) -> str:
        v = sys.version_info
        return f"CPython {v.major}.{v.minor}.{v.micro} standard library ({self.root}), PSF License v2"

    def text(self, files: list[Path]) -> str:
        return EOS.join(read(f) for f in files)


def stdlib_corpus(limit: int | None = None) -> Corpus:
    """All `.py` files of the stdlib (minus tests and vendored packages), split train / held out."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(
        (p for p in root.rglob("*.py") if not (set(p.relative_to(root).parts[:-1]) & SKIP_DIRS)),
        key=lambda p: p.relative_to(root).as_posix(),
    )
    if limit is not None:
        files = files[:limit]
    heldout = [f for i, f in enumerate(files) if i % HOLDOUT_EVERY == HOLDOUT_EVERY - 1]
    train = [f for i, f in enumerate(files) if i % HOLDOUT_EVERY != HOLDOUT_EVERY - 1]
    return Corpus(root, train, heldout)


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")
