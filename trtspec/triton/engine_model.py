"""The logic behind the `trtspec_engine` Triton Python model: requests in, the reference engine, responses out.

`model_repo/trtspec_engine/1/model.py` is a thin shim that hands `pb_utils` to `EngineModel`. Requests are parsed
and validated up front (`parse_request`, pure numpy; a bad request gets a Triton error response naming the field and
the fix, and the server keeps serving). Valid requests go to one worker thread that owns the SpecEngine and runs its
request-level loop (add_request / step: concurrent requests are batched continuously); responses go back through
each request's decoupled response sender: one per engine step when `streaming` is set, else one at the end.
Acceptance counters are published as Prometheus metrics through Triton's custom-metrics API (`pb_utils.MetricFamily`).
torch is imported only when the engine is built.
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from trtspec.errors import TrtspecError

METRIC_PREFIX = "trtspec_spec_decode"


class RequestError(ValueError):
    """A request that cannot be served; the message goes back to the client as the Triton error."""


@dataclass(frozen=True)
class EngineLimits:
    """Server-side bounds a request is checked against (from the model's config.pbtxt parameters)."""

    method: str = "draft_target"
    max_k: int = 8
    default_k: int = 4
    max_input_len: int = 1024
    max_output_len: int = 512
    vocab_size: int | None = None
    exclude_input_in_output: bool = True


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


def parse_request(get: Callable[[str], np.ndarray | None], limits: EngineLimits) -> EngineRequest:
    """Turn the input tensors of one request into an EngineRequest, or raise RequestError saying what is wrong.

    Args:
        get: tensor name -> numpy array (as Triton delivered it, batch axis first) or None when absent.
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
    if length > limits.max_input_len:
        raise RequestError(f"prompt has {length} tokens, more than max_input_len={limits.max_input_len}")
    prompt = [int(t) for t in input_ids[0, :length]]
    if limits.vocab_size is not None and any(not 0 <= t < limits.vocab_size for t in prompt):
        bad = next(t for t in prompt if not 0 <= t < limits.vocab_size)
        raise RequestError(f"token id {bad} is outside the vocabulary [0, {limits.vocab_size})")
    output_len = _scalar(get, "request_output_len", int)
    if output_len is None:
        raise RequestError("request_output_len is required (INT32 [1, 1])")
    if not 1 <= output_len <= limits.max_output_len:
        raise RequestError(f"request_output_len={output_len} must be in [1, max_output_len={limits.max_output_len}]")
    seed = _scalar(get, "seed", int, _scalar(get, "random_seed", int))
    end_id = _scalar(get, "end_id", int)
    k = _scalar(get, "num_draft_tokens", int, limits.default_k)
    try:
        sampling = SamplingParams(
            temperature=_scalar(get, "temperature", float, 0.0), top_k=_scalar(get, "runtime_top_k", int, 0),
            top_p=_scalar(get, "runtime_top_p", float, 1.0), seed=seed, max_new_tokens=output_len,
            stop_token_ids=(end_id,) if end_id is not None and end_id >= 0 else (),
        ).validate()  # fmt: skip
        spec = SpecParams(method=limits.method, k=k).validate(max_k=limits.max_k)
    except TrtspecError as exc:
        message = _with_hint(exc)
        if getattr(exc, "field", None) == "k":  # name the tensor the client sent
            message = "num_draft_tokens (k)" + message[1:]
        raise RequestError(message) from None
    return EngineRequest(
        prompt_ids=prompt, sampling=sampling, spec=spec,
        streaming=_scalar(get, "streaming", bool, False),
        exclude_input_in_output=_scalar(get, "exclude_input_in_output", bool, limits.exclude_input_in_output),
        return_perf_metrics=_scalar(get, "return_perf_metrics", bool, False),
    )  # fmt: skip


def _with_hint(exc: TrtspecError) -> str:
    return f"{exc.message} ({exc.hint})" if exc.hint else exc.message


@dataclass
class _Active:
    """A request the engine is running: where its responses go and what it generated so far."""

    sender: Any
    request: EngineRequest
    generated: list[int] = field(default_factory=list)

    def cancelled(self) -> bool:
        check = getattr(self.sender, "is_cancelled", None)  # python backend >= 23.10
        return bool(check and check())


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
            "requests": counter("requests", "Finished requests"),
            "mean": family(name=f"{METRIC_PREFIX}_mean_acceptance_length",
                           description="1 + accepted / drafts, over all requests since start", kind=family.GAUGE),
        }
        self._metrics = {name: fam.Metric(labels=labels) for name, fam in self._families.items() if name != "per_pos"}
        self._per_pos: list[Any] = []
        self._drafts = 0
        self._accepted = 0

    def observe(self, stats: Any) -> None:
        """Add one finished request's AcceptanceStats."""
        self._metrics["num_drafts"].increment(stats.num_drafts)
        self._metrics["num_draft_tokens"].increment(stats.num_draft_tokens)
        self._metrics["num_accepted_tokens"].increment(stats.num_accepted_tokens)
        self._metrics["num_emitted_tokens"].increment(stats.num_emitted_tokens)
        self._metrics["requests"].increment(1)
        for pos, count in enumerate(stats.num_accepted_tokens_per_pos):
            while len(self._per_pos) <= pos:
                labels = {**self._labels, "position": str(len(self._per_pos))}
                self._per_pos.append(self._families["per_pos"].Metric(labels=labels))
            self._per_pos[pos].increment(count)
        self._drafts += stats.num_drafts
        self._accepted += stats.num_accepted_tokens
        self._metrics["mean"].set(1.0 + self._accepted / self._drafts if self._drafts else 1.0)

    def close(self) -> None:
        # Metrics must go before their families (the backend refuses the reverse order).
        self._metrics.clear()
        self._per_pos.clear()
        self._families.clear()


class EngineModel:
    """The Python-backend model: owns the engine, a worker thread, and the metrics."""

    def __init__(self, args: dict[str, Any], pb_utils: Any) -> None:
        self.pb = pb_utils
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        self.limits = EngineLimits(
            method=params.get("method", "draft_target"), max_k=int(params.get("max_k", 8)),
            default_k=int(params.get("default_k", 4)), max_input_len=int(params.get("max_input_len", 1024)),
            max_output_len=int(params.get("max_output_len", 512)),
            exclude_input_in_output=params.get("exclude_input_in_output", "true").lower() == "true",
        )  # fmt: skip
        from trtspec.spec.engine import SpecEngine

        self.engine = SpecEngine.from_pretrained(
            target=params["target"], draft=params.get("draft") or None, medusa=params.get("medusa") or None,
            max_k=self.limits.max_k, device=params.get("device", "cpu"), dtype=params.get("dtype", "float32"))
        from trtspec.models import read_config, resolve_model

        vocab = read_config(resolve_model(params["target"], field="target")).get("vocab_size")
        self.limits = replace(self.limits, vocab_size=int(vocab) if vocab else None)
        labels = {"model": args.get("model_name", "trtspec_engine"), "version": str(args.get("model_version", "1")),
                  "method": self.limits.method}
        self.metrics = SpecMetrics(pb_utils, labels)
        self.inbox: queue.Queue[tuple[Any, EngineRequest] | None] = queue.Queue(int(params.get("max_queue", 256)))
        self.worker = threading.Thread(target=self._serve, name="trtspec-engine", daemon=True)
        self.worker.start()

    def execute(self, requests: list[Any]) -> None:
        for request in requests:
            sender = request.get_response_sender()
            try:
                parsed = parse_request(lambda name, r=request: self._get(r, name), self.limits)
                self.inbox.put_nowait((sender, parsed))
            except RequestError as exc:
                self._fail(sender, str(exc))
            except queue.Full:
                self._fail(sender, f"the engine queue is full ({self.inbox.maxsize} waiting requests); retry later")
        return None  # decoupled: responses go through the senders

    def _get(self, request: Any, name: str) -> np.ndarray | None:
        tensor = self.pb.get_input_tensor_by_name(request, name)
        return None if tensor is None else tensor.as_numpy()

    def _fail(self, sender: Any, message: str) -> None:
        sender.send(self.pb.InferenceResponse(error=self.pb.TritonError(message)),
                    flags=self.pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def _serve(self) -> None:
        """Worker loop (continuous batching): admit new requests, drop cancelled ones, step, route the deltas."""
        active: dict[int, _Active] = {}
        while True:
            # 1. admit: block while idle, otherwise take whatever arrived since the last step
            items = [self.inbox.get()] if not active else []
            while True:
                try:
                    items.append(self.inbox.get_nowait())
                except queue.Empty:
                    break
            for item in items:
                if item is None:  # finalize(): abort what is running and stop
                    for rid, running in active.items():
                        self.engine.abort(rid)
                        self._fail(running.sender, "the model is being unloaded")
                    return
                sender, request = item
                try:
                    rid = self.engine.add_request(request.prompt_ids, request.sampling, request.spec)
                except TrtspecError as exc:
                    self._fail(sender, _with_hint(exc))
                    continue
                active[rid] = _Active(sender, request)
            # 2. cancel: clients that went away stop costing engine steps
            for rid in [rid for rid, running in active.items() if running.cancelled()]:
                self.engine.abort(rid)
                del active[rid]
            if not active:
                continue
            # 3. step: one speculative step for every running request
            try:
                deltas = self.engine.step()
            except Exception as exc:  # never let the worker die: fail the running requests, keep serving
                for rid, running in active.items():
                    self.engine.abort(rid)
                    self._fail(running.sender, f"generation failed: {type(exc).__name__}: {exc}")
                active.clear()
                continue
            # 4. route: stream deltas, finish requests
            for delta in deltas:
                running = active.get(delta.request_id)
                if running is None:
                    continue
                running.generated += delta.token_ids
                if delta.finished:
                    del active[delta.request_id]
                    self._finish(running, list(delta.token_ids), delta.stats)
                elif running.request.streaming and delta.token_ids:
                    running.sender.send(self._response(list(delta.token_ids)))

    def _finish(self, running: _Active, last: list[int], stats: Any) -> None:
        request = running.request
        if stats is not None:
            self.metrics.observe(stats)
        if request.streaming:
            tokens = last  # the final delta's tokens
        else:
            tokens = running.generated if request.exclude_input_in_output else request.prompt_ids + running.generated
        running.sender.send(self._response(tokens, stats if request.return_perf_metrics else None),
                            flags=self.pb.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def _response(self, tokens: list[int], stats: Any = None) -> Any:
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
        self.inbox.put(None)
        self.worker.join(timeout=10)
        self.metrics.close()
