"""The flags that set or override an engine configuration, declared once.

Each flag is one parameter of `trtspec.contracts.engine.EngineConfig` (its flat name, `to_parameters`): `trtspec
deploy` applies them over the build's configuration, `trtspec serve --dynamo` over the build's, the repository's or
the defaults. A value is parsed and checked by EngineConfig itself, and its errors name the flag the user typed.
A new served knob is a field of EngineConfig plus, when users set it, one row here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from trtspec.cli._types import COUNT, NAME_VALUE, PROBABILITY, FiniteFloat, LiveChoice
from trtspec.contracts.engine import MAX_DEPTH, MAX_TOPK, EagleTree, EngineConfig, spelled
from trtspec.contracts.schedule import CONTROLS
from trtspec.errors import ConfigError
from trtspec.methods import engine_methods

SUFFIX = "suffix_"  # --suffix NAME=VALUE sets parameter suffix_NAME


@dataclass(frozen=True)
class Flag:
    """One command-line flag of an EngineConfig parameter."""

    flag: str
    parameter: str
    type: Any
    help: str
    metavar: str | None = None
    multiple: bool = False

    @property
    def dest(self) -> str:
        return "engine_" + self.flag.lstrip("-").replace("-", "_")


FLAGS = {f.flag: f for f in (
    Flag("--model", "target", str, "Target: embedded name (tiny) or HF checkpoint directory."),
    Flag("--draft", "draft", str, "Draft model (method draft_target)."),
    Flag("--medusa", "medusa", str, "Medusa heads (method medusa)."),
    Flag("--eagle", "eagle", str, "EAGLE-3 drafter (method eagle3)."),
    Flag("--method", "method", LiveChoice(engine_methods), "The speculative method every request runs unless it "
         "says otherwise."),
    Flag("--k", "default_k", COUNT, "Draft tokens per request when a request does not say."),
    Flag("--max-k", "max_k", click.IntRange(1, 1024), "The largest k a request may ask for."),
    Flag("--device", "device", str, "Where the reference engine runs: cpu, cuda, cuda:1."),
    Flag("--lookahead", "lookahead", str, "Method lookahead: the window, n-gram size and verification set (W, N, G).",
         metavar="W,N,G"),
    Flag("--eagle-topk", "eagle_topk", click.IntRange(1, MAX_TOPK), "Method eagle3: the dynamic tree's children per "
         "expansion (default 4); not with a static tree (eagle.choices)."),
    Flag("--eagle-depth", "eagle_depth", click.IntRange(1, MAX_DEPTH), "Method eagle3: the dynamic tree's levels "
         "(default 6). The node budget is k."),
    Flag("--suffix", SUFFIX, NAME_VALUE, "Method suffix: one suffix decoding option NAME=VALUE (repeatable): "
         "max_tree_depth, max_cached_requests (the cross-request cache's bound), max_spec_factor, max_spec_offset, "
         "min_token_prob, tree (true/false).", multiple=True),
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
)}  # fmt: skip
SCHEDULE = ("--draft-len-schedule", "--max-concurrency", "--acceptance-window", "--acceptance-length-threshold",
            "--acceptance-rate-window-size", "--acceptance-rate-threshold", "--gate-probe-every",
            "--speculation-controls")  # the speculation schedule (contracts/schedule.py)


DEPLOY_NOTES = {  # `trtspec deploy`: each engine flag overrides the build's engine configuration
    "--k": "Default: the build's max_draft_len.", "--max-k": "torch flavour; default: the build's max_draft_len.",
    "--device": "torch flavour; default cpu.", "--eagle-topk": "torch flavour; over the build's eagle.topk.",
    "--eagle-depth": "torch flavour; over the build's eagle.depth.", "--suffix": "torch flavour; over the build's.",
    "--log-prompts": "torch flavour.",
    "--lookahead": "On the tensorrtllm flavour it must match the engine's max_draft_len.",
    **{flag: "torch flavour; over the build's llm_api section (what the tensorrtllm flavour reads)." for flag in SCHEDULE},
}


def engine_flags(*names: str, tag: str = "", notes: Mapping[str, str] | None = None) -> Callable[..., Any]:
    """A decorator adding the flags `names` (e.g. "--k", "--max-k"), each help prefixed with `tag` and followed by
    `notes[flag]`; their values reach the command as `engine_<name>` keyword arguments (see `overrides`)."""

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        for name in reversed(names):
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
        if f.parameter == SUFFIX:
            out |= {SUFFIX + name: text for name, text in value}
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
    if name == "suffix":
        return "--suffix"
    for f in FLAGS.values():
        if name == f.parameter or (f.parameter == SUFFIX and name.startswith(SUFFIX)):
            return f.flag if f.parameter != SUFFIX else f"--suffix {name.removeprefix(SUFFIX)}"
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
