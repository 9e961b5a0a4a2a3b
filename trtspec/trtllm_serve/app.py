"""The aiohttp app: trtllm-serve's routes over one EngineHost (see the package docstring for the sources).

GET  /health                 200, empty (the server answers only once the engine has loaded)
GET  /version                {"version": <the TensorRT-LLM release whose contract is served>, "trtspec": ...}
GET  /v1/models              the one served model
GET  /metrics                the iterations since the previous GET (JSON list; [] without enable_iter_perf_stats)
GET  /trtspec/metrics        trtspec's spec-decode series (contracts/series.py) in Prometheus text format
POST /v1/completions         OpenAI completions, non-streaming or SSE (`data: ...`, then `data: [DONE]`)
POST /v1/chat/completions    OpenAI chat completions, likewise

A request's `model` may name any model (trtllm-serve never reads it); the response's `model` is that name, as
trtllm-serve answers.

A request runs on the engine loop through a `spec.serving.QueueSink` (each delta handed to the asyncio loop). A bad
request gets an ErrorResponse with status 400 before anything runs (an engine refusal too: a stream starts only after
the engine has taken the request); the server keeps serving. A client that goes away (the handler is cancelled, or a stream
write fails) cancels its request (EngineHost.cancel). Each finished request feeds the Prometheus series
(`contracts.prom_series.WorkerMetrics`, as a Dynamo worker does); each engine step, when iteration statistics are on,
goes to the IterationBuffer `/metrics` drains.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import deque
from typing import Any

from aiohttp import web

from trtspec import __version__
from trtspec.chat import chat_text
from trtspec.contracts.prom_series import WorkerMetrics
from trtspec.errors import ConfigError, TrtspecError
from trtspec.methods import BASELINE
from trtspec.spec.params import SpecParams
from trtspec.trtllm_serve import protocol as p

MAX_BODY = 4 * 1024 * 1024  # bytes of one request body (aiohttp's client_max_size)
FINISH_REASONS = {"abort": "cancelled"}  # the engine's name -> the LLM API's


class IterationBuffer:
    """The iterations since the last drain, at most `max_iterations` (the oldest dropped). `add` is called on the
    engine loop's thread, `drain` on the server's; both are safe from any thread."""

    def __init__(self, max_iterations: int) -> None:
        self._items: deque[Any] = deque(maxlen=max_iterations)
        self._lock = threading.Lock()
        self.dropped = 0  # iterations pushed out before any GET read them (since the server started)

    def add(self, stats: Any) -> None:
        with self._lock:
            if self._items.maxlen is not None and len(self._items) == self._items.maxlen:
                self.dropped += 1
            self._items.append(stats)

    def drain(self) -> list[Any]:
        """Every kept iteration, oldest first; the buffer is empty afterwards."""
        with self._lock:
            items = list(self._items)
            self._items.clear()
        return items

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)



class TrtllmServeApp:
    """The routes of one served model. `host` is a started `spec.host.EngineHost`; `iterations` the buffer its
    on_iteration fills (None: iteration statistics are off); `release` the TensorRT-LLM release whose contract
    `/version` and `/metrics` speak."""

    def __init__(self, host: Any, *, model: str, release: str, iterations: IterationBuffer | None) -> None:
        self.host, self.model, self.release, self.iterations = host, model, release, iterations
        self.engine = host.engine
        self.created = int(time.time())
        config = host.config
        self.spec = SpecParams(method=config.method, k=config.default_k)
        self.speculative = config.method != BASELINE  # specDecodingStats is null on a server without speculation
        self.metrics = WorkerMetrics({"model": model, "version": "1", "method": config.method},
                                     default_k=config.default_k, gate=lambda: self.engine.gate_state)
        tokenizer = self.engine.tokenizer
        self.encoder = p.Encoder(self._encode, self._render, getattr(tokenizer, "eos_token_id", None))

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_get("/health", self.health)
        app.router.add_get("/version", self.version)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/metrics", self.iteration_stats)
        app.router.add_get("/trtspec/metrics", self.prometheus)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat)
        return app

    # -- text ----------------------------------------------------------------------------------------------------
    def _encode(self, text: str, special: bool) -> list[int]:
        tokenizer = self.engine.tokenizer
        if tokenizer is None:
            raise ConfigError("prompt", "text", "this model has no tokenizer", hint="send token ids")
        return list(tokenizer.encode(text, add_special_tokens=special))

    def _render(self, messages: list[dict[str, Any]]) -> str:
        return chat_text(messages, self.engine.tokenizer)  # the one rendering of a chat request (trtspec/chat.py)

    # -- plain routes --------------------------------------------------------------------------------------------
    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": self.release, "trtspec": __version__})

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response(p.model_list(self.model, self.created))

    async def iteration_stats(self, request: web.Request) -> web.Response:
        from trtspec.contracts.trtllm_iterations import iteration_row

        stats = self.iterations.drain() if self.iterations is not None else []
        return web.json_response([iteration_row(s, release=self.release, speculative=self.speculative)
                                  for s in stats])

    async def prometheus(self, request: web.Request) -> web.Response:
        from prometheus_client import CONTENT_TYPE_LATEST

        return web.Response(body=self.metrics.exposition().encode(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    # -- generation ----------------------------------------------------------------------------------------------
    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, p.COMPLETION)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, p.CHAT)

    async def _generate(self, request: web.Request, kind: str) -> web.StreamResponse:
        from trtspec.spec.serving import QueueSink  # imports torch: not at module import

        arrived = time.monotonic()
        try:
            body = await self._body(request)
            parsed = p.parse_request(kind, body, model=self.model, encoder=self.encoder,
                                     max_context=self.engine.max_context)
        except ConfigError as exc:
            return _error(exc, 400)
        queue: asyncio.Queue[Any] = asyncio.Queue()
        try:
            handle = self.host.submit_to(QueueSink(asyncio.get_running_loop(), queue), parsed.prompt_ids,
                                         parsed.sampling, self.spec)
        except TrtspecError as exc:  # the loop is shut down
            return _error(exc, 503)
        run = _Run(self, parsed, kind, arrived)
        try:
            first = await queue.get()  # the engine's refusal (bad input, full queue) still gets its own status
            if isinstance(first, BaseException):
                run.finished = True
                self.metrics.finished("abort")
                return _error(p.renamed(first, kind) if isinstance(first, ConfigError) else first, p.status_of(first))
            if not parsed.stream:
                item = first
                while not run.add(item):
                    item = await queue.get()
                    if isinstance(item, BaseException):
                        run.fail()
                        return _error(item, p.status_of(item))
                return web.json_response(run.body())
            return await self._stream(request, run, first, queue)
        finally:
            if not run.finished:  # the client went away (the handler was cancelled, or a write failed)
                self.host.cancel(handle)
                run.fail()  # counted as aborted

    async def _stream(self, request: web.Request, run: _Run, first: Any, queue: asyncio.Queue[Any]
                      ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        try:
            for chunk in run.opening():
                await _send(response, chunk)
            item = first
            while True:
                if isinstance(item, BaseException):
                    run.fail()
                    await _send(response, p.error_body(item, p.status_of(item)))
                    break
                done = run.add(item)
                for chunk in run.chunks(done):
                    await _send(response, chunk)
                if done:
                    break
                item = await queue.get()
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
        except (ConnectionError, RuntimeError):  # the client closed the stream: the request is cancelled above
            pass
        return response

    @staticmethod
    async def _body(request: web.Request) -> Any:
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise ConfigError("body", f"over {MAX_BODY} bytes", "is too large",
                              hint="send a shorter prompt") from None
        try:
            return json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConfigError("body", raw[:60].decode(errors="replace"), f"is not valid JSON ({exc})",
                              hint='send a JSON object, e.g. {"model": ..., "prompt": ...}') from None


class _Run:
    """One request's answer as it arrives: text, tokens, timings, and the metrics when it ends."""

    def __init__(self, app: TrtllmServeApp, request: p.ServeRequest, kind: str, arrived: float) -> None:
        self.app, self.request, self.kind, self.arrived = app, request, kind, arrived
        self.text = p.TextOutput(request)
        self.rid, self.created = p.response_id(kind), int(time.time())
        self.piece, self.reason, self.stop, self.stats = "", "length", None, None
        self.first_token: float | None = None
        self.finished = False

    def add(self, delta: Any) -> bool:
        """Take one delta; True when it is the last."""
        if delta.token_ids and self.first_token is None:
            self.first_token = time.monotonic()
        self.piece = self.text.feed(delta.text, delta.token_ids)
        if not delta.finished:
            return False
        self.finished = True
        reason = delta.finish_reason or "length"
        rest, self.stop = self.text.finish(reason)
        self.piece += rest
        self.reason, self.stats = FINISH_REASONS.get(reason, reason), delta.stats
        now, tokens = time.monotonic(), self.text.tokens
        self.app.metrics.finished(reason, delta.stats, latency_s=now - self.arrived, time_per_output_token_s=(
            (now - self.first_token) / (tokens - 1) if self.first_token is not None and tokens > 1 else None))
        return True

    def fail(self) -> None:
        self.finished = True
        self.app.metrics.finished("abort")

    def usage(self) -> dict[str, Any]:
        return p.usage(len(self.request.prompt_ids), self.text.tokens)

    def body(self) -> dict[str, Any]:
        make = p.completion_body if self.kind == p.COMPLETION else p.chat_body
        return make(self.rid, self.request.model, self.request.echo + self.text.shown, self.reason, self.stop,
                    self.usage(), p.decoded_per_iteration(self.stats))

    def opening(self) -> list[dict[str, Any]]:
        """The chunks before any text: chat's role chunk; a completion's echo."""
        model = self.request.model
        if self.kind == p.CHAT:
            return [p.chat_chunk(self.rid, self.created, model, {"role": "assistant"}, use=self._running_usage())]
        if self.request.echo:
            return [p.completion_chunk(self.rid, self.created, model, self.request.echo, use=self._running_usage())]
        return []

    def chunks(self, done: bool) -> list[dict[str, Any]]:
        """The chunks of the latest delta (none when it shows nothing and is not the last), then the usage chunk."""
        if not self.piece and not done:
            return []
        model, reason = self.request.model, self.reason if done else None
        stop, per_iter = (self.stop, p.decoded_per_iteration(self.stats)) if done else (None, None)
        if self.kind == p.COMPLETION:
            out = [p.completion_chunk(self.rid, self.created, model, self.piece, reason, stop, per_iter,
                                      self._running_usage())]
        else:
            out = [p.chat_chunk(self.rid, self.created, model, {"content": self.piece}, reason, stop, per_iter,
                                self._running_usage())]
        if done and self.request.include_usage:
            out.append(p.usage_chunk(self.kind, self.rid, self.created, model, self.usage()))
        return out

    def _running_usage(self) -> dict[str, Any] | None:
        return self.usage() if self.request.continuous_usage else None


async def _send(response: web.StreamResponse, chunk: dict[str, Any]) -> None:
    await response.write(f"data: {json.dumps(chunk)}\n\n".encode())


def _error(exc: BaseException, status: int) -> web.Response:
    return web.json_response(p.error_body(exc, status), status=status)
