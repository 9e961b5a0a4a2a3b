"""The results file: one JSON record per line, appended durably, readable after a crash. Pure Python.

Record kinds (`kind`): `case` (one measured grid point; `status` is `ok` or `error`), `calibration` (the cost
micro-benchmark of one model set) and `sweep` (the spec a run started with). Every record has `schema` and `id`.

Durability: each record is one `write()` of a complete line followed by flush + fsync, so a kill leaves at most one
torn last line. `ResultsFile.open_for_append()` cuts such a torn tail before appending, so it can never glue onto the
next record; `read_records()` skips it when reading (`read_results` says which line it skipped, for the report's
warning). Later records with the same id supersede earlier ones.

Older files: `upgrade` reads every record under today's key names (a case's `backend` -> `via_info` and params
`backend` -> `via`; a sweep's `backend_info` -> `via_info` and spec `backend` -> `via`) and drops the spec fields the
sweep no longer has (`draft_model_name`), so every results file loads and resumes.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtspec.errors import UsageError

SCHEMA = 1
Record = dict[str, Any]


@dataclass(frozen=True)
class ResultsRead:
    """The complete records of a results file, the line each came from, and the unterminated last line that was
    skipped (None when the file ends with a newline)."""

    records: list[Record]
    lines: list[int]
    torn_line: int | None = None


def read_records(path: str | Path, *, max_bytes: int | None = None) -> list[Record]:
    """All complete records of a results file (an unterminated or unparsable last line is ignored).

    Anything else that is not a record (a corrupt line in the middle: the file was edited; a file that is not a
    results file) is refused with UsageError naming the file and the line. With `max_bytes`, at most that much is
    read: a larger file is refused (UsageError naming the file and the limit) unread past it.
    """
    return read_results(path, max_bytes=max_bytes).records


def read_results(path: str | Path, *, max_bytes: int | None = None) -> ResultsRead:
    """`read_records` with each record's line number and the torn last line it skipped: a line without the newline
    that ends every complete record (a sweep killed while writing it; `ResultsFile.open_for_append` cuts it and the
    sweep reruns that case), parsable or not."""
    path = Path(path)
    if not path.exists():
        return ResultsRead([], [])
    if path.is_dir():
        raise UsageError(f"{path} is a directory, not a results file", hint="give a .jsonl file path")
    if max_bytes is None:
        data = path.read_bytes()
    else:
        with open(path, "rb") as fh:
            data = fh.read(max_bytes + 1)
        if len(data) > max_bytes:
            from trtspec.textfile import size_text

            raise UsageError(f"{path} is larger than {size_text(max_bytes)}, the most read here",
                             hint="give a smaller results file (a sweep of fewer cases)")
    lines = data.split(b"\n")
    records: list[Record] = []
    numbers: list[int] = []
    for lineno, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        if lineno == len(lines):  # no trailing newline: the write did not finish; torn, rewritten on resume
            return ResultsRead(records, numbers, lineno)
        try:
            obj = json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError):  # not UTF-8, not JSON, too deep, an integer of too many digits
            raise UsageError(f"{path}:{lineno}: not a JSON record (not a trtspec results file, or edited)",
                             hint="give another --out file, or remove the line") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("kind"), str) or not isinstance(obj.get("id"), str):
            raise UsageError(f"{path}:{lineno}: a JSON value without the record fields kind and id",
                             hint="this is not a trtspec results file: give another --out file")
        records.append(upgrade(obj))
        numbers.append(lineno)
    return ResultsRead(records, numbers)


def upgrade(record: Record) -> Record:
    """`record` (changed in place) with keys written under an older name renamed to today's, and retired ones
    dropped, so its spec builds a SweepSpec."""
    if record.get("kind") == "case":
        _rename(record, "backend", "via_info")  # the runner's info (name engine | triton, device, versions)
        _rename(record.get("params"), "backend", "via")
    elif record.get("kind") == "sweep":
        _rename(record, "backend_info", "via_info")
        _rename(record.get("spec"), "backend", "via")
        if isinstance(record.get("spec"), dict):  # a field the sweep no longer has (grid.RETIRED_FIELDS)
            record["spec"].pop("draft_model_name", None)
    return record


def _rename(mapping: object, old: str, new: str) -> None:
    if isinstance(mapping, dict) and old in mapping and new not in mapping:
        mapping[new] = mapping.pop(old)


def output_digest(token_ids: Sequence[Sequence[int]]) -> str:
    """sha256 of a case's output token ids, request by request: equal digests mean the same tokens (e.g. a
    speculative case against its plain baseline at temperature 0) without storing the tokens."""
    blob = json.dumps([list(ids) for ids in token_ids], separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def latest_by_id(records: Iterable[Record], kind: str | None = None) -> dict[str, Record]:
    """The last record per id (optionally of one kind), in first-seen order."""
    out: dict[str, Record] = {}
    for rec in records:
        if kind is None or rec.get("kind") == kind:
            out[rec["id"]] = rec
    return out


class ResultsFile:
    """Append-only JSONL with crash-safe appends. Not shared between processes (one sweep per file)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._fh: Any = None

    def open_for_append(self) -> list[Record]:
        """Cut a torn tail, open for appending, and return the complete records already there."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            data = self.path.read_bytes()
            keep = data.rfind(b"\n") + 1  # everything after the last newline is a torn write
            if keep != len(data):
                with open(self.path, "r+b") as fh:
                    fh.truncate(keep)
                    fh.flush()
                    os.fsync(fh.fileno())
        records = read_records(self.path)
        self._fh = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        return records

    def append(self, record: Record) -> None:
        """Write one record as one line, then flush and fsync so it survives a kill."""
        if self._fh is None:
            raise RuntimeError("ResultsFile.open_for_append() first")
        record = {"schema": SCHEMA, **record}
        line = json.dumps(record, sort_keys=True, separators=(",", ":"), default=_jsonable) + "\n"
        self._fh.write(line)
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def __enter__(self) -> ResultsFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _jsonable(obj: object) -> object:
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if hasattr(obj, "item"):
        return obj.item()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
