"""`trtspec serve`: run a real tritonserver on a model repository until Ctrl-C (or, with --dynamo N, a local NVIDIA
Dynamo deployment: cli/_dynamo.py; with --trtllm-serve, trtllm-serve's HTTP contract: cli/_trtllm_serve.py).

SIGINT, SIGTERM and SIGHUP stop it cleanly, also while the models are still loading; if `trtspec serve` itself is
killed (SIGKILL), the supervisor stops tritonserver and removes its temporary directory (trtspec/supervise.py).
A busy port is refused before anything starts (exit 2, naming the port and its owner)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import click

from trtspec.cli._dynamo import dynamo_options, serve_dynamo
from trtspec.cli._engine import ENGINE_FLAGS, FLAGS, EngineCommand, engine_flags
from trtspec.cli._signals import Stopped, exit_code, stop_signals
from trtspec.cli._trtllm_serve import OPTIONS as TRTLLM_ONLY
from trtspec.cli._trtllm_serve import serve_trtllm, trtllm_serve_options
from trtspec.cli._types import FiniteFloat


@click.command(cls=EngineCommand)
@click.argument("repo", type=click.Path(path_type=Path, exists=True, file_okay=False), required=False)
@click.option("--grpc-port", type=click.IntRange(1, 65535), default=8001, show_default=True, help="gRPC port.")
@click.option("--http-port", type=click.IntRange(1, 65535), default=8000, show_default=True, help="HTTP port.")
@click.option("--metrics-port", type=click.IntRange(1, 65535), default=8002, show_default=True,
              help="Prometheus metrics port (/metrics).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (0.0.0.0 for all).")
@click.option("--load-model", "load_models", multiple=True,
              help="Load only these models (explicit model control); repeatable.")
@click.option("--startup-timeout", type=FiniteFloat(min=1.0), default=300.0, show_default=True, help="Seconds to wait for ready.")
@click.option("--log-file", type=click.Path(path_type=Path), default=None,
              help="Write tritonserver's (--trtllm-serve: the server's) log here (default: a temporary file, shown on "
                   "failure).")
@click.option("--dry-run", is_flag=True, help="Check what a start would (repository, binary, free ports); print the server's command and exit.")
@click.option("--dynamo", "dynamo_workers", type=click.IntRange(1, 64), default=None, metavar="N",
              help="Instead of Triton: NVIDIA Dynamo's OpenAI frontend (--http-port) and N trtspec workers serving "
                   "REPO (a torch repository or build output) or --model.")
@click.option("--trtllm-serve", "trtllm_serve", is_flag=True,
              help="Instead of Triton: trtllm-serve's HTTP contract (OpenAI endpoints, /metrics iteration statistics) "
                   "on --http-port with the reference engine on CPU, serving REPO (a PyTorch-workflow build output) "
                   "or --model (docs/trtllm-serve.md).")
@dynamo_options
@trtllm_serve_options
@engine_flags(*ENGINE_FLAGS, tag="[--dynamo, --trtllm-serve] ",
              notes={"--model": "Default: tiny (with --draft tiny-draft) without REPO."})
def serve(repo: Path | None, grpc_port: int, http_port: int, metrics_port: int, host: str,
          load_models: tuple[str, ...], startup_timeout: float, log_file: Path | None, dry_run: bool,
          dynamo_workers: int | None, trtllm_serve: bool, **options: Any) -> None:
    """Serve the Triton model repository REPO (rendered by `trtspec deploy`), or, with --dynamo N, the same engine as
    N NVIDIA Dynamo workers behind Dynamo's OpenAI-compatible frontend (docs/dynamo.md): REPO may then be a torch
    repository or the build output it was rendered from; without it, --model and the engine flags say what runs.
    With --trtllm-serve, one server speaks NVIDIA trtllm-serve's HTTP API (TensorRT-LLM 1.2.1) with the reference
    engine: REPO is then a PyTorch-workflow build output (its LLM-API options turn /metrics on), or --model and the
    engine flags say what runs (iteration statistics on by default).

    Examples:

    \b
        trtspec serve out/triton/tiny-torch
        trtspec serve --dynamo 2 out/build/tiny-torch --draft-len-schedule 1:4,4:2,16:0 --max-concurrency 16
        trtspec serve --trtllm-serve --model tiny --draft tiny-draft --method draft_target --http-port 8000
    """
    from trtspec.errors import UsageError

    trtllm = {k: options.pop(k) for k in TRTLLM_ONLY}
    trtllm_given = [f"--{k.replace('_', '-')}" for k, v in trtllm.items() if v != TRTLLM_ONLY[k]]
    if trtllm_serve:
        if dynamo_workers is not None:
            raise UsageError("--trtllm-serve and --dynamo are two ways to serve: pick one",
                             hint="drop --dynamo N, or drop --trtllm-serve")
        unused = [f"--{k.replace('_', '-')}" for k, v in options.items()
                  if k in DYNAMO_ONLY and k not in TRTLLM_SHARED and v != DYNAMO_ONLY[k]]
        if unused:
            raise UsageError(f"{unused[0]} applies to a Dynamo deployment (--dynamo N), not to --trtllm-serve",
                             hint=f"leave {unused[0]} out")
        serve_trtllm(repo, http_port=http_port, host=host, startup_timeout=startup_timeout, dry_run=dry_run,
                     log_file=log_file, **trtllm, **{k: v for k, v in options.items()
                                                     if k not in DYNAMO_ONLY or k in TRTLLM_SHARED})
        return
    if trtllm_given:
        raise UsageError(f"{trtllm_given[0]} applies to --trtllm-serve", hint=f"add --trtllm-serve, or leave "
                                                                              f"{trtllm_given[0]} out")
    if dynamo_workers is not None:
        serve_dynamo(dynamo_workers, repo, http_port=http_port, startup_timeout=startup_timeout, dry_run=dry_run,
                     **options)
        return
    flags_by_dest = {f.dest: f.flag for f in FLAGS.values()}  # the engine flags now (methods register any time)
    given = [flags_by_dest[k] for k, v in options.items() if k in flags_by_dest and v not in (None, ())]
    given += [f"--{k.replace('_', '-')}" for k, v in options.items() if k in DYNAMO_ONLY and v != DYNAMO_ONLY[k]]
    if given:
        raise UsageError(f"{given[0]} applies to a Dynamo deployment (--dynamo N) or --trtllm-serve; a Triton "
                         "repository serves what `trtspec deploy` rendered",
                         hint="add --dynamo N, or change the repository: `trtspec deploy ... --k K` (or live: "
                              "`trtspec set-k`)")
    if repo is None:
        raise UsageError("REPO is missing: the Triton model repository to serve",
                         hint="render one with `trtspec deploy`, or serve with NVIDIA Dynamo: --dynamo N")
    from trtspec.errors import ServerError, ToolNotFoundError
    from trtspec.triton.server import (
        Ports,
        TritonServer,
        check_repository,
        find_tritonserver,
        is_bundled,
        plan_launch,
        read_repo_record,
    )

    ports = Ports(grpc=grpc_port, http=http_port, metrics=metrics_port)
    record = read_repo_record(repo)
    check_repository(repo, record, load_models or None)
    binary = find_tritonserver()
    if record is not None and record.backend == "tensorrtllm" and binary is not None and is_bundled(binary) and not load_models:
        raise ToolNotFoundError(
            "this repository serves TensorRT-LLM engines, but the only tritonserver here is nvidia-pytriton's, "
            "which has no tensorrtllm backend",
            hint="run `trtspec serve` inside nvcr.io/nvidia/tritonserver:<yy.mm>-trtllm-python-py3, or pass "
                 "--load-model preprocessing --load-model postprocessing to serve only the Python models")
    if dry_run:  # what a real start checks first: the ports (the binary and the repository are checked above)
        ports.check_free(host)
        plan = plan_launch(repo, ports=ports, binary=binary, load_models=load_models or None, host=host)
        if plan.note:
            click.echo(f"# {plan.note}")
        click.echo(plan.shell())
        return
    server = TritonServer(repo, ports=ports, load_models=load_models or None, host=host,
                          startup_timeout=startup_timeout, log_path=log_file)

    def handle(signum: int, count: int) -> None:
        """Before the supervisor exists: leave start(); after: ask it to stop tritonserver (SIGTERM)."""
        if server.process is None:
            raise Stopped
        if server.process.poll() is None:
            server.process.send_signal(signal.SIGTERM)

    with stop_signals(handle) as received:
        try:
            server.start()
        except (Stopped, ServerError):
            if not received:
                raise
            server.stop()  # stopped while the models loaded
            raise SystemExit(exit_code(received)) from None
        if server.plan is not None and server.plan.note:
            click.echo(server.plan.note)
        click.echo(f"tritonserver ready: gRPC {server.grpc_url}  HTTP {server.http_url}  metrics {server.metrics_url}")
        if record is not None and "ensemble" not in record.models:  # the llmapi model: text in, text out
            click.echo(f"Try: curl -X POST {server.http_url}/v2/models/tensorrt_llm/generate -d '{{\"text_input\": "
                       f"\"def fib(n):\", \"sampling_param_max_tokens\": 16}}'   (Ctrl-C stops)")
        else:
            click.echo(f"Try: trtspec generate --url {server.grpc_url} --model ensemble \"def fib(n):\"   (Ctrl-C stops)")
        code = server.wait()
    click.echo(f"tritonserver exited ({code}).")


DYNAMO_ONLY = {"served_model_name": None, "system_port": 8081, "router_mode": "round-robin", "migration_limit": 3,
               "threads": 1, "log_dir": None}  # --dynamo's own options and their defaults
TRTLLM_SHARED = ("served_model_name", "threads")  # ... of which --trtllm-serve reads these too
