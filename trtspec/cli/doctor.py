"""`trtspec doctor`: what this machine can run; with --llm-api, whether an LLM-API options file is one a release reads."""

from __future__ import annotations

import json
from pathlib import Path

import click


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the checks (or the --llm-api result) as JSON.")
@click.option("--llm-api", "llm_api", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="Validate an extra_llm_api_options YAML file instead: with the installed tensorrt_llm's own "
                   "classes where it imports, else with trtspec's facts of --trtllm-version.")
@click.option("--trtllm-version", metavar="VERSION",
              help="TensorRT-LLM release whose LLM-API facts --llm-api checks against (default: the installed "
                   "tensorrt_llm's version, else the newest release with facts).")
def doctor(as_json: bool, llm_api: Path | None, trtllm_version: str | None) -> None:
    """Report versions, tritonserver, TensorRT-LLM, GPUs, the embedded models and the shipped templates.

    Exits 0 when everything required is present; optional pieces (TensorRT-LLM, GPUs) are reported, not required.
    With --llm-api FILE: exits 0 when the file is valid, 2 when it is not (each problem names the key, the release
    and the nearest valid key or the rule), and says which validator ran.

    Examples:

    \b
        trtspec doctor
        trtspec doctor --json
        trtspec doctor --llm-api out/build/llm-api/extra_llm_api_options.yaml --trtllm-version 1.2.1
    """
    if llm_api is not None:
        _llm_api(llm_api, trtllm_version, as_json)
        return
    if trtllm_version is not None:
        from trtspec.errors import UsageError

        raise UsageError("--trtllm-version goes with --llm-api FILE",
                         hint="trtspec doctor --llm-api FILE --trtllm-version VERSION")
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


def _llm_api(path: Path, version: str | None, as_json: bool) -> None:
    """Validate one options file; print the validator and the problems; exit 2 when there are any."""
    from trtspec.doctor import llm_api_check

    validation, version = llm_api_check(path, version)
    if as_json:
        click.echo(json.dumps({"file": str(path), "trtllm_version": version, "validator": validation.validator,
                               "ok": validation.ok, "problems": list(validation.problems),
                               "note": validation.note}, indent=2))
    else:
        verdict = "valid" if validation.ok else f"{len(validation.problems)} problem(s)"
        click.echo(f"{path}: {verdict} for TensorRT-LLM {version} (validator: {validation.validator})")
        for problem in validation.problems:
            click.echo(f"  {problem}")
        if validation.note:
            click.echo(f"  note: {validation.note}")
    if not validation.ok:
        raise SystemExit(2)
