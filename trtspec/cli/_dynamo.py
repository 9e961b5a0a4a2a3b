"""`trtspec serve --dynamo N`: NVIDIA Dynamo's OpenAI frontend plus N trtspec workers on this machine until Ctrl-C.

SIGINT, SIGTERM and SIGHUP stop it cleanly (workers drain first, then the frontend), also while the workers load;
if `trtspec serve` itself is killed (SIGKILL), each process's supervisor stops it (trtspec/dynamo/launch.py). A worker
that exits while serving is reported and the frontend keeps serving with the others.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from trtspec.cli._types import COUNT
from trtspec.dynamo.launch import ROUTER_MODES
from trtspec.methods import engine_methods


class _Stopped(Exception):
    pass


def dynamo_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The options of a Dynamo deployment (they only apply with --dynamo)."""
    options = [
        click.option("--model", default="tiny", show_default=True, help="[--dynamo] Target: embedded name or HF dir."),
        click.option("--draft", default="tiny-draft", show_default=True, help="[--dynamo] Draft model."),
        click.option("--medusa", default=None, help="[--dynamo] Medusa heads (method medusa)."),
        click.option("--method", type=click.Choice(engine_methods()), default="draft_target", show_default=True,
                     help="[--dynamo] Speculative method every request runs."),
        click.option("--k", type=COUNT, default=4, show_default=True, help="[--dynamo] Draft tokens per step."),
        click.option("--max-k", type=click.IntRange(1, 1024), default=8, show_default=True,
                     help="[--dynamo] Largest k the engine accepts."),
        click.option("--served-model-name", default=None, help="[--dynamo] OpenAI model name (default: the model's)."),
        click.option("--system-port", type=click.IntRange(1, 32767), default=8081, show_default=True,
                     help="[--dynamo] First worker's health and /metrics port (worker i: +i)."),
        click.option("--router-mode", type=click.Choice(ROUTER_MODES), default="round-robin", show_default=True,
                     help="[--dynamo] How the frontend picks a worker."),
        click.option("--migration-limit", type=click.IntRange(0, 100), default=3, show_default=True,
                     help="[--dynamo] Times the frontend moves a request to another worker when its worker dies."),
        click.option("--threads", type=click.IntRange(1, 4096), default=1, show_default=True,
                     help="[--dynamo] torch CPU threads per worker."),
        click.option("--log-dir", type=click.Path(path_type=Path, file_okay=False), default=None,
                     help="[--dynamo] Keep each process's log here (default: a temporary directory)."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def serve_dynamo(workers: int, *, http_port: int, startup_timeout: float, dry_run: bool, model: str,
                 draft: str | None, medusa: str | None, method: str, k: int, max_k: int,
                 served_model_name: str | None, system_port: int, router_mode: str, migration_limit: int,
                 threads: int, log_dir: Path | None) -> None:
    from trtspec.dynamo.launch import DynamoDeployment, check_dynamo, plan_deployment
    from trtspec.dynamo.worker import check_params
    from trtspec.errors import ServerError
    from trtspec.ports import check_ports_free
    from trtspec.triton.engine_params import EngineParams

    params = EngineParams(target=model, method=method, draft=draft, medusa=medusa, max_k=max_k, default_k=k)
    check_params(params)  # models and method before anything starts (exit 2 naming the option)
    plan = plan_deployment(params, workers=workers, http_port=http_port, system_port=system_port,
                           router_mode=router_mode, migration_limit=migration_limit, threads=threads,
                           served_model_name=served_model_name)
    check_dynamo()
    if dry_run:
        check_ports_free(plan.ports())
        click.echo(plan.shell())
        return
    deployment = DynamoDeployment(plan, startup_timeout=startup_timeout, log_dir=log_dir)
    received: list[int] = []

    def handler(signum: int, _frame: object) -> None:
        received.append(signum)
        if len(received) == 1:  # later signals must not interrupt the stop
            raise _Stopped

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        try:
            deployment.start()
        except (_Stopped, ServerError):
            deployment.stop()
            if not received:
                raise
            raise SystemExit(128 + received[0]) from None
        for name, why in deployment.failed.items():
            click.echo(f"Warning: {name} {why}", err=True)
        serving = len(plan.processes) - 1 - len(deployment.failed)
        click.echo(f"Dynamo ready: {plan.url} (model {plan.model!r}, {serving} worker(s); worker metrics on ports "
                   f"{', '.join(map(str, plan.system_ports))})")
        click.echo(f"Try: curl {plan.url}/completions -H 'content-type: application/json' "
                   f"-d '{{\"model\": \"{plan.model}\", \"prompt\": \"def fib(n):\", \"max_tokens\": 32}}'   "
                   "(Ctrl-C stops)")
        click.echo("Monitor: trtspec monitor --metrics "
                   + ",".join(f"127.0.0.1:{port}" for port in plan.system_ports))
        code = _watch(deployment)
    except _Stopped:
        code = None
    finally:
        codes = deployment.stop()
        for s, h in previous.items():
            signal.signal(s, h)
    if code is not None:
        raise ServerError(f"the Dynamo frontend exited ({code}); the workers were stopped ({codes})",
                          hint=f"see the logs in --log-dir ({log_dir})" if log_dir else "rerun with --log-dir DIR")
    click.echo("Dynamo deployment stopped.")


def _watch(deployment: Any) -> int:
    """Until the frontend exits (returns its code) or a signal arrives; reports workers that exit meanwhile."""
    reported: set[str] = set(deployment.failed)
    while True:
        alive = deployment.alive()
        if not alive.get("frontend", False):
            return deployment.processes["frontend"].returncode
        for name, up in alive.items():
            if not up and name not in reported:
                reported.add(name)
                left = sum(1 for n, a in alive.items() if a and n != "frontend")
                click.echo(f"Warning: {name} exited ({deployment.processes[name].returncode}); the frontend keeps "
                           f"serving with {left} worker(s)", err=True)
        time.sleep(1.0)
