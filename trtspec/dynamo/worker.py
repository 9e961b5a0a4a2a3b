"""A NVIDIA Dynamo worker that serves trtspec's reference engine: `python -m trtspec.dynamo.worker --target tiny ...`.

It is a Dynamo Python backend (`dynamo.common.backend.LLMEngine`, driven by Dynamo's `Worker`): Dynamo's Rust worker
creates the DistributedRuntime, serves the `generate` endpoint, registers the model with `register_model`
(ModelInput.Tokens, chat + completions; the frontend reads the target's tokenizer and chat template from its
directory), handles SIGTERM/SIGINT (unregister, drain, `cleanup`) and cancellation (`abort`). This module adds only
what is trtspec's:

- `start` runs the one engine host (`spec.host.EngineHost`, as the Triton model does) on the engine configuration
  given as arguments (`--<parameter> VALUE`: the EngineConfig parameters the Triton model reads from its config.pbtxt):
  every speculative method, continuous batching on the one serving loop, the prompt log when configured;
- `generate` maps Dynamo's preprocessed request (dynamo/requests.py), pushes the loop's deltas back onto the
  asyncio loop, and ends with OpenAI usage carrying the request's acceptance;
- what the KV router and the planner read: KV events (the prompt's full blocks stored on admission, removed when
  the request ends; the reference engine has no prefix cache, so they describe resident KV) and worker load
  (`ComponentSnapshot`: KV blocks in use out of the scheduler's budget);
- trtspec's acceptance series on Dynamo's `/metrics` (contracts/prom_series.py), served on the worker's system port when
  `DYN_SYSTEM_PORT` is set, labelled with the deployment's method, with the default k and request timings
  (what `trtspec monitor --metrics` reads from every worker).

Bad arguments print one `Error:` line (and a `Hint:`) and exit 2 before Dynamo starts; a model that cannot be found
exits 2 the same way; one that fails to load exits 1 (the frontend keeps serving with the other workers).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import logging
import sys
import threading
import time
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from trtspec.contracts.engine import EngineConfig
from trtspec.contracts.engine_args import add_engine_arguments, engine_from_args, flag
from trtspec.contracts.openai import served_name
from trtspec.contracts.prom_series import WorkerMetrics
from trtspec.dynamo.requests import chunk, engine_request, usage
from trtspec.errors import ConfigError, ToolNotFoundError, TrtspecError, UsageError

log = logging.getLogger(__name__)
DYNAMO_HINT = "install NVIDIA Dynamo: `make install` (ai-dynamo and ai-dynamo-runtime 1.6.1, see README)"
LOCAL_PLANES = {"discovery_backend": "file", "request_plane": "tcp", "event_plane": "zmq"}  # no etcd, no NATS


@dataclass(frozen=True)
class WorkerOptions:
    """Where the worker registers and how it runs (its EngineConfig says what it serves)."""

    served_model_name: str | None = None  # the OpenAI `model` name; default: the target's name or directory
    namespace: str = "dynamo"
    component: str = "trtspec"
    endpoint: str = "generate"
    discovery_backend: str = LOCAL_PLANES["discovery_backend"]
    request_plane: str = LOCAL_PLANES["request_plane"]
    event_plane: str = LOCAL_PLANES["event_plane"]
    threads: int | None = None  # torch CPU threads (None: torch's default)
    kv_events: bool = True  # publish KV events and worker load for the KV router and the planner


def parse_args(argv: Sequence[str] | None = None) -> tuple[EngineConfig, WorkerOptions]:
    """`--target tiny --method draft_target --draft tiny-draft ...` (EngineConfig parameters) plus WorkerOptions."""
    parser = argparse.ArgumentParser(prog="python -m trtspec.dynamo.worker",
                                     description="Serve trtspec's reference engine as an NVIDIA Dynamo worker.")
    add_engine_arguments(parser)
    worker = parser.add_argument_group("dynamo")
    for f in fields(WorkerOptions):
        flag = f"--{f.name.replace('_', '-')}"
        if f.type == "bool":
            worker.add_argument(f"--no-{f.name.replace('_', '-')}", dest=f.name, action="store_false")
        else:
            worker.add_argument(flag, dest=f.name, default=f.default, type=int if "int" in str(f.type) else str)
    ns = vars(parser.parse_args(argv))
    params = engine_from_args(ns)
    options = WorkerOptions(**{f.name: ns[f.name] for f in fields(WorkerOptions)})
    if options.threads is not None and options.threads < 1:
        raise ConfigError("--threads", options.threads, "must be >= 1", hint="e.g. --threads 1 per worker on 2 cores")
    return params, options


def check_params(params: EngineConfig) -> Path:
    """What can be checked before loading (spec.host.check, naming the worker's flags); the target's directory."""
    from trtspec.spec.host import check

    return check(params, spell=flag)


def engine_class() -> type:
    """TrtspecEngine, defined once Dynamo imports (ToolNotFoundError naming the fix when it does not)."""
    try:
        from dynamo.common.backend import EngineConfig, LLMEngine, WorkerConfig
        from dynamo.common.backend.engine import LlmRegistration
        from dynamo.common.backend.metrics import register_engine_registry
        from dynamo.common.backend.publisher import ComponentSnapshot, PushSource
        from dynamo.llm.exceptions import EngineShutdown, InvalidArgument, Unknown
    except ImportError as exc:
        raise ToolNotFoundError(f"NVIDIA Dynamo is not installed here ({exc})", hint=DYNAMO_HINT) from None

    class TrtspecEngine(LLMEngine):
        """trtspec's reference engine behind Dynamo's Worker (see the module docstring)."""

        def __init__(self, params: EngineConfig, options: WorkerOptions, target: Path) -> None:
            self.params, self.options, self.target = params, options, target
            self.name = options.served_model_name or served_name(params.target)
            self.host: Any = None  # spec.host.EngineHost, once started
            self.engine: Any = None
            self.metrics = WorkerMetrics({"method": params.method}, default_k=params.default_k,
                                         gate=lambda: None if self.engine is None else self.engine.gate_state)
            self._handles: dict[str, int] = {}  # Dynamo request id -> EngineLoop handle
            self._kv: Any = None  # KvEventPublisher, once Dynamo hands it over
            self._snapshots: Any = None  # SnapshotPublisher
            self._block_ids = itertools.count(1)
            self._used_blocks = 0
            self._lock = threading.Lock()
            self._closing = False

        @classmethod
        async def from_args(cls, argv: list[str] | None = None) -> tuple[Any, Any]:
            params, options = parse_args(argv)
            target = check_params(params)
            self = cls(params, options, target)
            config = WorkerConfig(
                namespace=options.namespace, component=options.component, endpoint=options.endpoint,
                model_name=str(target), served_model_name=self.name, endpoint_types="chat,completions",
                discovery_backend=options.discovery_backend, request_plane=options.request_plane,
                event_plane=options.event_plane, enable_kv_routing=options.kv_events)
            return self, config

        # -- lifecycle --------------------------------------------------------------------------------------------
        async def start(self, worker_id: int) -> Any:
            from trtspec.spec.host import EngineHost

            if self.options.threads is not None:
                import torch

                torch.set_num_threads(self.options.threads)
            try:
                self.host = await asyncio.to_thread(EngineHost, self.params, model=self.name, version=str(worker_id))
            except TrtspecError as exc:
                raise EngineShutdown(f"{exc.message} ({exc.hint})" if exc.hint else exc.message) from None
            self.engine = self.host.engine
            self.metrics.update_gate()
            scheduler = self.engine.scheduler.config
            return EngineConfig(model=str(self.target), served_model_name=self.name, llm=LlmRegistration(
                context_length=self.engine.max_context, kv_cache_block_size=scheduler.kv_block_size,
                total_kv_blocks=self.total_blocks, max_num_seqs=scheduler.max_num_seqs,
                max_num_batched_tokens=scheduler.max_num_batched_tokens))

        @property
        def total_blocks(self) -> int:
            cfg = self.engine.scheduler.config
            return cfg.num_kv_blocks or cfg.max_num_seqs * -(-self.engine.max_context // cfg.kv_block_size)

        async def cleanup(self) -> None:
            self._closing = True
            if self.host is not None:
                await asyncio.to_thread(self.host.close)

        async def abort(self, context: Any) -> None:
            handle = self._handles.get(context.id())
            if handle is not None and self.host is not None:
                self.host.cancel(handle)

        # -- what the router and the planner read -----------------------------------------------------------------
        async def kv_event_sources(self) -> list[Any]:
            return [PushSource(on_ready=self._on_kv_publisher, dp_rank=0)]

        def _on_kv_publisher(self, publisher: Any) -> None:
            self._kv = publisher

        def component_metrics_dp_ranks(self) -> list[int]:
            return [0]

        def attach_snapshot_publisher(self, publisher: Any) -> None:
            self._snapshots = publisher

        async def register_prometheus(self, metrics: Any) -> None:
            register_engine_registry(metrics, self.metrics.registry)

        def _store(self, prompt_ids: list[int]) -> list[int]:
            """KV stored event for the prompt's full blocks; returns their ids (for the removed event)."""
            size = self.engine.scheduler.config.kv_block_size
            full = len(prompt_ids) // size
            ids = [next(self._block_ids) for _ in range(full)]
            if ids and self._kv is not None and not self._closing:
                self._kv.publish_stored(token_ids=prompt_ids[: full * size], num_block_tokens=[size] * full,
                                        block_hashes=ids)
            return ids

        def _release(self, ids: list[int]) -> None:
            if ids and self._kv is not None and not self._closing:
                self._kv.publish_removed(block_hashes=ids)

        def _load(self, delta_blocks: int) -> None:
            """Worker load for the router and the planner: KV blocks in use out of the budget."""
            with self._lock:
                self._used_blocks += delta_blocks
                used = self._used_blocks
            if self._snapshots is not None and not self._closing:
                total = self.total_blocks
                self._snapshots.publish(0, ComponentSnapshot(kv_used_blocks=used, kv_total_blocks=total,
                                                             gpu_cache_usage=used / total, dp_rank=0))

        # -- requests ---------------------------------------------------------------------------------------------
        async def generate(self, request: dict[str, Any], context: Any) -> AsyncGenerator[dict[str, Any], None]:
            try:
                req = engine_request(request, self.params, max_context=self.engine.max_context)
            except UsageError as exc:
                log.warning("refused request %s: %s (keys: %s)", context.id(), exc, sorted(request))
                raise InvalidArgument(f"{exc.message} ({exc.hint})" if exc.hint else exc.message) from None
            except Exception:  # a request the mapping did not foresee: in the log, not only a bare error upstream
                log.exception("could not map request %s (keys: %s)", context.id(), sorted(request))
                raise
            from trtspec.spec.serving import QueueSink

            queue: asyncio.Queue[Any] = asyncio.Queue()
            sink = QueueSink(asyncio.get_running_loop(), queue)
            try:
                handle = self.host.submit_to(sink, req.prompt_ids, req.sampling, req.spec)
            except TrtspecError as exc:  # the loop is shut down
                raise EngineShutdown(exc.message) from None
            self._handles[context.id()] = handle
            size = self.engine.scheduler.config.kv_block_size
            stored, held, generated, finished = self._store(req.prompt_ids), 0, 0, False
            arrived, first_token = time.monotonic(), None
            try:
                while True:
                    item = await queue.get()
                    if isinstance(item, BaseException):
                        self.metrics.finished("abort")
                        if isinstance(item, UsageError):  # the engine's own checks (e.g. a token id past its vocab)
                            log.warning("refused request %s: %s", context.id(), item)
                            raise InvalidArgument(f"{item.message} ({item.hint})" if item.hint else item.message)
                        log.error("request %s failed: %s: %s", context.id(), type(item).__name__, item)
                        raise Unknown(str(item))
                    generated += len(item.token_ids)
                    if first_token is None and item.token_ids:
                        first_token = time.monotonic()
                    blocks = -(-(len(req.prompt_ids) + generated) // size)
                    self._load(blocks - held)
                    held = blocks
                    out = chunk(item.token_ids, log_probs=item.log_probs if req.return_log_probs else None)
                    if item.finished:
                        finished = True
                        reason = item.finish_reason or "length"
                        now = time.monotonic()
                        self.metrics.finished(reason, item.stats, latency_s=now - arrived, time_per_output_token_s=(
                            (now - first_token) / (generated - 1) if first_token is not None and generated > 1
                            else None))
                        out["finish_reason"] = "cancelled" if reason == "abort" else reason
                        out["completion_usage"] = usage(len(req.prompt_ids), generated, item.stats)
                        yield out
                        return
                    if item.token_ids:
                        yield out
            finally:
                self._handles.pop(context.id(), None)
                if not finished:  # the stream was closed early (the client went away): stop generating
                    self.host.cancel(handle)
                self._load(-held)
                self._release(stored)

    return TrtspecEngine


def main(argv: Sequence[str] | None = None) -> int:
    """Check the arguments and the models (one-line errors, exit 2 or 3), then run Dynamo's Worker until stopped."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        params, _ = parse_args(args)
        check_params(params)
        cls = engine_class()
    except TrtspecError as exc:
        print(f"Error: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"Hint: {exc.hint}", file=sys.stderr)
        return exc.exit_code
    from dynamo.common.backend.run import run

    try:
        run(cls, args)
    except Exception as exc:  # the engine failed to start (EngineShutdown) or the runtime could not
        print(f"Error: the Dynamo worker stopped: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
