"""`trtspec serve --dynamo N [SOURCE]`: NVIDIA Dynamo's OpenAI frontend plus N trtspec workers on this machine until
Ctrl-C. The workers serve SOURCE's engine configuration (a torch build output, or the repository `trtspec deploy`
rendered from it: what Triton serves), or the embedded pair, with the engine flags applied over it.

SIGINT, SIGTERM and SIGHUP stop it cleanly (workers drain first, then the frontend), also while the workers load;
if `trtspec serve` itself is killed (SIGKILL), each process's supervisor stops it (trtspec/dynamo/launch.py). A worker
that exits while serving is reported and the frontend keeps serving with the others.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from trtspec.cli._engine import apply, flag_of
from trtspec.cli._signals import run_supervised
from trtspec.contracts.engine import EngineConfig
from trtspec.dynamo.launch import ROUTER_MODES
from trtspec.errors import UsageError
from trtspec.ports import check_ports_free

DEFAULT_ENGINE = EngineConfig(target="tiny", draft="tiny-draft")  # without SOURCE: the embedded pair, draft_target


def dynamo_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The options of a Dynamo deployment (they only apply with --dynamo); the engine's are `_engine.FLAGS`."""
    options = [
        click.option("--served-model-name", default=None,
                     help="[--dynamo, --trtllm-serve] OpenAI model name (default: the model's)."),
        click.option("--system-port", type=click.IntRange(1, 32767), default=8081, show_default=True,
                     help="[--dynamo] First worker's health and /metrics port (worker i: +i)."),
        click.option("--router-mode", type=click.Choice(ROUTER_MODES), default="round-robin", show_default=True,
                     help="[--dynamo] How the frontend picks a worker."),
        click.option("--migration-limit", type=click.IntRange(0, 100), default=3, show_default=True,
                     help="[--dynamo] Times the frontend moves a request to another worker when its worker dies."),
        click.option("--threads", type=click.IntRange(1, 4096), default=1, show_default=True,
                     help="[--dynamo, --trtllm-serve] torch CPU threads per worker (of the server)."),
        click.option("--log-dir", type=click.Path(path_type=Path, file_okay=False), default=None,
                     help="[--dynamo] Keep each process's log here (default: a temporary directory)."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def dynamo_engine(source: Path | None, flags: dict[str, Any]) -> EngineConfig:
    """What the workers serve: SOURCE's engine configuration (a torch build output, or a torch-flavour repository:
    what its tensorrt_llm model serves, its newest version's checkpoints included), else the embedded pair; the engine
    flags applied over it. Checked before anything starts (exit 2 naming the flag, 3 for a missing package)."""
    return resolve_engine(None if source is None else _source_engine(source), flags)


def resolve_engine(base: EngineConfig | None, flags: dict[str, Any]) -> EngineConfig:
    """The engine flags over `base` (None: the embedded pair), checked as every `trtspec serve` mode that runs the
    reference engine checks it (`serve --dynamo`, `serve --trtllm-serve`): errors name the flag."""
    from trtspec.spec.host import check

    config = apply(DEFAULT_ENGINE if base is None else base, flags)
    check(config, spell=lambda name: flag_of(name) or name)
    return config


def _source_engine(source: Path) -> EngineConfig:
    from trtspec.contracts.build_output import MANIFEST
    from trtspec.triton.build_output import read_build_output
    from trtspec.triton.server import read_repo_record

    if (source / MANIFEST).is_file():
        build = read_build_output(source)
        if build.backend != "torch":
            raise UsageError(f"SOURCE {source} is a TensorRT-LLM build; Dynamo's trtspec workers run the reference "
                             "engine", hint="build with backend: torch (the same config), or serve the engines with "
                                            "`trtspec k8s` (Dynamo's TensorRT-LLM worker)")
        return build.engine
    record = read_repo_record(source)
    if not record:
        raise UsageError(f"SOURCE {source} is neither a build output (no {MANIFEST}) nor a repository rendered by "
                         "`trtspec deploy` (no trtspec-repo.json)", hint="pass the output of `trtspec build` or of "
                                                                          "`trtspec deploy --backend torch`")
    if record.backend != "torch":
        raise UsageError(f"SOURCE {source} serves TensorRT-LLM engines (backend {record.backend!r}); "
                         "Dynamo's trtspec workers run the reference engine",
                         hint="deploy the torch build (`trtspec deploy --backend torch`) and serve that")
    from trtspec.triton.control import config_params
    from trtspec.triton.rollout import model_versions
    from trtspec.triton.served_config import for_version

    model = source / "tensorrt_llm"
    versions = model_versions(model)
    config = config_params(model / "config.pbtxt")
    return for_version(config, model / str(versions[-1])) if versions else config


def serve_dynamo(workers: int, source: Path | None, *, http_port: int, startup_timeout: float, dry_run: bool,
                 served_model_name: str | None, system_port: int, router_mode: str, migration_limit: int,
                 threads: int, log_dir: Path | None, **flags: Any) -> None:
    from trtspec.dynamo.launch import DynamoDeployment, check_dynamo, plan_deployment
    from trtspec.errors import ServerError

    config = dynamo_engine(source, flags)
    plan = plan_deployment(config, workers=workers, http_port=http_port, system_port=system_port,
                           router_mode=router_mode, migration_limit=migration_limit, threads=threads,
                           served_model_name=served_model_name)
    check_dynamo()
    if dry_run:
        check_ports_free(plan.ports())
        click.echo(plan.shell())
        return
    deployment = DynamoDeployment(plan, startup_timeout=startup_timeout, log_dir=log_dir)

    def serve() -> int | None:
        for name, why in deployment.failed.items():
            click.echo(f"Warning: {name} {why}", err=True)
        serving = len(plan.processes) - 1 - len(deployment.failed)
        click.echo(f"Dynamo ready: {plan.url} (model {plan.model!r}, method {config.method}, {serving} worker(s); "
                   f"worker metrics on ports {', '.join(map(str, plan.system_ports))})")
        click.echo(f"Try: curl {plan.url}/completions -H 'content-type: application/json' "
                   f"-d '{{\"model\": \"{plan.model}\", \"prompt\": \"def fib(n):\", \"max_tokens\": 32}}'   "
                   "(Ctrl-C stops)")
        click.echo("Monitor: trtspec monitor --metrics " + ",".join(f"127.0.0.1:{port}" for port in plan.system_ports))
        return _watch(deployment)

    code, codes = run_supervised(deployment.start, serve, deployment.stop)
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
