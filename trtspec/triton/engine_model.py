"""The logic behind the torch flavour's engine models (`tensorrt_llm`, `tensorrt_llm_draft`): NVIDIA's tensorrt_llm
tensors in, trtspec's reference engine, NVIDIA's tensorrt_llm tensors out.

`model_repo/common/engine_shim.py` (each engine model's 1/model.py) hands `pb_utils` to `EngineModel`. This module
keeps only what is Triton's: request parsing (`parse_request`, pure numpy: a bad request gets a Triton error naming the
input and the limit, code INVALID_ARG (`triton_error`), and the server keeps serving), response encoding (`_JobSink`, a `spec.serving.Sink`) and
metrics. The serving loop is `spec.serving.EngineLoop`. The model's `parameters` are an `EngineParams`.

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

With `log_prompts` set (off by default), a sampled share of the prompts goes to the prompt log (ops/prompt_log.py).
A version directory may bring its own checkpoints (`EngineParams.for_version`: a draft rolled out as a new version).

Acceptance counters, target forwards and latency histograms are published as Prometheus metrics (the series of
`trtspec.ops.series`, through `trtspec.triton.spec_metrics`). torch is imported only when
the engine is built.
"""

from __future__ import annotations

import dataclasses
import json
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trtspec.errors import OverloadedError, RequestError, TrtspecError, UsageError
from trtspec.ops.prompt_log import PromptLog
from trtspec.spec.metrics import AcceptanceStats
from trtspec.triton.engine_params import EngineParams
from trtspec.triton.spec_metrics import SpecMetrics

KV_OUTPUTS = ("kv_cache_alloc_new_blocks", "kv_cache_reused_blocks", "kv_cache_alloc_total_blocks")
TIME_OUTPUTS = ("arrival_time_ns", "first_scheduled_time_ns", "first_token_time_ns", "last_token_time_ns")
ACCEPTANCE_OUTPUTS = ("acceptance_rate", "total_accepted_draft_tokens", "total_draft_tokens", "num_drafts")
# Inputs of features the reference engine does not have: a request that sends one is refused naming it.
REFUSED_INPUTS = {
    "lora_task_id": "LoRA", "lora_weights": "LoRA", "lora_config": "LoRA",
    "prompt_embedding_table": "prompt tables (p-tuning)", "prompt_table_extra_ids": "prompt tables (p-tuning)",
    "guided_decoding_guide_type": "guided decoding", "guided_decoding_guide": "guided decoding",
    "draft_logits": "draft logits (it verifies draft_input_ids by token id)",
    "draft_acceptance_threshold": "a draft acceptance threshold (it verifies draft_input_ids by token id)",
    "runtime_top_p_decay": "top-p decay", "runtime_top_p_reset_ids": "top-p decay",
}  # fmt: skip
# Controls the engine reads only once trtspec.spec.params has them (checked by field name at first use).
SAMPLING_FEATURES = {"min_tokens": "min_tokens", "repetition_penalty": "repetition_penalty",
                     "presence_penalty": "presence_penalty", "frequency_penalty": "frequency_penalty",
                     "stop_words": "stop_words", "bad_words": "bad_words", "return_log_probs": "return_log_probs"}
NEUTRAL = {"repetition_penalty": (None, 1.0)}  # values that change nothing (others: unset, empty, false or 0)


@dataclass(frozen=True)
class Job:
    """One engine request: one (batch row, sequence) of a Triton request."""

    batch_index: int
    sequence_index: int
    prompt_ids: list[int]  # [prompt_len]
    sampling: Any  # trtspec.spec.params.SamplingParams
    spec: Any  # trtspec.spec.params.SpecParams
    end_id: int | None  # dropped from the output when it ends the request
    exclude_input_in_output: bool
    return_log_probs: bool


@dataclass(frozen=True)
class ParsedRequest:
    """A Triton request as engine jobs, and how to answer it."""

    jobs: tuple[Job, ...]
    batch_size: int
    num_return_sequences: int
    streaming: bool
    return_perf_metrics: bool
    return_kv_stats: bool  # return_kv_cache_reuse_stats (0.18.0): the KV outputs alone
    stop: bool = False  # a stop request: cancel the running requests with this request's id


def engine_features() -> frozenset[str]:
    """The request controls this trtspec's reference engine implements (SamplingParams/SpecParams field names)."""
    from trtspec.spec.params import SamplingParams, SpecParams

    return frozenset(f.name for cls in (SamplingParams, SpecParams) for f in dataclasses.fields(cls))


