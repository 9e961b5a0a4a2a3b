"""trtllm-serve's OpenAI request and response bodies <-> the reference engine's parameters. Pure Python.

`parse_request` reads a `/v1/completions` or `/v1/chat/completions` body the way TensorRT-LLM 1.2.1's
CompletionRequest / ChatCompletionRequest do (sources: the package docstring) and returns what the engine loop takes;
a body it cannot serve raises ConfigError naming the field, the value and the fix (`error_body`: the ErrorResponse
trtllm-serve answers with, status 400). Meanings:
- temperature and top_p unset are 1.0 (temperature 0 is greedy); top_k 0 is off; seed unset is random.
- max_tokens (chat: max_completion_tokens or max_tokens) unset: up to the model's context.
- stop: strings, matched as the token sequences the tokenizer makes of each (as the LLM API does); the stop string is
  not part of the output unless include_stop_str_in_output. stop_token_ids end the request too; ignore_eos and
  min_tokens as TensorRT-LLM defines them; presence/frequency/repetition penalties likewise.
- one prompt, one choice: n other than 1, several prompts in one request, and NVIDIA's fields whose effect the
  reference engine does not have (NEUTRAL: beam search, log-probs, logit bias, guided decoding, tools, LoRA, ...) are
  refused unless their value changes nothing; fields neither API has are refused (trtllm-serve forbids extra fields).
- chat: the messages rendered with trtspec.chat's template (the tokenizer's own template when it has another), then
  tokenized with the model's special tokens, as trtllm-serve tokenizes the rendered prompt.
`TextOutput` turns the engine's text deltas into what a client sees (the stop string held back while it may still
be one, and cut at the end); `completion_body`, `chat_body` and `*_chunk` build the response bodies.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trtspec.contracts.metrics import AcceptanceStats
from trtspec.errors import ConfigError, TrtspecError, UsageError
from trtspec.spec.params import SamplingParams

COMPLETION, CHAT = "completion", "chat"
OWNED_BY = "tensorrt_llm"  # ModelCard.owned_by
# The fields each endpoint reads (TensorRT-LLM 1.2.1's request classes, the ones with an effect here).
READ = {
    COMPLETION: {"model", "prompt", "max_tokens", "echo"},
    CHAT: {"model", "messages", "max_tokens", "max_completion_tokens", "add_generation_prompt", "echo"},
}
COMMON = {"temperature", "top_p", "top_k", "seed", "stop", "n", "stream", "stream_options", "frequency_penalty",
          "presence_penalty", "repetition_penalty", "min_tokens", "ignore_eos", "stop_token_ids",
          "include_stop_str_in_output", "user", "add_special_tokens"}
# NVIDIA's fields the reference engine has no effect for: the values that change nothing, and what to do instead.
NEUTRAL: dict[str, tuple[tuple[Any, ...], str]] = {
    "best_of": ((None, 1), "leave it unset: one sequence per request"),
    "use_beam_search": ((False,), "leave it false: the reference engine does not run beam search"),
    "length_penalty": ((None,), "leave it unset (beam search only)"),
    "early_stopping": ((None,), "leave it unset (beam search only)"),
    "logprobs": ((None, False, 0), "leave it unset: this server returns no log-probs"),
    "top_logprobs": ((None, 0), "leave it unset: this server returns no log-probs"),
    "logit_bias": ((None, {}), "leave it unset: the reference engine has no logit bias"),
    "suffix": ((None, ""), "leave it unset (trtllm-serve does not support suffix either)"),
    "top_p_min": ((0, 0.0), "leave it unset"),
    "min_p": ((0, 0.0), "leave it unset: the reference engine has no min-p sampling"),
    "response_format": ((None, {"type": "text"}), "leave it unset: the reference engine has no guided decoding"),
    "guided_json": ((None,), "leave it unset: the reference engine has no guided decoding"),
    "tools": ((None, []), "leave it unset: this server parses no tool calls"),
    "tool_choice": ((None, "none"), "leave it unset: this server parses no tool calls"),
    "parallel_tool_calls": ((None, False, True), "leave it unset"),
    "documents": ((None,), "leave it unset"),
    "chat_template": ((None,), "leave it unset: the server's template is the model's"),
    "chat_template_kwargs": ((None, {}), "leave it unset"),
    "skip_special_tokens": ((True,), "leave it true: the output text never holds special tokens here"),
    "spaces_between_special_tokens": ((True,), "leave it true"),
    "truncate_prompt_tokens": ((None,), "leave it unset: a prompt is never truncated here"),
    "return_context_logits": ((False,), "leave it false: this server returns no logits"),
    "detokenize": ((True,), "leave it true: this server answers text"),
    "lora_request": ((None,), "leave it unset: the reference engine has no LoRA"),
    "disaggregated_params": ((None,), "leave it unset: this server is not disaggregated"),
    "prompt_ignore_length": ((None, 0), "leave it unset"),
    "priority": ((None,), "leave it unset: requests are served in arrival order"),
}
# The engine's names -> the request's (a ConfigError of SamplingParams or of the engine names the field sent).
FIELD_NAMES = {"max_new_tokens": "max_tokens", "stop_words": "stop", "prompt": "prompt"}


class Encoder:
    """What parsing needs of a tokenizer: `encode(text, special)` and the chat rendering (`render(messages)`)."""

    def __init__(self, encode: Callable[[str, bool], list[int]], render: Callable[[list[dict[str, Any]]], str],
                 end_id: int | None) -> None:
        self.encode, self.render, self.end_id = encode, render, end_id


@dataclass(frozen=True)
class ServeRequest:
    """One request as the engine loop takes it, and how its answer is shaped."""

    kind: str  # COMPLETION | CHAT
    prompt_ids: list[int]
    sampling: SamplingParams
    stream: bool
    include_usage: bool  # stream_options.include_usage: a last chunk with the usage
    continuous_usage: bool  # stream_options.continuous_usage_stats: usage on every chunk
    stop_strings: tuple[str, ...]
    include_stop_str: bool
    echo: str  # text put before the output (completions' echo), else ""
    end_id: int | None  # the model's end token (not part of the output)
    model: str = ""  # the request's `model`, answered in the response's `model` as trtllm-serve does


def parse_request(kind: str, body: Any, *, model: str, encoder: Encoder, max_context: int) -> ServeRequest:
    """Map a request body; ConfigError (field, value, problem, fix) for one that cannot be served."""
    if not isinstance(body, dict):
        raise ConfigError("body", _short(body), "is not a JSON object", hint='send {"model": ..., ...}')
    known = READ[kind] | COMMON | set(NEUTRAL)
    for key in body:
        if key not in known:
            raise ConfigError(key, _short(body[key]), "is not a field of this endpoint (trtllm-serve refuses extra "
                              "fields)", hint="remove it; docs/trtllm-serve.md lists the fields")
    for key, (neutral, fix) in NEUTRAL.items():
        if key in body and not any(body[key] == v and type(body[key]) is type(v) or body[key] is v for v in neutral):
            raise ConfigError(key, _short(body[key]), "is not supported by this server", hint=fix)
    # Any name is answered, and echoed in the response, as trtllm-serve does: its `openai_completion` /
    # `openai_chat` never read `model` (openai_server.py @e7f7345e) and its post-processors answer with
    # `request.model` (postprocess_handlers.py @01bf1923: `ChatPostprocArgs` / `CompletionPostprocArgs.from_request`).
    # Its request classes require the field as a string (`model: str`).
    name = body.get("model")
    if not isinstance(name, str):
        raise ConfigError("model", _short(name), "is required (a string)" if name is None else "is not a string",
                          hint=f"send a model name, e.g. model={model!r} (GET /v1/models lists it)")
    n = _int(body, "n", 1)
    if n != 1:
        raise ConfigError("n", n, "the reference engine returns one choice per request", hint="send n=1, or several "
                          "requests")
    stream = _bool(body, "stream", False)
    options = body.get("stream_options")
    if options is not None and not stream:
        raise ConfigError("stream_options", _short(options), "applies to streamed requests only",
                          hint="add stream=true, or leave stream_options out")
    include_usage, continuous = _stream_options(options)
    add_special = _bool(body, "add_special_tokens", True)
    if kind == COMPLETION:
        prompt_ids, text = _prompt(body.get("prompt"), encoder, add_special)
        echo = text if _bool(body, "echo", False) else ""
        max_field = "max_tokens"
    else:
        _bool(body, "add_generation_prompt", True)  # the embedded template adds no generation prompt either way
        if _bool(body, "echo", False):
            raise ConfigError("echo", True, "is not supported for chat by this server", hint="leave echo unset")
        prompt_ids, echo = encoder.encode(encoder.render(_messages(body.get("messages"))), add_special), ""
        max_field = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    if not prompt_ids:
        raise ConfigError("prompt" if kind == COMPLETION else "messages", "", "is empty",
                          hint="send at least one token of text")
    max_tokens = _int(body, max_field, None)
    if max_tokens is not None and max_tokens < 1:
        raise ConfigError(max_field, max_tokens, "must be >= 1", hint=f"e.g. {max_field}=64, or leave it unset")
    stops = _strings(body.get("stop"), "stop")
    stop_ids = _token_ids(body.get("stop_token_ids"), "stop_token_ids")
    try:
        sampling = SamplingParams(
            temperature=_number(body, "temperature", 1.0), top_p=_number(body, "top_p", 1.0),
            top_k=_int(body, "top_k", 0), seed=_int(body, "seed", None),
            max_new_tokens=max_tokens if max_tokens is not None else max(1, max_context - len(prompt_ids)),
            stop_token_ids=tuple(stop_ids), ignore_eos=_bool(body, "ignore_eos", False),
            repetition_penalty=_number(body, "repetition_penalty", 1.0),
            presence_penalty=_number(body, "presence_penalty", 0.0),
            frequency_penalty=_number(body, "frequency_penalty", 0.0),
            min_tokens=_int(body, "min_tokens", 0),
            stop_words=[encoder.encode(s, False) for s in stops]).validate()
    except ConfigError as exc:
        raise renamed(exc, kind) from None
    return ServeRequest(kind, prompt_ids, sampling, stream, include_usage, continuous, tuple(stops),
                        _bool(body, "include_stop_str_in_output", False), echo, encoder.end_id, name)


def renamed(exc: ConfigError, kind: str) -> ConfigError:
    """The engine's ConfigError under the request's field name (`prompt` is `messages` for chat)."""
    field = FIELD_NAMES.get(exc.field, exc.field)
    if field == "prompt" and kind == CHAT:
        field = "messages"
    return exc if field == exc.field else ConfigError(field, exc.value, exc.problem, hint=exc.hint)


# -- errors -----------------------------------------------------------------------------------------------------------
def error_body(exc: BaseException, status: int = 400) -> dict[str, Any]:
    """trtllm-serve's ErrorResponse: `param` names the field when the error does."""
    types = {400: "BadRequestError", 404: "NotFoundError", 503: "ServiceUnavailableError"}
    message = exc.message if isinstance(exc, TrtspecError) else str(exc)
    hint = exc.hint if isinstance(exc, TrtspecError) else None
    return {"object": "error", "message": f"{message} (fix: {hint})" if hint else message,
            "type": types.get(status, "InternalServerError"), "param": getattr(exc, "field", None), "code": status}


