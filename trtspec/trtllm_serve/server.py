"""The server process: `python -m trtspec.trtllm_serve --target tiny --draft tiny-draft --port 8000 ...`, and the
iteration statistics its `/metrics` shows.

Arguments: the engine configuration as its text parameters (`--<parameter> VALUE`, contracts/engine_args.py: what a
Dynamo worker reads too), the served model name, the TensorRT-LLM release whose contract is served, and the
iteration-statistics options (`IterStatsOptions.argv`). It loads the engine (EngineHost) before it
binds the port, so `/health` answering means ready; SIGTERM, SIGINT and SIGHUP stop it: the port closes, running
requests get the configuration's drain_timeout_s to finish, the rest are aborted. Bad arguments print one `Error:`
line (and a `Hint:`) and exit 2; a model that cannot load exits the same way (3 for a missing package).
`launch.py` runs this under trtspec's supervisor (`trtspec serve --trtllm-serve`).

`IterStatsOptions` is the one definition of how the iteration statistics are configured: `enable_iter_perf_stats`
and the release's bounding key (`BOUND_KEY`: 1.2.1 `max_stats_len`, 1.3.0rc29 `iter_stats_max_iterations`) read from
a build's LLM-API options (the `extra_llm_api_options` file; NVIDIA's defaults when a key is absent: off, 1000), or,
with no options file, this CPU server's own default (on), a command-line choice winning over either
(`--iter-stats-max-iterations` sets the release's bounding key). `app.IterationBuffer` keeps the engine's steps between
two GETs: the newest `max_iterations`, the oldest dropped; each GET drains it.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trtspec.contracts.engine import EngineConfig
from trtspec.contracts.engine_args import add_engine_arguments, engine_from_args, flag
from trtspec.contracts.openai import served_name
from trtspec.errors import ConfigError, TrtspecError

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
ENABLE = "enable_iter_perf_stats"  # the LLM-API options' key (top-level LLM() argument of both releases)
# What bounds the rows a GET of /metrics hands over, per release (trtspec/targets/iteration-stats.json, releases.<r>.
# enabling_options and queue_bounds):
# - 1.2.1: the PyTorch executor keeps max(max_stats_len, 1) rows (max_stats_len's default 1000) and the server's queue
#   has no bound at all; iter_stats_max_iterations has no effect there. This server bounds its one buffer by that
#   executor rule.
# - 1.3.0rc29: the server's tee buffer holds iter_stats_max_iterations rows: None or 0 -> 1000, < 0 -> unbounded.
#   Here a negative value is capped at HARD_CAP: a CPU server must not grow without bound.
BOUND_KEY = {"1.2.1": "max_stats_len", "1.3.0rc29": "iter_stats_max_iterations"}
NVIDIA_DEFAULT = 1000  # either key's default (1.2.1: max_stats_len; 1.3.0rc29: iter_stats_max_iterations None or 0)
HARD_CAP = 100_000  # rows kept where 1.3.0rc29 keeps them without bound (a negative iter_stats_max_iterations)
CPU_SERVER_DEFAULT = True  # with no options file this server records iterations (trtllm-serve's default is off)


def bound(release: str, value: int | None) -> int:
    """The rows kept between two GETs for `value` of the release's BOUND_KEY (None: unset), by that release's rule."""
    if BOUND_KEY[release] == "max_stats_len":
        return max(NVIDIA_DEFAULT if value is None else value, 1)
    if value is None or value == 0:
        return NVIDIA_DEFAULT
    return HARD_CAP if value < 0 else value


@dataclass(frozen=True)
class IterStatsOptions:
    """Whether `/metrics` has iterations, and how many it keeps between two GETs (the bound in force, >= 1)."""

    enabled: bool = CPU_SERVER_DEFAULT
    max_iterations: int = NVIDIA_DEFAULT

    def __post_init__(self) -> None:
        if isinstance(self.max_iterations, bool) or not isinstance(self.max_iterations, int) \
                or self.max_iterations < 1:
            raise ValueError(f"max_iterations={self.max_iterations!r}: the bound in force is a whole number >= 1")

    @classmethod
    def resolve(cls, llm_api: Mapping[str, Any] | None, *, release: str, enabled: bool | None = None,
                max_iterations: int | None = None) -> IterStatsOptions:
        """For TensorRT-LLM `release` (a key of BOUND_KEY): from a build's LLM-API options (None: it has none), with
        the command line's choices over them (None: not given; `max_iterations` is a value of the release's
        BOUND_KEY). ConfigError names the option and its value."""
        options = dict(llm_api or {})
        on = options.get(ENABLE, False) if llm_api is not None else CPU_SERVER_DEFAULT
        if not isinstance(on, bool):
            raise ConfigError(ENABLE, on, "must be true or false", hint=f"{ENABLE}: true in the LLM-API options")
        key = BOUND_KEY[release]
        value = options.get(key) if max_iterations is None else max_iterations
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ConfigError(key, value, f"must be a whole number (TensorRT-LLM {release}'s bound of the iteration "
                              "statistics)", hint=f"e.g. {key}: {NVIDIA_DEFAULT} (the default)")
        return cls(enabled=on if enabled is None else enabled, max_iterations=bound(release, value))

    def argv(self) -> list[str]:
        """The server process's arguments for these options (server.py parses them back)."""
        return ["--iter-stats" if self.enabled else "--no-iter-stats", "--iter-stats-max-iterations",
                str(self.max_iterations)]


