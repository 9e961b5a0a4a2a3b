"""NVIDIA Dynamo's request and response dicts <-> trtspec's engine parameters. Pure Python: no torch, no dynamo.

Dynamo's frontend tokenizes an OpenAI request (applying the model's chat template for chat) and hands the worker a
`PreprocessedRequest` as a dict (dynamo.common.backend.engine.GenerateRequest): `token_ids`, `sampling_options`,
`stop_conditions`, `output_options`. `engine_request` turns it into what `EngineLoop.submit_to` takes; the worker
answers with `GenerateChunk` dicts (`chunk`), the last one with `finish_reason` and `completion_usage`.

Meanings (OpenAI's, as Dynamo forwards them):
- temperature unset is 1.0 (OpenAI's default); 0 is greedy. top_k unset, 0 or -1 is off; top_p unset is 1.
- max_tokens unset: up to the model's context (the engine's limit); min_tokens, ignore_eos as given.
- stop_token_ids_hidden (the model's EOS ids, added by the frontend) and stop_token_ids_visible end the request;
  the frontend's decoder hides or shows the token and applies `stop` strings itself.
- n > 1, best_of, top logprobs, guided decoding and `echo` (it arrives as output_options.prompt_logprobs) are refused
  naming the field (RequestError, HTTP 400). `logit_bias`, `suffix` and `tools` never reach the worker: Dynamo
  1.6.1's frontend drops them from the PreprocessedRequest (docs/dynamo.md "Fields the frontend drops").
- The speculation (method, k) is the worker's (EngineConfig.method, default_k) unless the request says otherwise in
  Dynamo's `nvext.annotations` (strings the frontend passes through): `trtspec:method=ngram`, `trtspec:k=2`,
  `trtspec:adaptive=true` (trtspec.contracts.openai). A client's output is the same whatever the method (exact verification);
  only its speed and the acceptance counters differ.

Acceptance reaches the client in OpenAI's own usage fields: `completion_tokens_details.accepted_prediction_tokens`
(draft tokens the target accepted) and `rejected_prediction_tokens` (drafted and not accepted), as for OpenAI's
Predicted Outputs. (Dynamo 1.6.1's frontend parses usage into OpenAI's typed struct: keys of its own would be dropped;
the full series, per position, are on the worker's /metrics.)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trtspec.contracts.engine import EngineConfig
from trtspec.contracts.metrics import AcceptanceStats
from trtspec.contracts.openai import spec_annotations
from trtspec.errors import RequestError
from trtspec.spec.params import SamplingParams, SpecParams

# sampling options the reference engine does not have: field -> (why, the values that change nothing, the fix)
REFUSED_SAMPLING = {
    "guided_decoding": ("the reference engine has no guided decoding", (None,), "leave it unset"),
    "best_of": ("the reference engine samples one sequence per request", (None, 1), "leave it unset"),
    "n": ("the reference engine returns one choice per request", (None, 1), "send n=1, or several requests"),
}




@dataclass(frozen=True)
class EngineRequest:
    """One Dynamo request as the engine loop takes it."""

    prompt_ids: list[int]  # [prompt_len]
    sampling: SamplingParams
    spec: SpecParams
    return_log_probs: bool


def engine_request(request: Mapping[str, Any], params: EngineConfig, *, max_context: int | None = None) -> EngineRequest:
    """Map a PreprocessedRequest dict; RequestError names the field, the value and the fix."""
    token_ids = request.get("token_ids")
    if not isinstance(token_ids, list) or not token_ids or not all(isinstance(t, int) for t in token_ids):
        raise RequestError("token_ids: the prompt is empty or not a list of token ids",
                           hint="send a non-empty prompt (the frontend tokenizes it)")
    sampling = dict(request.get("sampling_options") or {})
    stop = dict(request.get("stop_conditions") or {})
    output = dict(request.get("output_options") or {})
    for key, (why, neutral, fix) in REFUSED_SAMPLING.items():
        if sampling.get(key) not in neutral:
            raise RequestError(f"{key}={sampling[key]!r}: {why}", hint=fix)
    if output.get("prompt_logprobs") is not None:  # what Dynamo 1.6.1's frontend makes of `echo: true`
        raise RequestError(f"echo/prompt_logprobs={output['prompt_logprobs']!r}: the reference engine returns neither "
                           "the prompt nor its log-probs", hint="leave echo (and prompt_logprobs) unset")
    top_logprobs = output.get("logprobs")
    if top_logprobs not in (None, 0, False, True) and not (isinstance(top_logprobs, int) and top_logprobs <= 1):
        raise RequestError(f"top_logprobs={top_logprobs!r}: only the chosen token's log-prob is returned",
                           hint="ask for logprobs with top_logprobs 0 (or 1)")
    top_k = sampling.get("top_k")
    max_new = stop.get("max_tokens")
    if max_new is None:
        max_new = max(1, (max_context or len(token_ids) + params.max_output_len) - len(token_ids))
    stop_ids = [*(stop.get("stop_token_ids_hidden") or []), *(stop.get("stop_token_ids_visible") or [])]
    return_log_probs = top_logprobs is not None and top_logprobs is not False
    try:
        sampling_params = SamplingParams(
            temperature=_number(sampling, "temperature", 1.0),
            top_k=0 if top_k in (None, -1) else int(top_k),
            top_p=_number(sampling, "top_p", 1.0),
            seed=sampling.get("seed"),
            max_new_tokens=int(max_new),
            stop_token_ids=tuple(dict.fromkeys(int(t) for t in stop_ids)),
            ignore_eos=bool(stop.get("ignore_eos") or False),
            repetition_penalty=_number(sampling, "repetition_penalty", 1.0),
            presence_penalty=_number(sampling, "presence_penalty", 0.0),
            frequency_penalty=_number(sampling, "frequency_penalty", 0.0),
            min_tokens=int(stop.get("min_tokens") or 0),
            return_log_probs=return_log_probs,
        ).validate()
    except (TypeError, ValueError) as exc:
        raise RequestError(f"sampling options: {exc}", hint="send numbers for the sampling fields") from None
    spec = SpecParams(**{"method": params.method, "k": params.default_k,
                         **spec_annotations(request.get("annotations") or [])})
    return EngineRequest(list(token_ids), sampling_params, spec, return_log_probs)


def chunk(token_ids: list[int], *, log_probs: list[float] | None = None) -> dict[str, Any]:
    """A streamed GenerateChunk of new tokens."""
    out: dict[str, Any] = {"token_ids": list(token_ids), "index": 0}
    if log_probs is not None:
        out["log_probs"] = list(log_probs)
    return out


def usage(prompt_tokens: int, completion_tokens: int, stats: AcceptanceStats | None) -> dict[str, Any]:
    """OpenAI's usage, with the request's acceptance in completion_tokens_details."""
    stats = stats or AcceptanceStats()
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens_details": {
            "accepted_prediction_tokens": stats.num_accepted_tokens,
            "rejected_prediction_tokens": stats.num_draft_tokens - stats.num_accepted_tokens,
        },
    }


def _number(options: Mapping[str, Any], key: str, default: float) -> float:
    value = options.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RequestError(f"{key}={value!r}: not a number", hint=f"send a number for {key}, or leave it unset")
    return float(value)
