"""Sweep backend `triton`: measure acceptance against a served model repository over gRPC.

Two ways to count acceptance, chosen by the method table (never by model names):
- perf metrics (the torch-flavour `trtspec_engine` model, and TensorRT-LLM tree/lookahead methods): one request per
  prompt with `num_draft_tokens` = k and `return_perf_metrics`; read `total_accepted_draft_tokens`,
  `total_draft_tokens` (and `acceptance_rate`). Per-position acceptance is not available on this path.
- client-side draft-target loop (TensorRT-LLM `draft_tokens_external`, as in tensorrtllm_backend's
  `e2e_grpc_speculative_decoding_client.py`): per step, ask the draft model for k tokens, send them to the target as
  `draft_input_ids` with `request_output_len = k + 1`, and count accepted = new target tokens - 1. Every step is
  counted, unlike the BLS model whose perf metrics cover only its last target call.

The transport is a small protocol (`infer(model, inputs, outputs) -> arrays`) so the loop is testable with a fake;
the real one wraps `tritonclient.grpc` and is imported lazily.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from trtspec.errors import ConfigError, ServerError, ToolNotFoundError
from trtspec.methods import resolve
from trtspec.spec.metrics import AcceptanceStats  # data only, no torch
from trtspec.sweep.grid import Case, SweepSpec
from trtspec.sweep.prompts import PromptSuite

PERF_OUTPUTS = ("acceptance_rate", "total_accepted_draft_tokens", "total_draft_tokens")


class Transport(Protocol):
    """One synchronous inference call: numpy inputs by tensor name -> numpy outputs by tensor name."""

    def infer(self, model: str, inputs: Mapping[str, np.ndarray], outputs: Sequence[str]) -> dict[str, np.ndarray]: ...

    def ready(self, model: str) -> bool: ...

    def close(self) -> None: ...


def draft_target_loop(transport: Transport, *, draft_model: str, target_model: str, prompt_ids: Sequence[int],
                      max_new_tokens: int, k: int, temperature: float, end_id: int | None = None,
                      pad_id: int | None = None) -> tuple[list[int], AcceptanceStats]:
    """Generate with TensorRT-LLM draft-target through two Triton models, counting every step's acceptance.

    Args:
        prompt_ids: the tokenized prompt, [prompt_len].
        k: draft tokens per step (clamped so the output never exceeds prompt_len + max_new_tokens).
    Returns:
        (generated token ids without the prompt, counts). Stops at the length limit, when the target makes no
        progress (end_id reached), or when the target reproduces the draft output exactly (upstream's stop rule).
    """
    prompt = np.asarray(prompt_ids, dtype=np.int32)  # [prompt_len]
    ids = prompt
    limit = len(prompt) + max_new_tokens
    counts = AcceptanceStats()
    while True:
        # 1. draft: up to k tokens continuing `ids`
        num_draft = min(k, limit - len(ids) - 1)
        draft_tokens = np.zeros((0,), dtype=np.int32)  # [num_draft]
        draft_out = None
        if num_draft > 0:
            draft_out, draft_len = _trtllm_call(transport, draft_model, ids, num_draft, None, temperature, end_id,
                                                pad_id)
            draft_tokens = draft_out[len(ids):draft_len]
        # 2. target: verify the draft and add one token (request_output_len = draft + 1)
        target_out, target_len = _trtllm_call(transport, target_model, ids, len(draft_tokens) + 1,
                                              draft_tokens if len(draft_tokens) else None, temperature, end_id, pad_id)
        new_ids = target_out[:target_len]  # [len(ids) + accepted + 1]
        # 3. count: every new target token but the last is an accepted draft token
        gained = len(new_ids) - len(ids)
        counts.num_target_forwards += 1
        counts.num_emitted_tokens += max(gained, 0)
        if len(draft_tokens):
            counts.observe(len(draft_tokens), min(max(gained - 1, 0), len(draft_tokens)))
        # 4. stop rules (tensorrtllm_backend client): length, no progress, target == draft output
        done = (len(new_ids) >= limit or gained <= 0
                or (draft_out is not None and np.array_equal(draft_out[:len(new_ids)], new_ids)
                    and len(draft_out) == len(new_ids)))
        ids = new_ids
        if done:
            return ids[len(prompt):].tolist(), counts


def _trtllm_call(transport: Transport, model: str, ids: np.ndarray, output_len: int, draft: np.ndarray | None,
                 temperature: float, end_id: int | None, pad_id: int | None) -> tuple[np.ndarray, int]:
    """One `tensorrt_llm`-style request for batch 1; returns (output_ids [seq], sequence_length)."""
    inputs: dict[str, np.ndarray] = {
        "input_ids": ids[None, :].astype(np.int32),  # [1, len]
        "input_lengths": np.array([[len(ids)]], dtype=np.int32),
        "request_output_len": np.array([[output_len]], dtype=np.int32),
        "beam_width": np.array([[1]], dtype=np.int32),
        "temperature": np.array([[temperature]], dtype=np.float32),
    }
    if draft is not None:
        inputs["draft_input_ids"] = draft[None, :].astype(np.int32)  # [1, num_draft]
    if end_id is not None:
        inputs["end_id"] = np.array([[end_id]], dtype=np.int32)
    if pad_id is not None:
        inputs["pad_id"] = np.array([[pad_id]], dtype=np.int32)
    out = transport.infer(model, inputs, ["output_ids", "sequence_length"])
    output_ids = np.asarray(out["output_ids"]).reshape(-1).astype(np.int64)  # [1, 1, seq] -> [seq] (beam 0)
    seq_len = int(np.asarray(out["sequence_length"]).reshape(-1)[0])
    return output_ids, seq_len


def perf_metrics_request(transport: Transport, *, model: str, prompt_ids: Sequence[int], max_new_tokens: int,
                         k: int | None, temperature: float, seed: int) -> tuple[list[int], dict[str, float]]:
    """One request with `return_perf_metrics`; returns (generated ids, the three perf-metric values).

    `k` is sent as `num_draft_tokens` (the torch-flavour model's per-request k); None for TensorRT-LLM models, whose
    tree/lookahead draft size is fixed by the server configuration.
    """
    ids = np.asarray(prompt_ids, dtype=np.int32)
    inputs = {
        "input_ids": ids[None, :],  # [1, prompt_len]
        "input_lengths": np.array([[len(ids)]], dtype=np.int32),
        "request_output_len": np.array([[max_new_tokens]], dtype=np.int32),
        "temperature": np.array([[temperature]], dtype=np.float32),
        "seed": np.array([[seed]], dtype=np.uint64),
        "return_perf_metrics": np.array([[True]], dtype=bool),
    }
    extra: list[str] = []
    if k is not None:  # the torch-flavour model: k per request, no prompt in the output, num_drafts reported
        inputs["num_draft_tokens"] = np.array([[k]], dtype=np.int32)
        inputs["exclude_input_in_output"] = np.array([[True]], dtype=bool)
        extra = ["num_drafts"]
    out = transport.infer(model, inputs, ["output_ids", "sequence_length", *PERF_OUTPUTS, *extra])
    output_ids = np.asarray(out["output_ids"]).reshape(-1)
    seq_len = int(np.asarray(out["sequence_length"]).reshape(-1)[0])
    generated = output_ids[:seq_len].tolist()
    if k is None and generated[: len(ids)] == ids.tolist():
        generated = generated[len(ids):]  # tensorrt_llm output_ids include the prompt (exclude_input_in_output off)
    metrics = {name: float(np.asarray(out[name]).reshape(-1)[0]) for name in (*PERF_OUTPUTS, *extra) if name in out}
    return generated, metrics


class GrpcTransport:
    """`Transport` over tritonclient.grpc (streaming call for decoupled models, plain infer otherwise)."""

    def __init__(self, url: str, timeout_s: float = 5.0) -> None:
        try:
            import tritonclient.grpc as grpcclient
        except ImportError as exc:
            raise ToolNotFoundError("tritonclient[grpc] is not installed",
                                    hint="pip install 'tritonclient[grpc]'") from exc
        self._grpc = grpcclient
        self.url = url
        self.client = grpcclient.InferenceServerClient(url=url)
        try:
            live = self.client.is_server_live(client_timeout=timeout_s)
        except Exception as exc:  # noqa: BLE001 - any connection failure means unreachable
            raise ServerError(f"url={url!r}: no Triton server answers ({type(exc).__name__}: {exc})",
                              hint="start one with `trtspec serve REPO` or fix --url (gRPC port, e.g. 8001)") from None
        if not live:
            raise ServerError(f"url={url!r}: the Triton server is not live", hint="check the server log")
        self._decoupled: dict[str, bool] = {}

    def ready(self, model: str) -> bool:
        return bool(self.client.is_model_ready(model))

    def infer(self, model: str, inputs: Mapping[str, np.ndarray], outputs: Sequence[str]) -> dict[str, np.ndarray]:
        from tritonclient.utils import np_to_triton_dtype

        tensors = []
        for name, arr in inputs.items():
            t = self._grpc.InferInput(name, list(arr.shape), np_to_triton_dtype(arr.dtype))
            t.set_data_from_numpy(arr)
            tensors.append(t)
        requested = [self._grpc.InferRequestedOutput(n) for n in outputs]
        if not self._is_decoupled(model):
            result = self.client.infer(model, tensors, outputs=requested)
            return {n: result.as_numpy(n) for n in outputs if result.as_numpy(n) is not None}
        return self._stream_infer(model, tensors, requested, outputs)

    def model_parameters(self, model: str) -> dict[str, str]:
        """A model's config.pbtxt `parameters` as strings."""
        cfg = self.client.get_model_config(model, as_json=True).get("config", {})
        return {k: v.get("string_value", "") for k, v in cfg.get("parameters", {}).items()}

    def _is_decoupled(self, model: str) -> bool:
        if model not in self._decoupled:
            cfg = self.client.get_model_config(model, as_json=True).get("config", {})
            self._decoupled[model] = bool(cfg.get("model_transaction_policy", {}).get("decoupled"))
        return self._decoupled[model]

    def _stream_infer(self, model: str, tensors: list, requested: list, outputs: Sequence[str]) -> dict:
        import queue

        results: queue.Queue = queue.Queue()
        client = self._grpc.InferenceServerClient(url=self.url)  # a stream per call: requests may run concurrently
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        try:
            client.async_stream_infer(model, tensors, outputs=requested, enable_empty_final_response=True)
            merged: dict[str, np.ndarray] = {}
            while True:
                result, error = results.get(timeout=600)
                if error is not None:
                    raise ServerError(f"model {model!r} failed: {error}", hint="see the tritonserver log")
                for n in outputs:
                    arr = result.as_numpy(n)
                    if arr is not None:
                        merged[n] = arr  # the last response carries the full sequence and the final metrics
                params = result.get_response().parameters
                if "triton_final_response" in params and params["triton_final_response"].bool_param:
                    return merged
        finally:
            client.stop_stream()
            client.close()

    def close(self) -> None:
        self.client.close()


class TritonBackend:
    """Sweep cases against a running tritonserver (see the module docstring for how acceptance is counted)."""

    name = "triton"

    def __init__(self, transport: Transport | None = None, tokenizer: Any = None) -> None:
        self.transport = transport
        self.tokenizer = tokenizer
        self.url: str | None = None

    def preflight(self, spec: SweepSpec) -> None:
        self.url = spec.url
        if self.transport is None:
            self.transport = GrpcTransport(spec.url or "")
        models = {spec.served_model_name}
        if any(_uses_client_loop(spec, m) for m in spec.methods):
            models.add(spec.draft_model_name)
        for model in sorted(models):
            if not self.transport.ready(model):
                raise ServerError(f"model {model!r} is not ready on {spec.url}",
                                  hint="check `model_name`/`draft_model_name` against the served repository")
        served = _served_method(self.transport, spec.served_model_name)
        wrong = [m for m in spec.methods if m != "none" and served is not None and m != served]
        if wrong:
            raise ConfigError("methods", wrong[0], f"model {spec.served_model_name!r} on {spec.url} serves method "
                              f"{served!r} (a server-level setting); k and temperature vary per request",
                              hint=f"sweep --method {served}, or deploy a repository per method")
        if self.tokenizer is None:
            self.tokenizer = _load_tokenizer(spec.model)

    def calibrate(self, spec: SweepSpec, model_set: Any) -> None:
        return None  # forward costs are measured in-process only; the report says so

    def run_case(self, case: Case, suite: PromptSuite, spec: SweepSpec) -> dict[str, Any]:
        """Every prompt of the suite, `concurrency` requests in flight (one client thread each)."""
        from concurrent.futures import ThreadPoolExecutor

        prompts = [list(self.tokenizer.encode(p)) for p in suite.prompts]
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=case.concurrency) as pool:
            results = list(pool.map(lambda i: self._one_request(case, spec, prompts[i], case.seed + i),
                                    range(len(prompts))))
        wall = time.perf_counter() - start
        counts = AcceptanceStats()
        perf = [p for _, _, p in results if p is not None]
        for _, one, _ in results:
            counts.merge(one)
        output_tokens = sum(len(generated) for generated, _, _ in results)
        stats = counts.to_dict()
        if perf:
            accepted = sum(int(p["total_accepted_draft_tokens"]) for p in perf)
            drafted = sum(int(p["total_draft_tokens"]) for p in perf)
            # trtspec_engine reports num_drafts; for TensorRT-LLM, drafts (iterations) ~ draft tokens / k, since it
            # counts min(k, path length) draft tokens per step.
            drafts = sum(int(p.get("num_drafts", 0)) for p in perf) or (drafted / case.k if case.k else 0)
            stats.update(num_draft_tokens=drafted, num_accepted_tokens=accepted, num_drafts=round(drafts),
                         num_accepted_tokens_per_pos=None, acceptance_rate_per_pos=None,
                         acceptance_rate=accepted / drafted if drafted else 0.0,
                         mean_acceptance_length=1.0 + accepted / drafts if drafts else 1.0, source="perf_metrics")
        else:
            stats["source"] = "client_loop" if counts.num_drafts else "plain"
        return {"wall_time_s": wall, "num_requests": len(prompts), "output_tokens": output_tokens,
                "tokens_per_s": output_tokens / wall if wall > 0 else 0.0, "stats": stats}

    def _one_request(self, case: Case, spec: SweepSpec, prompt_ids: list[int],
                     seed: int) -> tuple[list[int], AcceptanceStats, dict[str, float] | None]:
        """(generated ids, client-loop counts, perf metrics or None) of one request."""
        assert self.transport is not None
        counts = AcceptanceStats()
        if spec.flavour == "tensorrtllm" and case.k == 0:
            out, seq_len = _trtllm_call(self.transport, spec.served_model_name, np.asarray(prompt_ids, dtype=np.int32),
                                        case.max_new_tokens, None, case.temperature, None, None)
            generated = out[len(prompt_ids):seq_len].tolist()
            counts.num_target_forwards = counts.num_emitted_tokens = len(generated)
            return generated, counts, None
        if case.k > 0 and _uses_client_loop(spec, case.method):
            generated, counts = draft_target_loop(
                self.transport, draft_model=spec.draft_model_name, target_model=spec.served_model_name,
                prompt_ids=prompt_ids, max_new_tokens=case.max_new_tokens, k=case.k, temperature=case.temperature)
            return generated, counts, None
        generated, perf = perf_metrics_request(
            self.transport, model=spec.served_model_name, prompt_ids=prompt_ids, max_new_tokens=case.max_new_tokens,
            k=case.k if spec.flavour == "torch" else None, temperature=case.temperature, seed=seed)
        return generated, counts, perf

    def info(self) -> dict[str, Any]:
        return {"name": self.name, "url": self.url}

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


def _served_method(transport: Transport, model: str) -> str | None:
    """The `method` parameter of a served trtspec_engine model (None when the transport or model does not say)."""
    params = getattr(transport, "model_parameters", None)
    return (params(model) or {}).get("method") if params else None


def _uses_client_loop(spec: SweepSpec, method: str) -> bool:
    """TensorRT-LLM draft-target needs the client-side loop; everything else reports perf metrics itself."""
    info = resolve(method)
    return spec.flavour == "tensorrtllm" and info.needs_draft_model and info.trtllm_build_mode == "draft_tokens_external"


def _load_tokenizer(model: str) -> Any:
    """The target's HF tokenizer, used exactly as the in-process engine uses it (special tokens added)."""
    from trtspec.models import resolve_model

    path = Path(resolve_model(model, field="model"))
    if not (path / "tokenizer.json").is_file() and not (path / "tokenizer_config.json").is_file():
        raise ServerError(f"model={model!r}: no tokenizer in {path} to tokenize prompts for the server",
                          hint="pass the target's local HF directory as --model (the one the repository serves)")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)