def status_of(exc: BaseException) -> int:
    """The HTTP status of an engine refusal: bad input 400, a full queue or a stopping server 503, else 500."""
    from trtspec.errors import OverloadedError, ServerError

    if isinstance(exc, UsageError):
        return 400
    return 503 if isinstance(exc, OverloadedError | ServerError) else 500


# -- the answer -------------------------------------------------------------------------------------------------------
class TextOutput:
    """One request's output text: `feed` each delta's text, get what may be shown now; `finish` gives the rest and
    the stop reason (the stop string, or the stop token id that ended it; None for the end token or a limit)."""

    def __init__(self, request: ServeRequest) -> None:
        self.request = request
        self.shown = ""  # sent to the client (streaming) so far
        self.pending = ""  # received, held back: it may be the start of a stop string
        self.tokens = 0  # generated tokens (the end token that ended the request excluded, at finish)
        self.last_token: int | None = None

    def feed(self, text: str, token_ids: Sequence[int]) -> str:
        self.pending += text
        self.tokens += len(token_ids)
        self.last_token = token_ids[-1] if token_ids else self.last_token
        hold = 0 if self.request.include_stop_str else max(  # a stop string, or the start of one
            (n for s in self.request.stop_strings for n in range(1, len(s) + 1) if self.pending.endswith(s[:n])),
            default=0)
        out, self.pending = self.pending[: len(self.pending) - hold], self.pending[len(self.pending) - hold:]
        self.shown += out
        return out

    def finish(self, reason: str) -> tuple[str, str | int | None]:
        text, stop = self.pending, None
        if reason == "stop" and self.last_token is not None and self.last_token == self.request.end_id:
            self.tokens -= 1  # the end token is not part of the output
        if reason == "stop":
            whole = self.shown + text
            stop = next((s for s in self.request.stop_strings if whole.endswith(s)), None)
            if stop is not None and not self.request.include_stop_str:
                text = text[: max(0, len(text) - len(stop))]
            elif stop is None and self.last_token in self.request.sampling.stop_token_ids:
                stop = self.last_token
        self.pending = ""
        self.shown += text
        return text, stop


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens, "prompt_tokens_details": {"cached_tokens": 0}}


