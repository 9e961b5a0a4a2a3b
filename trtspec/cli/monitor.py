"""`trtspec monitor`: live acceptance, drift, the recommended k and the proposed schedule of a running server, from
its metrics port(s).

Scrapes Triton's metrics page, or every worker's page of a NVIDIA Dynamo deployment (summed per model), every
--interval, keeps the last --window of scrapes (trtspec.ops.window), runs the
drift test against the deploy-time baseline (trtspec.ops.drift), the cost model's recommendation
(trtspec.ops.recommend) and schedule proposal per concurrency bucket (trtspec.ops.schedule, beside the served schedule
read from --url or --repo), and shows them per model (trtspec.ops.dashboard). `--apply` hands a drifted model's
proposed schedule to `trtspec.triton.control.set_schedule` (`trtspec set-schedule`), or its recommended k to
`set_default_k` (`trtspec set-k`) where the proposal is one k and no schedule is served, and restarts its drift test;
this command never reloads anything itself.

`--deployment FORM:PATH` names the deployment watched (cli/_deployment.py: a trtllm-serve build, a Triton repository
of any form, a `trtspec k8s` output): its files say what it serves, and a drifted model's proposal becomes that
form's planned change (contracts.control.PlannedChange: files with their diffs, commands, how it takes effect),
shown after the report (`--json`: `planned_change` in the model's object). With `--apply` the plan's files are
written (atomically) and its commands printed for the operator: trtspec restarts, reloads or rolls out none of
NVIDIA's processes; a torch-flavour repository is reloaded live as before (needs --url).
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import Any

import click

from trtspec.cli._deployment import DEPLOYMENT, HELP
from trtspec.cli._types import HOST_PORT, FiniteFloat
from trtspec.methods import BASELINE
from trtspec.ops.drift import DEFAULT_ALPHA, DEFAULT_DISPERSION, DEFAULT_HORIZON, DEFAULT_SHIFT

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_SCALE = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


class Duration(click.ParamType):
    """Seconds, written 60, 60s, 1.5m, 500ms or 1h."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, (int, float)):
            seconds = float(value)
        else:
            match = _DURATION.match(str(value))
            if not match:
                self.fail(f"{value!r} is not a duration (e.g. 60s, 2m, 500ms)", param, ctx)
            seconds = float(match.group(1)) * _SCALE[match.group(2)]
        if seconds <= 0 or seconds > 7 * 86400:
            self.fail(f"{value!r} must be more than 0 and at most a week", param, ctx)
        return seconds


@click.command()
@click.option("--metrics", "urls", required=True, multiple=True, metavar="URL",
              help="Metrics endpoint: HOST:PORT or a full http(s) URL. Triton: its metrics port (default 8002). "
                   "Dynamo (`trtspec serve --dynamo N`, or TensorRT-LLM workers with --publish-metrics): every "
                   "worker's system port (8081, 8082, ...), repeated or comma-separated; the series are summed per "
                   "model. trtllm-serve: its HTTP port (its /metrics iteration statistics, JSON). tap:FILE: a file "
                   "of per-request acceptance lines its clients append (`trtspec generate --url ... --tap FILE`).")
@click.option("--repo", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="The served repository: its baseline (`trtspec deploy --baseline`) is the drift reference.")
@click.option("--baseline", "baseline_file", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="A trtspec-baseline.json, or the results JSONL of a `trtspec sweep` of the served models (the "
                   "served method and k are read from the metrics), instead of --repo.")
@click.option("--baseline-temperature", type=FiniteFloat(min=0.0), default=None,
              help="Which temperature of a results --baseline the server runs at (needed when it has several).")
@click.option("--window", "window_s", type=Duration(), default="60s", show_default=True,
              help="Length of the window the numbers cover (e.g. 60s, 5m); at least two --interval.")
@click.option("--interval", "interval_s", type=Duration(), default="1s", show_default=True,
              help="Seconds between scrapes (and dashboard refreshes).")
@click.option("--price-per-hour", type=FiniteFloat(min=0.0), default=None,
              help="$ per device-hour, for the cost per 1M output tokens.")
@click.option("--model", "models", multiple=True, help="Only this served model (repeatable; default: all).")
@click.option("--false-alarm-rate", "alpha", type=FiniteFloat(min=1e-9, max=0.5), default=DEFAULT_ALPHA, show_default=True,
              help="Drift test: probability of any false alarm over --horizon scrapes (independent trials).")