class _Tensors:
    """A request's input tensors as numpy (batch axis first), read per batch row with the input named in errors."""

    def __init__(self, get: Callable[[str], np.ndarray | None], batch: int) -> None:
        self.get, self.batch = get, batch

    def array(self, name: str) -> np.ndarray | None:
        value = self.get(name)
        if value is None:
            return None
        array = np.asarray(value)
        if array.ndim == 0 or array.shape[0] != self.batch:
            raise RequestError(f"{name} has shape {list(array.shape)}: its first (batch) dimension must be "
                               f"{self.batch}, the batch size of input_ids")
        return array

    def scalar(self, name: str, row: int, cast: type, default: Any = None) -> Any:
        array = self.array(name)
        if array is None:
            return default
        flat = array[row].reshape(-1)
        if flat.size != 1:
            raise RequestError(f"{name} must hold one value per batch row, got shape {list(array.shape)}")
        return cast(flat[0].item())

    def present(self, name: str) -> bool:
        array = self.get(name)
        return array is not None and np.asarray(array).size > 0


def word_lists(array: np.ndarray | None, row: int, name: str) -> tuple[tuple[int, ...], ...]:
    """Token sequences of one row of TensorRT-LLM's word-list tensor [batch, 2, len]: row 0 the concatenated ids,
    row 1 the end offset of each word, padded with -1 (tensorrtllm_backend's `_to_word_list_format`)."""
    if array is None:
        return ()
    if array.ndim != 3 or array.shape[1] != 2:
        raise RequestError(f"{name} has shape {list(array.shape)}; expected [batch, 2, len] (token ids, end offsets)")
    ids, offsets = array[row, 0].tolist(), array[row, 1].tolist()
    words, start = [], 0
    for end in offsets:
        if end < 0:
            break
        if not start < end <= len(ids):
            raise RequestError(f"{name}: offset {end} is not in ({start}, {len(ids)}]; offsets end each word")
        words.append(tuple(int(t) for t in ids[start:end]))
        start = end
    return tuple(words)


def parse_request(get: Callable[[str], np.ndarray | None], params: EngineParams, vocab_size: int | None = None, *,
                  decoupled: bool = True, features: frozenset[str] | None = None) -> ParsedRequest:
    """Turn the input tensors of one Triton request into engine jobs, or raise RequestError saying what is wrong.

    Args:
        get: tensor name -> numpy array (as Triton delivered it, batch axis first) or None when absent.
        params: the served model's parameters (limits and defaults); vocab_size: the target's, to check token ids.
        decoupled: the model's transaction policy (several responses, and streaming, need it).
        features: the engine's request controls (engine_features()); None = ask the engine.
    """
    features = engine_features() if features is None else features
    stop = get("stop")
    if stop is not None and bool(np.asarray(stop).reshape(-1)[0]):
        return ParsedRequest(jobs=(), batch_size=0, num_return_sequences=0, streaming=False,
                             return_perf_metrics=False, return_kv_stats=False, stop=True)
    input_ids = get("input_ids")
    if input_ids is None:
        raise RequestError("input_ids is required (INT32 [batch, prompt_len])")
    input_ids = np.asarray(input_ids)
    if input_ids.ndim == 1:
        input_ids = input_ids[None, :]  # [1, prompt_len]
    batch = input_ids.shape[0]
    t = _Tensors(get, batch)
    streaming = bool(t.scalar("streaming", 0, bool, False))
    if streaming and not decoupled:
        raise RequestError("streaming=true needs a decoupled model; this one is not (deploy with "
                           "`trtspec deploy --decoupled`, or send streaming=false)")
    if batch > 1 and not decoupled:
        raise RequestError(f"batch size {batch} needs a decoupled model (one response per row); this one is not: "
                           "send one row per request, or deploy with `trtspec deploy --decoupled`")
    for name, feature in REFUSED_INPUTS.items():
        if t.present(name):
            raise RequestError(f"{name}: {feature} is not supported by the reference engine; leave {name} out")
    embedding_bias = t.array("embedding_bias")
    if embedding_bias is not None and np.any(embedding_bias != 0):
        raise RequestError("embedding_bias: a logit bias is not supported by the reference engine; send an empty "
                           "embedding_bias (or none)")
    draft_ids = t.array("draft_input_ids")
    jobs = []
    for row in range(batch):
        jobs += _row_jobs(t, row, input_ids, draft_ids, params, vocab_size, features, decoupled=decoupled)
    return ParsedRequest(
        jobs=tuple(jobs), batch_size=batch, num_return_sequences=max(j.sequence_index for j in jobs) + 1,
        streaming=streaming, return_perf_metrics=bool(t.scalar("return_perf_metrics", 0, bool, False)),
        return_kv_stats=bool(t.scalar("return_kv_cache_reuse_stats", 0, bool, False)),
    )  # fmt: skip


