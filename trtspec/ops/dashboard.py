"""Rendering of the monitor's reports: a rich panel per model (live or once), and JSON for scripts.

Pure formatting: it reads `ModelReport`s and never scrapes or decides anything.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from trtspec.ops.monitor import ModelReport


def _num(value: float | None, fmt: str = "{:.2f}", none: str = "-") -> str:
    return none if value is None else fmt.format(value)


def _per_pos(values: Sequence[float], baseline: Sequence[float] | None) -> str:
    parts = []
    for i, value in enumerate(values):
        base = f" ({baseline[i]:.2f})" if baseline and i < len(baseline) else ""
        parts.append(f"{value:.2f}{base}")
    return "  ".join(parts) or "-"


def _bucket(row: Any) -> str:
    """One batch size of a schedule proposal: proposed k and prediction (served k's prediction, measured; drafts)."""
    seen = f"{row.drafts:.0f} drafts" if row.acceptance == "window" else "pooled"
    served = "" if row.k == row.served_k else f"now k={row.served_k} {row.served_speedup:.2f}x, "
    measured = "" if row.measured_speedup is None else f"measured {row.measured_speedup:.2f}x; "
    return f"{row.batch_size}: k={row.k} {row.speedup:.2f}x ({served}{measured}{seen})"


def model_panel(report: ModelReport) -> Any:
    """One model's numbers as a rich Panel."""
    from rich.panel import Panel
    from rich.table import Table

    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    drafting = report.num_drafts > 0
    if drafting:
        table.add_row("mean accepted length", _num(report.mean_acceptance_length))
        table.add_row("acceptance rate", _num(report.acceptance_rate))
        table.add_row("acceptance per position", _per_pos(report.acceptance_per_pos, report.baseline_per_pos)
                      + ("   (baseline)" if report.baseline_per_pos else "")
                      + ("   [dim]estimated: the source publishes totals only (constant alpha)[/dim]"
                         if report.per_pos_estimated else ""))
    speed = f"{report.tokens_per_s:.1f}"
    if report.plain_tokens_per_s:
        speed += f"   plain decoding {report.plain_tokens_per_s:.1f}   ratio {_num(report.speedup, '{:.2f}x')}"
    table.add_row("effective tokens/s", speed)
    if report.cost_per_million is not None:
        table.add_row("cost per 1M tokens", f"${report.cost_per_million:.2f}")
    table.add_row("requests", f"{report.requests:.0f}   in flight {_num(report.concurrency, '{:.1f}')}   latency "
                  f"p50 {_num(report.latency_p50_s, '{:.2f}s')} p95 {_num(report.latency_p95_s, '{:.2f}s')}   "
                  f"per token p50 {_num(report.time_per_output_token_p50_s, '{:.3f}s')}")
    if report.missing_iterations:
        table.add_row("missed", f"[yellow]{report.missing_iterations:.0f} iteration rows never reached this monitor: "
                      "another reader drains trtllm-serve's /metrics, or more rows than its buffer holds arrived "
                      "between two scrapes (shorten --interval)[/yellow]")
    if report.note:
        table.add_row("note", f"[yellow]{report.note}[/yellow]")
    if report.drift is not None:
        drift = report.drift
        rate = drift.test == "acceptance_rate"
        stats = "  ".join(f"{'rate' if rate else p.position}:{p.statistic:.1f}" for p in drift.positions)
        where = "in the acceptance rate" if rate else f"at position(s) {', '.join(map(str, drift.alarmed_positions))}"
        verdict = f"[red]DRIFT {where}[/red]" if drift.drifted else "[green]no drift[/green]"
        table.add_row("drift (CUSUM)", f"{verdict}   S {stats}   h {drift.threshold:.1f} "
                      f"(false alarms <= {drift.alpha:g} per {drift.horizon} scrapes)")
    if report.recommendation is not None:
        rec = report.recommendation
        style = {"keep": "green", "no_data": "dim", "retrain_draft": "red"}.get(rec.action, "yellow")
        table.add_row("recommendation", f"[{style}]{rec.message}[/{style}]")
    if report.schedule is not None:
        plan = report.schedule
        style = {"keep": "green", "no_data": "dim"}.get(plan.action, "yellow")
        if plan.action == "no_data":
            table.add_row("schedule", f"[dim]served {plan.served_text()}; {plan.message}[/dim]")
        else:
            verb = "keep" if plan.action == "keep" else "propose"
            table.add_row("schedule", f"served {plan.served_text()}   [{style}]{verb} {plan.text()}[/{style}]")
            table.add_row("by batch size", "  ".join(_bucket(b) for b in plan.buckets))
    if report.speedup and report.mean_acceptance_length and report.speedup > 1.5 * report.mean_acceptance_length:
        table.add_row("note", "the ratio to plain decoding exceeds what acceptance allows: the baseline's throughput "
                              "was measured under other conditions (load, threads, hardware); re-sweep where it serves")
    if report.resets:
        table.add_row("note", f"{report.resets} counter reset(s) in the window (the model reloaded)")
    title = f"{report.model}  {report.method or ''}  k={_num(report.k, '{}')}  window {report.window_s:.0f}s"
    border = "red" if report.drift is not None and report.drift.drifted else "blue"
    return Panel(table, title=title, title_align="left", border_style=border)


def render(reports: Sequence[ModelReport], *, source: str, note: str = "") -> Any:
    """Every model's panel (or a line saying why there is nothing yet)."""
    from rich.console import Group
    from rich.text import Text

    header = Text(f"trtspec monitor  {source}{'  ' + note if note else ''}", style="bold")
    if not reports:
        return Group(header, Text("no trtspec series yet: waiting for a second scrape / for traffic", style="dim"))
    return Group(header, *(model_panel(r) for r in reports))


def to_text(reports: Sequence[ModelReport], *, source: str, width: int = 110) -> str:
    """The dashboard as plain text (what a terminal shows, without colour)."""
    import io

    from rich.console import Console

    console = Console(record=True, width=width, file=io.StringIO(), color_system=None)
    console.print(render(reports, source=source))
    return console.export_text()


def to_json(reports: Sequence[ModelReport]) -> str:
    return json.dumps([r.to_dict() for r in reports], indent=2, default=_jsonable)


def _jsonable(value: object) -> object:
    if isinstance(value, float) and value != value:
        return None
    return str(value)
