"""An acceptance tap file (`trtspec.contracts.acceptance_tap`) as a metrics source of the monitor: the lines appended
since the previous read, added into cumulative counters per model, as the window reads Prometheus counters.

The reader starts at the file's end (what clients append from now on), reads at most `max_bytes` a scrape (the rest
on the next; whole lines only), and reads from the top of a file that was rotated (another inode) or truncated, the
totals growing on (noted). A line that is not a record, or longer than one read, is counted (`bad_lines`) and
skipped, never fatal. Records with neither drafts nor output tokens count in the acceptance rate only
(`rate_only_num_draft_tokens` / `rate_only_num_accepted_tokens`, which the window adds to the rate alone). Counters: num_drafts
(the records' own, else estimated: output_tokens - 1 - accepted, noted; neither: not counted, noted),
num_draft_tokens, num_accepted_tokens, num_emitted_tokens (output tokens), requests by finish reason, request_seconds (latencies: the window's concurrency).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from trtspec.contracts.acceptance_tap import TapRecord
from trtspec.contracts.metrics import draft_length
from trtspec.errors import ServerError
from trtspec.ops.sample import MAX_PAGE_BYTES, ModelCounters, ModelId

PREFIX = "tap:"


def is_tap(url: str) -> bool:
    return url.strip().startswith(PREFIX)


@dataclass
class TapFile:
    """One tap file's totals per model since the monitor started reading it."""

    path: Path
    max_bytes: int = MAX_PAGE_BYTES
    offset: int | None = None  # None: not opened yet (the first read starts at the end)
    inode: tuple[int, int] | None = None  # (st_dev, st_ino) of the file being read: another one is a rotation
    models: dict[ModelId, ModelCounters] = field(default_factory=dict)
    estimated: set[ModelId] = field(default_factory=set)  # models whose drafts are estimated
    unknown: set[ModelId] = field(default_factory=set)  # models with records of neither drafts nor output tokens
    bad_lines: int = 0
    restarts: int = 0  # rotations or truncations seen
    skipping: bool = False  # inside a line longer than one read

    @classmethod
    def of(cls, url: str) -> TapFile:
        path = Path(url.strip()[len(PREFIX):]).expanduser()
        if not path.is_file():
            raise ServerError(f"--metrics {url}: {path} is not a file",
                              hint="give the tap file your clients append to (`trtspec generate --url ... --tap FILE`)")
        return cls(path)

    def read(self) -> dict[ModelId, ModelCounters]:
        """The totals after the lines appended since the last read. ServerError when the file cannot be read."""
        try:
            with self.path.open("rb") as file:
                status = os.fstat(file.fileno())
                inode = (status.st_dev, status.st_ino)
                if self.offset is None:
                    self.offset, self.inode = status.st_size, inode
                elif inode != self.inode or status.st_size < self.offset:  # rotated or truncated: read it whole
                    self.offset, self.inode, self.restarts = 0, inode, self.restarts + 1
                file.seek(self.offset)
                chunk = file.read(self.max_bytes)
        except OSError as exc:
            raise ServerError(f"cannot read the tap file {self.path}: {exc.strerror or exc}",
                              hint="is it readable by this user?") from None
        end = chunk.rfind(b"\n") + 1  # whole lines only; a line still being written waits for the next read
        if end == 0 and len(chunk) >= self.max_bytes:  # a line longer than a whole read: not a record, skipped
            self.skipping, end = True, len(chunk)
        else:
            lines = chunk[:end].splitlines()
            if self.skipping and lines:  # the rest of the long line
                self.skipping, lines = False, lines[1:]
                self.bad_lines += 1
            for raw in lines:
                self._add(raw)
        self.offset += end
        for model, counters in self.models.items():
            counters.note = self._note(model)
        return self.models

    def _add(self, raw: bytes) -> None:
        if not raw.strip():
            return
        try:
            record = TapRecord.from_line(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            self.bad_lines += 1
            return
        model = ModelId(record.model)
        counters = self.models.setdefault(model, ModelCounters())
        drafts = record.num_drafts
        if drafts is None and record.output_tokens is not None:
            self.estimated.add(model)
            drafts = max(0, record.output_tokens - 1 - record.total_accepted_draft_tokens) \
                if record.total_draft_tokens else 0
        tokens = (("num_draft_tokens", record.total_draft_tokens),
                  ("num_accepted_tokens", record.total_accepted_draft_tokens))
        if drafts is None:  # the acceptance rate only: kept apart, so the drafts' own figures stay whole
            self.unknown.add(model)
            tokens = tuple((f"rate_only_{key}", amount) for key, amount in tokens)
        for key, amount in (("num_drafts", drafts or 0), *tokens, ("num_emitted_tokens", record.output_tokens or 0),
                            ("request_seconds", record.latency_s or 0.0)):
            counters.counters[key] = counters.counters.get(key, 0.0) + amount
        reason = record.finish_reason or "completed"
        counters.requests[reason] = counters.requests.get(reason, 0.0) + 1
        if drafts:
            counters.k = float(draft_length(record.total_draft_tokens, drafts))

    def _note(self, model: ModelId) -> str:
        notes = []
        if model in self.estimated:
            notes.append("drafts estimated from output tokens (the tap's records carry no num_drafts)")
        if model in self.unknown:
            notes.append("records with neither num_drafts nor output_tokens count in the acceptance rate only")
        if self.restarts:
            notes.append(f"{self.path} was rotated or truncated {self.restarts} time(s) (read again from its start)")
        if self.bad_lines:
            notes.append(f"{self.bad_lines} line(s) of {self.path} are not tap records (skipped)")
        return "; ".join(notes)