@click.option("--horizon", type=click.IntRange(1, 10**9), default=DEFAULT_HORIZON, show_default=True,
              help="Drift test: scrapes the false-alarm rate covers (600 = 10 minutes at 1s).")
@click.option("--shift", type=FiniteFloat(min=0.01, max=0.9), default=DEFAULT_SHIFT, show_default=True,
              help="Drift test: the drop in per-position acceptance it is tuned to catch (absolute).")
@click.option("--dispersion", type=FiniteFloat(min=1.0, max=100.0), default=DEFAULT_DISPERSION, show_default=True,
              help="Drift test: how much the trials of one request count together (1 = independent tokens; "
                   "docs/operations.md measures it).")
@click.option("--once", is_flag=True, help="Collect one window, print it, exit.")
@click.option("--duration", "duration_s", type=Duration(), default=None,
              help="Stop after this long (default: until Ctrl-C).")
@click.option("--json", "as_json", is_flag=True,
              help="JSON: one document with --once, else one line per refresh.")
@click.option("--apply", is_flag=True,
              help="When drift is flagged, set the proposed schedule live (`trtspec set-schedule`), or the recommended "
                   "k (`trtspec set-k`) when the proposal is one k and no schedule is served: Triton model control; "
                   "with --repo also persisted in the repository. Needs --url, except with a --deployment of NVIDIA's "
                   "stack: then the planned change's files are written and its commands printed (never run).")
@click.option("--deployment", type=DEPLOYMENT, default=None, metavar="FORM:PATH",
              help=HELP + " Its files say what it serves; a drifted model's proposal is shown as that form's planned "
                          "change (JSON: planned_change).")
@click.option("--http-url", type=HOST_PORT, default="localhost:8000", show_default=True,
              help="Triton's HTTP HOST:PORT in a planned reload command (--deployment triton:REPO of NVIDIA's "
                   "llmapi model or inflight batcher).")
@click.option("--url", "grpc_url", type=HOST_PORT, default=None,
              help="Triton gRPC HOST:PORT (e.g. localhost:8001): where --apply acts, and where the served schedule "
                   "is read (else from --repo's files).")
@click.option("--max-batch-size", type=click.IntRange(1, 1 << 20), default=None,
              help="The largest batch size the schedule proposal covers (default: the baseline's largest "
                   "calibrated batch size; the cost model knows nothing beyond it).")
