"""The flags that set or override an engine configuration: the general ones declared here, each method's as data
rows in its home (`MethodInfo.flags`, trtspec/methods/), read at each use.

Each flag is one parameter of `trtspec.contracts.engine.EngineConfig` (its flat name, `to_parameters`): `trtspec
deploy` applies them over the build's configuration, `trtspec serve --dynamo` over the build's, the repository's or
the defaults, `trtspec generate` over its own method options. A value is parsed and checked by EngineConfig itself, and
its errors name the flag the user typed. A new served knob is a field of EngineConfig plus, when users set it, one row
here (or, for a method's knob, in its home: a command of class `EngineCommand` lists the rows of every registered home
where its engine flags have a method slot, so a method registered later brings its flags along).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import click

from trtspec.cli._types import COUNT, NAME_VALUE, PROBABILITY, FiniteFloat, LiveChoice
from trtspec.contracts.engine import EagleTree, EngineConfig, spelled
from trtspec.contracts.schedule import CONTROLS
from trtspec.errors import ConfigError
from trtspec.methods import METHODS, DerivedTable, FlagRow, derived, engine_methods


@dataclass(frozen=True)
class Flag:
    """One command-line flag of an EngineConfig parameter (`parameter`; a NAME=VALUE flag's: the prefix of its
    parameters, e.g. suffix_)."""

    flag: str
    parameter: str
    type: Any
    help: str
    metavar: str | None = None
    multiple: bool = False

    @property
    def dest(self) -> str:
        return "engine_" + self.flag.lstrip("-").replace("-", "_")

    @property
    def prefix(self) -> bool:
        """Its values are NAME=VALUE settings, each of the parameter `parameter` + NAME."""
        return self.type is NAME_VALUE


@cache
def from_row(row: FlagRow) -> Flag:
    """The Flag of a method home's row (`MethodInfo.flags`): its kind as a click type."""
    if row.kind == "int":
        kind: Any = click.IntRange(*(row.bounds or (None, None)))
    elif row.kind in ("text", "name_value"):
        kind = str if row.kind == "text" else NAME_VALUE
    else:
        raise ValueError(f"flag {row.flag}: kind {row.kind!r} is not text, int or name_value")
    return Flag(row.flag, row.field, kind, row.help, metavar=row.metavar, multiple=row.multiple)


# Where the registered homes' rows go among the general flags: the methods' checkpoints after the target (--model),
# their knobs after --device. A command's engine flags name a slot where it lists them.
CHECKPOINT_FLAGS = "<method checkpoints>"
METHOD_FLAGS = "<method knobs>"
DEPLOY_FLAGS = "<method knobs deploy takes>"  # the knobs with a `deploy` note (each followed by it)
SLOTS: dict[str, Callable[[FlagRow], bool]] = {
    CHECKPOINT_FLAGS: lambda row: row.checkpoint, METHOD_FLAGS: lambda row: not row.checkpoint,
    DEPLOY_FLAGS: lambda row: row.deploy is not None}


def method_rows(slot: str) -> Iterator[FlagRow]:
    """The registered homes' flag rows that `slot` lists, in table order."""
    seen: set[str] = set()
    for info in METHODS.values():
        for row in info.flags:
            if SLOTS[slot](row) and row.flag not in seen:
                seen.add(row.flag)
                yield row


