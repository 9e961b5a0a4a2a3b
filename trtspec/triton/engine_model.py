"""The logic behind the `trtspec_engine` Triton Python model: requests in, the reference engine, responses out.

`model_repo/trtspec_engine/1/model.py` is a thin shim that hands `pb_utils` to `EngineModel`. This module keeps only
what is Triton's: request parsing (`parse_request`, pure numpy; a bad request gets a Triton error response naming the
field and the fix, and the server keeps serving), response encoding (`_ResponseSink`, a `spec.serving.Sink`) and
metrics. The serving loop is `spec.serving.EngineLoop`, the one loop every server runs: continuous batching,
cancellation of requests whose client went away, multi-byte characters held back across streamed responses, drain
on unload. The model's `parameters` are an `EngineParams` (triton/engine_params.py). Acceptance counters are
published as Prometheus metrics through Triton's custom-metrics API (`pb_utils.MetricFamily`). torch is imported
only when the engine is built.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trtspec.errors import RequestError, TrtspecError
from trtspec.spec.metrics import AcceptanceStats
from trtspec.triton.engine_params import EngineParams

METRIC_PREFIX = "trtspec_spec_decode"


@dataclass(frozen=True)
class EngineRequest:
    prompt_ids: list[int]  # [prompt_len]
    sampling: Any  # trtspec.spec.params.SamplingParams
    spec: Any  # trtspec.spec.params.SpecParams
    streaming: bool
    exclude_input_in_output: bool
    return_perf_metrics: bool


def _scalar(get: Callable[[str], np.ndarray | None], name: str, cast: type, default: Any = None) -> Any:
    value = get(name)
    if value is None:
        return default
    flat = np.asarray(value).reshape(-1)
    if flat.size != 1:
        raise RequestError(f"{name} must hold one value per request, got shape {list(np.shape(value))}")
    return cast(flat[0].item())


def parse_request(get: Callable[[str], np.ndarray | None], params: EngineParams,
                  vocab_size: int | None = None) -> EngineRequest:
    """Turn the input tensors of one request into an EngineRequest, or raise RequestError saying what is wrong.

    Args:
        get: tensor name -> numpy array (as Triton delivered it, batch axis first) or None when absent.
        params: the served model's parameters (limits and defaults); vocab_size: the target's, to check token ids.
    """
    from trtspec.spec.params import SamplingParams, SpecParams

    input_ids = get("input_ids")
    if input_ids is None:
        raise RequestError("input_ids is required (INT32 [1, prompt_len])")
    input_ids = np.asarray(input_ids)
    if input_ids.ndim == 1:
        input_ids = input_ids[None, :]  # [1, prompt_len]
    if input_ids.shape[0] != 1:
        raise RequestError(f"batch size {input_ids.shape[0]} is not supported: send one prompt per request "
                           "(concurrent requests are batched by the engine)")
    length = _scalar(get, "input_lengths", int, input_ids.shape[1])
    if length < 1 or input_ids.shape[1] == 0:
        raise RequestError("empty prompt: input_ids/input_lengths must hold at least one token")
    if length > input_ids.shape[1]:
        raise RequestError(f"input_lengths={length} exceeds the {input_ids.shape[1]} tokens in input_ids")
    if length > params.max_input_len:
        raise RequestError(f"prompt has {length} tokens, more than max_input_len={params.max_input_len}")
    prompt = [int(t) for t in input_ids[0, :length]]
    if vocab_size is not None and any(not 0 <= t < vocab_size for t in prompt):
        bad = next(t for t in prompt if not 0 <= t < vocab_size)
        raise RequestError(f"token id {bad} is outside the vocabulary [0, {vocab_size})")
    output_len = _scalar(get, "request_output_len", int)
    if output_len is None:
        raise RequestError("request_output_len is required (INT32 [1, 1])")
    if not 1 <= output_len <= params.max_output_len:
        raise RequestError(f"request_output_len={output_len} must be in [1, max_output_len={params.max_output_len}]")
    seed = _scalar(get, "seed", int, _scalar(get, "random_seed", int))
    end_id = _scalar(get, "end_id", int)
    k = _scalar(get, "num_draft_tokens", int, params.default_k)
    try:
        sampling = SamplingParams(
            temperature=_scalar(get, "temperature", float, 0.0), top_k=_scalar(get, "runtime_top_k", int, 0),
            top_p=_scalar(get, "runtime_top_p", float, 1.0), seed=seed, max_new_tokens=output_len,
            stop_token_ids=(end_id,) if end_id is not None and end_id >= 0 else (),
        ).validate()  # fmt: skip
        spec = SpecParams(method=params.method, k=k).validate(max_k=params.max_k)
    except TrtspecError as exc:
        message = _with_hint(exc)
        if getattr(exc, "field", None) == "k":  # name the tensor the client sent
            message = "num_draft_tokens (k)" + message[1:]
        raise RequestError(message) from None
    return EngineRequest(
        prompt_ids=prompt, sampling=sampling, spec=spec,
        streaming=_scalar(get, "streaming", bool, False),
        exclude_input_in_output=_scalar(get, "exclude_input_in_output", bool, params.exclude_input_in_output),
        return_perf_metrics=_scalar(get, "return_perf_metrics", bool, False),
    )  # fmt: skip


def _with_hint(exc: TrtspecError) -> str:
    return f"{exc.message} ({exc.hint})" if exc.hint else exc.message


class SpecMetrics:
    """Prometheus counters of speculation, via Triton's custom-metrics API (names follow vLLM's spec-decode ones)."""

    def __init__(self, pb_utils: Any, labels: dict[str, str]) -> None:
        family = pb_utils.MetricFamily
        self._labels = labels

        def counter(name: str, description: str) -> Any:
            return family(name=f"{METRIC_PREFIX}_{name}", description=description, kind=family.COUNTER)

        self._families = {
            "num_drafts": counter("num_drafts", "Verified drafts (one per sequence per speculative step)"),
            "num_draft_tokens": counter("num_draft_tokens", "Draft tokens proposed"),
            "num_accepted_tokens": counter("num_accepted_tokens", "Draft tokens accepted by the verifier"),
            "num_emitted_tokens": counter("num_emitted_tokens", "Tokens emitted (accepted + recovered/bonus)"),
            "per_pos": counter("num_accepted_tokens_per_pos", "Accepted draft tokens by draft position"),
            "requests": counter("requests", "Ended requests by finish_reason (stop, length, abort)"),
            "mean": family(name=f"{METRIC_PREFIX}_mean_acceptance_length",
                           description="1 + accepted / drafts, over all requests since start", kind=family.GAUGE),
        }
        self._metrics = {name: fam.Metric(labels=labels) for name, fam in self._families.items()
                         if name not in ("per_pos", "requests")}
        self._by_label: dict[tuple[str, str], Any] = {}  # (family, label value) -> metric, made on first use
        self._total = AcceptanceStats()  # every finished request's, merged: the gauge's one definition

    def _labelled(self, family: str, key: str, value: str) -> Any:
        if (family, value) not in self._by_label:
            self._by_label[family, value] = self._families[family].Metric(labels={**self._labels, key: value})
        return self._by_label[family, value]

    def finished(self, finish_reason: str, stats: AcceptanceStats | None = None) -> None:
        """Count one ended request; add its AcceptanceStats when it ran to the end."""
        self._labelled("requests", "finish_reason", finish_reason).increment(1)
        if stats is None:
            return
        self._metrics["num_drafts"].increment(stats.num_drafts)
        self._metrics["num_draft_tokens"].increment(stats.num_draft_tokens)
        self._metrics["num_accepted_tokens"].increment(stats.num_accepted_tokens)
        self._metrics["num_emitted_tokens"].increment(stats.num_emitted_tokens)
        for pos, count in enumerate(stats.num_accepted_tokens_per_pos):
            self._labelled("per_pos", "position", str(pos)).increment(count)
        self._total.merge(stats)
        self._metrics["mean"].set(self._total.mean_acceptance_length)

    def close(self) -> None:
        # Metrics must go before their families (the backend refuses the reverse order).
        self._metrics.clear()
        self._by_label.clear()
        self._families.clear()


@dataclass
class _ResponseSink:
    """Encodes one request's deltas as Triton responses (a `spec.serving.Sink`; runs on the loop thread)."""

    model: EngineModel
    sender: Any  # the request's decoupled response sender
    request: EngineRequest
    generated: list[int] = field(default_factory=list)

    def deliver(self, delta: Any) -> None:
        self.generated += delta.token_ids
        request, model = self.request, self.model
        if not delta.finished:
            if request.streaming and delta.token_ids:
                self.sender.send(model.response(list(delta.token_ids)))
            return
        model.metrics.finished(delta.finish_reason or "length", delta.stats)
        if delta.finish_reason == "abort":  # the client cancelled: close the stream with the reason
            model.send_error(self.sender, "the request was cancelled")
            return
        if request.streaming:
            tokens = list(delta.token_ids)  # the final delta's tokens
        else:
            tokens = self.generated if request.exclude_input_in_output else request.prompt_ids + self.generated
        self.sender.send(model.response(tokens, delta.stats if request.return_perf_metrics else None),
                         flags=model.pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def fail(self, error: BaseException) -> None:
        self.model.send_error(self.sender, _with_hint(error) if isinstance(error, TrtspecError) else str(error))


class EngineModel:
    """The Python-backend model: parses requests, runs them on the one EngineLoop, encodes responses, counts."""

    def __init__(self, args: dict[str, Any], pb_utils: Any) -> None:
        from trtspec.models import read_config, resolve_model
        from trtspec.spec.engine import SpecEngine
        from trtspec.spec.scheduler import SchedulerConfig
        from trtspec.spec.serving import EngineLoop

        self.pb = pb_utils
        self.params = EngineParams.from_model_config(json.loads(args["model_config"]))
        params = self.params
        options = {"lookahead": params.lookahead} if params.lookahead is not None else None
        self.engine = SpecEngine.from_pretrained(
            target=params.target, draft=params.draft, medusa=params.medusa, max_k=params.max_k, device=params.device,
            dtype=params.dtype, proposer_options=options,
            scheduler=SchedulerConfig(max_queue_len=params.max_queue).validate())
        vocab = read_config(resolve_model(params.target, field="target")).get("vocab_size")
        self.vocab_size = int(vocab) if vocab else None
        labels = {"model": args.get("model_name", "trtspec_engine"), "version": str(args.get("model_version", "1")),
                  "method": params.method}
        self.metrics = SpecMetrics(pb_utils, labels)
        self.loop = EngineLoop(self.engine)

    def execute(self, requests: list[Any]) -> None:
        for request in requests:
            sender = request.get_response_sender()
            try:
                parsed = parse_request(lambda name, r=request: self._get(r, name), self.params, self.vocab_size)
            except RequestError as exc:
                self.send_error(sender, str(exc))
                continue
            is_cancelled = getattr(sender, "is_cancelled", None)  # python backend >= 23.10
            self.loop.submit_to(_ResponseSink(self, sender, parsed), parsed.prompt_ids, parsed.sampling, parsed.spec,
                                is_cancelled=is_cancelled)
        return None  # decoupled: responses go through the senders

    def _get(self, request: Any, name: str) -> np.ndarray | None:
        tensor = self.pb.get_input_tensor_by_name(request, name)
        return None if tensor is None else tensor.as_numpy()

    def send_error(self, sender: Any, message: str) -> None:
        sender.send(self.pb.InferenceResponse(error=self.pb.TritonError(message)),
                    flags=self.pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def response(self, tokens: list[int], stats: AcceptanceStats | None = None) -> Any:
        tensor = self.pb.Tensor
        out = [tensor("output_ids", np.asarray(tokens, dtype=np.int32).reshape(1, 1, -1)),  # [batch, beam, len]
               tensor("sequence_length", np.array([[len(tokens)]], dtype=np.int32))]  # [batch, beam]
        if stats is not None:
            out += [tensor("acceptance_rate", np.array([[stats.acceptance_rate]], dtype=np.float32)),
                    tensor("total_accepted_draft_tokens", np.array([[stats.num_accepted_tokens]], dtype=np.int32)),
                    tensor("total_draft_tokens", np.array([[stats.num_draft_tokens]], dtype=np.int32)),
                    tensor("num_drafts", np.array([[stats.num_drafts]], dtype=np.int32))]
        return self.pb.InferenceResponse(output_tensors=out)

    def close(self) -> None:
        """Unload: running requests finish within drain_timeout_s, then the rest fail; metrics go last."""
        self.loop.shutdown(drain=True, timeout=self.params.drain_timeout_s)
        self.metrics.close()

