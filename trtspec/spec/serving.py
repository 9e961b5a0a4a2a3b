"""EngineLoop: the one serving loop. A thread-safe front for SpecEngine, used by every server (the Triton Python
models) and by async callers.

One background thread owns the engine and runs its continuous-batching loop (`step()` while work exists, asleep when
idle). Any thread may `submit` a request and iterate its `RequestStream` (pull), or `submit_to` its own `Sink` (push: a server
encodes and sends each delta from the loop thread; `QueueSink` hands them to an asyncio loop). Every delta has passed
the `IncrementalDetokenizer`: tokens of an incomplete multi-byte character are held back until it completes, so each
delta's tokens decode on their own to its text. A request ends when its client cancels it (`cancel(handle)`, or the
`is_cancelled` check given at submit, polled every loop turn), when it finishes, or when the loop shuts down
(`drain`: finish what runs first, within a timeout; otherwise abort). Errors reach the request they belong to: a
request the engine refuses (bad parameters, OverloadedError past the queue limit) fails alone; an exception inside a
step fails the requests that were running and the loop keeps serving; a sink that raises loses only its request.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from trtspec.contracts.iteration import IterationStats
from trtspec.errors import ServerError, SinkClosed, TrtspecError
from trtspec.spec.detokenize import IncrementalDetokenizer, decodes_whole
from trtspec.spec.engine import Prompt, RequestDelta, SpecEngine
from trtspec.spec.params import SamplingParams, SpecParams

if TYPE_CHECKING:
    import asyncio

logger = logging.getLogger(__name__)
DRAIN_TIMEOUT_S = 30.0  # shutdown(drain=True): running requests get this long to finish before they are aborted


class Sink(Protocol):
    """Where one request's results go. Called from the loop thread only; must not block for long."""

    def deliver(self, delta: RequestDelta) -> None:
        """A delta (tokens and text already held back as needed); `delta.finished` marks the last one. SinkClosed:
        the request has ended; any other exception fails the request (`fail`)."""

    def fail(self, error: BaseException) -> None:
        """The request failed (refused, step error, shutdown); nothing more follows."""


