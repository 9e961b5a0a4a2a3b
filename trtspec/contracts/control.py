"""How the operations loop reaches a running deployment: the small control interface it acts through, what a served
model speculates with, and what one change did.

The loop (trtspec.ops: windows, drift, recommendations, schedule proposals) decides; a server's implementation acts
(`trtspec.triton.control.TritonControl`: Triton model control on a torch-flavour repository). The command line joins
them (`trtspec monitor --apply --url ...`), so the loop never imports a server.

NVIDIA's deployment forms fix their speculation controls when the LLM is created, so a change there is planned as
data, then executed: a `SpeculationChange` (what the proposal or `set-k` / `set-schedule` asks for) becomes a
`PlannedChange` (files with their diffs, the commands that apply them, how the change takes effect) by the planner of
the form, beside that form's rendering (build/change.py: trtllm-serve; triton/change.py: Triton's llmapi model and
inflight batcher; dynamo/change.py: Dynamo on Kubernetes). Pure Python.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

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


# --- changes that take effect by reload, restart, rolling update or rebuild (NVIDIA's deployment forms) --------------

# The deployment forms whose change is planned as data (docs/operations.md, "Acting through each form's controls"):
# trtllm-serve (the PyTorch workflow's options file + restart), Triton's llmapi model (model.yaml + a model-control
# reload), Triton's inflight batcher (what changes without a rebuild), Dynamo on Kubernetes (engine configs + the
# DynamoGraphDeployment's rolling update), and trtspec's own Triton models (the torch flavour: live, TritonControl).
FORMS = ("trtllm-serve", "triton-llmapi", "triton-inflight", "dynamo-k8s", "torch")
# How a planned change takes effect: at once on the running server (torch flavour; a per-request field), by a Triton
# model-control reload, by restarting the server process, by the operator's rolling update, only after a rebuild, or
# not at all (every part of the change refused: `refused` says why).
HOWS = ("live", "reload", "restart", "rolling update", "rebuild", "none")


@dataclass(frozen=True)
class SpeculationChange:
    """What a change asks for: the monitor's proposal (a schedule and its default k, or one k) or the flags of
    `set-k` / `set-schedule`. `default_k` None: as served; `schedule` replaces the served one only with
    `replace_schedule` (then None removes it)."""

    default_k: int | None = None
    schedule: SpecSchedule | None = None
    replace_schedule: bool = False

    def describe(self) -> str:
        parts = [] if self.default_k is None else [f"k={self.default_k}"]
        if self.replace_schedule:
            parts.append(describe(self.schedule, 0).partition(" ")[2] or "no schedule")
        return " ".join(parts) or "nothing"


@dataclass(frozen=True)
class PlannedChange:
    """The exact change that applies a SpeculationChange to one deployment form, as data (plan, then execute).

    `files`: absolute path -> the new text (written atomically by whoever executes the plan); `diffs`: path -> its
    unified diff against the file as it is now; `commands`: argv lists the operator runs, in order, in `cwd` (None:
    anywhere), printed shell-quoted (`command_lines`); `how`: one of HOWS; `refused`: the parts of the change this form
    cannot make, each with the reason; `notes`: what else the operator should know."""

    form: str
    model: str
    old: str  # what the deployment speculates with now (`describe`)
    new: str  # after the change
    how: str
    files: Mapping[str, str] = field(default_factory=dict)
    diffs: Mapping[str, str] = field(default_factory=dict)
    commands: tuple[tuple[str, ...], ...] = ()
    cwd: str | None = None
    notes: tuple[str, ...] = ()
    refused: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.form not in FORMS:
            raise ValueError(f"form {self.form!r} is not one of {', '.join(FORMS)}")
        if self.how not in HOWS:
            raise ValueError(f"how {self.how!r} is not one of {', '.join(HOWS)}")
        object.__setattr__(self, "files", dict(self.files))
        object.__setattr__(self, "diffs", dict(self.diffs))
        object.__setattr__(self, "commands", tuple(tuple(str(a) for a in argv) for argv in self.commands))
        object.__setattr__(self, "notes", tuple(self.notes))
        object.__setattr__(self, "refused", tuple(self.refused))

    @property
    def summary(self) -> str:
        return f"{self.old} -> {self.new}"

    @property
    def changes_anything(self) -> bool:
        """Whether executing it changes a file or runs a command (a plan whose parts were all refused does not)."""
        return bool(self.files or self.commands) or (self.how == "live" and self.old != self.new)

    def command_lines(self) -> list[str]:
        """Each command shell-quoted (shlex.join), prefixed with `cd CWD && ` when it must run there."""
        prefix = f"cd {shlex.quote(self.cwd)} && " if self.cwd else ""
        return [prefix + shlex.join(argv) for argv in self.commands]

    def lines(self, *, diffs: bool = True, width: int = 200) -> list[str]:
        """The plan as text: the summary, each file (with its diff, lines cut at `width` characters), each command,
        the refusals and notes."""
        out = [f"planned change ({self.form}, takes effect by {self.how}): {self.model}: {self.summary}"]
        for path in self.files:
            out.append(f"  file {path}")
            if diffs and self.diffs.get(path):
                out += [f"    {line if len(line) <= width else line[:width] + ' ...'}"
                        for line in self.diffs[path].splitlines()]
        if self.commands:
            out.append("  run:")
            out += [f"    $ {line}" for line in self.command_lines()]
        out += [f"  refused: {line}" for line in self.refused]
        out += [f"  note: {line}" for line in self.notes]
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"form": self.form, "model": self.model, "old": self.old, "new": self.new, "how": self.how,
                "files": dict(self.files), "diffs": dict(self.diffs), "commands": [list(c) for c in self.commands],
                "command_lines": self.command_lines(), "cwd": self.cwd, "notes": list(self.notes),
                "refused": list(self.refused)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PlannedChange:
        return cls(form=data["form"], model=data["model"], old=data["old"], new=data["new"], how=data["how"],
                   files=dict(data.get("files") or {}), diffs=dict(data.get("diffs") or {}),
                   commands=tuple(tuple(c) for c in data.get("commands") or ()), cwd=data.get("cwd"),
                   notes=tuple(data.get("notes") or ()), refused=tuple(data.get("refused") or ()))


def unified_diff(path: str, old: str | None, new: str, *, old_path: str | None = None) -> str:
    """The unified diff from `old` (the text of `old_path`, default `path`; None: no file) to `new` (the text of
    `path`); "" when they are equal."""
    import difflib

    if old == new:
        return ""
    before = "/dev/null" if old is None else f"a/{(old_path or path).lstrip('/')}"
    lines = difflib.unified_diff((old or "").splitlines(keepends=True), new.splitlines(keepends=True),
                                 fromfile=before, tofile=f"b/{path.lstrip('/')}")
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)
