"""`trtspec set-k` and `trtspec rollout-draft`: change a running torch-flavour deployment without failing a request.

Thin: parse, call trtspec.triton.control / trtspec.triton.rollout, print. Both refuse bad input (a k outside the model's
range, a draft whose vocabulary differs from the target's) before anything on the server or on disk changes.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from trtspec.cli._types import COUNT, HOST_PORT, FiniteFloat


@click.command("set-k")
@click.argument("k", type=COUNT)
@click.option("--url", type=HOST_PORT, default="127.0.0.1:8001", show_default=True, metavar="HOST:PORT",
              help="The Triton server's gRPC address.")
@click.option("--model", default="tensorrt_llm", show_default=True,
              help="The engine model whose default k changes (the torch flavour's tensorrt_llm).")
@click.option("--repo", type=click.Path(path_type=Path, file_okay=False, exists=True), default=None,
              help="The repository the server runs: the new k is also written into MODEL/config.pbtxt (atomically), "
                   "so a restart keeps it. Without it the change lasts until the server restarts.")
@click.option("--timeout", "timeout_s", type=FiniteFloat(min=1.0), default=300.0, show_default=True,
              help="Seconds the reload may take.")
@click.option("--dry-run", is_flag=True, help="Check the server, the model, k and --repo; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the change as JSON.")
def set_k(k: int, url: str, model: str, repo: Path | None, timeout_s: float, dry_run: bool, as_json: bool) -> None:
    """Set the default k (draft tokens per step of a request that does not say) of a running model to K.

    The model is reloaded through Triton's model-control API with its live configuration carrying the new k;
    requests in flight finish on the old instance, later ones get K. 0 turns speculation off.

    Examples:

    \b
        trtspec set-k 2 --repo out/triton/tiny-torch
        trtspec set-k 0 --url 127.0.0.1:8001 --dry-run
    """
    from trtspec.triton.control import set_default_k

    change = set_default_k(url, model, k, repo=repo, dry_run=dry_run, timeout_s=timeout_s)
    if as_json:
        click.echo(json.dumps({"model": change.model, "old_k": change.old_k, "new_k": change.new_k,
                               "persisted": str(change.persisted) if change.persisted else None,
                               "note": change.note, "dry_run": dry_run}))
        return
    verb = "would change" if dry_run else "changed"
    click.echo(f"{change.model}: default k {verb} {change.old_k} -> {change.new_k} on {url}")
    click.echo(f"written to {change.persisted}" if change.persisted else change.note)


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