def decoded_per_iteration(stats: AcceptanceStats | None) -> float | None:
    """trtllm-serve's avg_decoded_tokens_per_iter: tokens the request emitted per target forward."""
    if stats is None or not stats.num_target_forwards:
        return None
    return stats.num_emitted_tokens / stats.num_target_forwards


def response_id(kind: str) -> str:
    return f"{'cmpl' if kind == COMPLETION else 'chatcmpl'}-{uuid.uuid4().hex}"


def completion_body(rid: str, model: str, text: str, reason: str, stop: Any, use: dict[str, Any],
                    per_iter: float | None) -> dict[str, Any]:
    choice = {"index": 0, "text": text, "token_ids": None, "logprobs": None, "context_logits": None,
              "finish_reason": reason, "stop_reason": stop, "disaggregated_params": None,
              "avg_decoded_tokens_per_iter": per_iter}
    return {"id": rid, "object": "text_completion", "created": int(time.time()), "model": model, "choices": [choice],
            "usage": use, "prompt_token_ids": None}


def chat_body(rid: str, model: str, text: str, reason: str, stop: Any, use: dict[str, Any],
              per_iter: float | None) -> dict[str, Any]:
    message = {"role": "assistant", "content": text, "reasoning_content": None, "tool_calls": []}
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": reason, "stop_reason": stop,
              "disaggregated_params": None, "avg_decoded_tokens_per_iter": per_iter}
    return {"id": rid, "object": "chat.completion", "created": int(time.time()), "model": model, "choices": [choice],
            "usage": use}


