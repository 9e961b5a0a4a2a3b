"""The one gRPC client for trtspec's Triton deployments (either flavour), built on tritonclient.grpc.

    client = TritonClient("127.0.0.1:8001", model="ensemble")
    out = client.generate("def foo(", max_tokens=32)               # Completion: text, token_ids, acceptance fields
    for chunk in client.stream("def foo(", max_tokens=32):         # Chunk: text / token_ids of one response
        print(chunk.text, end="")
    arrays = client.infer("tensorrt_llm", {"input_ids": ids, ...}, ["output_ids", "sequence_length"])  # tensors

Two levels. `responses()` / `infer()` take numpy arrays by tensor name for any served model; `responses()` is the
only code that talks to the server: a unary call for ordinary models, one gRPC stream per request for decoupled ones
(Triton requires it, also without streaming). `generate()` / `stream()` build those tensors for the model's form
(`model_form`, read from its declared inputs): `text` (the inflight-batcher text models `ensemble`,
`tensorrt_llm_bls`: `text_input`, `max_tokens`, ...), `tokens` (the inflight-batcher engine models `tensorrt_llm`,
`tensorrt_llm_draft`: `input_ids`, `request_output_len`, ...) or `llmapi` (the PyTorch workflow's llmapi
`tensorrt_llm`: `text_input`, `sampling_param_*`, answering the whole text so far in each response), shaped by its
max_batch_size (a batch dimension of 1 when it batches, none when it is 0). They read responses into Chunks: they ask
for the generated part alone (exclude_input_in_output, the llmapi model's sampling_param_exclude_input_from_output)
and for the perf outputs where the model declares them; `k` is sent as `num_draft_tokens` (the BLS's draft-target,
or the torch flavour's engine models; the llmapi model has no such input); a text prompt to an engine model goes
through the repository's `preprocessing` and `postprocessing` models. `generating_model()` names the model to ask
when none is given: the first of GENERATE_MODELS the server has ready. Every request is bounded by `timeout_s` from sending to its final response; a stream that times out or is
abandoned by its reader before its final response is cancelled, one that ended (final response or error) is closed
gracefully. A request the server refuses as bad input (Triton's
INVALID_ARG: a served model's own check, or Triton's check of dtypes and shapes) raises RequestError (exit 2) with
the server's message; any other failure raises ServerError (exit 1). A gRPC stream's error carries its message
alone (Triton's `triton_grpc_error` mode, which adds the code, crashes tritonserver 2.51 under load and is not used):
trtspec's models tag bad-input messages (trtspec.errors.BAD_INPUT_TAG), which the client reads as INVALID_ARG.
Used by the CLI, the sweep and scripts.
TensorRT-LLM renamed two request inputs after 0.19.0 (`random_seed` -> `seed`, `min_length` -> `min_tokens`); an
input is sent under whichever spelling the served model declares (read from its config), so one caller works
against every release. tritonclient is imported when a client is created, not at module import.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trtspec.contracts.metrics import mean_acceptance_length  # data only, no torch
from trtspec.errors import BAD_INPUT_TAG, ConfigError, RequestError, ServerError, ToolNotFoundError, UsageError

DEFAULT_TIMEOUT_S = 120.0  # seconds one request may take, sending to final response
TEXT_INPUT = "text_input"
# Acceptance counters a response carries when the request sets return_perf_metrics: TensorRT-LLM's three, plus
# num_drafts (a trtspec extension of the torch flavour's engine models; the mean acceptance length needs it).
# The one list of their names.
TRTLLM_PERF_OUTPUTS = ("acceptance_rate", "total_accepted_draft_tokens", "total_draft_tokens")
PERF_OUTPUTS = (*TRTLLM_PERF_OUTPUTS, "num_drafts")
# The forms of a model generate() can ask (module docstring), and the models it asks when none is named, preferred
# first (the ensemble of the inflight repository; an llmapi repository serves tensorrt_llm alone).
FORMS = ("text", "tokens", "llmapi")
GENERATE_MODELS = ("ensemble", "tensorrt_llm_bls", "tensorrt_llm")
# request field -> input name in each form of FORMS (None: the form has no such input)
_INPUT_NAMES: dict[str, tuple[str | None, str | None, str | None]] = {
    "max_tokens": ("max_tokens", "request_output_len", "sampling_param_max_tokens"),
    "temperature": ("temperature", "temperature", "sampling_param_temperature"),
    "top_k": ("top_k", "runtime_top_k", "sampling_param_top_k"),
    "top_p": ("top_p", "runtime_top_p", "sampling_param_top_p"),
    "seed": ("seed", "seed", "sampling_param_seed"),
    "stream": ("stream", "streaming", "streaming"),
    "return_perf_metrics": ("return_perf_metrics", "return_perf_metrics", "sampling_param_return_perf_metrics"),
    "k": ("num_draft_tokens", "num_draft_tokens", None),
    "end_id": ("end_id", "end_id", None),
    "exclude_input_in_output": ("exclude_input_in_output", "exclude_input_in_output",
                                "sampling_param_exclude_input_from_output"),
}
# The request inputs TensorRT-LLM renamed after 0.19.0 (tensorrtllm_backend c2e65b8): old name -> new name.
RENAMED_INPUTS = {"random_seed": "seed", "min_length": "min_tokens"}
_OTHER_SPELLING = {**RENAMED_INPUTS, **{new: old for old, new in RENAMED_INPUTS.items()}}
# Triton's INVALID_ARG as tritonclient reports it: a bad request, not a failure of the server
BAD_REQUEST_STATUS = "StatusCode.INVALID_ARGUMENT"
_DTYPES: dict[str, type] = {"max_tokens": np.int32, "temperature": np.float32, "top_k": np.int32,
                            "top_p": np.float32, "seed": np.uint64, "stream": np.bool_,
                            "return_perf_metrics": np.bool_, "k": np.int32, "end_id": np.int32,
                            "exclude_input_in_output": np.bool_}


@dataclass
class Chunk:
    """One response: the tokens (and, for text models, the text) it added; `perf` holds the acceptance counters
    when the response carried them (the last one, when return_perf_metrics was set)."""

    text: str
    token_ids: list[int]
    final: bool = False
    perf: dict[str, float] = field(default_factory=dict)
    whole_text: str | None = None  # the whole text so far, from a model that sends it (the llmapi model)


@dataclass
class Completion:
    """A finished request: the generated text and token ids (prompt excluded) and the acceptance counters.

    `token_ids` is empty for models that return text only (the TensorRT-LLM flavour's `ensemble` and
    `tensorrt_llm_bls`, as in NVIDIA's templates); the counters are None where the model does not declare them."""

    text: str
    token_ids: list[int]
    acceptance_rate: float | None = None
    total_accepted_draft_tokens: int | None = None
    total_draft_tokens: int | None = None
    num_drafts: int | None = None  # the torch flavour's tensorrt_llm only (mean acceptance length needs it)
    chunks: list[Chunk] = field(default_factory=list)

    @classmethod
    def from_chunks(cls, chunks: Iterable[Chunk]) -> Completion:
        """Join streamed chunks: text and tokens concatenated (the last whole text, when the chunks carry it), the
        acceptance counters of the last chunk."""
        completion = cls(text="", token_ids=[])
        for chunk in chunks:
            completion.chunks.append(chunk)
            completion.text = chunk.whole_text if chunk.whole_text is not None else completion.text + chunk.text
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
        return mean_acceptance_length(self.num_drafts, self.total_accepted_draft_tokens)


class TritonClient:
    """gRPC client of one Triton server; `model` is the model the text-level methods call.

    Args:
        url: the server's gRPC address, host:port.
        model: the model generate()/stream() call; infer()/responses() name theirs per call (None: no such model;
            the server's and models' facts only).
        timeout_s: seconds one request may take from sending to its final response (also bounds the checks).
    Raises:
        ServerError: no server answers at `url`, or `model` is not served there.
    """

    def __init__(self, url: str = "127.0.0.1:8001", model: str | None = "ensemble", *,
                 timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        if not timeout_s > 0:
            raise ConfigError("timeout_s", timeout_s, "must be a positive number of seconds",
                              hint=f"e.g. timeout_s={DEFAULT_TIMEOUT_S:g}")
        try:
            import tritonclient.grpc as grpcclient
            from tritonclient.utils import np_to_triton_dtype
        except ImportError:
            raise ToolNotFoundError("tritonclient[grpc] is not installed",
                                    hint="pip install 'tritonclient[grpc]'") from None
        self._grpc, self._triton_dtype = grpcclient, np_to_triton_dtype
        self.url, self.timeout_s = url, timeout_s
        self._client = grpcclient.InferenceServerClient(url=url)
        self._configs: dict[str, dict[str, Any]] = {}
        try:
            live = self._client.is_server_live(client_timeout=timeout_s)
        except Exception as exc:  # InferenceServerException, or gRPC unavailable: nobody answers
            self._client.close()
            raise ServerError(f"url={url!r}: no Triton server answers ({_message(exc)})",
                              hint="start one with `trtspec serve REPO`, or fix the url (the gRPC port, e.g. 8001)"
                              ) from None
        if not live:
            self._client.close()
            raise ServerError(f"url={url!r}: the Triton server is not live", hint="see the server log")
        self.use(model)

    def use(self, model: str | None) -> None:
        """Make `model` the one generate()/stream() ask (None: none); its configuration tells its form
        (`self.form`, None for a model generate() cannot ask) and whether it is decoupled."""
        config = self.model_config(model) if model is not None else {}
        self.model = model
        self.inputs = {i["name"]: i for i in config.get("input", [])}
        self.decoupled = self.is_decoupled(model) if model is not None else False
        self.form = model_form(self.inputs)
        self.text_model = self.form in ("text", "llmapi")
        self.batched = int(config.get("max_batch_size", 0) or 0) > 0

    # text level ----------------------------------------------------------------------------------------------------
    def generate(self, prompt: str | Sequence[int], *, max_tokens: int = 64, k: int | None = None,
                 temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int | None = None,
                 end_id: int | None = None) -> Completion:
        """One request, not streamed; returns the whole completion.

        A text prompt to an engine model (`tensorrt_llm`) is tokenized by the repository's `preprocessing` model
        (which also gives the end_id that ends the request) and the output detokenized by `postprocessing`."""
        inputs = self._request(prompt, max_tokens=max_tokens, k=k, temperature=temperature, top_k=top_k,
                               top_p=top_p, seed=seed, end_id=end_id, stream=False)
        completion = Completion.from_chunks(self._chunks(self.responses(self._model(), inputs)))
        if isinstance(prompt, str) and not self.text_model:
            completion.text = self.detokenize(completion.token_ids)
        return completion

    def stream(self, prompt: str | Sequence[int], *, max_tokens: int = 64, k: int | None = None,
               temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int | None = None,
               end_id: int | None = None) -> Iterator[Chunk]:
        """Stream one request: yields a Chunk per response as it arrives (needs a decoupled model)."""
        if not self.decoupled:
            raise UsageError(f"model {self.model!r} is not decoupled and cannot stream",
                             hint="deploy the repository with `trtspec deploy --decoupled`, or call generate()")
        inputs = self._request(prompt, max_tokens=max_tokens, k=k, temperature=temperature, top_k=top_k,
                               top_p=top_p, seed=seed, end_id=end_id, stream=True)
        for chunk in self._chunks(self.responses(self._model(), inputs)):
            if isinstance(prompt, str) and not self.text_model:  # each response's tokens decode on their own
                chunk.text = self.detokenize(chunk.token_ids)
            yield chunk

    def tokenize(self, text: str) -> tuple[list[int], int]:
        """(token ids, end_id) of `text` from the served `preprocessing` model (the repository's tokenizer)."""
        out = self.infer("preprocessing", {"QUERY": np.array([[text.encode("utf-8")]], dtype=object),
                                           "REQUEST_OUTPUT_LEN": np.array([[1]], dtype=np.int32)},
                         ["INPUT_ID", "REQUEST_INPUT_LEN", "OUT_END_ID"])
        length = int(out["REQUEST_INPUT_LEN"].reshape(-1)[0])
        return [int(t) for t in out["INPUT_ID"].reshape(-1)[:length]], int(out["OUT_END_ID"].reshape(-1)[0])

    def detokenize(self, token_ids: Sequence[int]) -> str:
        """The text of `token_ids` from the served `postprocessing` model."""
        if not token_ids:
            return ""
        out = self.infer("postprocessing", {
            "TOKENS_BATCH": np.asarray(list(token_ids), dtype=np.int32).reshape(1, 1, -1),  # [batch, beam, len]
            "SEQUENCE_LENGTH": np.array([[len(token_ids)]], dtype=np.int32)}, ["OUTPUT"])
        raw = out["OUTPUT"].reshape(-1)[0]
        return raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else str(raw)

    def stream_completion(self, prompt: str | Sequence[int], **kwargs: Any) -> Completion:
        """Stream one request and gather it into a Completion (chunks kept in `.chunks`)."""
        return Completion.from_chunks(self.stream(prompt, **kwargs))

    # tensor level --------------------------------------------------------------------------------------------------
    def infer(self, model: str, inputs: Mapping[str, np.ndarray],
              outputs: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """One request to any served model; its outputs by name.

        Args:
            model: the served model, e.g. `tensorrt_llm`, `tensorrt_llm_draft`, `preprocessing`.
            inputs: tensor name -> array, batch dimension first (e.g. input_ids [1, prompt_len] int32); the Triton
                dtype follows the numpy dtype (object arrays of bytes are BYTES).
            outputs: the output names to return; None = every output the model sends.
        Returns:
            name -> array as the model sent it (e.g. output_ids [1, beam, seq]). A decoupled model may answer
            with several responses; each output keeps its last value, which is the whole result of a request that
            does not stream (its final response carries the full sequence and the counters). Read a streamed
            request with responses().
        Raises:
            RequestError: the server refused the request as bad input (INVALID_ARG); the message is the server's.
            ServerError: the request failed otherwise, or took longer than timeout_s.
        """
        merged: dict[str, np.ndarray] = {}
        for arrays in self.responses(model, inputs, outputs):
            merged.update(arrays)
        return merged

    def responses(self, model: str, inputs: Mapping[str, np.ndarray],
                  outputs: Sequence[str] | None = None) -> Iterator[dict[str, np.ndarray]]:
        """Send one request; yield each response's outputs (name -> array) as it arrives, until the final one.

        A model that is not decoupled answers once (a unary call); a decoupled one through a gRPC stream of its own,
        stopped with the request cancelled when the request ends, fails, times out, or the caller stops reading.
        """
        declared = self.input_names(model)
        tensors = [self._tensor(model, declared_name(name, declared), array) for name, array in inputs.items()]
        sent = {tensor.name() for tensor in tensors}
        missing = sorted(i["name"] for i in self.model_config(model).get("input", [])
                         if not i.get("optional", False) and i["name"] not in sent)
        if missing:
            raise RequestError(f"{model}: required input(s) {', '.join(missing)} missing from the request",
                               hint="send every input the model does not mark optional (see its config.pbtxt)")
        requested = None if outputs is None else [self._grpc.InferRequestedOutput(name) for name in outputs]
        if not self.is_decoupled(model):
            try:
                result = self._client.infer(model, tensors, outputs=requested, client_timeout=self.timeout_s)
            except Exception as exc:  # InferenceServerException: the model's error, or the deadline
                raise _request_failed(model, exc, hint="see the server log; a request slower than "
                                      f"timeout_s={self.timeout_s:g} s needs a larger timeout") from None
            yield _arrays(result, outputs)
            return
        yield from self._stream(model, tensors, requested, outputs)

    # server and model facts ----------------------------------------------------------------------------------------
    def server_ready(self) -> bool:
        """Whether the server is ready (live, and its models loaded)."""
        try:
            return bool(self._client.is_server_ready(client_timeout=self.timeout_s))
        except Exception as exc:
            raise ServerError(f"url={self.url!r}: readiness unknown ({_message(exc)})",
                              hint="is the server still up? see its log") from None

    def ready(self, model: str) -> bool:
        """Whether `model` is loaded and ready on the server."""
        try:
            return bool(self._client.is_model_ready(model, client_timeout=self.timeout_s))
        except Exception as exc:
            raise ServerError(f"url={self.url!r}: readiness of {model!r} unknown ({_message(exc)})",
                              hint="is the server still up? see its log") from None

    def model_config(self, model: str) -> dict[str, Any]:
        """A served model's configuration (its config.pbtxt as JSON), read once per model."""
        if model not in self._configs:
            try:
                reply = self._client.get_model_config(model, as_json=True, client_timeout=self.timeout_s)
            except Exception as exc:  # InferenceServerException, or gRPC unavailable
                raise ServerError(f"cannot read model {model!r} from {self.url}: {_message(exc)}",
                                  hint=f"is the server up (`trtspec serve REPO`) and {model!r} loaded?") from None
            self._configs[model] = reply.get("config", {})
        return self._configs[model]

    def load_model(self, model: str, config: Mapping[str, Any] | None = None) -> None:
        """Load or reload `model` through Triton's model-control API (the server runs in explicit mode).

        Args:
            config: a whole model configuration (the JSON form of config.pbtxt) used instead of the repository's
                config.pbtxt for this load (Triton's config override); None = the repository's own.
        Triton loads the new instance while the old one keeps serving, and swaps them when it is ready; a failed
        load leaves the running model as it was. Raises ServerError with Triton's reason.
        """
        import json

        try:
            self._client.load_model(model, config=None if config is None else json.dumps(config),
                                    client_timeout=self.timeout_s)
        except Exception as exc:  # InferenceServerException: explicit mode off, a bad config, a failed load
            raise ServerError(f"loading {model!r} on {self.url} failed: {_message(exc)}",
                              hint="the running model is unchanged; see the server log (the server must run in "
                                   "explicit model-control mode, as `trtspec serve` starts it)") from None
        finally:
            self._configs.pop(model, None)  # read the new configuration on next use

    def model_versions(self, model: str) -> dict[int, str]:
        """Version -> state (READY, UNAVAILABLE, LOADING, ...) of `model` in the server's repository index."""
        try:
            index = self._client.get_model_repository_index(as_json=True, client_timeout=self.timeout_s)
        except Exception as exc:
            raise ServerError(f"cannot read the repository index of {self.url}: {_message(exc)}",
                              hint="is the server still up? see its log") from None
        return {int(entry["version"]): entry.get("state", "") for entry in index.get("models", [])
                if entry.get("name") == model and str(entry.get("version", "")).isdigit()}

    def served_models(self) -> list[str]:
        """The models the server has ready (a READY version in its repository index), sorted."""
        try:
            index = self._client.get_model_repository_index(as_json=True, client_timeout=self.timeout_s)
        except Exception as exc:
            raise ServerError(f"cannot read the repository index of {self.url}: {_message(exc)}",
                              hint="is the server still up? see its log") from None
        return sorted({entry["name"] for entry in index.get("models", []) if entry.get("state") == "READY"})

    def generating_model(self) -> str:
        """The model generate() asks when none is named: the first of GENERATE_MODELS the server has ready
        (UsageError naming what it serves when it has none of them)."""
        served = self.served_models()
        picked = next((name for name in GENERATE_MODELS if name in served), None)
        if picked is None:
            raise UsageError(f"url={self.url!r}: the server has none of {', '.join(GENERATE_MODELS)} ready (it "
                             f"serves: {', '.join(served) or 'nothing'})",
                             hint="name the model to ask with --model, or serve a repository of `trtspec deploy`")
        return picked

    def model_parameters(self, model: str) -> dict[str, str]:
        """A served model's config.pbtxt `parameters`, as strings."""
        params = self.model_config(model).get("parameters", {})
        return {key: value.get("string_value", "") for key, value in params.items()}

    def input_names(self, model: str) -> set[str]:
        """The input names a served model declares."""
        return {i["name"] for i in self.model_config(model).get("input", [])}

    def is_decoupled(self, model: str) -> bool:
        """Whether `model` answers through a stream (model_transaction_policy { decoupled: true })."""
        return bool(self.model_config(model).get("model_transaction_policy", {}).get("decoupled", False))

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> TritonClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # internals -----------------------------------------------------------------------------------------------------
    def _request(self, prompt: str | Sequence[int], *, stream: bool, max_tokens: int = 64, k: int | None = None,
                 temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int | None = None,
                 end_id: int | None = None) -> dict[str, np.ndarray]:
        """The request tensors of `self.model` in its form for a prompt and sampling options (knobs it lacks are left
        out), with a batch dimension of 1 when the model batches."""
        model = self._model()
        if self.form is None:
            raise UsageError(f"model {model!r} is not one generate() can ask: it takes neither {TEXT_INPUT} nor "
                             f"input_ids (its inputs: {', '.join(sorted(self.inputs))})",
                             hint=f"ask one of {', '.join(GENERATE_MODELS)} (leave out --model to pick the first "
                                  "the server has)")
        if self.text_model:
            if not isinstance(prompt, str):
                raise UsageError(f"model {model!r} takes text; got token ids", hint="pass the prompt as text")
            inputs = {TEXT_INPUT: np.array([prompt.encode("utf-8")], dtype=object)}  # [1]
        else:
            if isinstance(prompt, str):  # through the repository's tokenizer, ending at its end token
                prompt, served_end_id = self.tokenize(prompt)
                end_id = served_end_id if end_id is None else end_id
            ids = np.asarray(list(prompt), dtype=np.int32)  # [prompt_len]
            inputs = {"input_ids": ids, "input_lengths": np.array([ids.shape[0]], dtype=np.int32)}
        values = {"max_tokens": max_tokens, "temperature": temperature, "top_k": top_k, "top_p": top_p,
                  "seed": seed, "stream": stream, "return_perf_metrics": True, "k": k, "end_id": end_id,
                  "exclude_input_in_output": True}
        for key, value in values.items():
            if value is None:
                continue
            spelled = _INPUT_NAMES[key][FORMS.index(self.form)]
            name = declared_name(spelled, self.inputs) if spelled is not None else None
            if name not in self.inputs:
                if key == "k":
                    raise UsageError(_no_k(model, self.form), hint="use model `tensorrt_llm` of an inflight "
                                     "repository (the torch flavour: k per request) or `tensorrt_llm_bls` "
                                     "(draft-target through the draft model); an llmapi model drafts with the k it "
                                     "was deployed with (`trtspec deploy --k`)")
                continue  # an optional knob this model does not expose
            inputs[name] = np.array([value], dtype=_DTYPES[key])  # [1]
        return {name: array[np.newaxis] if self.batched else array for name, array in inputs.items()}

    def _model(self) -> str:
        if self.model is None:
            raise UsageError("this client names no model to generate with",
                             hint="create it with model=NAME, or call use(client.generating_model())")
        return self.model

    def _chunks(self, responses: Iterable[Mapping[str, np.ndarray]]) -> Iterator[Chunk]:
        """Each response as a Chunk. The llmapi model sends the whole text so far: a chunk's text is what it adds to
        the text shown before (a trailing U+FFFD, the part of a character still to come, held back) and its
        whole_text the text itself."""
        shown = ""
        for arrays in responses:
            chunk = _chunk(arrays)
            if self.form == "llmapi":
                whole, stable = chunk.text, chunk.text.rstrip("\ufffd")
                same = next((i for i, (a, b) in enumerate(zip(shown, stable, strict=False)) if a != b),
                            min(len(shown), len(stable)))
                chunk.text, chunk.whole_text = stable[same:], whole
                shown = stable
            yield chunk

    def _tensor(self, model: str, name: str, array: np.ndarray) -> Any:
        """`array` as the request input `name` of `model`, or RequestError when the model declares no such input or
        another dtype (checked here because Triton answers those on a gRPC stream without a status code)."""
        array = np.asarray(array)
        dtype = self._triton_dtype(array.dtype)
        declared = {i["name"]: i for i in self.model_config(model).get("input", [])}
        if name not in declared:
            raise RequestError(f"{model}: {name!r} is not one of its inputs ({', '.join(sorted(declared))})",
                               hint="leave it out, or ask a model that declares it")
        want = str(declared[name].get("data_type", "")).removeprefix("TYPE_").replace("STRING", "BYTES")
        if dtype != want:
            raise RequestError(f"{model}: input {name!r} is numpy {array.dtype} ({dtype or 'no Triton type'}); the "
                               f"model takes {want}", hint=f"send {name} as a {want} array (object arrays of bytes "
                               "are BYTES)")
        tensor = self._grpc.InferInput(name, list(array.shape), dtype)
        tensor.set_data_from_numpy(array)
        return tensor

    def _stream(self, model: str, tensors: list[Any], requested: list[Any] | None,
                outputs: Sequence[str] | None) -> Iterator[dict[str, np.ndarray]]:
        """One request on a fresh gRPC stream: yields each response that has outputs, until the final flag."""
        results: queue.Queue[tuple[Any, Any]] = queue.Queue()
        client = self._grpc.InferenceServerClient(url=self.url)  # one stream per client object; requests may overlap
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        deadline = time.monotonic() + self.timeout_s
        ended = False  # the final response or an error came: nothing left to cancel
        try:
            client.async_stream_infer(model, tensors, outputs=requested, enable_empty_final_response=True)
            while True:
                try:
                    result, error = results.get(timeout=max(deadline - time.monotonic(), 0.0))
                except queue.Empty:
                    raise ServerError(f"{model}: no final response within timeout_s={self.timeout_s:g} s (request "
                                      "cancelled)", hint="the server may be overloaded or the request long; raise "
                                      "timeout_s (`trtspec sweep --timeout SECONDS`)") from None
                if error is not None:
                    ended = True
                    raise _request_failed(model, error, hint="see the server log for details")
                response = result.get_response()
                final = response.parameters.get("triton_final_response")
                ended = final is not None and final.bool_param
                if response.outputs:
                    yield _arrays(result, outputs)
                if ended:
                    return
        finally:
            # a request that ended closes its stream gracefully; one that did not (timeout, the reader stopped early)
            # is cancelled, so the server stops generating for nobody
            client.stop_stream(cancel_requests=not ended)
            client.close()


def model_form(inputs: Collection[str]) -> str | None:
    """The form (FORMS) of a model with these declared inputs: `tokens` (input_ids), `llmapi` (text_input and
    sampling_param_max_tokens), `text` (text_input), None (another model: preprocessing, a draft-only model)."""
    if "input_ids" in inputs:
        return "tokens"
    if TEXT_INPUT in inputs:
        return "llmapi" if "sampling_param_max_tokens" in inputs else "text"
    return None


def _no_k(model: str, form: str) -> str:
    if form == "llmapi":
        return (f"model {model!r} is the llmapi model (the PyTorch workflow's): it has no per-request k "
                "(no `num_draft_tokens` input)")
    return f"model {model!r} has no `num_draft_tokens` input, so k cannot be set per request"


def declared_name(name: str, declared: Collection[str]) -> str:
    """`name`, or its other TensorRT-LLM spelling (`seed`/`random_seed`, `min_tokens`/`min_length`) when the model
    declares only that one."""
    other = _OTHER_SPELLING.get(name)
    return other if name not in declared and other in declared else name


def perf_values(arrays: Mapping[str, np.ndarray]) -> dict[str, float]:
    """The acceptance counters (PERF_OUTPUTS) among one response's outputs: acceptance_rate a float, the rest ints."""
    perf: dict[str, float] = {}
    for name in PERF_OUTPUTS:
        if name in arrays:
            scalar = np.asarray(arrays[name]).reshape(-1)[0]  # [1, 1]
            perf[name] = float(scalar) if name == "acceptance_rate" else int(scalar)
    return perf


def _arrays(result: Any, names: Sequence[str] | None) -> dict[str, np.ndarray]:
    """A tritonclient result as name -> array (`names`, or every output it has), absent outputs left out."""
    if names is None:
        names = [output.name for output in result.get_response().outputs]
    arrays = {name: result.as_numpy(name) for name in names}
    return {name: array for name, array in arrays.items() if array is not None}


def _chunk(arrays: Mapping[str, np.ndarray]) -> Chunk:
    ids = arrays.get("output_ids")  # [batch, beam, len]
    lengths = arrays.get("sequence_length")  # [batch, beam]
    token_ids: list[int] = []
    if ids is not None:
        n = int(lengths.reshape(-1)[0]) if lengths is not None else ids.shape[-1]
        token_ids = [int(t) for t in ids.reshape(-1)[:n]]
    text_out = arrays.get("text_output")
    text = ""
    if text_out is not None:
        raw = text_out.reshape(-1)[0]
        text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else str(raw)
    return Chunk(text=text, token_ids=token_ids, perf=perf_values(arrays))


def _request_failed(model: str, exc: BaseException, *, hint: str) -> RequestError | ServerError:
    """The error for a failed request: RequestError when the server refused it as bad input, else ServerError."""
    message = _message(exc)
    tagged = message.endswith(BAD_INPUT_TAG)  # a stream error carries the message alone (trtspec.errors.BAD_INPUT_TAG)
    message = message.removesuffix(BAD_INPUT_TAG).rstrip()
    message = message if message.startswith(f"{model}: ") else f"{model}: {message}"
    if _status(exc) == BAD_REQUEST_STATUS or tagged:
        return RequestError(message, hint="the server refused the request as bad input: fix the value it names")
    return ServerError(message, hint=hint)


def _status(exc: BaseException) -> str | None:
    """The gRPC status of a tritonclient error (e.g. "StatusCode.INVALID_ARGUMENT"), None when it has none."""
    status = getattr(exc, "status", None)
    return status() if callable(status) else None


def _message(exc: BaseException) -> str:
    message = getattr(exc, "message", None)
    text = message() if callable(message) else str(exc)
    return text.strip()