@dataclass(frozen=True)
class ServerOptions:
    """Where the server listens and what it says it is (the engine configuration says what it serves)."""

    host: str
    port: int
    model: str  # the OpenAI model name
    release: str  # the TensorRT-LLM release whose contract /version and /metrics speak
    iter_stats: IterStatsOptions
    threads: int | None = None  # torch CPU threads (None: torch's default)


def parse_args(argv: Sequence[str] | None = None) -> tuple[EngineConfig, ServerOptions]:
    parser = argparse.ArgumentParser(prog="python -m trtspec.trtllm_serve",
                                     description="Serve trtllm-serve's HTTP contract with trtspec's reference engine.")
    add_engine_arguments(parser)
    server = parser.add_argument_group("server")
    server.add_argument("--host", default="127.0.0.1")
    server.add_argument("--port", type=int, default=8000)
    server.add_argument("--served-model-name", default=None)
    server.add_argument("--release", default=None, help="TensorRT-LLM release (default: trtspec's default target)")
    server.add_argument("--iter-stats", dest="iter_stats", action=argparse.BooleanOptionalAction, default=None)
    server.add_argument("--iter-stats-max-iterations", type=int, default=None,
                        help="the release's bounding key (BOUND_KEY): 1.2.1 max_stats_len, 1.3.0rc29 "
                             "iter_stats_max_iterations")
    server.add_argument("--threads", type=int, default=None)
    ns = vars(parser.parse_args(argv))
    config = engine_from_args(ns)
    from trtspec.contracts.trtllm_iterations import RELEASES
    from trtspec.targets import DEFAULT_TARGET

    if ns["release"] is not None and ns["release"] not in RELEASES:
        raise ConfigError("--release", ns["release"], "has no iteration-statistics facts",
                          hint=f"use one of {', '.join(RELEASES)}")
    release = ns["release"] or DEFAULT_TARGET
    stats = IterStatsOptions.resolve(None, release=release, enabled=ns["iter_stats"],
                                     max_iterations=ns["iter_stats_max_iterations"])
    options = ServerOptions(host=ns["host"], port=ns["port"], model=ns["served_model_name"] or served_name(config.target),
                            release=release, iter_stats=stats, threads=ns["threads"])
    return config, options


async def serve(config: EngineConfig, options: ServerOptions) -> None:
    """Load the engine, serve until a stop signal, then drain and stop."""
    from aiohttp import web

    from trtspec.spec.host import EngineHost, check
    from trtspec.trtllm_serve.app import IterationBuffer, TrtllmServeApp

    if options.threads is not None:
        import torch

        torch.set_num_threads(options.threads)
    check(config, spell=flag)
    buffer = IterationBuffer(options.iter_stats.max_iterations) if options.iter_stats.enabled else None
    host = await asyncio.to_thread(EngineHost, config, model=options.model, version="1",
                                   on_iteration=None if buffer is None else buffer.add)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, stop.set)
    app = TrtllmServeApp(host, model=options.model, release=options.release, iterations=buffer).app()
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=config.drain_timeout_s,
                           access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, options.host, options.port).start()
        print(f"trtllm-serve (trtspec) serving {options.model!r} on http://{options.host}:{options.port}",
              flush=True)
        await stop.wait()
    finally:
        await runner.cleanup()  # the port closes; running handlers get shutdown_timeout to finish
        await asyncio.to_thread(host.close)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        config, options = parse_args(argv)
        try:
            asyncio.run(serve(config, options))
        except OSError as exc:  # the port could not be bound
            print(f"Error: cannot serve on {options.host}:{options.port}: {exc}", file=sys.stderr)
            return 1
    except TrtspecError as exc:
        print(f"Error: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"Hint: {exc.hint}", file=sys.stderr)
        return exc.exit_code
    return 0