GENERAL = (
    Flag("--model", "target", str, "Target: embedded name (tiny) or HF checkpoint directory."),
    CHECKPOINT_FLAGS,
    Flag("--method", "method", LiveChoice(engine_methods), "The speculative method every request runs unless it "
         "says otherwise."),
    Flag("--k", "default_k", COUNT, "Draft tokens per request when a request does not say."),
    Flag("--max-k", "max_k", click.IntRange(1, 1024), "The largest k a request may ask for."),
    Flag("--device", "device", str, "Where the reference engine runs: cpu, cuda, cuda:1."),
    METHOD_FLAGS,
    Flag("--log-prompts", "log_prompts", click.Path(path_type=Path, file_okay=False), "Log a sample of the prompts "
         "to DIR/prompts.jsonl (rotating JSONL; the input of `trtspec train draft`). Off by default: prompts are user "
         "data, stored in clear text (docs/retrain.md).", metavar="DIR"),
    Flag("--log-sample-rate", "log_sample_rate", PROBABILITY, "Share of requests whose prompt is logged (with "
         "--log-prompts; default 0.1)."),
    Flag("--log-max-mb", "log_max_mb", FiniteFloat(min=0.01, max=1e6), "MiB the prompt log's files may take together; "
         "the oldest are dropped (default 64)."),
    Flag("--draft-len-schedule", "draft_len_schedule", str, "Draft length by batch size: from BATCH running requests "
         "on, at most K draft tokens (0: none); must hold batch size 1 (docs/operations.md).", metavar="1:4,4:2,16:0"),
    Flag("--max-concurrency", "max_concurrency", int, "No speculation above this many running requests."),
    Flag("--acceptance-window", "acceptance_window", int, "TensorRT-LLM 1.2.1's acceptance gate: completed requests "
         "in its rolling mean (0: no gate; with --acceptance-length-threshold)."),
    Flag("--acceptance-length-threshold", "acceptance_length_threshold", str, "TensorRT-LLM 1.2.1's acceptance gate: "
         "speculation stops while the window's mean is below this, in accepted draft tokens per iteration of a "
         "request, bonus token excluded (a request with 2.0 tokens per target forward counts 1.0).", metavar="TOKENS"),
    Flag("--acceptance-rate-window-size", "acceptance_rate_window_size", int, "TensorRT-LLM 1.3's acceptance gate: "
         "iterations that drafted in its rolling mean (0: no gate; with --acceptance-rate-threshold)."),
    Flag("--acceptance-rate-threshold", "acceptance_rate_threshold", str, "TensorRT-LLM 1.3's acceptance gate: "
         "speculation stops while the window's mean accepted / drafted draft tokens per iteration is below this "
         "(0-1).", metavar="RATE"),
    Flag("--gate-probe-every", "gate_probe_every", int, "While the gate is closed, a probe request still "
         "speculates every this many admissions (backing off while probes lose), so the gate reopens when acceptance "
         "recovers (default 16; 0: closed for good, as TensorRT-LLM)."),
    Flag("--speculation-controls", "speculation_controls", click.Choice(CONTROLS), "How the engine runs the "
         "schedule, max_concurrency and the gate: trtspec (1.2.1's lookup, a gate that reopens; default) or exactly "
         "as a TensorRT-LLM release does (its lookup and rule, its gate permanent; docs/operations.md)."),
)  # fmt: skip
ENGINE_FLAGS = tuple(f if isinstance(f, str) else f.flag for f in GENERAL)  # every engine flag, slots included


def _table() -> dict[str, Flag]:
    out: dict[str, Flag] = {}
    for f in GENERAL:
        out |= {row.flag: from_row(row) for row in method_rows(f)} if isinstance(f, str) else {f.flag: f}
    return out


# Every engine flag (the registered homes' rows included) in --help order, current at each read.
FLAGS: DerivedTable[str, Flag] = derived(_table)
SCHEDULE = ("--draft-len-schedule", "--max-concurrency", "--acceptance-window", "--acceptance-length-threshold",
            "--acceptance-rate-window-size", "--acceptance-rate-threshold", "--gate-probe-every",
            "--speculation-controls")  # the speculation schedule (contracts/schedule.py)


# `trtspec deploy`'s engine flags, each overriding the build's engine configuration, and the note after each help (the
# methods' knobs: their rows' `deploy` notes)
DEPLOY = ("--k", "--max-k", "--device", DEPLOY_FLAGS, "--log-prompts", *SCHEDULE, "--log-sample-rate",
          "--log-max-mb")
DEPLOY_NOTES = {
    "--k": "Default: the build's max_draft_len.", "--max-k": "torch flavour; default: the build's max_draft_len.",
    "--device": "torch flavour; default cpu.", "--log-prompts": "torch flavour.",
    **{flag: "torch flavour; over the build's llm_api section (what the tensorrtllm flavour reads)." for flag in SCHEDULE},
}


def _option(f: Flag, tag: str, note: str | None) -> click.Option:
    text = f"{tag}{f.help}{' ' + note if note else ''}"
    return click.Option([f.flag, f.dest], type=f.type, default=None, multiple=f.multiple, metavar=f.metavar, help=text)


class MethodSlot(click.Option):
    """A place in a command's options for the registered homes' flag rows (hidden itself): `EngineCommand` lists the
    rows current at each use there, each help prefixed with `tag` (deploy's knobs: followed by their `deploy` note)."""

    def __init__(self, param_decls: Any, *, slot: str, tag: str = "") -> None:
        name = "--" + "-".join(slot.strip("<>").replace("'", "").split())  # never listed nor parsed (hidden, no value)
        super().__init__([name], hidden=True, expose_value=False)
        self.slot, self.tag = slot, tag
        self._made: tuple[tuple[FlagRow, ...], list[click.Option]] = ((), [])

    def options(self, declared: set[str]) -> list[click.Option]:
        """The click options of the slot's rows now, less those the command declares itself (`declared` flags)."""
        rows = tuple(row for row in method_rows(self.slot) if row.flag not in declared)
        if rows != self._made[0]:  # a registration changed them: made once per change, so parsing sees one object
            self._made = rows, [_option(from_row(row), self.tag, row.deploy if self.slot == DEPLOY_FLAGS else None)
                                for row in rows]
        return self._made[1]