def _row_jobs(t: _Tensors, row: int, input_ids: np.ndarray, draft_ids: np.ndarray | None, params: EngineParams,
              vocab_size: int | None, features: frozenset[str], *, decoupled: bool) -> list[Job]:
    from trtspec.spec.params import SpecParams

    where = f" (batch row {row})" if t.batch > 1 else ""
    length = t.scalar("input_lengths", row, int, input_ids.shape[1])
    if length < 1 or input_ids.shape[1] == 0:
        raise RequestError(f"empty prompt{where}: input_ids/input_lengths must hold at least one token")
    if length > input_ids.shape[1]:
        raise RequestError(f"input_lengths={length}{where} exceeds the {input_ids.shape[1]} tokens in input_ids")
    if length > params.max_input_len:
        raise RequestError(f"input_lengths={length}{where}: the prompt is longer than max_input_len="
                           f"{params.max_input_len}")
    prompt = [int(x) for x in input_ids[row, :length]]
    _check_vocab("input_ids", prompt, vocab_size)
    output_len = t.scalar("request_output_len", row, int)
    if output_len is None:
        raise RequestError("request_output_len is required (INT32 [batch, 1])")
    if not 1 <= output_len <= params.max_output_len:
        raise RequestError(f"request_output_len={output_len}{where} must be in [1, max_output_len="
                           f"{params.max_output_len}]")
    beam_width = t.scalar("beam_width", row, int, 1)
    if beam_width != 1:
        raise RequestError(f"beam_width={beam_width}: the reference engine has no beam search (max_beam_width 1); "
                           "send beam_width 1")
    n = t.scalar("num_return_sequences", row, int, 1)
    if n < 1:
        raise RequestError(f"num_return_sequences={n} must be >= 1")
    if n > 1 and not decoupled:
        raise RequestError(f"num_return_sequences={n} needs a decoupled model (one response per sequence); this one "
                           "is not: deploy with `trtspec deploy --decoupled`, or send 1")
    for name, value in (("lookahead_window_size", params.lookahead and params.lookahead[0]),
                        ("lookahead_ngram_size", params.lookahead and params.lookahead[1]),
                        ("lookahead_verification_set_size", params.lookahead and params.lookahead[2])):
        asked = t.scalar(name, row, int)
        if asked is not None and asked != value:
            raise RequestError(f"{name}={asked}: this model runs lookahead {list(params.lookahead or ())} set when "
                               "it was deployed; leave the lookahead inputs out or send the same values")
    for name in ("return_context_logits", "return_generation_logits"):
        if t.scalar(name, row, bool, False):
            raise RequestError(f"{name}=true: the reference engine does not return logits; send false")
    controls = {
        "min_tokens": t.scalar("min_length", row, int, t.scalar("min_tokens", row, int)),
        "repetition_penalty": t.scalar("repetition_penalty", row, float),
        "presence_penalty": t.scalar("presence_penalty", row, float),
        "frequency_penalty": t.scalar("frequency_penalty", row, float),
        "stop_words": word_lists(t.array("stop_words_list"), row, "stop_words_list"),
        "bad_words": word_lists(t.array("bad_words_list"), row, "bad_words_list"),
        "return_log_probs": bool(t.scalar("return_log_probs", row, bool, False)),
    }
    for name, value in controls.items():
        if SAMPLING_FEATURES[name] not in features and value not in NEUTRAL.get(name, (None, (), False, 0)):
            tensor = {"min_tokens": "min_length/min_tokens", "stop_words": "stop_words_list",
                      "bad_words": "bad_words_list"}.get(name, name)
            raise RequestError(f"{tensor}: not supported yet by this trtspec's reference engine; leave it out")
    end_id = t.scalar("end_id", row, int)
    end_id = end_id if end_id is not None and end_id >= 0 else None
    draft: list[int] = []
    if draft_ids is not None:
        draft = [int(x) for x in np.asarray(draft_ids[row]).reshape(-1)]
        if len(draft) > params.max_k:
            raise RequestError(f"draft_input_ids has {len(draft)} tokens{where}, more than this model's max_k="
                               f"{params.max_k} (TensorRT-LLM: max_draft_len); send at most {params.max_k}")
        _check_vocab("draft_input_ids", draft, vocab_size)
        if draft and "draft_token_ids" not in features:
            raise RequestError("draft_input_ids: verifying a caller's draft is not supported yet by this trtspec's "
                               "reference engine; leave draft_input_ids out")
    k = t.scalar("num_draft_tokens", row, int, params.default_k) if params.method != "none" else 0
    seed = t.scalar("random_seed", row, int, t.scalar("seed", row, int))
    jobs = []
    for index in range(n):
        try:
            # sequence i: seed + i, an unset seed counting as 0 (TensorRT-LLM's createChildRequest)
            seed_i = seed if index == 0 else (seed or 0) + index
            sampling = _sampling(t, row, output_len, end_id, seed_i, controls, params, features)
            spec_kwargs: dict[str, Any] = {"method": params.method, "k": k}
            if draft:  # like a draft_tokens_external engine: the caller's draft, then no speculation of its own
                spec_kwargs = {"method": "none", "k": 0, "draft_token_ids": tuple(draft)}
            spec = SpecParams(**spec_kwargs).validate(max_k=params.max_k)
        except TrtspecError as exc:
            message = _with_hint(exc)
            if getattr(exc, "field", None) == "k":  # name the tensor the client sent
                message = "num_draft_tokens (k)" + message[1:]
            raise RequestError(message) from None
        jobs.append(Job(batch_index=row, sequence_index=index, prompt_ids=prompt, sampling=sampling, spec=spec,
                        end_id=end_id, return_log_probs=controls["return_log_probs"],
                        exclude_input_in_output=bool(t.scalar("exclude_input_in_output", row, bool,
                                                              params.exclude_input_in_output))))
    return jobs


