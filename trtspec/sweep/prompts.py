"""Prompt suites for sweeps: the shipped held-out suites and user JSONL files. Pure Python (no torch).

A suite is named either by a shipped name (`code`, `prose`, `grounded`: files in `trtspec/assets/prompts/`) or by a
path to a JSONL file with one `{"prompt": "..."}` object per line (extra keys are kept as metadata). Malformed files
raise ConfigError naming the file, the line and the fix, before any model is loaded.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from trtspec.errors import ConfigError
from trtspec.models import PROMPTS


@dataclass(frozen=True)
class PromptSuite:
    """The prompts of one suite, in file order, and where they came from."""

    name: str  # shipped suite name, or the file stem of a user JSONL
    path: Path
    prompts: tuple[str, ...]
    sha256: str  # of the selected prompts (so a record pins exactly what was measured)

    def describe(self) -> dict[str, object]:
        return {"suite": self.name, "path": str(self.path), "num_prompts": len(self.prompts), "sha256": self.sha256}


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
    """Read and validate a suite; keep the first `num_prompts` prompts (all when None)."""
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
    digest = hashlib.sha256("\x1e".join(selected).encode()).hexdigest()
    name = name_or_path if name_or_path in shipped_suites() else path.stem
    return PromptSuite(name=name, path=path, prompts=selected, sha256=digest)