def monitor(urls: tuple[str, ...], repo: Path | None, baseline_file: Path | None, baseline_temperature: float | None,
            window_s: float, interval_s: float, price_per_hour: float | None, models: tuple[str, ...], alpha: float,
            horizon: int, shift: float, dispersion: float, once: bool, duration_s: float | None, as_json: bool,
            apply: bool, deployment: tuple[str, str] | None, http_url: str, grpc_url: str | None,
            max_batch_size: int | None) -> None:
    """Watch a server's speculation live: mean accepted length, acceptance (per position), effective tokens/s vs
    plain decoding, cost per 1M tokens, drift against the deploy-time baseline, the k to use now and the schedule
    (draft length per batch size, max concurrency, gate threshold) to serve, beside the served one.

    Examples:

    \b
        trtspec monitor --metrics localhost:8002 --repo out/triton/tiny-torch --window 60s --price-per-hour 2.5
        trtspec monitor --metrics localhost:8002 --repo out/triton/tiny-torch --apply --url localhost:8001
        trtspec monitor --metrics localhost:8000 --baseline results.jsonl --deployment trtllm-serve:out/build/tiny \\
            --apply
    """
    from trtspec.contracts.baseline import load_baseline
    from trtspec.errors import UsageError
    from trtspec.ops.drift import DriftConfig
    from trtspec.ops.monitor import Monitor
    from trtspec.ops.scrape import scraper

    if repo is not None and baseline_file is not None:
        raise click.UsageError("give --repo or --baseline, not both")
    if window_s < 2 * interval_s:  # a window's numbers are the increments between at least two scrapes
        raise UsageError(f"--window {window_s:g}s is shorter than two scrape intervals (--interval {interval_s:g}s): "
                         "it would hold the increments of one scrape or none",
                         hint=f"pass --window {2 * interval_s:g}s or longer, or a shorter --interval")
    # a sweep's results (JSONL): made into a baseline once the first scrape shows the served method and k
    results = baseline_file if baseline_file is not None and baseline_file.suffix == ".jsonl" else None
    if results is not None and not results.is_file():
        raise UsageError(f"--baseline {results} is not a file", hint="give the results JSONL of `trtspec sweep`")
    baseline = load_baseline(baseline_file or repo) if (baseline_file or repo) and results is None else None
    if apply and baseline is None and results is None:
        raise UsageError("--apply needs a baseline (the cost model behind the recommendation)",
                         hint="pass --repo DIR (deployed with --baseline) or --baseline FILE")
    target = None
    if deployment is not None:
        from trtspec.cli._deployment import read_deployment

        target = read_deployment(deployment)  # refuse a path that is not that form before anything runs
    live = target is None or target.live
    if apply and live and grpc_url is None:
        raise click.UsageError("--apply needs --url HOST:PORT (the server's gRPC port) to reload the model")
    control = _control(grpc_url, target.path if target is not None else repo) if apply and live else None
    scrape = scraper([u.strip() for text in urls for u in text.split(",") if u.strip()])
    url = ", ".join(urls)
    first = scrape()  # fails here, in one line, when a URL cannot be read
    if results is not None:
        baseline = _baseline_of_results(results, first, set(models), baseline_temperature)
    if control is not None:  # the server --apply acts on answers, and can set k on what the metrics show
        control.check(_speculating(first, set(models)))
    own_repo = repo if target is None or not target.live else (repo or target.path)
    served = _served(first, set(models), grpc_url, own_repo) if baseline is not None else {}
    if target is not None and not target.live and baseline is not None:
        served = _deployment_served(first, set(models), target, baseline.max_k)
    actor = _Actor(control, target, apply=apply, http_url=http_url, url=grpc_url)
    state = Monitor(window_s, baseline, price_per_hour=price_per_hour, models=set(models) or None,
                    drift=DriftConfig(alpha=alpha, horizon=horizon, shift=shift, dispersion=dispersion),
                    served=served, max_batch_size=max_batch_size)
    state.observe(first)
    stop_at = time.monotonic() + (window_s if once else duration_s or float("inf"))
    if once:
        _collect(scrape, state, interval_s, stop_at)
        _require_series(state, url, models, window_s)
        _emit(state, url, as_json, actor)
        return
    seen = False
    if as_json or not sys.stdout.isatty():
        while time.monotonic() < stop_at:
            _collect(scrape, state, interval_s, min(stop_at, time.monotonic() + interval_s))
            seen = _emit(state, url, as_json, actor, compact=True) or seen
    else:
        seen = _live(scrape, state, url, interval_s, stop_at, actor)
    if not seen:  # --duration ended without one window of trtspec series
        _require_series(state, url, models, window_s)


def _baseline_of_results(results: Path, sample: Any, models: set[str], temperature: float | None) -> Any:
    """A baseline from a sweep's results for what the scraped server runs: the one speculative model's method
    (its `method` label) and default k (its `k` gauge); UsageError naming what the pages serve otherwise."""
    from trtspec.errors import UsageError
    from trtspec.sweep.baseline import baseline_for

    served = {(m.pooled.model, m.method, int(c.k)) for m, c in sample.models.items()
              if m.method not in ("", BASELINE) and c.k and (not models or m.model in models)}
    unlabelled = {(m.pooled.model, int(c.k)) for m, c in sample.models.items()
                  if not m.method and c.k and (not models or m.model in models)}
    if not served and unlabelled:  # trtllm-serve's rows, a tap, TensorRT-LLM's families: the results' one method
        from trtspec.sweep.baseline import swept_methods

        methods = swept_methods(results)
        if len(methods) != 1:
            raise UsageError(f"--baseline {results}: the metrics label no method and the results hold "
                             f"{', '.join(methods) or 'none'}", hint="give the results of a sweep of the served "
                             "method only, or a trtspec-baseline.json")
        served = {(name, methods[0], k) for name, k in unlabelled}
    kinds = {(method, k) for _, method, k in served}
    if len(kinds) != 1:
        found = ", ".join(f"{name} ({method}, k={k})" for name, method, k in sorted(served)) or "none"
        raise UsageError(f"--baseline {results} is a sweep's results, so the served method and k must be read from "
                         f"the metrics, which show one speculative model's; they show: {found}",
                         hint="choose one with --model NAME, or pass a trtspec-baseline.json")
    ((method, k),) = kinds
    return baseline_for(results, method=method, k=k, temperature=temperature)


