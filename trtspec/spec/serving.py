"""EngineLoop: a thread-safe front for SpecEngine, for servers (the Triton Python-backend model) and async callers.

One background thread owns the engine and runs its continuous-batching loop (`step()` while work exists, asleep when
idle). Any thread may `submit` a request and iterate its `RequestStream` of RequestDelta (text deltas decoded, held
back while a multi-byte character is incomplete), `cancel` it (its KV is freed at the next loop turn), or `shutdown`
the loop (draining running work or aborting it). Errors reach the request they belong to: a request the engine
refuses (bad parameters, OverloadedError past the queue limit) gets the exception when its stream is iterated; an
exception inside a step fails the requests that were running and the loop keeps serving.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Iterator
from typing import Any

from trtspec.errors import ServerError, TrtspecError
from trtspec.spec.engine import Prompt, RequestDelta, SpecEngine
from trtspec.spec.params import SamplingParams, SpecParams

_DONE = object()


class RequestStream:
    """The deltas of one submitted request, in order; iterating raises the request's error if it failed."""

    def __init__(self, loop: EngineLoop, handle: int) -> None:
        self.handle = handle  # loop-level id (valid immediately; the engine's request id is assigned later)
        self.request_id: int | None = None
        self._loop = loop
        self._queue: queue.Queue[Any] = queue.Queue()
        self._token_ids: list[int] = []
        self._emitted_text = ""

    def __iter__(self) -> Iterator[RequestDelta]:
        while True:
            item = self._queue.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def cancel(self) -> bool:
        return self._loop.cancel(self.handle)

    def token_ids(self) -> list[int]:
        """Consume the stream; return all generated token ids."""
        return [t for delta in self for t in delta.token_ids]

    # -- called from the loop thread -----------------------------------------------------------------------------
    def _deliver(self, delta: RequestDelta, engine: SpecEngine) -> None:
        self._token_ids += delta.token_ids
        text = engine.decode(self._token_ids)
        if delta.finished or not text.endswith("\ufffd"):  # hold back an incomplete multi-byte character
            delta.text, self._emitted_text = text[len(self._emitted_text):], text
        self._queue.put(delta)
        if delta.finished:
            self._queue.put(_DONE)

    def _fail(self, error: BaseException) -> None:
        self._queue.put(error)
        self._queue.put(_DONE)


class EngineLoop:
    """Run `engine` on a background thread; see the module docstring. Usable as a context manager."""

    def __init__(self, engine: SpecEngine) -> None:
        self.engine = engine
        self._inbox: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._handles = itertools.count()
        self._streams: dict[int, RequestStream] = {}  # engine request id -> stream (loop thread only)
        self._by_handle: dict[int, RequestStream] = {}  # handle -> stream (loop thread only)
        self._closed = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="trtspec-engine-loop", daemon=True)
        self._thread.start()

    def __enter__(self) -> EngineLoop:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -- any thread ----------------------------------------------------------------------------------------------
    def submit(self, prompt: Prompt, sampling: SamplingParams | None = None,
               spec: SpecParams | None = None) -> RequestStream:
        """Queue a request; returns its stream at once (errors surface when the stream is iterated)."""
        with self._lock:
            if self._closed:
                raise ServerError("the engine loop is shut down", hint="create a new EngineLoop")
            stream = RequestStream(self, next(self._handles))
            self._inbox.put(("submit", (stream, prompt, sampling, spec)))
        return stream

    def cancel(self, handle: int) -> bool:
        """Abort a submitted request (its stream ends with finish_reason "abort"); False once the loop is closed."""
        with self._lock:
            if self._closed:
                return False
            self._inbox.put(("cancel", handle))
        return True

    def shutdown(self, *, drain: bool = False, timeout: float | None = 30.0) -> None:
        """Stop the loop: with drain, finish running and queued requests first; else abort them (streams end with
        ServerError). Idempotent."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._inbox.put(("stop", drain))
        self._thread.join(timeout)

    # -- loop thread ---------------------------------------------------------------------------------------------
    def _run(self) -> None:
        stopping = draining = False
        while True:
            idle = not self.engine.has_unfinished()
            if stopping and (idle or not draining):
                self._abort_all(ServerError("the engine loop was shut down before the request finished"))
                return
            # 1. commands: block while idle, else take whatever arrived since the last step
            commands = [self._inbox.get()] if idle and not stopping else []
            while True:
                try:
                    commands.append(self._inbox.get_nowait())
                except queue.Empty:
                    break
            for kind, payload in commands:
                if kind == "submit":
                    self._admit(*payload)
                elif kind == "cancel":
                    self._cancel(payload)
                else:
                    stopping, draining = True, payload
            if not self.engine.has_unfinished():
                continue
            # 2. step, then route deltas to their streams
            try:
                deltas = self.engine.step()
            except Exception as exc:  # fail the running requests; keep serving the others
                self._abort_all(ServerError(f"generation failed: {type(exc).__name__}: {exc}"))
                continue
            for delta in deltas:
                stream = self._streams.get(delta.request_id)
                if stream is not None:
                    if delta.finished:
                        self._forget(stream)
                    stream._deliver(delta, self.engine)

    def _admit(self, stream: RequestStream, prompt: Prompt, sampling: SamplingParams | None,
               spec: SpecParams | None) -> None:
        try:
            stream.request_id = self.engine.add_request(prompt, sampling, spec)
        except TrtspecError as exc:  # bad input or overloaded: this request only
            stream._fail(exc)
            return
        self._streams[stream.request_id] = stream
        self._by_handle[stream.handle] = stream

    def _cancel(self, handle: int) -> None:
        stream = self._by_handle.get(handle)
        if stream is None or stream.request_id is None:
            return
        self.engine.abort(stream.request_id)
        self._forget(stream)
        stream._deliver(RequestDelta(request_id=stream.request_id, token_ids=[], finished=True,
                                     finish_reason="abort"), self.engine)

    def _forget(self, stream: RequestStream) -> None:
        self._streams.pop(stream.request_id, None)  # type: ignore[arg-type]
        self._by_handle.pop(stream.handle, None)

    def _abort_all(self, error: BaseException) -> None:
        for stream in list(self._streams.values()):
            self.engine.abort(stream.request_id)  # type: ignore[arg-type]
            self._forget(stream)
            stream._fail(error)
