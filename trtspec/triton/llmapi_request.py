"""Request parsing for the torch flavour's llmapi model: the input tensors of one Triton request to NVIDIA's llmapi
model (`text_input`, `streaming`, `stop`, `sampling_param_*`, `return_*`; pure numpy) -> `LlmapiRequest`, or a
RequestError naming the input and the limit.

Meanings follow NVIDIA's model (TensorRT-LLM triton_backend/all_models/llmapi/tensorrt_llm/1/model.py and helpers.py,
the 2025 stored version the facts name): one prompt per request (`text_input` 1-D of one element: NVIDIA's model
reads the first element and drops the rest, batched prompts being unimplemented there, so more are refused here); the
`sampling_param_*` inputs are the LLM API's SamplingParams fields of the same names, with best_of 1 and
exclude_input_from_output false when unset (so text_output starts with the prompt); `sampling_param_stop` is a list
of stop strings, matched as the LLM API matches them: as the token sequences the tokenizer makes of each (no special
tokens); `return_finish_reason` / `return_stop_reason` / `return_cumulative_logprob` ask for those outputs;
`stop` = true cancels the running requests with the same request id. The sampling controls mean what TensorRT-LLM's
sampler makes of them (trtspec.spec.params.trtllm_sampling_params; the PyTorch sampler's reading of unset values is
not pinned); max_tokens unset is the LLM API's default, 32; the tokenizer's end token ends a request.
Text (`text_input`, `sampling_param_stop`) is read by trtspec.text_codec.request_text, as the preprocessing model
reads it: bytes that are not UTF-8 are refused naming the input.
Refused by name: best_of > 1 (the reference engine returns one sequence per request) and every request parameter
(`check_parameters`: a generate-endpoint key that is no input, e.g. a later release's `image_url` or LoRA inputs).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from trtspec.contracts.engine import EngineConfig
from trtspec.errors import RequestError, TrtspecError
from trtspec.methods import BASELINE
from trtspec.text_codec import request_text
from trtspec.triton.engine_request import with_hint

DEFAULT_MAX_TOKENS = 32  # the LLM API's SamplingParams.max_tokens default
SAMPLING_PREFIX = "sampling_param_"
# Inputs of later releases' llmapi model (the facts' not_in_<version>) and what the reference engine lacks for them.
LATER_INPUTS = {"image_url": "image input", "lora_id": "LoRA", "lora_name": "LoRA", "lora_path": "LoRA",
                "lora_ckpt_source": "LoRA"}


@dataclass(frozen=True)
class LlmapiRequest:
    """One llmapi request as an engine job, and how to answer it."""

    prompt_ids: list[int]
    sampling: Any  # trtspec.spec.params.SamplingParams
    spec: Any  # trtspec.spec.params.SpecParams
    end_id: int | None  # dropped from the output when it ends the request
    stop_strings: tuple[str, ...]
    streaming: bool
    exclude_input_from_output: bool
    return_perf_metrics: bool
    return_finish_reason: bool
    return_stop_reason: bool
    return_cumulative_logprob: bool
    stop: bool = False  # a stop request: cancel the running requests with this request's id


def _scalar(get: Callable[[str], np.ndarray | None], name: str, cast: type, default: Any = None) -> Any:
    value = get(name)
    if value is None:
        return default
    flat = np.asarray(value).reshape(-1)
    if flat.size != 1:
        raise RequestError(f"{name} must hold one value, got shape {list(np.asarray(value).shape)}")
    item = flat[0].item()
    return cast(_text(item, name) if isinstance(item, bytes) else item)


def _strings(value: np.ndarray | None, name: str) -> list[str]:
    if value is None:
        return []
    return [_text(v, name) for v in np.asarray(value).reshape(-1).tolist()]


def _text(value: Any, name: str) -> str:
    try:
        return request_text(value, name)
    except ValueError as exc:
        raise RequestError(str(exc)) from None


def check_parameters(parameters: dict[str, Any], inputs: list[str]) -> None:
    """Refuse request parameters: Triton's HTTP generate endpoint turns every JSON key that is not a declared input
    into one (NVIDIA's model ignores them), so a misspelt or unsupported input would be dropped without a word."""
    for name in parameters:
        feature = LATER_INPUTS.get(name)
        why = f" ({feature}, which the reference engine does not have)" if feature else ""
        near = next((i for i in inputs if i.endswith(name) or name.endswith(i)), None)
        raise RequestError(f"{name}: not an input of this llmapi model{why}; it arrived as a request parameter"
                           + (f" (did you mean {near}?)" if near else "") + f"; its inputs: {', '.join(inputs)}")


def parse_llmapi_request(get: Callable[[str], np.ndarray | None], params: EngineConfig, *,
                         encode: Callable[[str], list[int]], encode_words: Callable[[str], list[int]],
                         end_id: int | None, decoupled: bool) -> LlmapiRequest:
    """Turn the input tensors of one llmapi request into an engine job, or raise RequestError saying what is wrong.

    Args:
        get: tensor name -> numpy array (as Triton delivered it) or None when absent.
        params: the served model's configuration (limits, method and k).
        encode: the target tokenizer's encode (special tokens added, as the LLM API tokenizes a prompt).
        encode_words: the same without special tokens (the LLM API's stop strings -> stop token sequences).
        end_id: the tokenizer's end token (the LLM API's default end_id).
        decoupled: the model's transaction policy (streaming needs it).
    """
    flags = {name: bool(_scalar(get, name, bool, False)) for name in (
        "stop", "streaming", "return_finish_reason", "return_stop_reason", "return_cumulative_logprob")}
    if flags["stop"]:
        return LlmapiRequest([], None, None, None, (), False, False, False, False, False, False, stop=True)
    text = get("text_input")
    if text is None:
        raise RequestError("text_input is missing from the request (STRING [1]: the prompt)")
    text = np.asarray(text)
    if text.ndim != 1 or text.size < 1:
        raise RequestError(f"text_input has shape {list(text.shape)}: the llmapi model takes one prompt, a 1-D "
                           "tensor (as NVIDIA's model.py requires)")
    if text.size > 1:
        raise RequestError(f"text_input has {text.size} prompts: the llmapi model takes one prompt per request "
                           "(NVIDIA's model.py would answer the first and drop the rest); send each prompt as its "
                           "own request")
    if flags["streaming"] and not decoupled:
        raise RequestError("streaming=true needs a decoupled model (NVIDIA: 'Streaming is only supported in decoupled "
                           "mode.'); deploy with `trtspec deploy --decoupled`, or send streaming=false")
    prompt = _text(text[0], "text_input")
    ids = encode(prompt)
    if not ids:
        raise RequestError("text_input is empty: the prompt must hold at least one token")
    if len(ids) > params.max_input_len:
        raise RequestError(f"text_input: the prompt has {len(ids)} tokens, more than max_input_len="
                           f"{params.max_input_len}")

    def sampling(name: str, cast: type) -> Any:
        return _scalar(get, SAMPLING_PREFIX + name, cast)

    best_of = sampling("best_of", int)
    if best_of not in (None, 1):
        raise RequestError(f"sampling_param_best_of={best_of}: the reference engine returns one sequence per request; "
                           "send best_of 1 (or leave it out)")
    max_tokens = sampling("max_tokens", int)
    max_tokens = DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens
    if not 1 <= max_tokens <= params.max_output_len:
        raise RequestError(f"sampling_param_max_tokens={max_tokens} must be in [1, max_output_len="
                           f"{params.max_output_len}]")
    temperature, top_k, top_p = sampling("temperature", float), sampling("top_k", int), sampling("top_p", float)
    for name, value in (("temperature", temperature), ("top_p", top_p)):
        if value is not None and not math.isfinite(value):
            raise RequestError(f"sampling_param_{name}={value} must be a finite number")
    if top_k is not None and top_k < 0:
        raise RequestError(f"sampling_param_top_k={top_k} must be >= 0")
    stop_strings = tuple(s for s in _strings(get(SAMPLING_PREFIX + "stop"), SAMPLING_PREFIX + "stop") if s)
    from trtspec.spec.params import SpecParams, trtllm_sampling_params

    try:
        sampling_params = trtllm_sampling_params(
            max_new_tokens=max_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
            seed=sampling("seed", int), end_id=end_id, presence_penalty=sampling("presence_penalty", float),
            frequency_penalty=sampling("frequency_penalty", float),
            stop_words=[encode_words(s) for s in stop_strings],
            return_log_probs=flags["return_cumulative_logprob"]).validate()
        k = params.default_k if params.method != BASELINE else 0
        spec = SpecParams(method=params.method, k=k).validate(max_k=params.max_k)
    except TrtspecError as exc:
        raise RequestError(with_hint(exc)) from None
    return LlmapiRequest(
        prompt_ids=ids, sampling=sampling_params, spec=spec, end_id=end_id, stop_strings=stop_strings,
        streaming=flags["streaming"],
        exclude_input_from_output=bool(sampling("exclude_input_from_output", bool) or False),
        return_perf_metrics=bool(sampling("return_perf_metrics", bool) or False),
        return_finish_reason=flags["return_finish_reason"], return_stop_reason=flags["return_stop_reason"],
        return_cumulative_logprob=flags["return_cumulative_logprob"])