def _served(sample: Any, models: set[str], grpc_url: str | None, repo: Path | None) -> dict[str, Any]:
    """What each speculating model of the first scrape serves (trtspec.contracts.control.ServedSpeculation): from the
    server at --url (its live configuration), else from --repo's config.pbtxt files; {} when neither is given. A model
    the repository has no engine configuration for (another flavour's) is left out."""
    from trtspec.errors import TrtspecError
    from trtspec.triton.control import TritonControl, served_in_repository

    names = _speculating(sample, models)
    if grpc_url is not None:
        control = TritonControl(grpc_url, repo)
        return {name: control.served(name) for name in names}
    out: dict[str, Any] = {}
    if repo is None:
        return out
    for name in names:
        try:
            out[name] = served_in_repository(repo, name)
        except TrtspecError:  # no such model there, or not a torch-flavour engine model
            continue
    return out


def _collect(scrape: Any, state: Any, interval_s: float, until: float) -> None:
    """Scrape every interval until `until`; a failed scrape mid-run is skipped (the next one may work)."""
    from trtspec.errors import ServerError

    while True:
        time.sleep(max(0.0, min(interval_s, until - time.monotonic())))
        try:
            state.observe(scrape())
        except ServerError:
            pass
        if time.monotonic() >= until - 1e-3:
            return


def _require_series(state: Any, url: str, models: tuple[str, ...], window_s: float) -> None:
    """Nothing to report is an error, never `[]` with exit 0: UsageError (exit 2) when --model names none of the
    models the pages show, ServerError (exit 1) when they show no trtspec series, or fewer than two scrapes worked."""
    from trtspec.errors import ServerError, UsageError

    if state.reports():
        return
    if len(state.ring.samples) < 2:
        raise ServerError(f"only one scrape of {url} worked in the window of {window_s:g}s: no increments to report",
                          hint="is the server still up? a longer --window or --interval gives it more time")
    shown = sorted({m.model for sample in state.ring.samples for m in sample.models})
    if models and shown:
        raise UsageError(f"--model {', '.join(models)}: the metrics of {url} show no such model (they show: "
                         f"{', '.join(shown)})", hint="pass one of those names, or leave --model out")
    raise ServerError(f"the metrics of {url} hold no acceptance (trtspec_spec_decode_*, trtllm_spec_decode_*, "
                      f"iteration rows or tap lines) in the window of {window_s:g}s",
                      hint="point --metrics at the server `trtspec serve` runs (Triton's metrics port, default 8002; "
                           "each Dynamo worker's system port; trtllm-serve's HTTP port) or a tap:FILE: its engine "
                           "models publish them once they are loaded")


def _emit(state: Any, url: str, as_json: bool, actor: _Actor, *, compact: bool = False) -> bool:
    """Print the window's reports, each drifted model's planned change (with --deployment) and the changes --apply
    made; whether there were any reports."""
    import json

    from trtspec.ops.dashboard import to_json, to_text

    reports = state.reports()
    plans = actor.plans(state, reports)
    applied = actor.act(state, reports, plans)
    if as_json:
        text = to_json(reports)
        if actor.deployment is not None:
            documents = json.loads(text)
            for document, report in zip(documents, reports, strict=True):
                plan = plans.get(report.model)
                document["planned_change"] = plan.to_dict() if plan is not None and not isinstance(plan, str) else None
                if isinstance(plan, str):
                    document["planned_change_error"] = plan
            text = json.dumps(documents, indent=None if compact else 2)
        click.echo(" ".join(text.split()) if compact and actor.deployment is None else text)
    else:
        click.echo(to_text(reports, source=url), nl=False)
        for model, plan in plans.items():
            for line in ([f"planned change for {model}: none: {plan}"] if isinstance(plan, str)
                         else plan.lines(diffs=not compact)):  # every refresh: the diffs once, with --once
                click.echo(line)
    for line in applied:
        click.echo(line, err=True)
    return bool(reports)