class EngineCommand(click.Command):
    """A click command whose engine flags include the registered homes' method flags, read at each use (help,
    parsing, completion) like `LiveChoice`: the flags of a method registered after the command was defined show."""

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        params = super().get_params(ctx)
        declared = {opt for p in params if not isinstance(p, MethodSlot) for opt in p.opts}
        out: list[click.Parameter] = []
        for p in params:
            out.extend(p.options(declared) if isinstance(p, MethodSlot) else [p])
        return out


def engine_flags(*names: str, tag: str = "", notes: Mapping[str, str] | None = None) -> Callable[..., Any]:
    """A decorator adding the flags `names` (e.g. "--k", "--max-k", or a method slot such as METHOD_FLAGS), each help
    prefixed with `tag` and followed by `notes[flag]`; their values reach the command as `engine_<name>` keyword
    arguments (see `overrides`). A command with a method slot is an `EngineCommand` (click.command(cls=...))."""

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        for name in reversed(names):
            if name in SLOTS:
                command = click.option(cls=MethodSlot, slot=name, tag=tag)(command)
                continue
            f = FLAGS[name]
            text = f"{tag}{f.help}{' ' + notes[name] if notes and name in notes else ''}"
            command = click.option(f.flag, f.dest, type=f.type, default=None, multiple=f.multiple,
                                   metavar=f.metavar, help=text)(command)
        return command

    return decorate


def overrides(values: Mapping[str, Any]) -> dict[str, str]:
    """The parameters the user set with engine flags, from a command's keyword arguments (unset flags are absent)."""
    out: dict[str, str] = {}
    for f in FLAGS.values():
        value = values.get(f.dest)
        if value is None or value == ():
            continue
        if isinstance(value, str) and not value.strip():
            raise ConfigError(f.flag, value, "is empty", hint=f"give a value, or leave {f.flag} out")
        if f.prefix:
            out |= {f.parameter + name: text for name, text in value}
        else:
            out[f.parameter] = str(value.resolve()) if isinstance(value, Path) else str(value)
    return out


def apply(config: EngineConfig, values: Mapping[str, Any]) -> EngineConfig:
    """`config` with the engine flags in `values` applied; an error names the flag (`--eagle-topk=0: ...`)."""
    changes = overrides(values)
    with spelled(flag_of):
        return config.with_parameters(changes)


def flag_of(field: str) -> str | None:
    """The flag of a parameter named in an error (`parameter eagle_topk` or `eagle_topk` -> `--eagle-topk`)."""
    name, bracket, entry = field.removeprefix("parameter ").partition("[")  # `draft_len_schedule[4]`: one entry
    if bracket:
        flag = flag_of(name)
        return None if flag is None else f"{flag}[{entry}"
    for f in FLAGS.values():
        if name == f.parameter or (f.prefix and name == f.parameter.removesuffix("_")):  # suffix_: the whole part
            return f.flag
        if f.prefix and name.startswith(f.parameter):
            return f"{f.flag} {name.removeprefix(f.parameter)}"
    return None


def eagle_tree_grid(command: Callable[..., Any]) -> Callable[..., Any]:
    """`trtspec tune tree`'s search over the dynamic EAGLE tree: lists of top-k and depth values to try (their
    product), given to the command as `engine_tree_grid` (a list of EagleTree)."""
    topk = click.option("--eagle-topk", "engine_topks", default="1,2,4,8", show_default=True,
                        help="EAGLE dynamic tree: top-k children per node to try (comma list).")
    depth = click.option("--eagle-depth", "engine_depths", default="3,4,6", show_default=True,
                         help="EAGLE: dynamic tree levels to try (comma list); the largest is the static tree's depth.")
    return topk(depth(command))


def tree_grid(values: Mapping[str, Any]) -> list[EagleTree]:
    """The dynamic trees `eagle_tree_grid`'s lists span (every top-k with every depth); errors name the flag."""
    from trtspec.sweep.grid import parse_int_list

    lists = {flag: parse_int_list(values[dest], flag.lstrip("-")) for dest, flag in
             (("engine_topks", "--eagle-topk"), ("engine_depths", "--eagle-depth"))}
    with spelled(lambda name: flag_of(name) or name):
        return [EagleTree(topk=k, depth=d) for k in lists["--eagle-topk"] for d in lists["--eagle-depth"]]
