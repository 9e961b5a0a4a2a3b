"""`trtspec serve --trtllm-serve [SOURCE]`: trtllm-serve's HTTP contract on this machine with the reference engine
(trtspec/trtllm_serve), until Ctrl-C.

SOURCE is a build output of the PyTorch workflow (or a torch bundle): its engine configuration
(`BuildOutput.engine`) is served, its LLM-API options (`BuildOutput.llm_api`) say whether `/metrics` has iteration
statistics (`enable_iter_perf_stats`; how many are kept: its release's key, trtllm_serve/server.py `BOUND_KEY`) and
its TensorRT-LLM release which contract is spoken. Without SOURCE the engine flags say what runs, resolved as
`serve --dynamo` resolves them (cli/_dynamo.py `resolve_engine`). SIGINT, SIGTERM and SIGHUP stop it (the server
drains first), also while the engine loads; if `trtspec serve` itself is killed (SIGKILL), the supervisor stops the
server.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from trtspec.cli._dynamo import resolve_engine
from trtspec.cli._signals import run_supervised
from trtspec.contracts.engine import EngineConfig
from trtspec.errors import UsageError

OPTIONS = {"iter_stats": None, "iter_stats_max_iterations": None}  # --trtllm-serve's own options and their defaults


def trtllm_serve_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The options that apply only with --trtllm-serve."""
    options = [
        click.option("--iter-stats/--no-iter-stats", "iter_stats", default=None,
                     help="[--trtllm-serve] Record iteration statistics for /metrics (the LLM-API option "
                          "enable_iter_perf_stats). Default: REPO's options file says (off when it does not, as "
                          "trtllm-serve); on without REPO."),
        click.option("--iter-stats-max-iterations", "iter_stats_max_iterations", type=click.IntRange(-1, 10**7),
                     default=None, help="[--trtllm-serve] Bounds the iterations /metrics keeps between two GETs, the "
                                        "oldest dropped, as the release's own key: 1.2.1 max_stats_len (at least 1 "
                                        "kept), 1.3.0rc29 iter_stats_max_iterations (0: 1000; -1: unbounded there, "
                                        "100000 here). Default: REPO's options, else 1000."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def trtllm_source(source: Path) -> tuple[EngineConfig, dict[str, Any] | None, str | None]:
    """SOURCE's engine configuration, LLM-API options and TensorRT-LLM release; UsageError for anything else."""
    from trtspec.contracts.build_output import MANIFEST
    from trtspec.triton.build_output import read_build_output

    if not (source / MANIFEST).is_file():
        raise UsageError(f"SOURCE {source} is not a build output (no {MANIFEST})",
                         hint="pass the output of `trtspec build` (workflow: pytorch), or leave SOURCE out and give "
                              "--model")
    build = read_build_output(source)
    if build.backend != "torch" and build.workflow != "pytorch":
        raise UsageError(f"SOURCE {source} is a TensorRT-engine build (workflow {build.workflow}); trtllm-serve here "
                         "serves a PyTorch-workflow build with the reference engine",
                         hint="build with workflow: pytorch (TensorRT-LLM 1.2.1's default), or serve these engines "
                              "with `trtspec deploy` and `trtspec serve`")
    return build.engine, build.llm_api, build.trtllm_version


def serve_trtllm(source: Path | None, *, http_port: int, host: str, startup_timeout: float, dry_run: bool,
                 log_file: Path | None, served_model_name: str | None, threads: int, iter_stats: bool | None,
                 iter_stats_max_iterations: int | None, **flags: Any) -> None:
    from trtspec.contracts.trtllm_iterations import RELEASES
    from trtspec.errors import ServerError
    from trtspec.ports import check_ports_free
    from trtspec.targets import DEFAULT_TARGET
    from trtspec.trtllm_serve.launch import TrtllmServer, plan_server
    from trtspec.trtllm_serve.server import IterStatsOptions

    base, llm_api, built_for = (None, None, None) if source is None else trtllm_source(source)
    config = resolve_engine(base, flags)
    if built_for is not None and built_for not in RELEASES:
        click.echo(f"# {source} was built for TensorRT-LLM {built_for}; serving trtllm-serve {DEFAULT_TARGET}'s "
                   f"contract (releases with iteration-statistics facts: {', '.join(RELEASES)})")
    release = built_for if built_for in RELEASES else DEFAULT_TARGET
    stats = IterStatsOptions.resolve(llm_api, release=release, enabled=iter_stats,
                                     max_iterations=iter_stats_max_iterations)
    plan = plan_server(config, port=http_port, host=host, release=release, iter_stats=stats,
                       served_model_name=served_model_name, threads=threads)
    if dry_run:
        check_ports_free(plan.ports(), host)
        click.echo(plan.shell())
        return
    server = TrtllmServer(plan, startup_timeout=startup_timeout, stop_timeout=config.drain_timeout_s + 10,
                          log_path=log_file)
    tail = ""

    def serve() -> int | None:
        nonlocal tail
        kept = f"at most {stats.max_iterations} per GET" if stats.enabled else "off: /metrics answers []"
        click.echo(f"trtllm-serve ready: {plan.url} (model {plan.model!r}, method {config.method}; iteration "
                   f"statistics {kept})")
        click.echo(f"Try: curl {plan.url}/v1/completions -H 'content-type: application/json' -d '{{\"model\": "
                   f"\"{plan.model}\", \"prompt\": \"def fib(n):\", \"max_tokens\": 32}}'   (Ctrl-C stops)")
        click.echo(f"Metrics: {plan.url}/metrics (iterations, trtllm-serve's), {plan.url}/trtspec/metrics "
                   "(trtspec's series)")
        code = server.wait()
        tail = server.log_tail()  # before the stop removes the work directory and its log
        return code

    code, _ = run_supervised(server.start, serve, server.stop)
    if code is not None:
        raise ServerError(f"the trtllm-serve server exited ({code}):\n{tail}",
                          hint="rerun with --log-file FILE to keep its whole log")
    click.echo("trtllm-serve stopped.")