def completion_chunk(rid: str, created: int, model: str, text: str, reason: str | None = None, stop: Any = None,
                     per_iter: float | None = None, use: dict[str, Any] | None = None) -> dict[str, Any]:
    """A streamed completion chunk (every field, as trtllm-serve dumps it)."""
    choice = {"index": 0, "text": text, "token_ids": None, "logprobs": None, "finish_reason": reason,
              "stop_reason": stop, "avg_decoded_tokens_per_iter": per_iter}
    return {"id": rid, "object": "text_completion", "created": created, "model": model, "choices": [choice],
            "usage": use}


def chat_chunk(rid: str, created: int, model: str, delta: dict[str, Any], reason: str | None = None,
               stop: Any = None, per_iter: float | None = None, use: dict[str, Any] | None = None) -> dict[str, Any]:
    """A streamed chat chunk (None-valued fields left out, as trtllm-serve dumps it)."""
    choice = {"index": 0, "delta": delta, "finish_reason": reason, "stop_reason": stop,
              "avg_decoded_tokens_per_iter": per_iter}
    out = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
           "choices": [{k: v for k, v in choice.items() if v is not None}], "usage": use}
    return {k: v for k, v in out.items() if v is not None}


def usage_chunk(kind: str, rid: str, created: int, model: str, use: dict[str, Any]) -> dict[str, Any]:
    """The last chunk with stream_options.include_usage: no choices, the request's usage."""
    return {"id": rid, "object": "text_completion" if kind == COMPLETION else "chat.completion.chunk",
            "created": created, "model": model, "choices": [], "usage": use}


