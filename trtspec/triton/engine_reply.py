"""Responses of the torch flavour's engine models: one job's engine deltas -> Triton responses in tensorrtllm_backend's
shapes (`JobSink`, a `spec.serving.Sink` run on the loop thread), where they go (`Reply`: the request's response
sender, decoupled or not) and the Triton error that answers a failed request (`triton_error`)."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from trtspec.contracts.metrics import AcceptanceStats
from trtspec.errors import OverloadedError, ServerError, SinkClosed, TrtspecError, UsageError, tag_bad_input
from trtspec.triton.engine_request import Job, ParsedRequest, with_hint


class ReplyHost(Protocol):
    """What a reply reads of the engine model that made it (triton.engine_model.EngineModel): the Python backend's
    `pb_utils` (responses, tensors, flags) and the model's metrics (SpecMetrics)."""

    pb: Any
    metrics: Any


logger = logging.getLogger(__name__)

KV_OUTPUTS = ("kv_cache_alloc_new_blocks", "kv_cache_reused_blocks", "kv_cache_alloc_total_blocks")
TIME_OUTPUTS = ("arrival_time_ns", "first_scheduled_time_ns", "first_token_time_ns", "last_token_time_ns")
ACCEPTANCE_OUTPUTS = ("acceptance_rate", "total_accepted_draft_tokens", "total_draft_tokens", "num_drafts")


def triton_error(pb: Any, error: BaseException) -> Any:
    """The Triton error that answers a failed request, with its code: INVALID_ARG for bad input (a RequestError, a
    parameter the engine refuses), UNAVAILABLE when the engine is full (OverloadedError), INTERNAL for the rest.
    Clients see the code as gRPC INVALID_ARGUMENT / UNAVAILABLE / INTERNAL and HTTP 400 / 503 / 500; trtspec's
    client raises RequestError (exit 2) for INVALID_ARGUMENT, and for a stream error tagged BAD_INPUT_TAG (a stream
    on tritonserver 2.51 carries the message alone: trtspec.errors.BAD_INPUT_TAG)."""
    code = ("INVALID_ARG" if isinstance(error, UsageError) else "UNAVAILABLE" if isinstance(error, OverloadedError)
            else "INTERNAL")
    message = with_hint(error) if isinstance(error, TrtspecError) else str(error)
    return pb.TritonError(tag_bad_input(message) if code == "INVALID_ARG" else message, getattr(pb.TritonError, code))


