"""A small gRPC client for trtspec's Triton deployments (either flavour), built on tritonclient.grpc.

    client = TritonClient("127.0.0.1:8001", model="ensemble")
    out = client.generate("def foo(", max_tokens=32, k=4)          # Completion: text, token_ids, acceptance fields
    for chunk in client.stream("def foo(", max_tokens=32):         # Chunk: text / token_ids of one response
        print(chunk.text, end="")

Text models (`ensemble`, `tensorrt_llm_bls`) take a string; core models (`trtspec_engine`, `tensorrt_llm`) take token
ids. Decoupled models are always called through the gRPC stream (Triton requires it), also without streaming.
tritonclient is imported when a client is created, not at module import.
"""

from __future__ import annotations

import queue
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trtspec.errors import ServerError, ToolNotFoundError, UsageError

TEXT_INPUT = "text_input"
PERF_FIELDS = ("acceptance_rate", "total_accepted_draft_tokens", "total_draft_tokens", "num_drafts")
# request field -> input name on (text models, core models)
_INPUT_NAMES = {
    "max_tokens": ("max_tokens", "request_output_len"),
    "temperature": ("temperature", "temperature"),
    "top_k": ("top_k", "runtime_top_k"),
    "top_p": ("top_p", "runtime_top_p"),
    "seed": ("seed", "seed"),
    "stream": ("stream", "streaming"),
    "return_perf_metrics": ("return_perf_metrics", "return_perf_metrics"),
    "k": ("num_draft_tokens", "num_draft_tokens"),
    "end_id": ("end_id", "end_id"),
}
_DTYPES = {"max_tokens": "INT32", "temperature": "FP32", "top_k": "INT32", "top_p": "FP32", "seed": "UINT64",
           "stream": "BOOL", "return_perf_metrics": "BOOL", "k": "INT32", "end_id": "INT32"}
_NUMPY = {"INT32": np.int32, "FP32": np.float32, "UINT64": np.uint64, "BOOL": np.bool_}


@dataclass
class Chunk:
    """One response: the tokens (and, for text models, the text) it added; `perf` holds the acceptance counters
    when the response carried them (the last one, when return_perf_metrics was set)."""

    text: str
    token_ids: list[int]
    final: bool = False
    perf: dict[str, float] = field(default_factory=dict)


@dataclass
class Completion:
    """A finished request: the generated text and token ids (prompt excluded) and the acceptance counters."""

    text: str
    token_ids: list[int]
    acceptance_rate: float | None = None
    total_accepted_draft_tokens: int | None = None
    total_draft_tokens: int | None = None
    num_drafts: int | None = None  # trtspec_engine only (mean acceptance length needs it)
    chunks: list[Chunk] = field(default_factory=list)

    @classmethod
    def from_chunks(cls, chunks: Iterable[Chunk]) -> Completion:
        """Join streamed chunks: text and tokens concatenated, the acceptance counters of the last chunk."""
        completion = cls(text="", token_ids=[])
        for chunk in chunks:
            completion.chunks.append(chunk)
            completion.text += chunk.text
            completion.token_ids += chunk.token_ids
            for name, value in chunk.perf.items():
                setattr(completion, name, value)
        if completion.chunks:
            completion.chunks[-1].final = True
        return completion

    @property
    def mean_acceptance_length(self) -> float | None:
        if self.num_drafts is None or self.total_accepted_draft_tokens is None:
            return None
        return 1.0 + self.total_accepted_draft_tokens / self.num_drafts if self.num_drafts else 1.0