def _sampling(t: _Tensors, row: int, output_len: int, end_id: int | None, seed: int | None,
              controls: dict[str, Any], params: EngineParams, features: frozenset[str]) -> Any:
    """SamplingParams with TensorRT-LLM's meaning of the request's controls (unset ones included)."""
    from trtspec.spec import params as engine_params

    temperature = t.scalar("temperature", row, float)
    top_k = t.scalar("runtime_top_k", row, int)
    top_p = t.scalar("runtime_top_p", row, float)
    if top_k is not None and top_k < 0:
        raise RequestError(f"runtime_top_k={top_k} must be >= 0 (0 or unset: no top-k; 1: greedy)")
    if temperature is not None and not (temperature >= 0 and math.isfinite(temperature)):
        raise RequestError(f"temperature={temperature} must be a finite number >= 0")
    if top_p is not None and not math.isfinite(top_p):
        raise RequestError(f"runtime_top_p={top_p} must be a finite number (<= 0 or unset: no top-p)")
    convert = getattr(engine_params, "trtllm_sampling_params", None)
    if convert is not None:
        supported = {k: v for k, v in controls.items() if SAMPLING_FEATURES[k] in features}
        return convert(max_new_tokens=output_len, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                       end_id=end_id, normalize_log_probs=params.normalize_log_probs, **supported).validate()
    # An engine without trtllm_sampling_params: the same mapping for the controls it has.
    k = 0 if top_k is None else top_k
    p = 0.0 if top_p is None or top_p <= 0 else top_p
    if k == 0 and p == 0.0:
        k = 1  # greedy
    if k > 0 and p == 0.0:
        p = 1.0
    greedy = k == 1  # TensorRT-LLM's greedy: top-k 1 at any temperature
    return engine_params.SamplingParams(
        temperature=0.0 if greedy else 1.0 if temperature is None else temperature, top_k=k, top_p=p, seed=0 if seed is None else seed,
        max_new_tokens=output_len, stop_token_ids=(end_id,) if end_id is not None else (), ignore_eos=True,
    ).validate()


def _check_vocab(name: str, tokens: Sequence[int], vocab_size: int | None) -> None:
    if vocab_size is not None:
        bad = next((x for x in tokens if not 0 <= x < vocab_size), None)
        if bad is not None:
            raise RequestError(f"{name}: token id {bad} is outside the vocabulary [0, {vocab_size})")


def _with_hint(exc: TrtspecError) -> str:
    return f"{exc.message} ({exc.hint})" if exc.hint else exc.message