class Reply:
    """Where a Triton request's responses go: its response sender (the last job to finish sends the final flag).

    Every model answers through the sender, decoupled or not (python backend >= 24.01 takes one response with the
    final flag from the sender of a model in the default policy, and execute() returns None, as NVIDIA's llmapi
    model.py does): execute() hands the requests to the engine loop and returns at once, so unary requests that
    arrive together are served together in the loop's batch instead of one execute() call at a time.

    An error is the request's final response, also when other jobs of it still run: their later responses raise
    ReplyClosed (so the serving loop aborts them): nothing may follow an error on a gRPC stream (in Triton's
    triton_grpc_error mode the error closed it, and tritonserver 2.51 crashes on a later send).

    Where the model has a `responder` (a `Responder`), the responses are sent from its thread, in order, and the engine
    loop goes on stepping meanwhile; a non-final send that fails there (a stub-side error: a closed sender, shared
    memory exhausted) ends the request with an error response flagged FINAL (`end_broken`) and closes the reply, so
    the request's next response raises ReplyClosed and the loop aborts it."""

    def __init__(self, model: ReplyHost, request: Any, parsed: ParsedRequest | Any = None,
                 wanted: frozenset[str] | None = None, on_done: Callable[[], None] | None = None) -> None:
        self.model, self.parsed, self.wanted, self.on_done = model, parsed, wanted, on_done
        self.sender = request.get_response_sender()
        self.pending = len(getattr(parsed, "jobs", None) or ()) or 1  # an llmapi request is one job
        self.arrival_ns = time.monotonic_ns()
        self.done = threading.Event()
        self._closed = False
        self.broken = False  # a send failed (the Responder's thread): the request has nobody left to answer
        self._lock = threading.Lock()

    def send(self, response: Any, *, last_of_job: bool, failed: bool = False) -> None:
        with self._lock:
            if self._closed or self.broken:
                raise ReplyClosed("the request has already ended (an error answered it, or its client went away)")
            if last_of_job:
                self.pending -= 1
            final = self._closed = self.pending == 0 or failed
            flags = self.model.pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL if final else 0
            responder = getattr(self.model, "responder", None)
            # under the lock, so that no response of this request is sent (or queued) after its final one
            if responder is None:
                self.sender.send(response, flags=flags)
            else:
                responder.put(self, response, flags)
        if final:
            self.done.set()
            if self.on_done is not None:
                self.on_done()

    def end_broken(self, cause: BaseException) -> None:
        """A non-final response could not be sent (the Responder's thread): end the request with an error response
        flagged FINAL, so that its client does not wait for one; if that send fails too, it is logged."""
        with self._lock:
            self.broken = True
            ended, self._closed = self._closed, True
        pb = self.model.pb
        error = ServerError(f"a response could not be sent ({type(cause).__name__}: {cause}); the request is aborted")
        try:
            self.sender.send(pb.InferenceResponse(output_tensors=[], error=triton_error(pb, error)),
                             flags=pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        except Exception as exc:  # noqa: BLE001 - nobody left to answer
            logger.warning("the error ending a request could not be sent either (%s: %s)", type(exc).__name__, exc)
        if not ended:  # else the final response's send() has already marked the request done
            self.done.set()
            if self.on_done is not None:
                self.on_done()

    def error(self, error: BaseException) -> None:
        """Answer the request with `error` (triton_error: its code and message) as its final response."""
        pb = self.model.pb
        try:
            self.send(pb.InferenceResponse(output_tensors=[], error=triton_error(pb, error)), last_of_job=True,
                      failed=True)
        except ReplyClosed:  # an earlier error already answered it
            pass


class ReplyClosed(SinkClosed):
    """A response for a Triton request that an error has already ended."""


class Responder:
    """A thread that sends the model's responses, in the order they were put, so that the engine loop does not wait
    on them: a response sender's send() is a round trip from the Python stub to tritonserver (0.4-0.5 ms each measured
    on the 2-core machine, 22 a streamed 64-token request). NVIDIA's llmapi model.py sends from a response thread
    for the same reason. `close` sends what is queued, then ends the thread."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[Reply, Any, int] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="trtspec-responder", daemon=True)
        self._thread.start()

    def put(self, reply: Reply, response: Any, flags: int) -> None:
        self._queue.put((reply, response, flags))

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            reply, response, flags = item
            if reply.broken:  # an earlier send failed and an error ended the request: nothing follows it
                continue
            try:
                reply.sender.send(response, flags=flags)
            except Exception as exc:  # noqa: BLE001 - the loop aborts the request at its next response
                logger.warning("a response could not be sent (%s: %s); its request is aborted",
                               type(exc).__name__, exc)
                if flags & reply.model.pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL:
                    reply.broken = True  # the final one: the request has ended
                else:
                    reply.end_broken(exc)


@dataclass
class JobSink:
    """Encodes one job's deltas as Triton responses (a `spec.serving.Sink`; runs on the loop thread)."""

    reply: Reply
    job: Job
    submitted_ns: int = 0
    generated: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)  # of the generated tokens
    cum_log_prob: float = 0.0  # TensorRT-LLM's cum_log_probs: the sum of their unnormalised log-probs
    first_token_ns: int = 0
    last_token_ns: int = 0

    def deliver(self, delta: Any) -> None:
        model, parsed, job = self.reply.model, self.reply.parsed, self.job
        assert parsed is not None  # a job's reply always has its parsed request
        tokens = list(delta.token_ids)
        log_probs, cumulative = list(delta.log_probs or []), list(delta.cum_log_probs or [])
        if tokens:
            now = time.monotonic_ns()
            self.first_token_ns = self.first_token_ns or now
            self.last_token_ns = now
        if delta.finished and delta.finish_reason == "stop" and job.end_id is not None and tokens \
                and tokens[-1] == job.end_id:  # TensorRT-LLM leaves an end_id it sampled out of the output
            tokens, log_probs, cumulative = tokens[:-1], log_probs[:-1], cumulative[:-1]
        self.generated += tokens
        self.log_probs += log_probs
        if cumulative:
            self.cum_log_prob = cumulative[-1]
        if not delta.finished:
            if parsed.streaming and tokens:
                self.reply.send(self._response(tokens, log_probs, delta), last_of_job=False)
            return
        # A cancelled request (a stop request, or its client went away) ends like any other, with what it generated
        # so far: TensorRT-LLM's executor answers cancelRequest with a final result, not an error.
        model.metrics.finished(delta.finish_reason or "length", delta.stats, **self._timings(len(self.generated)))
        if parsed.streaming:
            self.reply.send(self._response(tokens, log_probs, delta), last_of_job=True)
            return
        ids = self.generated if job.exclude_input_in_output else job.prompt_ids + self.generated
        self.reply.send(self._response(ids, self.log_probs, delta), last_of_job=True)

    def _timings(self, num_tokens: int) -> dict[str, float | None]:
        return timings(self.reply.arrival_ns, self.first_token_ns, self.last_token_ns, num_tokens)

    def fail(self, error: BaseException) -> None:
        self.reply.error(error)  # first: the client's final response does not wait on the metrics
        self.reply.model.metrics.finished("abort")

    def _response(self, ids: list[int], log_probs: list[float], delta: Any) -> Any:
        """One response in tensorrtllm_backend's shapes: output_ids [1, 1, len], sequence_length [1, 1], ..."""
        parsed, job, wanted = self.reply.parsed, self.job, self.reply.wanted
        assert parsed is not None  # a job's reply always has its parsed request
        out: dict[str, np.ndarray] = {
            "output_ids": np.asarray(ids, dtype=np.int32).reshape(1, 1, -1),
            "sequence_length": np.array([[len(ids)]], dtype=np.int32),
        }
        if job.return_log_probs:  # of the generated tokens (a streamed response: its own tokens)
            out["cum_log_probs"] = np.array([[self.cum_log_prob]], dtype=np.float32)  # [1, beam]
            out["output_log_probs"] = np.asarray(log_probs, dtype=np.float32).reshape(1, 1, -1)  # [1, beam, len]
        if parsed.batch_size > 1:
            out["batch_index"] = np.array([[job.batch_index]], dtype=np.int32)
        if parsed.num_return_sequences > 1:
            out["sequence_index"] = np.array([[job.sequence_index]], dtype=np.int32)
        if parsed.return_perf_metrics or parsed.return_kv_stats:
            out |= {name: np.zeros((1, 1), dtype=np.int32) for name in KV_OUTPUTS}
        if parsed.return_perf_metrics:
            times = (self.reply.arrival_ns, self.submitted_ns, self.first_token_ns, self.last_token_ns)
            out |= {name: np.array([[value]], dtype=np.int64) for name, value in zip(TIME_OUTPUTS, times, strict=True)}
            stats = delta.stats if delta.finished and delta.stats is not None else AcceptanceStats()
            out |= {"acceptance_rate": np.array([[stats.acceptance_rate]], dtype=np.float32),
                    "total_accepted_draft_tokens": np.array([[stats.num_accepted_tokens]], dtype=np.int32),
                    "total_draft_tokens": np.array([[stats.num_draft_tokens]], dtype=np.int32),
                    "num_drafts": np.array([[stats.num_drafts]], dtype=np.int32)}
        tensor = self.reply.model.pb.Tensor
        return self.reply.model.pb.InferenceResponse(
            output_tensors=[tensor(name, value) for name, value in out.items() if wanted is None or name in wanted])


def timings(arrival_ns: int, first_token_ns: int, last_token_ns: int, num_tokens: int) -> dict[str, float | None]:
    """A request's latency and time per output token (seconds) for the latency histograms (SpecMetrics.finished)."""
    end = last_token_ns or time.monotonic_ns()
    per_token = ((last_token_ns - first_token_ns) / (num_tokens - 1) / 1e9
                 if num_tokens > 1 and first_token_ns else None)
    return {"latency_s": (end - arrival_ns) / 1e9, "time_per_output_token_s": per_token}


def requested_outputs(request: Any) -> frozenset[str] | None:
    """The outputs the request asked for (python backend's requested_output_names); None = all of them."""
    names = getattr(request, "requested_output_names", None)
    if not callable(names):
        return None
    try:
        wanted = frozenset(names())
    except Exception:  # an older backend: send everything
        return None
    return wanted or None
