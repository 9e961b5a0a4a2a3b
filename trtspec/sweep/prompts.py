"""Prompt suites for sweeps: the shipped held-out suites and user JSONL files. Pure Python (no torch).

A suite is named either by a shipped name (`code`, `prose`, `grounded`: held-out CPython files; `repetitive`: the
multi-turn edits, tool-call logs, templated answers and retries that suffix decoding is for, written by
scripts/make_repetitive_suite.py; files in `trtspec/assets/prompts/`) or by a path to a JSONL file with one
`{"prompt": "..."}` object per line (extra keys are kept as metadata). Suites joined
with `+` (`code+prose+grounded`) are one mixed suite, taken round-robin: code[0], prose[0], grounded[0], code[1], ...
Malformed files raise ConfigError naming the file, the line and the fix, before any model is loaded.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

from trtspec.errors import ConfigError
from trtspec.models import PROMPTS

MIX = "+"  # joins suite names into one round-robin suite


@dataclass(frozen=True)
class PromptSuite:
    """The prompts of one suite, in file order, and where they came from."""

    name: str  # shipped suite name, or the file stem of a user JSONL
    path: Path
    prompts: tuple[str, ...]
    sha256: str  # of the selected prompts (so a record pins exactly what was measured)

    def describe(self) -> dict[str, object]:
        return {"suite": self.name, "path": str(self.path), "num_prompts": len(self.prompts), "sha256": self.sha256}

    def cycled(self, num_requests: int) -> PromptSuite:
        """`num_requests` prompts, the suite's reused round-robin (request i gets prompt i mod len)."""
        prompts = tuple(itertools.islice(itertools.cycle(self.prompts), num_requests))
        return replace(self, prompts=prompts, sha256=_digest(prompts))


def shipped_suites() -> list[str]:
    """Names of the suites shipped with the package."""
    return sorted(p.stem for p in PROMPTS.glob("*.jsonl"))


def suite_path(name_or_path: str, *, field: str = "suites") -> Path:
    """The JSONL file behind a suite name or path; ConfigError when neither exists."""
    if name_or_path in shipped_suites():
        return PROMPTS / f"{name_or_path}.jsonl"
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return path
    raise ConfigError(field, name_or_path, "is neither a shipped prompt suite nor a JSONL file",
                      hint=f"use one of {', '.join(shipped_suites())} or a file with one {{\"prompt\": ...}} per line")


def load_suite(name_or_path: str, num_prompts: int | None = None, *, field: str = "suites") -> PromptSuite:
    """Read and validate a suite (or a `+` mix of suites); keep the first `num_prompts` prompts (all when None)."""
    if MIX in name_or_path and not Path(name_or_path).expanduser().is_file():
        parts = [load_suite(part, field=field) for part in name_or_path.split(MIX)]
        mixed = [p for row in itertools.zip_longest(*(part.prompts for part in parts)) for p in row if p is not None]
        selected = tuple(mixed[:num_prompts] if num_prompts else mixed)
        path = Path(os.path.commonpath([part.path for part in parts]))
        return PromptSuite(name=name_or_path, path=path, prompts=selected, sha256=_digest(selected))
    path = suite_path(name_or_path, field=field)
    prompts: list[str] = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(field, str(path), f"line {lineno} is not valid JSON ({exc.msg})",
                              hint='each line must be a JSON object like {"prompt": "def f("}') from None
        if not isinstance(obj, dict) or not isinstance(obj.get("prompt"), str) or not obj["prompt"]:
            raise ConfigError(field, str(path), f"line {lineno} has no non-empty string \"prompt\"",
                              hint='each line must be a JSON object like {"prompt": "def f("}')
        prompts.append(obj["prompt"])
    if not prompts:
        raise ConfigError(field, str(path), "contains no prompts", hint='add lines like {"prompt": "def f("}')
    selected = tuple(prompts[:num_prompts] if num_prompts else prompts)
    name = name_or_path if name_or_path in shipped_suites() else path.stem
    return PromptSuite(name=name, path=path, prompts=selected, sha256=_digest(selected))


def last_tokens(token_ids: list[int], prompt_tokens: int | None) -> list[int]:
    """A prompt cut from the left to its last `prompt_tokens` tokens (whole when None), keeping the text nearest to
    the continuation."""
    return token_ids[-prompt_tokens:] if prompt_tokens else token_ids


def _digest(prompts: tuple[str, ...]) -> str:
    return hashlib.sha256("\x1e".join(prompts).encode()).hexdigest()