def triton_error(pb: Any, error: BaseException) -> Any:
    """The Triton error that answers a failed request, with its code: INVALID_ARG for bad input (a RequestError, a
    parameter the engine refuses), UNAVAILABLE when the engine is full (OverloadedError), INTERNAL for the rest.
    Clients see the code as gRPC INVALID_ARGUMENT / UNAVAILABLE / INTERNAL and HTTP 400 / 503 / 500; trtspec's
    client raises RequestError (exit 2) for INVALID_ARGUMENT."""
    code = ("INVALID_ARG" if isinstance(error, UsageError) else "UNAVAILABLE" if isinstance(error, OverloadedError)
            else "INTERNAL")
    message = _with_hint(error) if isinstance(error, TrtspecError) else str(error)
    return pb.TritonError(message, getattr(pb.TritonError, code))


class _Reply:
    """Where a Triton request's responses go: its decoupled response sender (the last job to finish sends the final
    flag), or, for a model that is not decoupled, the one response execute() returns once `done` is set.

    An error is the request's final response, also when other jobs of it still run: their later responses raise
    ReplyClosed (so the serving loop aborts them), because nothing may follow an error on a gRPC stream in Triton's
    triton_grpc_error mode (the error closed it; tritonserver 2.51 crashes on a later send)."""

    def __init__(self, model: EngineModel, request: Any, parsed: ParsedRequest | None = None,
                 wanted: frozenset[str] | None = None, on_done: Callable[[], None] | None = None) -> None:
        self.model, self.parsed, self.wanted, self.on_done = model, parsed, wanted, on_done
        self.sender = request.get_response_sender() if model.decoupled else None
        self.pending = len(parsed.jobs) if parsed is not None and parsed.jobs else 1
        self.arrival_ns = time.monotonic_ns()
        self.response: Any = None  # not decoupled: the response to return
        self.done = threading.Event()
        self._closed = False
        self._lock = threading.Lock()

    def send(self, response: Any, *, last_of_job: bool, failed: bool = False) -> None:
        with self._lock:
            if self._closed:
                raise ReplyClosed("the request has already ended (an error answered it)")
            if last_of_job:
                self.pending -= 1
            final = self._closed = self.pending == 0 or failed
        if self.sender is None:
            self.response = response
        else:
            self.sender.send(response, flags=self.model.pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL if final else 0)
        if final:
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


class ReplyClosed(RuntimeError):
    """A response for a Triton request that an error has already ended."""


@dataclass
class _JobSink:
    """Encodes one job's deltas as Triton responses (a `spec.serving.Sink`; runs on the loop thread)."""

    reply: _Reply
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
        """The request's latency and time per output token (seconds) for the latency histograms."""
        end = self.last_token_ns or time.monotonic_ns()
        per_token = ((self.last_token_ns - self.first_token_ns) / (num_tokens - 1) / 1e9
                     if num_tokens > 1 and self.first_token_ns else None)
        return {"latency_s": (end - self.reply.arrival_ns) / 1e9, "time_per_output_token_s": per_token}

    def fail(self, error: BaseException) -> None:
        self.reply.model.metrics.finished("abort")
        self.reply.error(error)

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


