"""Request parsing for the torch flavour's engine models: the input tensors of one Triton request (NVIDIA's
tensorrt_llm tensors, pure numpy) -> engine jobs (`ParsedRequest`), or a RequestError naming the input and the limit.
The semantics (TensorRT-LLM's meaning of every input) are in `trtspec.triton.engine_model`'s docstring."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trtspec.contracts.engine import EngineConfig
from trtspec.errors import RequestError, TrtspecError
from trtspec.methods import BASELINE

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


def parse_request(get: Callable[[str], np.ndarray | None], params: EngineConfig, vocab_size: int | None = None, *,
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


def _row_jobs(t: _Tensors, row: int, input_ids: np.ndarray, draft_ids: np.ndarray | None, params: EngineConfig,
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
    served = params.lookahead.as_tuple() if params.lookahead is not None else (None, None, None)
    for name, value in zip(("lookahead_window_size", "lookahead_ngram_size", "lookahead_verification_set_size"),
                           served, strict=True):
        asked = t.scalar(name, row, int)
        if asked is not None and asked != value:
            raise RequestError(f"{name}={asked}: this model runs lookahead {[v for v in served if v is not None]} set when "
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
    k = t.scalar("num_draft_tokens", row, int, params.default_k) if params.method != BASELINE else 0
    seed = t.scalar("random_seed", row, int, t.scalar("seed", row, int))
    jobs = []
    for index in range(n):
        try:
            # sequence i: seed + i, an unset seed counting as 0 (TensorRT-LLM's createChildRequest)
            seed_i = seed if index == 0 else (seed or 0) + index
            sampling = _sampling(t, row, output_len, end_id, seed_i, controls, params, features)
            spec_kwargs: dict[str, Any] = {"method": params.method, "k": k}
            if draft:  # like a draft_tokens_external engine: the caller's draft, then no speculation of its own
                spec_kwargs = {"method": BASELINE, "k": 0, "draft_token_ids": tuple(draft)}
            spec = SpecParams(**spec_kwargs).validate(max_k=params.max_k)
        except TrtspecError as exc:
            message = with_hint(exc)
            if getattr(exc, "field", None) == "k":  # name the tensor the client sent
                message = "num_draft_tokens (k)" + message[1:]
            raise RequestError(message) from None
        jobs.append(Job(batch_index=row, sequence_index=index, prompt_ids=prompt, sampling=sampling, spec=spec,
                        end_id=end_id, return_log_probs=controls["return_log_probs"],
                        exclude_input_in_output=bool(t.scalar("exclude_input_in_output", row, bool,
                                                              params.exclude_input_in_output))))
    return jobs


def _sampling(t: _Tensors, row: int, output_len: int, end_id: int | None, seed: int | None,
              controls: dict[str, Any], params: EngineConfig, features: frozenset[str]) -> Any:
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


def with_hint(exc: TrtspecError) -> str:
    return f"{exc.message} ({exc.hint})" if exc.hint else exc.message

