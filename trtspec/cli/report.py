"""`trtspec report`: results JSONL -> Markdown report, PNG plots, a recommendation and the speculation schedule
(optionally written into a build config)."""

from __future__ import annotations

import click

from trtspec.cli._types import FiniteFloat
from trtspec.sweep.record_fields import MAX_BATCH_SIZE


@click.command()
@click.argument("results", type=click.Path(dir_okay=False))
@click.option("--out", "-o", required=True, type=click.Path(file_okay=False), help="Directory for report.md + PNGs.")
@click.option("--price-per-hour", type=FiniteFloat(min=0.0), help="$ per device-hour, for cost per 1M output tokens.")
@click.option("--gpu", "gpus", default="H100,H200", show_default=True,
              help="Comma list of GPUs for the roofline projection (always labelled a projection).")
@click.option("--max-batch-size", type=click.IntRange(min=1, max=MAX_BATCH_SIZE),
              help="The schedule's batch sizes: 1..N. Default: the largest calibrated or measured batch size; with "
                   "--write-config, the build config's engine.max_batch_size.")
@click.option("--gate-batch-size", type=click.IntRange(min=1), default=1, show_default=True,
              help="The batch size at which the acceptance gate's threshold is the break-even (1: the gate closes "
                   "only when speculation would lose even at the lightest load).")
@click.option("--write-config", type=click.Path(dir_okay=False),
              help="Create or update this build config YAML with the recommended method, max_draft_len = the k at "
                   "batch 1, and llm_api: draft_len_schedule, max_concurrency and the target release's gate (1.2.1: "
                   "acceptance_window, acceptance_length_threshold in accepted draft tokens per iteration) where the "
                   "target reads them. Checked before writing; the other keys keep their order; comments are not kept.")
@click.option("--load", metavar="B:W,...", help="The load profile the schedule serves: batch size:share of the time, "
                                            "e.g. 1:0.2,4:0.5,16:0.3 (default: the sweep's concurrencies, alike).")
@click.option("--force", is_flag=True, help="With --write-config: write into a config whose target or draft is not "
                                            "the pair the sweep measured.")
@click.option("--method", help="With --write-config: the variant to write (e.g. draft_target, or "
                               "draft_target:tiny-draft); default: the best mean speedup over the batch sizes.")
@click.option("--temperature", type=FiniteFloat(min=0.0),
              help="With --write-config: which temperature's schedule (default: the lowest swept).")
@click.option("--dry-run", is_flag=True, help="With --write-config: print the diff and write nothing.")
@click.option("--timing", type=click.Choice(["auto", "wall", "cpu"]), default="auto", show_default=True,
              help="Seconds used for speedups: wall clock, or process CPU (steady on a shared CPU); auto = cpu for "
                   "CPU runs that recorded it.")
@click.option("--no-plots", is_flag=True, help="Markdown only.")
def report(results: str, out: str, price_per_hour: float | None, gpus: str, max_batch_size: int | None,
           gate_batch_size: int, write_config: str | None, load: str | None, force: bool, method: str | None,
           temperature: float | None, dry_run: bool, timing: str, no_plots: bool) -> None:
    """Render RESULTS (from `trtspec sweep`) into OUT/report.md with plots, a recommendation block and the
    speculation schedule per method (k per batch size, max_concurrency, the acceptance gate, one PNG per
    temperature).

    Examples:

    \b
        trtspec report results.jsonl --out report/ --price-per-hour 2.5 --load 1:0.2,4:0.5,16:0.3
        trtspec report results.jsonl --out report/ --write-config build.yaml
        trtspec report results.jsonl --out report/ --write-config build.yaml --method ngram --dry-run
    """
    from trtspec.errors import UsageError
    from trtspec.sweep.grid import parse_str_list
    from trtspec.sweep.report import render_report
    from trtspec.sweep.schedule_report import write_schedule_config

    for name, value in (("--method", method), ("--temperature", temperature), ("--dry-run", dry_run or None),
                        ("--force", force or None)):
        if value is not None and not write_config:
            raise UsageError(f"{name} is an option of --write-config", hint="add --write-config BUILD.yaml")
    made = render_report(results, out, price_per_hour=price_per_hour, gpus=parse_str_list(gpus, "gpu"),
                         plots=not no_plots, timing=timing,
                         max_batch_size=max_batch_size, gate_batch_size=gate_batch_size, load=load)
    for warning in made.results.warnings:
        click.echo(f"warning: {warning}", err=True)
    click.echo(f"report: {made.markdown} ({len(made.plots)} plots)")
    for rec in made.recommendations:
        click.echo(f"  T={rec.temperature:g} batch {rec.batch_size}: {rec.variant if rec.k else 'none'} "
                   f"k={rec.k} -> {rec.speedup:.2f}x predicted")
    for sched in made.schedules:
        window, threshold = sched.gate.keys
        gate = f"{threshold} {sched.gate.threshold:g}, {window} {sched.gate.window}" if sched.gate.set else "no gate"
        what = ("no speculation" if sched.max_draft_len == 0 else f"draft_len_schedule {sched.schedule.text()}, "
                f"max_concurrency {sched.max_concurrency if sched.max_concurrency is not None else '-'}, {gate}")
        click.echo(f"  schedule {sched.variant} T={sched.temperature:g}: {what} ({sched.profile_speedup:.2f}x over the "
                   "load profile)")
        if sched.profile_note:
            click.echo(f"    note: {sched.profile_note}")
    if write_config:
        done = write_schedule_config(write_config, made.results, method=method, temperature=temperature,
                                     max_batch_size=max_batch_size, gate_batch_size=gate_batch_size,
                                     dry_run=dry_run, load=load, force=force)
        rec = done.recommendation
        if dry_run:
            click.echo(done.diff or f"{write_config}: no change", nl=not done.diff)
        what = ("no speculation (method none)" if rec.max_draft_len == 0 else
                f"max_draft_len={rec.max_draft_len} draft_len_schedule {rec.schedule.text()}")
        click.echo(f"{'would write' if dry_run else 'wrote'} {write_config}: method={rec.method} "
                   f"T={rec.temperature:g} {what}")
        for note in done.notes:
            click.echo(f"  note: {note}")