class EngineModel:
    """The Python-backend model: parses requests, runs them on the one EngineLoop, encodes responses, counts."""

    def __init__(self, args: dict[str, Any], pb_utils: Any) -> None:
        from trtspec.models import read_config, resolve_model
        from trtspec.spec.serving import EngineLoop

        self.pb = pb_utils
        config = json.loads(args["model_config"])
        # A version directory may bring its own checkpoints (a rolled-out draft: trtspec-version.json).
        self.params = EngineParams.from_model_config(config).for_version(
            Path(args.get("model_repository", ".")) / str(args.get("model_version", "1")))
        self.decoupled = bool(config.get("model_transaction_policy", {}).get("decoupled", False))
        params = self.params
        self.engine = params.build_engine()
        vocab = read_config(resolve_model(params.target, field="target")).get("vocab_size")
        self.vocab_size = int(vocab) if vocab else None
        self.features = engine_features()
        labels = {"model": args.get("model_name", "tensorrt_llm"), "version": str(args.get("model_version", "1")),
                  "method": params.method}
        self.metrics = SpecMetrics(pb_utils, labels, default_k=params.default_k)
        self.loop = EngineLoop(self.engine)
        self.prompt_log = None if params.log_prompts is None else PromptLog(
            Path(params.log_prompts), sample_rate=params.log_sample_rate, max_mb=params.log_max_mb,
            model=labels["model"], version=labels["version"])
        self._by_request_id: dict[str, list[int]] = {}  # Triton request id -> loop handles (for stop requests)
        self._ids_lock = threading.Lock()

    def execute(self, requests: list[Any]) -> list[Any] | None:
        """Decoupled: responses go through each request's sender (returns None). Otherwise: blocks until every
        request's job is done and returns their responses, in order."""
        replies = [self._submit(request) for request in requests]
        if self.decoupled:
            return None
        for reply in replies:
            reply.done.wait()
        return [reply.response for reply in replies]

    def _submit(self, request: Any) -> _Reply:
        try:
            parsed = parse_request(lambda name: self._get(request, name), self.params, self.vocab_size,
                                   decoupled=self.decoupled, features=self.features)
        except RequestError as exc:
            reply = _Reply(self, request)
            reply.error(exc)
            return reply
        request_id = request.request_id() if callable(getattr(request, "request_id", None)) else ""
        if parsed.stop:
            reply = _Reply(self, request)
            if not request_id:
                reply.error(RequestError("stop=true stops the request with the same request id, but this request "
                                         "has none; send the id of the request to stop"))
                return reply
            with self._ids_lock:
                handles = self._by_request_id.pop(request_id, [])
            for handle in handles:
                self.loop.cancel(handle)
            reply.send(self.pb.InferenceResponse(output_tensors=[]), last_of_job=True)
            return reply
        if self.prompt_log is not None:
            self._log_prompts(parsed)
        forget = (lambda: self._forget(request_id)) if request_id else None
        reply = _Reply(self, request, parsed, _requested_outputs(request), on_done=forget)
        cancelled = self._cancel_check(request, reply)
        handles = []
        for job in parsed.jobs:
            sink = _JobSink(reply, job, submitted_ns=time.monotonic_ns())
            try:
                handles.append(self.loop.submit_to(sink, job.prompt_ids, job.sampling, job.spec,
                                                   is_cancelled=cancelled))
            except TrtspecError as exc:  # the loop is shut down, or full: the error ends the request
                sink.fail(exc)
                for handle in handles:
                    self.loop.cancel(handle)
                break
        if request_id and not reply.done.is_set():
            with self._ids_lock:
                self._by_request_id[request_id] = handles
        return reply

    def _log_prompts(self, parsed: ParsedRequest) -> None:
        """Offer each batch row's prompt to the prompt log (sampled there); a failing log never fails a request."""
        assert self.prompt_log is not None
        for job in parsed.jobs:
            if job.sequence_index == 0:
                self.prompt_log.offer(job.prompt_ids, prompt=self.engine.decode(job.prompt_ids),
                                      max_tokens=job.sampling.max_new_tokens, temperature=job.sampling.temperature)

    def _forget(self, request_id: str) -> None:
        with self._ids_lock:
            self._by_request_id.pop(request_id, None)

    def _cancel_check(self, request: Any, reply: _Reply) -> Callable[[], bool] | None:
        """The request's client-went-away check (python backend >= 23.10), if it has one."""
        owner = reply.sender if reply.sender is not None else request
        check = getattr(owner, "is_cancelled", None)
        return check if callable(check) else None

    def _get(self, request: Any, name: str) -> np.ndarray | None:
        tensor = self.pb.get_input_tensor_by_name(request, name)
        return None if tensor is None else tensor.as_numpy()

    def close(self) -> None:
        """Unload: running requests finish within drain_timeout_s, then the rest fail. The metrics are kept."""
        self.loop.shutdown(drain=True, timeout=self.params.drain_timeout_s)
        if self.prompt_log is not None:
            self.prompt_log.close()
        # Not deleted: a reload of this version (`trtspec set-k`) loads the new instance before this one goes, and
        # Triton hands both the same Prometheus series (same labels); deleting ours would free it under the new
        # instance (tritonserver 2.51 crashes at its next increment). Kept, the counters run on without a reset;
        # this stub process ends with the instance.
        _RETIRED_METRICS.append(self.metrics)


_RETIRED_METRICS: list[SpecMetrics] = []  # of unloaded instances: never deleted (see EngineModel.close)


def _requested_outputs(request: Any) -> frozenset[str] | None:
    """The outputs the request asked for (python backend's requested_output_names); None = all of them."""
    names = getattr(request, "requested_output_names", None)
    if not callable(names):
        return None
    try:
        wanted = frozenset(names())
    except Exception:  # an older backend: send everything
        return None
    return wanted or None