def model_list(model: str, created: int) -> dict[str, Any]:
    return {"object": "list", "data": [{"id": model, "object": "model", "created": created, "owned_by": OWNED_BY}]}


# -- field readers ----------------------------------------------------------------------------------------------------
def _short(value: Any, limit: int = 80) -> Any:
    text = repr(value)
    return value if len(text) <= limit else text[: limit - 3] + "..."


def _number(body: Mapping[str, Any], key: str, default: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(key, _short(value), "is not a finite number", hint=f"send a number for {key}, or leave it "
                          "unset")
    return float(value)


def _int(body: Mapping[str, Any], key: str, default: int | None) -> Any:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(key, _short(value), "is not a whole number", hint=f"send an integer for {key}")
    return value


def _bool(body: Mapping[str, Any], key: str, default: bool) -> bool:
    value = body.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ConfigError(key, _short(value), "is not true or false", hint=f"send {key}: true or false")
    return value


def _strings(value: Any, key: str) -> list[str]:
    items = [value] if isinstance(value, str) else value if value is not None else []
    if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
        raise ConfigError(key, _short(value), "is not a string or a list of strings", hint=f'e.g. {key}: ["\\n\\n"]')
    return [s for s in items if s]


def _token_ids(value: Any, key: str) -> list[int]:
    items = value if value is not None else []
    if not isinstance(items, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in items):
        raise ConfigError(key, _short(value), "is not a list of token ids", hint=f"e.g. {key}: [13]")
    return items


def _stream_options(options: Any) -> tuple[bool, bool]:
    if options is None:
        return False, False
    if not isinstance(options, dict) or set(options) - {"include_usage", "continuous_usage_stats"}:
        raise ConfigError("stream_options", _short(options), "is not {include_usage, continuous_usage_stats}",
                          hint='e.g. stream_options: {"include_usage": true}')
    include = _bool(options, "include_usage", True)  # StreamOptions.include_usage defaults to true
    return include, include and _bool(options, "continuous_usage_stats", False)


def _prompt(prompt: Any, encoder: Encoder, add_special: bool) -> tuple[list[int], str]:
    """(token ids, text) of a completion prompt: text, token ids, or a list holding one of those."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    if isinstance(prompt, str) and prompt:
        return encoder.encode(prompt, add_special), prompt
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return list(prompt), ""
    if isinstance(prompt, list) and prompt and all(isinstance(p, str | list) for p in prompt):
        raise ConfigError("prompt", f"{len(prompt)} prompts", "this server takes one prompt per request",
                          hint="send each prompt as its own request")
    raise ConfigError("prompt", _short(prompt), "is empty" if prompt in ("", []) else "is not text or a list of token "
                      "ids", hint='e.g. "def fib(n):"')


def _messages(messages: Any) -> list[dict[str, Any]]:
    """Chat messages with text content (a string, or text parts joined)."""
    if not isinstance(messages, list) or not messages:
        raise ConfigError("messages", _short(messages), "is not a non-empty list of messages",
                          hint='e.g. messages: [{"role": "user", "content": "def fib(n):"}]')
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ConfigError(f"messages[{i}]", _short(message), "is not a message with a role",
                              hint='e.g. {"role": "user", "content": "..."}')
        content = message.get("content")
        if isinstance(content, list):
            if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                       for p in content):
                raise ConfigError(f"messages[{i}].content", _short(content), "holds a part that is not text",
                                  hint="send text parts only: the reference engine reads no images or audio")
            content = "".join(p["text"] for p in content)
        elif content is not None and not isinstance(content, str):
            raise ConfigError(f"messages[{i}].content", _short(content), "is not text", hint="send a string")
        out.append({"role": message["role"], "content": content or ""})
    return out