class _Actor:
    """What the monitor does with a drifted model's proposal: with --deployment, the planned change of its form
    (shown; with --apply its files written and its commands printed); a torch-flavour server with --apply, the live
    reload (Monitor.apply through TritonControl)."""

    def __init__(self, control: Any, deployment: Any, *, apply: bool, http_url: str, url: str | None) -> None:
        self.control, self.deployment, self.apply, self.http_url, self.url = control, deployment, apply, http_url, url

    def plans(self, state: Any, reports: list[Any]) -> dict[str, Any]:
        """{report's model: PlannedChange, or the one-line reason there is none} for each drifted model whose
        proposal changes something."""
        from trtspec.cli._deployment import plan
        from trtspec.errors import TrtspecError

        if self.deployment is None:
            return {}
        out: dict[str, Any] = {}
        for report in reports:
            wanted = wanted_change(report)
            if wanted is None:
                continue
            name = report.model.split("/")[0]
            try:
                out[report.model] = plan(self.deployment, wanted, model=name, http_url=self.http_url, url=self.url,
                                         current=state.served.get(name))
            except (TrtspecError, click.UsageError) as exc:
                out[report.model] = " ".join(str(getattr(exc, "message", exc)).split())
        return out

    def act(self, state: Any, reports: list[Any], plans: dict[str, Any]) -> list[str]:
        """--apply: the torch flavour's live reload, or each plan's files written and its commands printed."""
        from trtspec.cli._deployment import apply_lines, served, write_files

        if self.control is not None:
            return list(state.apply(reports, self.control))
        if not self.apply or self.deployment is None:
            return []
        lines: list[str] = []
        for model, change in plans.items():
            if isinstance(change, str) or not (change.files or change.commands) or change.refused:
                continue
            name = model.split("/")[0]
            lines.append(f"applied: {name} ({change.form}, takes effect by {change.how}): {change.summary}")
            lines += [f"  {line}" for line in write_files(change)]
            lines += apply_lines(change)
            now = served(self.deployment, name, max_k=state.served[name].max_k if name in state.served else 0)
            if now is not None:
                state.served[name] = now
            state.reset_drift()
        return lines


def wanted_change(report: Any) -> Any:
    """The change a drifted model's report asks for, as `Monitor.apply` reads it: its proposed schedule (with its
    default k), or its recommended k where the proposal is one k and no schedule is served; None when it asks for
    none (no drift, keep, no data)."""
    from trtspec.contracts.control import SpeculationChange

    if report.drift is None or not report.drift.drifted:
        return None
    proposal = report.schedule
    if proposal is not None and not (proposal.single_k and (proposal.served is None
                                                            or proposal.served.schedule is None)):
        if proposal.action != "change":
            return None
        return SpeculationChange(default_k=proposal.default_k, schedule=proposal.schedule, replace_schedule=True)
    rec = report.recommendation
    if rec is not None and rec.action in ("reduce_k", "increase_k", "retrain_draft") \
            and rec.recommended_k != rec.current_k:
        return SpeculationChange(default_k=rec.recommended_k)
    return None


def _speculating(sample: Any, models: set[str], *, unlabelled: bool = False) -> list[str]:
    """The models of a scrape that speculate by their `method` label (and, with `unlabelled`, those of sources that
    label none), among --model's when given."""
    return sorted({m.model for m in sample.models if m.method != BASELINE and (m.method or unlabelled)
                   and (not models or m.model in models)})


def _deployment_served(sample: Any, models: set[str], deployment: Any, max_k: int) -> dict[str, Any]:
    """What each model the metrics show serves, read from the deployment's files (a source that labels no method,
    trtllm-serve's /metrics, a tap or TensorRT-LLM's families, included: the files say what it speculates with)."""
    from trtspec.cli._deployment import served

    names = _speculating(sample, models, unlabelled=True)
    out = {}
    for name in names:
        now = served(deployment, name, max_k=max_k)
        if now is not None:
            out[name] = now
    return out


def _live(scrape: Any, state: Any, url: str, interval_s: float, stop_at: float, actor: _Actor) -> bool:
    """The dashboard, refreshed every interval until stop_at; whether any window had reports."""
    from rich.live import Live

    from trtspec.ops.dashboard import render

    seen = False
    with Live(render([], source=url), refresh_per_second=4) as live:
        while time.monotonic() < stop_at:
            _collect(scrape, state, interval_s, min(stop_at, time.monotonic() + interval_s))
            reports = state.reports()
            seen = seen or bool(reports)
            plans = actor.plans(state, reports)
            notes = actor.act(state, reports, plans)
            notes += [f"{model}: no planned change: {plan}" if isinstance(plan, str) else
                      f"{model}: planned ({plan.form}, {plan.how}): {plan.summary}"
                      + "".join(f"; $ {line}" for line in plan.command_lines()) for model, plan in plans.items()]
            live.update(render(reports, source=url, note="; ".join(notes)))
    return seen


def _control(grpc_url: str | None, repo: Path | None) -> Any:
    """The server the monitor acts on with --apply: Triton model control (trtspec.triton.control)."""
    from trtspec.triton.control import TritonControl

    return TritonControl(str(grpc_url), repo)
