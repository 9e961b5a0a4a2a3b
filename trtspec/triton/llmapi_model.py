"""The logic behind the torch flavour's llmapi model (`tensorrt_llm` of an llmapi repository): the tensors of NVIDIA's
llmapi model in, trtspec's reference engine, the same model's tensors out.

`model_repo/common/llmapi_shim.py` (its 1/model.py) hands `pb_utils` to `LlmapiModel`, an `EngineModel` (the same
engine host, serving loop, stop requests, cancellation, metrics and model parameters) that parses llmapi requests
(`trtspec.triton.llmapi_request`) and answers as NVIDIA's model.py does (the 2025 stored version the facts name).
Like NVIDIA's, execute() returns at once and every request, unary or decoupled, is answered through its response
sender, so concurrent unary requests run together in the engine loop's batch, as decoupled ones do:
- text_output [1]: the LLM API's CompletionOutput.text: the prompt followed by the generated text unless
  sampling_param_exclude_input_from_output; a streamed response carries the whole text so far (NVIDIA's model
  sends `output.text`, not its delta). A stop string that ended the request is not part of it (the LLM API's
  include_stop_str_in_output false); the end token is not either.
- finish_reason / stop_reason [1] when return_finish_reason / return_stop_reason: the LLM API's values as strings
  ("stop", "length", "cancelled"; the stop string that ended the request), "None" while unknown.
- cumulative_logprob [1] when return_cumulative_logprob: the sum of the generated tokens' log-probs.
- with sampling_param_return_perf_metrics, every response carries the perf outputs: KV block counters 0 and
  kv_cache_hit_rate 0.0 (the reference engine keeps one contiguous cache per sequence, not blocks); arrival, first
  scheduled, first and last token times from time.monotonic_ns (TensorRT-LLM's steady clock); acceptance_rate,
  total_accepted_draft_tokens and total_draft_tokens: the request's totals on its final response, 0 before.
Outputs are sent with the data types the model declares (NVIDIA's model.py sends its perf outputs as strings, which
its documented responses show as "0.0"; the declared types are the contract here).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trtspec.contracts.metrics import AcceptanceStats
from trtspec.errors import TrtspecError
from trtspec.triton.engine_model import EngineModel
from trtspec.triton.engine_reply import Reply, timings
from trtspec.triton.llmapi_request import LlmapiRequest, check_parameters, parse_llmapi_request

FINISH_REASONS = {"abort": "cancelled"}  # the engine's name -> the LLM API's (stop and length are the same)


class LlmapiModel(EngineModel):
    """The Python-backend llmapi model: one prompt per request, text in and out, on the one EngineLoop."""

    def __init__(self, args: dict[str, Any], pb_utils: Any) -> None:
        super().__init__(args, pb_utils)
        self.inputs = [t["name"] for t in json.loads(args["model_config"]).get("input", [])]

    def _parse(self, request: Any) -> LlmapiRequest:
        tokenizer = self.engine.tokenizer
        check_parameters(_parameters(request), self.inputs)
        return parse_llmapi_request(
            lambda name: self._get(request, name), self.params, encode=self.engine.encode,
            encode_words=lambda text: list(tokenizer.encode(text, add_special_tokens=False)),
            end_id=getattr(tokenizer, "eos_token_id", None), decoupled=self.decoupled)

    def _start(self, reply: Reply, parsed: LlmapiRequest, cancelled: Callable[[], bool] | None) -> list[int]:
        """One engine request with a TextSink; a refusal (the loop is shut down, or full) ends it with its error."""
        sink = TextSink(reply, parsed, submitted_ns=time.monotonic_ns())
        try:
            return [self.host.submit_to(sink, parsed.prompt_ids, parsed.sampling, parsed.spec, is_cancelled=cancelled)]
        except TrtspecError as exc:
            sink.fail(exc)
            return []


def _parameters(request: Any) -> dict[str, Any]:
    """The request's parameters (the python backend hands them over as JSON text)."""
    read = getattr(request, "parameters", None)
    text = read() if callable(read) else None
    return json.loads(text) if text else {}


