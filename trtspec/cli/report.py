"""`trtspec report`: results JSONL -> Markdown report, PNG plots and a recommendation (optionally into a config)."""

from __future__ import annotations

import click

from trtspec.cli._types import FiniteFloat


@click.command()
@click.argument("results", type=click.Path(dir_okay=False))
@click.option("--out", "-o", required=True, type=click.Path(file_okay=False), help="Directory for report.md + PNGs.")
@click.option("--price-per-hour", type=FiniteFloat(min=0.0), help="$ per device-hour, for cost per 1M output tokens.")
@click.option("--gpu", "gpus", default="H100,H200", show_default=True,
              help="Comma list of GPUs for the roofline projection (always labelled a projection).")
@click.option("--write-config", type=click.Path(dir_okay=False),
              help="Create or update this build config YAML with the recommended method, draft and max_draft_len.")
@click.option("--temperature", type=FiniteFloat(min=0.0), help="Which temperature's recommendation --write-config uses.")
@click.option("--timing", type=click.Choice(["auto", "wall", "cpu"]), default="auto", show_default=True,
              help="Seconds used for speedups: wall clock, or process CPU (steady on a shared CPU); auto = cpu for "
                   "CPU runs that recorded it.")
@click.option("--no-plots", is_flag=True, help="Markdown only.")
def report(results: str, out: str, price_per_hour: float | None, gpus: str, write_config: str | None,
           temperature: float | None, timing: str, no_plots: bool) -> None:
    """Render RESULTS (from `trtspec sweep`) into OUT/report.md with plots and a recommendation block.

    Examples:

    \b
        trtspec report results.jsonl --out report/
        trtspec report results.jsonl --out report/ --price-per-hour 2.5 --write-config build.yaml
    """
    from trtspec.sweep.grid import parse_str_list
    from trtspec.sweep.report import render_report
    from trtspec.sweep.report import write_config as write_build_config

    made = render_report(results, out, price_per_hour=price_per_hour, gpus=parse_str_list(gpus, "gpu"),
                         plots=not no_plots,
                         timing=timing)
    click.echo(f"report: {made.markdown} ({len(made.plots)} plots)")
    for rec in made.recommendations:
        click.echo(f"  T={rec.temperature:g} batch {rec.batch_size}: {rec.variant if rec.k else 'none'} "
                   f"k={rec.k} -> {rec.speedup:.2f}x predicted")
    if write_config:
        rows = made.results.rows
        target = rows[0].params["model"] if rows else None
        data = write_build_config(write_config, made.recommendations, target=target, temperature=temperature)
        click.echo(f"wrote {write_config}: method={data.get('method')} max_draft_len={data.get('max_draft_len')}")
