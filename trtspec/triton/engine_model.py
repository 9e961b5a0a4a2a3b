"""The logic behind the torch flavour's engine models (`tensorrt_llm`, `tensorrt_llm_draft`): NVIDIA's tensorrt_llm
tensors in, trtspec's reference engine, NVIDIA's tensorrt_llm tensors out.

`model_repo/common/engine_shim.py` (each engine model's 1/model.py) hands `pb_utils` to `EngineModel`. This module
keeps only what is Triton's: request parsing (`parse_request`, pure numpy: a bad request gets a Triton error naming the
input and the limit, code INVALID_ARG (`triton_error`), and the server keeps serving), response encoding (`JobSink`, a
`spec.serving.Sink`) and metrics. The engine, its serving loop and the prompt log are the one engine host
(`spec.host.EngineHost`, as in the Dynamo worker). The model's `parameters` are an EngineConfig's
(`triton.served_config`).

Semantics follow tensorrtllm_backend v0.19.0 (inflight_batcher_llm/src/utils.cc, model_instance_state.cc):
- One Triton request with batch size B > 1 is B engine requests; each response carries `batch_index` (when the
  request asks for it). `num_return_sequences` N makes N engine requests per row, each response with
  `sequence_index`; sequence i is seeded with seed + i (seed unset: 0), as TensorRT-LLM's
  `LlmRequest::createChildRequest` does. Several responses need the decoupled policy: without it, batch > 1,
  N > 1 and streaming are refused, as the C++ backend refuses them.
- Output ids are [1, beam 1, len]: the prompt followed by the generated tokens, unless exclude_input_in_output (the
  request's, else the model's parameter, false by default); a streamed response carries only its new tokens. An
  end_id that ends the request is not part of the output (TensorRT-LLM does not count it in sequence_length).
- Sampling controls mean what they mean to TensorRT-LLM (trtspec.spec.params.trtllm_sampling_params): unset
  temperature is 1.0, unset runtime_top_k and runtime_top_p (or top_p <= 0) mean greedy, unset seed is 0; end_id is
  the only token that ends a request (none: it runs to request_output_len).
- `draft_input_ids` are verified by the target in the request's first step like a draft_tokens_external engine (by
  token id; draft_logits are refused), and the request goes on without drafts of its own to request_output_len (the
  clients ask for len(draft) + 1); without them the model speculates with its own method and k
  (`num_draft_tokens`, a trtspec extension).
- return_perf_metrics fills every perf output on every response: timing from time.monotonic_ns (TensorRT-LLM's
  steady clock): arrival = when execute() received the request, first_scheduled = when it was handed to the engine
  loop (the loop adds it to the running batch at its next step; the engine keeps no separate timestamp),
  first/last token = when the loop delivered them. The KV block counters are 0: the reference engine keeps one
  contiguous cache per sequence, not blocks. The acceptance counters (and the `num_drafts` extension) are the
  request's totals on its final response and 0 on earlier streamed ones (the engine reports them when it finishes).
- Declared but refused per request with an error naming the input: beam_width > 1, LoRA, prompt tables, guided
  decoding, embedding_bias, context/generation logits, draft_logits, draft_acceptance_threshold, top-p decay/reset,
  per-request lookahead other than the server's. len_penalty, early_stopping and beam_search_diversity_rate act on
  beam search only, so at beam width 1 they change nothing (as in TensorRT-LLM) and are accepted.
- A request with `stop` = true cancels the running requests with the same Triton request id (an empty final
  response answers it); a cancelled request ends with a final response holding what it generated so far, as
  TensorRT-LLM's executor answers a cancellation.

With `log_prompts` set (off by default), a sampled share of the prompts goes to the prompt log (contracts/prompt_log.py).
A version directory may bring its own checkpoints (`served_config.for_version`: a draft rolled out as a new version).

Acceptance counters, target forwards and latency histograms are published as Prometheus metrics (the series of
`trtspec.contracts.series`, through `trtspec.triton.spec_metrics`). torch is imported only when
the engine is built.
"""


