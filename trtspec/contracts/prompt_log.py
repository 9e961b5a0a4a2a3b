"""The prompt log: what the served engine model writes when a deployment opts in, and what `trtspec train draft` reads.

Off by default (EngineConfig.prompt_log is None). When on, a sampled share of requests (`log_sample_rate`) has its
prompt appended as one JSON line to `DIR/prompts.jsonl`; the file rotates (stdlib `RotatingFileHandler`) into
`prompts.jsonl.1` .. `prompts.jsonl.{BACKUPS}`, the oldest dropped, so all files together stay under `log_max_mb`.
A line: {"time", "model", "version", "prompt_ids", "prompt", "max_tokens", "temperature"}. Prompts are user data:
the log holds them in clear text on the server's disk (see docs/retrain.md). Pure Python: no torch.

The reader takes a log directory or any JSONL file with `prompt_ids` (token ids) or `prompt` (text) per line (the
shipped prompt suites too); unusable lines (not JSON, neither field, a line cut by a crash) are counted and skipped.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from logging.handlers import RotatingFileHandler
from pathlib import Path

from trtspec.errors import ConfigError

LOG_NAME = "prompts.jsonl"
BACKUPS = 3  # rotated files kept besides the current one
WORKER_PREFIX = "worker-"  # a worker's own log inside a deployment's log directory (dynamo/launch.py)
MIB = 1024 * 1024


class PromptLog:
    """A sampled, size-bounded, rotating JSONL log of prompts (thread-safe; one per served model instance).

    Args:
        directory: where `prompts.jsonl` and its rotated files live (created if missing).
        sample_rate: probability that one request's prompt is logged, in [0, 1].
        max_mb: bound on all the log's files together, in MiB.
        seed: seeds the sampling (None: fresh entropy), so tests can count.
    """

    def __init__(self, directory: Path, *, sample_rate: float, max_mb: float, model: str = "", version: str = "",
                 seed: int | None = None) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.sample_rate = sample_rate
        self.max_file_bytes = max(int(max_mb * MIB) // (BACKUPS + 1), 1)
        self.model, self.version = model, version
        self._handler = RotatingFileHandler(self.directory / LOG_NAME, maxBytes=self.max_file_bytes,
                                            backupCount=BACKUPS, encoding="utf-8", delay=True)
        self._handler.setFormatter(logging.Formatter("%(message)s"))
        self._rng = random.Random(seed)
        self._lock = threading.Lock()

    def offer(self, prompt_ids: Sequence[int], *, prompt: str | None = None, max_tokens: int | None = None,
              temperature: float | None = None) -> bool:
        """Log this request's prompt with probability `sample_rate`; returns whether it was logged.

        A record larger than one file's share of the bound is dropped (it would break the bound)."""
        with self._lock:
            if self._rng.random() >= self.sample_rate:
                return False
        line = json.dumps({"time": round(time.time(), 3), "model": self.model, "version": self.version,
                           "prompt_ids": [int(t) for t in prompt_ids], "prompt": prompt, "max_tokens": max_tokens,
                           "temperature": temperature}, ensure_ascii=False)
        if len(line.encode("utf-8")) + 1 > self.max_file_bytes:
            return False
        self._handler.handle(logging.makeLogRecord({"msg": line, "levelno": logging.INFO}))
        return True

    def close(self) -> None:
        self._handler.close()


@dataclass(frozen=True)
class LoggedPrompt:
    """One usable line of a prompt log: token ids (preferred: exact) and/or the text."""

    prompt_ids: tuple[int, ...] | None
    prompt: str | None

    @property
    def key(self) -> str:
        """Identity for de-duplication and the held-out split: the same prompt always lands on the same side."""
        return json.dumps(list(self.prompt_ids)) if self.prompt_ids else f"text:{self.prompt}"


def log_files(path: Path) -> list[Path]:
    """The files of a log, oldest first: a directory's rotated `prompts.jsonl.N` .. `prompts.jsonl`, then those of
    its `worker-*` directories (a deployment of several processes: each logs to its own), or one file."""
    path = Path(path)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise ConfigError("--prompts", str(path), "is neither a prompt log directory nor a JSONL file",
                          hint="deploy with --log-prompts DIR and pass DIR, or a file with one {\"prompt\": ...} a line")
    rotated = sorted((p for p in path.glob(f"{LOG_NAME}.*") if p.suffix[1:].isdigit()),
                     key=lambda p: -int(p.suffix[1:]))
    own = [*rotated, *([path / LOG_NAME] if (path / LOG_NAME).is_file() else [])]
    return own + [f for worker in sorted(path.glob(f"{WORKER_PREFIX}*")) if worker.is_dir() for f in log_files(worker)]


def read_prompt_log(path: Path) -> tuple[list[LoggedPrompt], int]:
    """(usable prompts in log order, number of unusable lines) of a log directory or JSONL file.

    Raises ConfigError (exit 2) naming the path when no line is usable."""
    prompts, skipped, lines = [], 0, 0
    for file in log_files(path):
        for raw in file.read_bytes().splitlines():
            if not raw.strip():
                continue
            lines += 1
            item = _parse_line(raw)
            if item is None:
                skipped += 1
            else:
                prompts.append(item)
    if not prompts:
        raise ConfigError("--prompts", str(path), f"has no usable prompts ({lines} lines, none with a non-empty "
                          "\"prompt_ids\" list or \"prompt\" string)",
                          hint="deploy with --log-prompts DIR --log-sample-rate R and send traffic, or pass a JSONL "
                               "file with one {\"prompt\": ...} a line")
    return prompts, skipped


def _parse_line(raw: bytes) -> LoggedPrompt | None:
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(obj, dict):
        return None
    ids, text = obj.get("prompt_ids"), obj.get("prompt")
    good_ids = isinstance(ids, list) and bool(ids) and all(type(t) is int and t >= 0 for t in ids)
    good_text = isinstance(text, str) and bool(text)
    if not (good_ids or good_text):
        return None
    return LoggedPrompt(prompt_ids=tuple(ids) if good_ids else None, prompt=text if good_text else None)