@dataclass
class TextSink:
    """Encodes one request's deltas as llmapi responses (a `spec.serving.Sink`; runs on the loop thread)."""

    reply: Reply
    request: LlmapiRequest
    submitted_ns: int = 0
    generated: list[int] = field(default_factory=list)
    cum_log_prob: float = 0.0
    first_token_ns: int = 0
    last_token_ns: int = 0

    def deliver(self, delta: Any) -> None:
        request = self.request
        tokens = list(delta.token_ids)
        if tokens:
            now = time.monotonic_ns()
            self.first_token_ns = self.first_token_ns or now
            self.last_token_ns = now
        if delta.finished and delta.finish_reason == "stop" and request.end_id is not None and tokens \
                and tokens[-1] == request.end_id:  # the end token is not part of the output
            tokens = tokens[:-1]
        self.generated += tokens
        if delta.cum_log_probs:
            self.cum_log_prob = delta.cum_log_probs[-1]
        if not delta.finished:
            if request.streaming and tokens:
                self.reply.send(self._response(None, None, None), last_of_job=False)
            return
        model: Any = self.reply.model
        reason = FINISH_REASONS.get(delta.finish_reason or "length", delta.finish_reason or "length")
        model.metrics.finished(delta.finish_reason or "length", delta.stats, **timings(
            self.reply.arrival_ns, self.first_token_ns, self.last_token_ns, len(self.generated)))
        self.reply.send(self._response(reason, self._stop_string(reason), delta.stats), last_of_job=True)

    def fail(self, error: BaseException) -> None:
        self.reply.model.metrics.finished("abort")
        self.reply.error(error)

    def _stop_string(self, reason: str) -> str | None:
        """The stop string that ended the request (None: the end token, the length limit or a cancellation)."""
        if reason != "stop":
            return None
        text = self.reply.model.engine.decode(self.generated)
        return next((s for s in self.request.stop_strings if text.endswith(s)), None)

    def _text(self, stop_string: str | None) -> str:
        engine = self.reply.model.engine
        prefix = [] if self.request.exclude_input_from_output else self.request.prompt_ids
        text = engine.decode(prefix + self.generated)
        return text[: len(text) - len(stop_string)] if stop_string else text

    def _response(self, reason: str | None, stop_string: str | None, stats: AcceptanceStats | None) -> Any:
        request, wanted = self.request, self.reply.wanted
        out: dict[str, np.ndarray] = {"text_output": np.array([self._text(stop_string).encode("utf-8")], dtype=object)}
        if request.return_finish_reason:
            out["finish_reason"] = np.array([str(reason).encode()], dtype=object)
        if request.return_stop_reason:
            out["stop_reason"] = np.array([str(stop_string).encode()], dtype=object)
        if request.return_cumulative_logprob:
            out["cumulative_logprob"] = np.array([self.cum_log_prob], dtype=np.float32)
        if request.return_perf_metrics:
            stats = stats if stats is not None else AcceptanceStats()
            out |= {name: np.zeros(1, dtype=np.int32) for name in (
                "kv_cache_reused_block", "kv_cache_missed_block", "kv_cache_alloc_new_blocks",
                "kv_cache_alloc_total_blocks")}
            out["kv_cache_hit_rate"] = np.zeros(1, dtype=np.float32)
            times = (self.reply.arrival_ns, self.submitted_ns, self.first_token_ns, self.last_token_ns)
            out |= {name: np.array([value], dtype=np.int64) for name, value in zip(
                ("arrival_time_ns", "first_scheduled_time_ns", "first_token_time_ns", "last_token_time_ns"), times,
                strict=True)}
            out |= {"acceptance_rate": np.array([stats.acceptance_rate], dtype=np.float32),
                    "total_accepted_draft_tokens": np.array([stats.num_accepted_tokens], dtype=np.int32),
                    "total_draft_tokens": np.array([stats.num_draft_tokens], dtype=np.int32)}
        pb = self.reply.model.pb
        return pb.InferenceResponse(output_tensors=[pb.Tensor(name, value) for name, value in out.items()
                                                    if wanted is None or name in wanted])
