"""Sweep via `triton`: measure acceptance against a served model repository over gRPC.

Two ways to count acceptance, chosen by the method table (never by model names):
- perf metrics (the torch flavour's `tensorrt_llm`, and TensorRT-LLM tree/lookahead methods): one request per
  prompt with `return_perf_metrics`, and on the torch flavour `num_draft_tokens` = k (trtspec's extension input);
  read `total_accepted_draft_tokens`, `total_draft_tokens` (and `acceptance_rate`, and the torch flavour's
  `num_drafts`). Per-position acceptance is not available on this path.
- client-side draft-target loop (TensorRT-LLM `draft_tokens_external`, as in tensorrtllm_backend's
  `e2e_grpc_speculative_decoding_client.py`): per step, ask the draft model for k tokens, send them to the target as
  `draft_input_ids` with `request_output_len = k + 1`, and count accepted = new target tokens - 1. Every step is
  counted, unlike the BLS model whose perf metrics cover only its last target call.

Requests go through trtspec.triton.client.TritonClient at its tensor level (`infer(model, inputs, outputs)`), with
the spec's `timeout_s`; the functions here need only the small `Client` protocol, so a test double can stand in.
Every request states its sampling the way TensorRT-LLM reads it: `runtime_top_k` 0 and `runtime_top_p` 1.0 (the full
distribution at `temperature`; unset, both would mean greedy), and `end_id` = the tokenizer's end token (unset,
generation would run to the length limit). TensorRT-LLM leaves an end_id it sampled out of the output.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from trtspec.contracts.metrics import AcceptanceStats, acceptance_rate, mean_acceptance_length  # data only, no torch
from trtspec.errors import ConfigError, ServerError
from trtspec.methods import resolve
from trtspec.sweep.grid import Case, SweepSpec
from trtspec.sweep.prompts import PromptSuite
from trtspec.triton.client import PERF_OUTPUTS, TRTLLM_PERF_OUTPUTS, perf_values  # tritonclient loads lazily


class Client(Protocol):
    """What the sweep needs of trtspec.triton.client.TritonClient (which a test double may replace)."""

    def infer(self, model: str, inputs: Mapping[str, np.ndarray], outputs: Sequence[str]) -> dict[str, np.ndarray]: ...

    def ready(self, model: str) -> bool: ...

    def model_parameters(self, model: str) -> dict[str, str]: ...

    def close(self) -> None: ...


def draft_target_loop(client: Client, *, draft_model: str, target_model: str, prompt_ids: Sequence[int],
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
            draft_out, draft_len = _trtllm_call(client, draft_model, ids, num_draft, None, temperature, end_id,
                                                pad_id)
            draft_tokens = draft_out[len(ids):draft_len]
        # 2. target: verify the draft and add one token (request_output_len = draft + 1)
        target_out, target_len = _trtllm_call(client, target_model, ids, len(draft_tokens) + 1,
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


def _trtllm_call(client: Client, model: str, ids: np.ndarray, output_len: int, draft: np.ndarray | None,
                 temperature: float, end_id: int | None, pad_id: int | None) -> tuple[np.ndarray, int]:
    """One `tensorrt_llm`-style request for batch 1; returns (output_ids [seq], sequence_length)."""
    inputs: dict[str, np.ndarray] = {
        "input_ids": ids[None, :].astype(np.int32),  # [1, len]
        "input_lengths": np.array([[len(ids)]], dtype=np.int32),
        "request_output_len": np.array([[output_len]], dtype=np.int32),
        "beam_width": np.array([[1]], dtype=np.int32),
        **_sampling_inputs(temperature),
    }
    if draft is not None:
        inputs["draft_input_ids"] = draft[None, :].astype(np.int32)  # [1, num_draft]
    if end_id is not None:
        inputs["end_id"] = np.array([[end_id]], dtype=np.int32)
    if pad_id is not None:
        inputs["pad_id"] = np.array([[pad_id]], dtype=np.int32)
    out = client.infer(model, inputs, ["output_ids", "sequence_length"])
    output_ids = np.asarray(out["output_ids"]).reshape(-1).astype(np.int64)  # [1, 1, seq] -> [seq] (beam 0)
    seq_len = int(np.asarray(out["sequence_length"]).reshape(-1)[0])
    return output_ids, seq_len


def _sampling_inputs(temperature: float) -> dict[str, np.ndarray]:
    """Sampling at `temperature` over the whole distribution, as TensorRT-LLM reads it (see the module docstring)."""
    return {"temperature": np.array([[temperature]], dtype=np.float32),
            "runtime_top_k": np.array([[0]], dtype=np.int32), "runtime_top_p": np.array([[1.0]], dtype=np.float32)}


def perf_metrics_request(client: Client, *, model: str, prompt_ids: Sequence[int], max_new_tokens: int,
                         k: int | None, temperature: float, seed: int,
                         end_id: int | None = None) -> tuple[list[int], dict[str, float]]:
    """One request with `return_perf_metrics`; returns (generated ids, the perf-metric values it reported).

    `k` is sent as `num_draft_tokens` (the torch flavour's per-request k, an extension input); None for TensorRT-LLM
    models, whose tree/lookahead draft size is fixed by the server configuration.
    """
    ids = np.asarray(prompt_ids, dtype=np.int32)
    inputs = {
        "input_ids": ids[None, :],  # [1, prompt_len]
        "input_lengths": np.array([[len(ids)]], dtype=np.int32),
        "request_output_len": np.array([[max_new_tokens]], dtype=np.int32),
        **_sampling_inputs(temperature),
        "seed": np.array([[seed]], dtype=np.uint64),
        "return_perf_metrics": np.array([[True]], dtype=bool),
        "exclude_input_in_output": np.array([[True]], dtype=bool),
    }
    if end_id is not None:
        inputs["end_id"] = np.array([[end_id]], dtype=np.int32)
    perf_names = TRTLLM_PERF_OUTPUTS
    if k is not None:  # the torch flavour: k per request, num_drafts reported
        inputs["num_draft_tokens"] = np.array([[k]], dtype=np.int32)
        perf_names = PERF_OUTPUTS
    out = client.infer(model, inputs, ["output_ids", "sequence_length", *perf_names])
    output_ids = np.asarray(out["output_ids"]).reshape(-1)  # [1, beam 1, len]: the generated tokens
    seq_len = int(np.asarray(out["sequence_length"]).reshape(-1)[0])
    return output_ids[:seq_len].tolist(), perf_values(out)


class TritonBackend:
    """Sweep cases against a running tritonserver (see the module docstring for how acceptance is counted)."""

    name = "triton"

    def __init__(self, client: Client | None = None, tokenizer: Any = None) -> None:
        self.client = client
        self.tokenizer = tokenizer
        self.url: str | None = None

    def preflight(self, spec: SweepSpec) -> None:
        self.url = spec.url
        if self.client is None:
            from trtspec.triton.client import TritonClient

            self.client = TritonClient(spec.url or "", model=spec.served_model_name, timeout_s=spec.timeout_s)
        models = {spec.served_model_name}
        if any(_uses_client_loop(spec, m) for m in spec.methods):
            models.add(spec.draft_model_name)
        for model in sorted(models):
            if not self.client.ready(model):
                raise ServerError(f"model {model!r} is not ready on {spec.url}",
                                  hint="check `model_name`/`draft_model_name` against the served repository")
        served = self.client.model_parameters(spec.served_model_name).get("method")  # the torch flavour's says
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
            # the torch flavour reports num_drafts; for TensorRT-LLM, drafts (iterations) ~ draft tokens / k, since it
            # counts min(k, path length) draft tokens per step.
            drafts = sum(int(p.get("num_drafts", 0)) for p in perf) or (drafted / case.k if case.k else 0)
            stats.update(num_draft_tokens=drafted, num_accepted_tokens=accepted, num_drafts=round(drafts),
                         num_accepted_tokens_per_pos=None, acceptance_rate_per_pos=None,
                         acceptance_rate=acceptance_rate(drafted, accepted),
                         mean_acceptance_length=mean_acceptance_length(drafts, accepted), source="perf_metrics")
        else:
            stats["source"] = "client_loop" if counts.num_drafts else "plain"
        return {"wall_time_s": wall, "num_requests": len(prompts), "output_tokens": output_tokens,
                "tokens_per_s": output_tokens / wall if wall > 0 else 0.0, "stats": stats}

    def _one_request(self, case: Case, spec: SweepSpec, prompt_ids: list[int],
                     seed: int) -> tuple[list[int], AcceptanceStats, dict[str, float] | None]:
        """(generated ids, client-loop counts, perf metrics or None) of one request."""
        if self.client is None:
            raise ServerError("the Triton sweep backend has no client", hint="call preflight() before run_case()")
        counts = AcceptanceStats()
        end_id = getattr(self.tokenizer, "eos_token_id", None)
        if spec.flavour == "tensorrtllm" and case.k == 0:
            out, seq_len = _trtllm_call(self.client, spec.served_model_name, np.asarray(prompt_ids, dtype=np.int32),
                                        case.max_new_tokens, None, case.temperature, end_id, None)
            generated = out[len(prompt_ids):seq_len].tolist()
            counts.num_target_forwards = counts.num_emitted_tokens = len(generated)
            return generated, counts, None
        if case.k > 0 and _uses_client_loop(spec, case.method):
            generated, counts = draft_target_loop(
                self.client, draft_model=spec.draft_model_name, target_model=spec.served_model_name,
                prompt_ids=prompt_ids, max_new_tokens=case.max_new_tokens, k=case.k, temperature=case.temperature,
                end_id=end_id)
            return generated, counts, None
        generated, perf = perf_metrics_request(
            self.client, model=spec.served_model_name, prompt_ids=prompt_ids, max_new_tokens=case.max_new_tokens,
            k=case.k if spec.flavour == "torch" else None, temperature=case.temperature, seed=seed, end_id=end_id)
        return generated, counts, perf

    def info(self) -> dict[str, Any]:
        return {"name": self.name, "url": self.url}

    def close(self) -> None:
        if self.client is not None:
            self.client.close()


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
