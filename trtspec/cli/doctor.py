"""`trtspec doctor`: what this machine can run."""

from __future__ import annotations

import json

import click


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON.")
def doctor(as_json: bool) -> None:
    """Report versions, tritonserver, TensorRT-LLM, GPUs, the embedded models and the shipped templates.

    Exits 0 when everything required is present; optional pieces (TensorRT-LLM, GPUs) are reported, not required.

    Examples:

    \b
        trtspec doctor
        trtspec doctor --json
    """
    from rich.console import Console
    from rich.table import Table

    from trtspec.doctor import run_checks

    checks = run_checks()
    if as_json:
        click.echo(json.dumps([c.__dict__ for c in checks], indent=2))
    else:
        table = Table(title="trtspec doctor")
        for col in ("check", "status", "detail"):
            table.add_column(col)
        for c in checks:
            word = c.label or ("missing" if c.required else "unavailable")
            status = "[green]ok[/]" if c.ok else (f"[red]{word}[/]" if c.required else f"[yellow]{word}[/]")
            table.add_row(c.name, status, c.detail)
        Console().print(table)
    if any(c.required and not c.ok for c in checks):
        raise SystemExit(1)