from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from trtspec.errors import RequestError, TrtspecError
from trtspec.triton.engine_reply import JobSink, Reply, ReplyClosed, Responder, requested_outputs, triton_error
from trtspec.triton.engine_request import Job, ParsedRequest, engine_features, parse_request, word_lists
from trtspec.triton.served_config import for_version, from_model_config
from trtspec.triton.spec_metrics import SpecMetrics

# Request parsing and response encoding live in engine_request.py and engine_reply.py; their public names stay
# importable from here.
__all__ = ["EngineModel", "Job", "ParsedRequest", "ReplyClosed", "engine_features", "parse_request", "triton_error",
           "word_lists"]


class EngineModel:
    """The Python-backend model: parses requests, runs them on the one EngineLoop, encodes responses, counts."""

    def __init__(self, args: dict[str, Any], pb_utils: Any) -> None:
        from trtspec.models import read_config, resolve_model
        from trtspec.spec.host import EngineHost

        self.pb = pb_utils
        config = json.loads(args["model_config"])
        # A version directory may bring its own checkpoints (a rolled-out draft: trtspec-version.json).
        self.params = for_version(from_model_config(config),
                                  Path(args.get("model_repository", ".")) / str(args.get("model_version", "1")))
        self.decoupled = bool(config.get("model_transaction_policy", {}).get("decoupled", False))
        params = self.params
        labels = {"model": args.get("model_name", "tensorrt_llm"), "version": str(args.get("model_version", "1")),
                  "method": params.method}
        self.host = EngineHost(params, model=labels["model"], version=labels["version"])
        self.engine = self.host.engine
        vocab = read_config(resolve_model(params.target, field="target")).get("vocab_size")
        self.vocab_size = int(vocab) if vocab else None
        self.features = engine_features()
        self.metrics = SpecMetrics(pb_utils, labels, default_k=params.default_k, gate=lambda: self.engine.gate_state)
        # Triton request id -> the loop handles of each running request with that id (for stop requests); a client
        # may reuse an id, so each request keeps its own list, removed when it ends (`_forget`)
        self._by_request_id: dict[str, list[list[int]]] = {}
        self.responder = Responder()  # sends the responses off the engine loop's thread
        self._ids_lock = threading.Lock()

    def execute(self, requests: list[Any]) -> None:
        """Hand each request to the engine loop and return: responses go through each request's sender from the loop
        thread, decoupled or not (`engine_reply.Reply`), so the next execute() call, and with it the next unary
        request, is not held up by this one's generation."""
        for request in requests:
            self._submit(request)

    def _submit(self, request: Any) -> Reply:
        """Parse the request (`_parse`); answer a bad one with its error and a stop request by cancelling; else start
        its engine requests (`_start`), their handles remembered under the request id (for stop requests) from before
        the start, so that a request that ends at once forgets its own handles, and another with the same id keeps its."""
        try:
            parsed = self._parse(request)
        except RequestError as exc:
            reply = Reply(self, request)
            reply.error(exc)
            return reply
        request_id = request.request_id() if callable(getattr(request, "request_id", None)) else ""
        if parsed.stop:
            return self._stop(request, request_id)
        handles: list[int] = []
        forget = None
        if request_id:
            with self._ids_lock:
                self._by_request_id.setdefault(request_id, []).append(handles)
            forget = lambda: self._forget(request_id, handles)  # noqa: E731
        reply = Reply(self, request, parsed, requested_outputs(request), on_done=forget)
        handles += self._start(reply, parsed, self._cancel_check(request, reply))
        return reply

    def _parse(self, request: Any) -> Any:
        """The request as engine jobs (a ParsedRequest), or RequestError."""
        return parse_request(lambda name: self._get(request, name), self.params, self.vocab_size,
                             decoupled=self.decoupled, features=self.features)

    def _start(self, reply: Reply, parsed: Any, cancelled: Callable[[], bool] | None) -> list[int]:
        """Hand each job to the engine loop with a JobSink; the handles. A refusal (the loop is shut down, or full)
        ends the request with its error and cancels the jobs already started."""
        handles: list[int] = []
        for job in parsed.jobs:
            sink = JobSink(reply, job, submitted_ns=time.monotonic_ns())
            try:
                handles.append(self.host.submit_to(sink, job.prompt_ids, job.sampling, job.spec,
                                                   is_cancelled=cancelled, log_prompt=job.sequence_index == 0))
            except TrtspecError as exc:
                sink.fail(exc)
                for handle in handles:
                    self.host.cancel(handle)
                break
        return handles

    def _stop(self, request: Any, request_id: str) -> Reply:
        """Answer a stop request: cancel the running requests with its request id, then an empty final response."""
        reply = Reply(self, request)
        if not request_id:
            reply.error(RequestError("stop=true stops the request with the same request id, but this request "
                                     "has none; send the id of the request to stop"))
            return reply
        with self._ids_lock:
            running = self._by_request_id.pop(request_id, [])
        for handle in [handle for handles in running for handle in handles]:
            self.host.cancel(handle)
        reply.send(self.pb.InferenceResponse(output_tensors=[]), last_of_job=True)
        return reply

    def _forget(self, request_id: str, handles: list[int]) -> None:
        """Drop one ended request's handles (`handles`, that very list) from those under its request id."""
        with self._ids_lock:
            running = self._by_request_id.get(request_id, [])
            running[:] = [other for other in running if other is not handles]
            if not running:
                self._by_request_id.pop(request_id, None)

    def _cancel_check(self, request: Any, reply: Reply) -> Callable[[], bool] | None:
        """The request's client-went-away check (python backend >= 23.10), if it has one, asked at most every
        CANCEL_CHECK_PERIOD_S (`PeriodicCheck`)."""
        check = getattr(reply.sender, "is_cancelled", None)
        return PeriodicCheck(check) if callable(check) else None

    def _get(self, request: Any, name: str) -> np.ndarray | None:
        tensor = self.pb.get_input_tensor_by_name(request, name)
        return None if tensor is None else tensor.as_numpy()

    def close(self) -> None:
        """Unload: running requests finish within drain_timeout_s, then the rest fail. The metrics are kept."""
        self.host.close()
        self.responder.close()  # the responses of what the drain finished
        # Not deleted: a reload of this version (`trtspec set-k`) loads the new instance before this one goes, and
        # Triton hands both the same Prometheus series (same labels); deleting ours would free it under the new
        # instance (tritonserver 2.51 crashes at its next increment). Kept, the counters run on without a reset;
        # this stub process ends with the instance.
        _RETIRED_METRICS.append(self.metrics)


_RETIRED_METRICS: list[SpecMetrics] = []  # of unloaded instances: never deleted (see EngineModel.close)
# NVIDIA's llmapi model.py asks its requests' is_cancelled() every cancellation_check_period_ms, 100 by default
CANCEL_CHECK_PERIOD_S = 0.1


class PeriodicCheck:
    """A request's is_cancelled() asked at most every `period_s` seconds; False in between, True for good once it
    said so. The engine loop polls its requests' checks every turn, and the response sender's is_cancelled() is a
    round trip from the Python stub to tritonserver (0.2-0.3 ms each on a loaded 2-core machine: a few ms per request
    and per step at batch 16, spent on the loop thread between engine steps)."""

    def __init__(self, check: Callable[[], bool], period_s: float = CANCEL_CHECK_PERIOD_S) -> None:
        self.check, self.period_s = check, period_s
        self._next = time.monotonic() + period_s
        self._cancelled = False

    def __call__(self) -> bool:
        if not self._cancelled and time.monotonic() >= self._next:
            self._cancelled = bool(self.check())
            self._next = time.monotonic() + self.period_s
        return self._cancelled