class TritonClient:
    """gRPC client for one model of a trtspec repository."""

    def __init__(self, url: str = "127.0.0.1:8001", model: str = "ensemble", *, timeout_s: float = 120.0) -> None:
        try:
            import tritonclient.grpc as grpcclient
        except ImportError:
            raise ToolNotFoundError("tritonclient[grpc] is not installed",
                                    hint="pip install 'tritonclient[grpc]'") from None
        self._grpc = grpcclient
        self.url, self.model, self.timeout_s = url, model, timeout_s
        self._client = grpcclient.InferenceServerClient(url=url)
        try:
            config = self._client.get_model_config(model, as_json=True)["config"]
        except Exception as exc:  # InferenceServerException, or gRPC unavailable
            raise ServerError(f"cannot read model {model!r} from {url}: {_message(exc)}",
                              hint=f"is the server up (`trtspec serve REPO`) and {model!r} loaded?") from None
        self.inputs = {i["name"]: i for i in config.get("input", [])}
        self.decoupled = bool(config.get("model_transaction_policy", {}).get("decoupled", False))
        self.text_model = TEXT_INPUT in self.inputs

    # public --------------------------------------------------------------------------------------------------------
    def generate(self, prompt: str | Sequence[int], *, max_tokens: int = 64, k: int | None = None,
                 temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int | None = None,
                 end_id: int | None = None) -> Completion:
        """One request, not streamed; returns the whole completion."""
        inputs = self._inputs(prompt, max_tokens=max_tokens, k=k, temperature=temperature, top_k=top_k,
                              top_p=top_p, seed=seed, end_id=end_id, stream=False)
        if self.decoupled:
            return _collect(self._stream_responses(inputs))
        try:
            result = self._client.infer(self.model, inputs, client_timeout=self.timeout_s)
        except Exception as exc:
            raise ServerError(f"{self.model}: {_message(exc)}", hint="see the server log for details") from None
        return _collect(iter([result]))

    def stream(self, prompt: str | Sequence[int], *, max_tokens: int = 64, k: int | None = None,
               temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int | None = None,
               end_id: int | None = None) -> Iterator[Chunk]:
        """Stream one request: yields a Chunk per response as it arrives (needs a decoupled model)."""
        if not self.decoupled:
            raise UsageError(f"model {self.model!r} is not decoupled and cannot stream",
                             hint="use model `ensemble` or `trtspec_engine`, or call generate()")
        inputs = self._inputs(prompt, max_tokens=max_tokens, k=k, temperature=temperature, top_k=top_k,
                              top_p=top_p, seed=seed, end_id=end_id, stream=True)
        for result in self._stream_responses(inputs):
            yield _chunk(result)

    def stream_completion(self, prompt: str | Sequence[int], **kwargs: Any) -> Completion:
        """Stream one request and gather it into a Completion (chunks kept in `.chunks`)."""
        if not self.decoupled:
            raise UsageError(f"model {self.model!r} is not decoupled and cannot stream", hint="call generate()")
        inputs = self._inputs(prompt, stream=True, **kwargs)
        return _collect(self._stream_responses(inputs))

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> TritonClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # internals -----------------------------------------------------------------------------------------------------
    def _inputs(self, prompt: str | Sequence[int], *, stream: bool, max_tokens: int = 64, k: int | None = None,
                temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int | None = None,
                end_id: int | None = None) -> list[Any]:
        infer_input = self._grpc.InferInput
        side = 0 if self.text_model else 1
        tensors: list[Any] = []
        if self.text_model:
            if not isinstance(prompt, str):
                raise UsageError(f"model {self.model!r} takes text; got token ids", hint="pass the prompt as text")
            tensors.append(_tensor(infer_input, TEXT_INPUT, np.array([[prompt.encode("utf-8")]], dtype=object),
                                   "BYTES"))
        else:
            if isinstance(prompt, str):
                raise UsageError(f"model {self.model!r} takes token ids, not text",
                                 hint="use model `ensemble` for text, or tokenize the prompt first")
            ids = np.asarray(list(prompt), dtype=np.int32).reshape(1, -1)  # [1, prompt_len]
            tensors.append(_tensor(infer_input, "input_ids", ids, "INT32"))
            tensors.append(_tensor(infer_input, "input_lengths", np.array([[ids.shape[1]]], dtype=np.int32), "INT32"))
        values = {"max_tokens": max_tokens, "temperature": temperature, "top_k": top_k, "top_p": top_p,
                  "seed": seed, "stream": stream, "return_perf_metrics": True, "k": k, "end_id": end_id}
        for key, value in values.items():
            if value is None:
                continue
            name = _INPUT_NAMES[key][side]
            if name not in self.inputs:
                if key == "k":
                    raise UsageError(f"model {self.model!r} has no `num_draft_tokens` input, so k cannot be set "
                                     "per request", hint="use model `trtspec_engine`/`ensemble` of a torch "
                                     "deployment, or `tensorrt_llm_bls` for draft-target on TensorRT-LLM")
                continue  # an optional knob this model does not expose
            dtype = _DTYPES[key]
            tensors.append(_tensor(infer_input, name, np.array([[value]], dtype=_NUMPY[dtype]), dtype))
        return tensors

    def _stream_responses(self, inputs: list[Any]) -> Iterator[Any]:
        """Send one request on a fresh gRPC stream and yield its results until the final flag."""
        results: queue.Queue[tuple[Any, Any]] = queue.Queue()
        client = self._grpc.InferenceServerClient(url=self.url)  # one stream per client object
        client.start_stream(callback=lambda result, error: results.put((result, error)),
                            stream_timeout=self.timeout_s)
        try:
            client.async_stream_infer(self.model, inputs, enable_empty_final_response=True)
            while True:
                try:
                    result, error = results.get(timeout=self.timeout_s)
                except queue.Empty:
                    raise ServerError(f"{self.model}: no response within {self.timeout_s:.0f} s",
                                      hint="the server may be overloaded; raise timeout_s") from None
                if error is not None:
                    raise ServerError(f"{self.model}: {_message(error)}", hint="see the server log for details")
                final = result.get_response().parameters.get("triton_final_response")
                is_final = bool(final and final.bool_param)
                if result.get_response().outputs:
                    yield result
                if is_final:
                    return
        finally:
            client.stop_stream(cancel_requests=True)
            client.close()


def _tensor(factory: Any, name: str, array: np.ndarray, dtype: str) -> Any:
    tensor = factory(name, list(array.shape), dtype)
    tensor.set_data_from_numpy(array)
    return tensor


def _chunk(result: Any) -> Chunk:
    ids = result.as_numpy("output_ids")  # [batch, beam, len]
    lengths = result.as_numpy("sequence_length")  # [batch, beam]
    token_ids: list[int] = []
    if ids is not None:
        n = int(lengths.reshape(-1)[0]) if lengths is not None else ids.shape[-1]
        token_ids = [int(t) for t in ids.reshape(-1)[:n]]
    text_out = result.as_numpy("text_output")
    text = ""
    if text_out is not None:
        raw = text_out.reshape(-1)[0]
        text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else str(raw)
    perf: dict[str, float] = {}
    for name in PERF_FIELDS:
        value = result.as_numpy(name)
        if value is not None:
            scalar = value.reshape(-1)[0]
            perf[name] = float(scalar) if name == "acceptance_rate" else int(scalar)
    return Chunk(text=text, token_ids=token_ids, perf=perf)


def _collect(results: Iterator[Any]) -> Completion:
    return Completion.from_chunks(_chunk(result) for result in results)


def _message(exc: BaseException) -> str:
    message = getattr(exc, "message", None)
    text = message() if callable(message) else str(exc)
    return text.strip()
