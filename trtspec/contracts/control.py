"""How the operations loop reaches a running deployment: the small control interface it acts through, what a served
model speculates with, and what one change did.

The loop (trtspec.ops: windows, drift, recommendations, schedule proposals) decides; a server's implementation acts
(`trtspec.triton.control.TritonControl`: Triton model control on a torch-flavour repository). The command line joins
them (`trtspec monitor --apply --url ...`), so the loop never imports a server. Pure Python.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from trtspec.contracts.schedule import SpecSchedule


@dataclass(frozen=True)
class KChange:
    """What a change of a served model's default k did."""

    model: str
    old_k: int
    new_k: int
    persisted: Path | None  # the file that now holds the new k (None: not persisted; `note` says why)
    note: str = ""


@dataclass(frozen=True)
class ServedSpeculation:
    """What a served model speculates with, as far as the loop proposes changes to it: its default k, the largest k it
    accepts and its schedule (None: none, every batch size runs the request's k)."""

    model: str
    default_k: int
    max_k: int
    schedule: SpecSchedule | None = None

    def k_at(self, batch_size: int) -> int:
        """The draft length a request that does not ask for k runs at `batch_size` running requests."""
        return self.default_k if self.schedule is None else self.schedule.draft_len_at(batch_size, self.default_k)


@dataclass(frozen=True)
class ScheduleChange:
    """What a change of a served model's schedule did (`old`/`new`: None = no schedule)."""

    model: str
    old: SpecSchedule | None
    new: SpecSchedule | None
    old_k: int  # the default k before
    new_k: int  # and after (the same unless the change set it)
    persisted: Path | None  # the file that now holds the change (None: not persisted; `note` says why)
    note: str = ""


def describe(schedule: SpecSchedule | None, default_k: int) -> str:
    """What a model speculates with, in one line: `k=4`, or `k=4 draft_len_schedule=1:4,6:2 max_concurrency=11` (the
    schedule's parameters)."""
    values = schedule.to_parameters() if schedule is not None else {}
    return " ".join([f"k={default_k}", *(f"{key}={value}" for key, value in values.items())])


class ServerControl(Protocol):
    """A running deployment, as far as the operations loop changes it."""

    def check(self, models: Sequence[str]) -> None:
        """Refuse before anything is watched when no change could be made: raises ServerError (exit 1) when the server
        does not answer or is not ready, TrtspecError naming why otherwise (a model it does not serve, or whose k
        it cannot set: exit 2)."""
        ...

    def served(self, model: str) -> ServedSpeculation:
        """What `model` speculates with now (its live configuration); raises TrtspecError naming why it cannot tell."""
        ...

    def set_default_k(self, model: str, k: int) -> KChange:
        """Serve `model` with default k = `k` from now on, failing no request; raises TrtspecError naming why not."""
        ...

    def set_schedule(self, model: str, schedule: SpecSchedule | None, *, default_k: int | None = None) -> ScheduleChange:
        """Serve `model` with `schedule` (the whole schedule; None: none) and, when given, default k `default_k` from
        now on, in one reload that fails no request; raises TrtspecError naming the entry and the rule when the served
        model cannot run it (ConfigError, exit 2), or why not otherwise."""
        ...
