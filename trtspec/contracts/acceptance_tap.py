"""The acceptance tap: one JSON line per finished request, written by a deployment's clients, read by the monitor.

A server that publishes no acceptance aggregate still answers it per request: Triton's TensorRT-LLM models return
`total_draft_tokens` and `total_accepted_draft_tokens` (accepted draft tokens, the bonus not counted) when a request
sets `return_perf_metrics` (`sampling_param_return_perf_metrics` on the llmapi model), facts in
`trtspec/targets/serving-observability.json`. A client that appends what it got, as one line per request, gives
`trtspec monitor --metrics tap:FILE` a source (`trtspec generate --url ... --tap FILE` does; any client can):

    {"time": 1796000000.5, "model": "ensemble", "output_tokens": 64, "total_draft_tokens": 120,
     "total_accepted_draft_tokens": 51, "finish_reason": "length", "latency_s": 1.9}

`num_drafts` (verified drafts) is optional: TensorRT-LLM does not return it; trtspec's torch flavour does. Without it
the reader estimates it as output_tokens - 1 - accepted (one draft per generation step after the first token), and
says so; without `output_tokens` too (a text-only answer) only the acceptance rate is known. Pure Python.
"""

from __future__ import annotations

import json
import math
import os
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

COUNTS = ("total_draft_tokens", "total_accepted_draft_tokens")


@dataclass(frozen=True)
class TapRecord:
    """One finished request as its client saw it."""

    time: float  # wall-clock seconds when it finished
    model: str
    output_tokens: int | None  # generated tokens (None: a text-only answer, its tokens unknown to the client)
    total_draft_tokens: int
    total_accepted_draft_tokens: int
    num_drafts: int | None = None
    finish_reason: str = ""
    latency_s: float | None = None

    def __post_init__(self) -> None:
        problem = _problem(asdict(self))
        if problem:
            raise ValueError(problem)

    def to_line(self) -> str:
        return json.dumps({k: v for k, v in asdict(self).items() if v is not None and v != ""},
                          separators=(",", ":")) + "\n"

    @classmethod
    def from_line(cls, line: str) -> TapRecord:
        """The record of one line; ValueError naming what is wrong (not JSON, a missing or bad count)."""
        try:
            data = json.loads(line, parse_constant=_no_constant)
        except (ValueError, RecursionError) as exc:
            raise ValueError(f"not JSON ({exc})") from None
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        problem = _problem(data)
        if problem:
            raise ValueError(problem)
        return cls(time=float(data.get("time", 0.0)), model=str(data["model"]),
                   output_tokens=None if data.get("output_tokens") is None else int(data["output_tokens"]),
                   total_draft_tokens=int(data["total_draft_tokens"]),
                   total_accepted_draft_tokens=int(data["total_accepted_draft_tokens"]),
                   num_drafts=None if data.get("num_drafts") is None else int(data["num_drafts"]),
                   finish_reason=str(data.get("finish_reason") or ""),
                   latency_s=None if data.get("latency_s") is None else float(data["latency_s"]))


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number")


def _whole(value: Any) -> bool:
    return (not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
            and value >= 0 and value == int(value) and value <= 1 << 53)


def _problem(data: dict[str, Any]) -> str | None:
    if not isinstance(data.get("model"), str) or not data["model"]:
        return "model: missing (the served model's name)"
    for key in COUNTS:
        if not _whole(data.get(key)):
            return f"{key} = {data.get(key)!r} is not a whole number >= 0"
    if data["total_accepted_draft_tokens"] > data["total_draft_tokens"]:
        return (f"total_accepted_draft_tokens {data['total_accepted_draft_tokens']} is more than total_draft_tokens "
                f"{data['total_draft_tokens']}")
    for key in ("output_tokens", "num_drafts"):
        if data.get(key) is not None and not _whole(data[key]):
            return f"{key} = {data[key]!r} is not a whole number >= 0"
    for key in ("time", "latency_s"):
        value = data.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not math.isfinite(value) or value < 0):
            return f"{key} = {value!r} is not a number >= 0"
    return None


class TapWriter:
    """Appends records to a tap file, one whole line per write (O_APPEND: several clients may share one file)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    def append(self, record: TapRecord) -> None:
        data = record.to_line().encode()
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
