"""`trtspec set-k`, `trtspec set-schedule` and `trtspec rollout-draft`: change a running torch-flavour deployment
without failing a request; with `--deployment FORM:PATH`, plan the change for NVIDIA's deployment forms.

Thin: parse, call trtspec.triton.control / trtspec.triton.rollout, print. Each refuses bad input (a k outside the
model's range, a schedule entry that breaks a rule, a draft whose vocabulary differs from the target's) before anything
on the server or on disk changes. `--deployment` (cli/_deployment.py) names a trtllm-serve build, a Triton repository
or a `trtspec k8s` output: the change is planned by that form's planner (a new options file, model.yaml or engine
config and the command that applies it), written (atomically; `--dry-run`: not) and its commands printed, never run;
a torch-flavour repository keeps the live reload.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from trtspec.cli._deployment import DEPLOYMENT, HELP
from trtspec.cli._types import COUNT, HOST_PORT, FiniteFloat
from trtspec.contracts.schedule import CONTROLS

HTTP_HELP = ("Triton's HTTP HOST:PORT in the printed reload command (--deployment triton:REPO of NVIDIA's llmapi model "
             "or inflight batcher), e.g. --http-url triton.internal:8000.")


def reload_options(checked: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """--repo, --timeout, --dry-run and --json: the options of a command that reloads a served model with a change
    (`checked`: what --dry-run checks besides the server, the model and --repo)."""
    options = [
        click.option("--repo", type=click.Path(path_type=Path, file_okay=False, exists=True), default=None,
                     help="The repository the server runs: the change is also written into MODEL/config.pbtxt "
                          "(atomically), so a restart keeps it. Without it the change lasts until the server restarts."),
        click.option("--timeout", "timeout_s", type=FiniteFloat(min=1.0), default=300.0, show_default=True,
                     help="Seconds the reload may take."),
        click.option("--dry-run", is_flag=True, help=f"Check the server, the model, {checked} and --repo; change "
                                                     "nothing."),
        click.option("--json", "as_json", is_flag=True, help="Print the change as JSON."),
    ]

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            command = option(command)
        return command

    return decorate



@click.command("set-k")
@click.argument("k", type=COUNT)
@click.option("--url", type=HOST_PORT, default="127.0.0.1:8001", show_default=True, metavar="HOST:PORT",
              help="The Triton server's gRPC address.")
@click.option("--model", default="tensorrt_llm", show_default=True,
              help="The engine model whose default k changes (the torch flavour's tensorrt_llm).")
@click.option("--deployment", type=DEPLOYMENT, default=None, metavar="FORM:PATH", help=HELP + " A trtllm-serve, "
              "llmapi, inflight or Dynamo deployment gets a planned change (files + commands) instead of a live reload.")
@click.option("--http-url", type=HOST_PORT, default="localhost:8000", show_default=True, help=HTTP_HELP)
@reload_options("k")
def set_k(k: int, url: str, model: str, deployment: tuple[str, str] | None, http_url: str, repo: Path | None,
          timeout_s: float, dry_run: bool, as_json: bool) -> None:
    """Set the default k (draft tokens per step of a request that does not say) of a running model to K.

    The model is reloaded through Triton's model-control API with its live configuration carrying the new k;
    requests in flight finish on the old instance, later ones get K. 0 turns speculation off.

    With --deployment FORM:PATH of NVIDIA's stack, K becomes that form's change: trtllm-serve a new options file
    (max_draft_len K) and its restart command; Triton's llmapi model a new model.yaml and a model-control reload;
    the inflight batcher the per-request num_draft_tokens (draft-target), a tree of K nodes, or a rebuild above the
    engine's max_draft_len; Dynamo new engine configs and the DynamoGraphDeployment to apply (a rolling update).
    The files are written (not with --dry-run) and the commands printed; trtspec runs none of them.

    Examples:

    \b
        trtspec set-k 2 --repo out/triton/tiny-torch
        trtspec set-k 0 --url 127.0.0.1:8001 --dry-run
        trtspec set-k 3 --deployment dynamo-k8s:out/dynamo --dry-run --json
    """
    from trtspec.contracts.control import SpeculationChange
    from trtspec.triton.control import set_default_k

    if deployment is not None:
        target = _deployment(deployment, repo)
        if not target.live:
            _planned(target, SpeculationChange(default_k=k), model=model, http_url=http_url, dry_run=dry_run,
                     as_json=as_json)
            return
        repo = target.path

    change = set_default_k(url, model, k, repo=repo, dry_run=dry_run, timeout_s=timeout_s)
    if as_json:
        click.echo(json.dumps({"model": change.model, "old_k": change.old_k, "new_k": change.new_k,
                               "persisted": str(change.persisted) if change.persisted else None,
                               "note": change.note, "dry_run": dry_run}))
        return
    verb = "would change" if dry_run else "changed"
    click.echo(f"{change.model}: default k {verb} {change.old_k} -> {change.new_k} on {url}")
    click.echo(f"written to {change.persisted}" if change.persisted else change.note)


_FLAGS = {"draft_len_schedule": "--draft-len-schedule", "max_concurrency": "--max-concurrency",
          "acceptance_window": "--acceptance-window", "acceptance_length_threshold": "--acceptance-length-threshold",
          "acceptance_rate_window_size": "--acceptance-rate-window-size",
          "acceptance_rate_threshold": "--acceptance-rate-threshold", "gate_probe_every": "--gate-probe-every",
          "speculation_controls": "--speculation-controls", "default_k": "--k"}


@click.command("set-schedule")
@click.argument("url", type=HOST_PORT, required=False)
@click.argument("model", required=False)
@click.option("--draft-len-schedule", "draft_len", default=None, metavar="B:K,...",
              help="Draft length by batch size: from B running requests on, at most K draft tokens (0: none). Must "
                   "hold batch size 1, e.g. 1:4,4:2,16:0; `none` removes it.")
@click.option("--max-concurrency", default=None, metavar="N|none",
              help="No speculation above N running requests; `none` removes the limit.")
@click.option("--acceptance-window", default=None, metavar="N",
              help="TensorRT-LLM 1.2.1's acceptance gate: completed requests in its rolling mean (0: no gate).")
@click.option("--acceptance-length-threshold", default=None, metavar="X",
              help="That gate closes while the mean is below X, in accepted draft tokens per iteration of a request, "
                   "bonus token excluded (2.0 tokens per target forward count 1.0).")
@click.option("--acceptance-rate-window-size", default=None, metavar="N",
              help="TensorRT-LLM 1.3's acceptance gate: iterations that drafted in its rolling mean (0: no gate).")
@click.option("--acceptance-rate-threshold", default=None, metavar="RATE",
              help="That gate closes while the mean accepted / drafted draft tokens per iteration is below RATE (0-1).")
@click.option("--gate-probe-every", default=None, metavar="N",
              help="While the gate is closed, a probe request still speculates every N admissions (backing off "
                   "while probes lose), so the gate reopens when acceptance recovers (default 16; 0: never, "
                   "TensorRT-LLM's permanent gate).")
@click.option("--speculation-controls", type=click.Choice(CONTROLS), default=None,
              help="trtspec (a gate that reopens) or exactly a TensorRT-LLM release (its rules, its gate permanent).")
@click.option("--no-gate", is_flag=True, help="Remove the acceptance gate (window, threshold and probes).")
@click.option("--clear", is_flag=True,
              help="Start from no schedule instead of the served one: the flags given are the whole schedule (alone: "
                   "remove the schedule).")
@click.option("--k", "default_k", type=COUNT, default=None,
              help="Also set the default k, in the same reload (a schedule caps a request's k, never raises it: the "
                   "default k should be the schedule's largest draft length).")
@click.option("--deployment", type=DEPLOYMENT, default=None, metavar="FORM:PATH", help=HELP + " URL and MODEL "
              "are then needed only for the torch flavour (its live reload).")
@click.option("--http-url", type=HOST_PORT, default="localhost:8000", show_default=True, help=HTTP_HELP)
@reload_options("the schedule")
def set_schedule(url: str | None, model: str | None, draft_len: str | None, max_concurrency: str | None,
                 acceptance_window: str | None, acceptance_length_threshold: str | None,
                 acceptance_rate_window_size: str | None, acceptance_rate_threshold: str | None,
                 gate_probe_every: str | None, speculation_controls: str | None, no_gate: bool, clear: bool,
                 default_k: int | None, deployment: tuple[str, str] | None, http_url: str, repo: Path | None,
                 timeout_s: float, dry_run: bool, as_json: bool) -> None:
    """Set the speculation schedule of MODEL on the running Triton server at URL (gRPC HOST:PORT): the draft length
    per batch size, the concurrency above which it does not speculate, and the acceptance gate.

    The fields given replace the served ones; the others stay as served (--clear: start from none). The model is
    reloaded through Triton's model-control API with its live configuration carrying the new schedule; requests in
    flight finish on the old instance. Every entry is checked first (keys >= 1 with batch size 1 present, draft lengths
    0..max_k, a finite threshold >= 0 with a window >= 1): a bad one exits 2 naming it and the rule.

    With --deployment FORM:PATH of NVIDIA's stack (no URL or MODEL), the schedule in that deployment's files is the
    served one, and the change is planned: the release's `draft_len_schedule` / `max_concurrency` / gate keys
    rendered as `trtspec build` renders them, in a new trtllm-serve options file (+ its restart command), the llmapi
    model's model.yaml (+ a Triton reload) or Dynamo's engine configs (+ `kubectl apply`, a rolling update); the
    inflight batcher has no schedule or gate (refused, exit 2). Written unless --dry-run; commands printed, not run.

    Examples:

    \b
        trtspec set-schedule 127.0.0.1:8001 tensorrt_llm --draft-len-schedule 1:4,4:2 --max-concurrency 12 --k 4
        trtspec set-schedule 127.0.0.1:8001 tensorrt_llm --acceptance-window 32 --acceptance-length-threshold 0.5
        trtspec set-schedule --deployment trtllm-serve:out/build/tiny-pytorch --draft-len-schedule 1:3,4:1 --dry-run
    """
    from trtspec.contracts.control import describe
    from trtspec.contracts.engine import spelled
    from trtspec.contracts.schedule import SpecSchedule
    from trtspec.errors import UsageError
    from trtspec.triton.control import SCHEDULE_FIELDS, set_schedule

    gate = (acceptance_window, acceptance_length_threshold, acceptance_rate_window_size, acceptance_rate_threshold,
            gate_probe_every)
    if no_gate and any(v is not None for v in gate):
        raise click.UsageError("--no-gate removes the gate: give it or the gate's flags, not both")
    with spelled(_flag):
        changes: dict[str, Any] = {}
        if draft_len is not None:
            changes["draft_len"] = None if draft_len.strip().lower() == "none" else SpecSchedule.parse_draft_len(
                draft_len, "--draft-len-schedule")
        for name, text, kind in (("max_concurrency", max_concurrency, int), ("acceptance_window", acceptance_window, int),
                                 ("acceptance_length_threshold", acceptance_length_threshold, float),
                                 ("acceptance_rate_window_size", acceptance_rate_window_size, int),
                                 ("acceptance_rate_threshold", acceptance_rate_threshold, float),
                                 ("probe_every", gate_probe_every, int)):
            if text is not None:
                changes[name] = _number(text, kind, _flag(SpecSchedule.PARAMETERS[name]))
        if speculation_controls is not None:
            changes["controls"] = speculation_controls
        length, rate = ("acceptance_window", "acceptance_length_threshold"), ("acceptance_rate_window_size",
                                                                                "acceptance_rate_threshold")
        if no_gate:
            changes |= dict.fromkeys((*length, *rate, "probe_every"))
        for own, other in ((length, rate), (rate, length)):
            if changes.get(own[0]) == 0 and own[1] not in changes:  # a window of 0 alone: that gate off
                changes |= dict.fromkeys(own)
            if any(changes.get(name) for name in own):  # one gate given: the other one goes (one gate at most)
                changes |= {name: None for name in other if name not in changes}
        if clear:
            changes = {name: changes.get(name) for name in SCHEDULE_FIELDS}
        if not changes and default_k is None:
            raise UsageError("set-schedule: nothing to set", hint="give --draft-len-schedule, --max-concurrency, the "
                             "gate's flags, --no-gate, --clear or --k")
        if deployment is not None:
            target = _deployment(deployment, repo)
            if not target.live:
                _planned_schedule(target, changes, default_k, model=model, http_url=http_url, dry_run=dry_run,
                                  as_json=as_json, url=url)
                return
            repo = target.path
        if url is None or model is None:
            raise click.UsageError("give URL and MODEL (the Triton server's gRPC HOST:PORT and the engine model), or "
                                   "--deployment FORM:PATH of NVIDIA's stack")
        change = set_schedule(url, model, changes=changes, default_k=default_k, repo=repo, dry_run=dry_run,
                              timeout_s=timeout_s)
    if as_json:
        click.echo(json.dumps({"model": change.model, "dry_run": dry_run, "note": change.note,
                               "persisted": str(change.persisted) if change.persisted else None,
                               **{side: {"default_k": k, "schedule": s.to_parameters() if s else None}
                                  for side, k, s in (("old", change.old_k, change.old),
                                                     ("new", change.new_k, change.new))}}))
        return
    verb = "would change" if dry_run else "changed"
    click.echo(f"{change.model}: {verb} {describe(change.old, change.old_k)} -> {describe(change.new, change.new_k)} "
               f"on {url}")
    click.echo(f"written to {change.persisted}" if change.persisted else change.note)
    if change.persisted and change.note:
        click.echo(change.note)


def _deployment(value: tuple[str, str], repo: Path | None) -> Any:
    """The deployment --deployment names (checked); --repo beside it is refused (the deployment is the repository)."""
    from trtspec.cli._deployment import read_deployment

    if repo is not None:
        raise click.UsageError("give --deployment or --repo, not both (--deployment triton:REPO is the repository)")
    return read_deployment(value)


def _planned_schedule(target: Any, changes: dict[str, Any], default_k: int | None, *, model: str | None,
                      http_url: str, dry_run: bool, as_json: bool, url: str | None) -> None:
    """set-schedule's flags over the schedule the deployment's files hold, planned for its form."""
    from trtspec.cli._deployment import served
    from trtspec.contracts.control import SpeculationChange
    from trtspec.errors import ConfigError
    from trtspec.triton.control import merged_schedule

    if url is not None:
        raise click.UsageError(f"--deployment {target.text} is planned from its files: leave URL out (it is for the "
                               "torch flavour's live reload)")
    for name, flag in (("probe_every", "--gate-probe-every"), ("controls", "--speculation-controls")):
        if changes.get(name):
            raise ConfigError(flag, changes[name], f"has no LLM-API form ({target.form}: TensorRT-LLM's gate never "
                              "reopens and runs its own release's rules)", hint=f"leave {flag} out")
    now = served(target, model or "", max_k=0)
    schedule = merged_schedule(now.schedule if now else None, changes) if changes else None
    change = SpeculationChange(default_k=default_k, schedule=schedule, replace_schedule=bool(changes))
    _planned(target, change, model=model or "", http_url=http_url, dry_run=dry_run, as_json=as_json)


def _planned(target: Any, change: Any, *, model: str, http_url: str, dry_run: bool, as_json: bool) -> None:
    """Plan `change` for the deployment, refuse it (exit 2) when the form cannot make part of it, else write its files
    (not with --dry-run) and print it with its commands."""
    from trtspec.cli._deployment import apply_lines, plan, write_files
    from trtspec.errors import ConfigError

    planned = plan(target, change, model=model or target.form, http_url=http_url)
    if planned.refused:
        raise ConfigError("--deployment", target.text, f"{target.form} cannot take {planned.refused[0]}",
                          hint="change only what this form can (docs/operations.md, \"Acting through each form's "
                               "controls\")")
    written = [] if dry_run else write_files(planned)
    if as_json:
        click.echo(json.dumps({"planned_change": planned.to_dict(), "dry_run": dry_run,
                               "written": [line.removeprefix("wrote ") for line in written]}))
        return
    for line in planned.lines():
        click.echo(line)
    for line in written or (["dry run: nothing written"] if planned.files else []):
        click.echo(line)
    if not dry_run:
        for line in apply_lines(planned):
            click.echo(line)


def _flag(field: str) -> str | None:
    """A schedule parameter (or an entry of one, `draft_len_schedule[16]`) as its flag."""
    for parameter, flag in _FLAGS.items():
        if field == parameter or field.startswith(parameter + "["):
            return flag + field[len(parameter):]
    return None


def _number(text: str, kind: type, flag: str | None) -> Any:
    """An integer (or a number) or `none`; ConfigError naming the flag otherwise (the schedule's rules come after)."""
    from trtspec.errors import ConfigError

    if text.strip().lower() == "none":
        return None
    try:
        if not text.isascii():
            raise ValueError(text)
        return kind(text)
    except ValueError:
        raise ConfigError(flag or "?", text, f"is not {'an integer' if kind is int else 'a number'} (or none)",
                          hint="e.g. --max-concurrency 12, --acceptance-window 32 --acceptance-length-threshold "
                               "0.5") from None


@click.command("rollout-draft")
@click.option("--url", type=HOST_PORT, default="127.0.0.1:8001", show_default=True, metavar="HOST:PORT",
              help="The Triton server's gRPC address (it serves --repo).")
@click.option("--repo", type=click.Path(path_type=Path, file_okay=False, exists=True), required=True,
              help="The torch-flavour repository the server runs.")
@click.option("--draft", type=click.Path(path_type=Path, file_okay=False, exists=True), required=True,
              help="The new draft checkpoint (e.g. the OUT of `trtspec train draft`).")
@click.option("--timeout", "timeout_s", type=FiniteFloat(min=1.0), default=300.0, show_default=True,
              help="Seconds one load may take.")
@click.option("--dry-run", is_flag=True, help="Check the repository and the draft; print the versions; change nothing.")
def rollout_draft(url: str, repo: Path, draft: Path, timeout_s: float, dry_run: bool) -> None:
    """Serve a new draft as version N+1 of the models that load it: load N+1 beside N, then retire N.

    Requests in flight finish on version N; new ones go to N+1. The old version's directory stays on disk.

    Examples:

    \b
        trtspec rollout-draft --repo out/triton/tiny-torch --draft out/draft-v2 --dry-run
        trtspec rollout-draft --url 127.0.0.1:8001 --repo out/triton/tiny-torch --draft out/draft-v2
    """
    from trtspec.triton.rollout import execute_rollout, plan_rollout

    plan = plan_rollout(repo, draft)
    for line in plan.describe():
        click.echo(f"{'would roll out' if dry_run else 'rolling out'} {line}")
    if dry_run:
        return
    done = execute_rollout(plan, url, timeout_s=timeout_s, progress=lambda m: click.echo(f"  {m}", err=True))
    click.echo(f"done: {', '.join(f'{s.model} serves version {s.new_version}' for s in done)}")
