"""The prompt log: what the served engine model writes when a deployment opts in, and what `trtspec train draft` reads.

Off by default (EngineConfig.prompt_log is None). When on, a sampled share of requests (`log_sample_rate`) has its
prompt appended as one JSON line to `DIR/prompts.jsonl`; the file rotates (stdlib `RotatingFileHandler`) into
`prompts.jsonl.1` .. `prompts.jsonl.{BACKUPS}`, the oldest dropped, so all files together stay under `log_max_mb`.
A line: {"time", "model", "version", "prompt_ids", "prompt", "max_tokens", "temperature"}. Prompts are user data:
the log holds them in clear text on the server's disk (see docs/retrain.md). Pure Python: no torch.

The reader takes a log directory or any JSONL file with `prompt_ids` (token ids) or `prompt` (text) per line (the
shipped prompt suites too), or OpenAI request bodies (`prompt`, or a chat's `messages`: what a client-side tap of a
deployment that logs no prompts writes, docs/retrain.md); unusable lines (not JSON, no prompt, a line cut by a crash)
are counted and skipped.
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
    messages: str | None = None  # an OpenAI chat request's messages (canonical JSON), rendered by the target's template

    @property
    def key(self) -> str:
        """Identity for de-duplication and the held-out split: the same prompt always lands on the same side."""
        if self.prompt_ids:
            return json.dumps(list(self.prompt_ids))
        return f"chat:{self.messages}" if self.messages else f"text:{self.prompt}"


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
            items = _parse_line(raw)
            if not items:
                skipped += 1
            else:
                prompts.extend(items)
    if not prompts:
        raise ConfigError("--prompts", str(path), f"has no usable prompts ({lines} lines, none with a non-empty "
                          "\"prompt_ids\" list or \"prompt\" string)",
                          hint="deploy with --log-prompts DIR --log-sample-rate R and send traffic, or pass a JSONL "
                               "file with one {\"prompt\": ...} a line")
    return prompts, skipped


def _parse_line(raw: bytes) -> list[LoggedPrompt]:
    """The prompts of one line: the log's own form, or an OpenAI request body as a client-side tap writes it (a
    completion's `prompt`: text, texts, token ids or lists of them; a chat's `messages`). [] when unusable."""
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return []
    if not isinstance(obj, dict):
        return []
    ids, text, messages = obj.get("prompt_ids"), obj.get("prompt"), obj.get("messages")
    if _token_ids(ids) or (isinstance(text, str) and text):
        return [LoggedPrompt(prompt_ids=tuple(ids) if _token_ids(ids) else None,
                             prompt=text if isinstance(text, str) and text else None)]
    if isinstance(text, list):  # an OpenAI completion's list prompt
        if _token_ids(text):
            return [LoggedPrompt(prompt_ids=tuple(text), prompt=None)]
        return [LoggedPrompt(prompt_ids=tuple(p) if _token_ids(p) else None, prompt=p if isinstance(p, str) else None)
                for p in text if _token_ids(p) or (isinstance(p, str) and p)]
    if isinstance(messages, list) and messages and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in messages):
        canonical = json.dumps([{"role": m["role"], "content": m["content"]} for m in messages], sort_keys=True)
        return [LoggedPrompt(prompt_ids=None, prompt=None, messages=canonical)]
    return []


def _token_ids(value: object) -> bool:
    return isinstance(value, list) and bool(value) and all(type(t) is int and t >= 0 for t in value)