class QueueSink:
    """A Sink for an asyncio caller (the trtllm-serve app, the Dynamo worker): each delta, or the request's error, is
    put on the caller's asyncio queue on its event loop's thread (`call_soon_threadsafe`), where a handler awaits it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[Any]) -> None:
        self._loop, self._queue = loop, queue

    def deliver(self, delta: RequestDelta) -> None:
        self._loop.call_soon_threadsafe(self._queue.put_nowait, delta)

    def fail(self, error: BaseException) -> None:
        self._loop.call_soon_threadsafe(self._queue.put_nowait, error)


_DONE = object()


class RequestStream:
    """The default Sink: a request's deltas, in order, to iterate; iterating raises the request's error if it failed."""

    def __init__(self) -> None:
        self.handle = -1  # set by EngineLoop.submit
        self._loop: EngineLoop | None = None
        self._queue: queue.Queue[Any] = queue.Queue()

    def __iter__(self) -> Iterator[RequestDelta]:
        while True:
            item = self._queue.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def cancel(self) -> bool:
        return self._loop is not None and self._loop.cancel(self.handle)

    def token_ids(self) -> list[int]:
        """Consume the stream; return all generated token ids."""
        return [t for delta in self for t in delta.token_ids]

    def deliver(self, delta: RequestDelta) -> None:
        self._queue.put(delta)
        if delta.finished:
            self._queue.put(_DONE)

    def fail(self, error: BaseException) -> None:
        self._queue.put(error)
        self._queue.put(_DONE)


@dataclass
class _Entry:
    """A submitted request as the loop thread tracks it."""

    handle: int
    sink: Sink
    is_cancelled: Callable[[], bool] | None
    detokenizer: IncrementalDetokenizer
    request_id: int | None = None  # the engine's id, once admitted


class EngineLoop:
    """Run `engine` on a background thread; see the module docstring. Usable as a context manager."""

    def __init__(self, engine: SpecEngine, *, on_iteration: Callable[[IterationStats], None] | None = None) -> None:
        self.engine = engine
        self.on_iteration = on_iteration  # called on the loop thread after each step (a server's iteration stats)
        self._inbox: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._handles = itertools.count()
        self._entries: dict[int, _Entry] = {}  # engine request id -> entry (loop thread only)
        self._by_handle: dict[int, _Entry] = {}  # handle -> entry (loop thread only)
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
        """Queue a request; returns its RequestStream at once (errors surface when the stream is iterated)."""
        stream = RequestStream()
        stream.handle, stream._loop = self.submit_to(stream, prompt, sampling, spec), self
        return stream

    def submit_to(self, sink: Sink, prompt: Prompt, sampling: SamplingParams | None = None,
                  spec: SpecParams | None = None, *, is_cancelled: Callable[[], bool] | None = None) -> int:
        """Queue a request whose results are pushed into `sink` from the loop thread; returns its handle (for
        `cancel`). `is_cancelled` is polled every loop turn: True aborts the request (a client that went away)."""
        tokenizer = self.engine.tokenizer
        decode = self.engine.decode if tokenizer is not None else None
        with self._lock:
            if self._closed:
                raise ServerError("the engine loop is shut down", hint="create a new EngineLoop")
            handle = next(self._handles)
            entry = _Entry(handle, sink, is_cancelled, IncrementalDetokenizer(decode, decodes_whole(tokenizer)))
            self._inbox.put(("submit", (entry, prompt, sampling, spec)))
        return handle

    def cancel(self, handle: int) -> bool:
        """Abort a submitted request (its sink gets a final delta with finish_reason "abort"); False once closed."""
        with self._lock:
            if self._closed:
                return False
            self._inbox.put(("cancel", handle))
        return True

    def shutdown(self, *, drain: bool = False, timeout: float | None = DRAIN_TIMEOUT_S) -> None:
        """Stop the loop. With drain, running and queued requests finish first; whatever still runs after `timeout`
        seconds is aborted. Without, they are aborted now. Aborted requests fail with ServerError. Idempotent."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._inbox.put(("stop", drain))
        self._thread.join(timeout)
        if self._thread.is_alive():  # drain ran out of time: abort the rest
            self._inbox.put(("stop", False))
            self._thread.join()

    # -- loop thread ---------------------------------------------------------------------------------------------
    def _run(self) -> None:
        stopping = draining = False
        while True:
            idle = not self.engine.has_unfinished()
            if stopping and (idle or not draining):
                self._fail_all(ServerError("the engine loop was shut down before the request finished"))
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
                    self._cancel(self._by_handle.get(payload))
                else:
                    stopping, draining = True, payload
            # 2. cancel: requests whose client went away stop costing engine steps
            for entry in [e for e in self._entries.values() if e.is_cancelled is not None and _true(e.is_cancelled)]:
                self._cancel(entry)
            if not self.engine.has_unfinished():
                continue
            # 3. step
            try:
                deltas = self.engine.step()
            except Exception as exc:  # fail the running requests; keep serving the others
                self._fail_all(ServerError(f"generation failed: {type(exc).__name__}: {exc}"))
                continue
            if self.on_iteration is not None and self.engine.last_iteration is not None:
                try:
                    self.on_iteration(self.engine.last_iteration)
                except Exception as exc:  # noqa: BLE001 - a failing stats reader never stops the serving loop
                    self.on_iteration = None
                    logger.warning("iteration statistics are off from now on: their reader failed (%s: %s)",
                                   type(exc).__name__, exc)
            # 4. route: hold back incomplete characters, push to the sinks
            for delta in deltas:
                entry = self._entries.get(delta.request_id)
                if entry is not None:
                    self._deliver(entry, delta)

    def _admit(self, entry: _Entry, prompt: Prompt, sampling: SamplingParams | None,
               spec: SpecParams | None) -> None:
        try:
            entry.request_id = self.engine.add_request(prompt, sampling, spec)
        except TrtspecError as exc:  # bad input or overloaded: this request only
            self._fail(entry, error=exc)
            return
        self._entries[entry.request_id] = entry
        self._by_handle[entry.handle] = entry

    def _deliver(self, entry: _Entry, delta: RequestDelta) -> None:
        entry.detokenizer.push_delta(delta)  # tokens, text and per-token log-probs
        if delta.finished:
            self._forget(entry)
        try:
            entry.sink.deliver(delta)
        except SinkClosed:  # the request has already ended: stop generating for it, nothing else is affected
            if not delta.finished:
                self._abort(entry)
        except Exception as exc:  # the sink could not deliver (building or sending the response): fail the request
            if not delta.finished:
                self._abort(entry)
            self._fail(entry, error=exc)

    def _cancel(self, entry: _Entry | None) -> None:
        if entry is None or entry.request_id is None:
            return
        self._abort(entry)
        self._deliver(entry, RequestDelta(request_id=entry.request_id, token_ids=[], finished=True,
                                          finish_reason="abort"))

    def _abort(self, entry: _Entry) -> None:
        self.engine.abort(entry.request_id)  # type: ignore[arg-type]
        self._forget(entry)

    def _forget(self, entry: _Entry) -> None:
        self._entries.pop(entry.request_id, None)  # type: ignore[arg-type]
        self._by_handle.pop(entry.handle, None)

    def _fail(self, entry: _Entry, *, error: BaseException) -> None:
        try:
            entry.sink.fail(error)
        except Exception:  # a sink that cannot report its own failure has nobody left to tell
            pass

    def _fail_all(self, error: BaseException) -> None:
        for entry in list(self._entries.values()):
            self._abort(entry)
            self._fail(entry, error=error)


def _true(check: Callable[[], bool]) -> bool:
    try:
        return bool(check())
    except Exception:  # a client whose state cannot be read is treated as gone
        return True
