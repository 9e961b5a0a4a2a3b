"""Sweep via `triton`: measure acceptance against a served model repository over gRPC.

Where a case goes, chosen by the method table (never by model names):
- the BLS (TensorRT-LLM draft-target, `draft_tokens_external`: flavour tensorrtllm, a method with a draft model): one
  request per prompt to the repository's BLS model (`bls_model_name`, default tensorrt_llm_bls), which runs the
  draft-target loop server-side (draft model for k tokens, target verifies them as `draft_input_ids`, repeated).
  Text in: `text_input`, `max_tokens`, `num_draft_tokens` = k, the sampling inputs under the BLS's names (`temperature`,
  `top_k`, `top_p`, `seed`), `return_perf_metrics`, `exclude_input_in_output`; the BLS's `preprocessing` gives the
  end id. Acceptance is its perf outputs, counted over every iteration: `total_draft_tokens`,
  `total_accepted_draft_tokens`, and `num_drafts` where its config declares that output; otherwise drafts are
  estimated as draft tokens / k (a last draft cut short by max_tokens makes the estimate low). The BLS returns text
  only, so a request's output tokens are the sweep tokenizer's encoding of `text_output` (no special tokens added).
  Such a sweep's k = 0 baseline goes through the BLS too (it forwards to the target without drafting), so both pay the
  same text path. A BLS without acceptance outputs (TensorRT-LLM 0.18.0's) or without a draft model is refused in
  preflight.
- perf metrics (the torch flavour's `tensorrt_llm`, and TensorRT-LLM tree/lookahead methods): one request per
  prompt with `return_perf_metrics`, and on the torch flavour `num_draft_tokens` = k (trtspec's extension input);
  read `total_accepted_draft_tokens`, `total_draft_tokens` (and `acceptance_rate`, and the torch flavour's
  `num_drafts`).
- plain (k = 0 on the TensorRT-LLM flavour otherwise): token ids to `tensorrt_llm`.
Per-position acceptance is not available on any of these paths.

Requests go through trtspec.triton.client.TritonClient at its tensor level (`infer(model, inputs, outputs)`), with
the spec's `timeout_s`; the functions here need only the small `Client` protocol, so a test double can stand in.
Every request states its sampling the way TensorRT-LLM reads it: top-k 0 and top-p 1.0 (the full distribution at
`temperature`; unset, both would mean greedy), and an end id = the tokenizer's end token (unset, generation would run
to the length limit). TensorRT-LLM leaves an end_id it sampled out of the output.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from trtspec.contracts.metrics import AcceptanceStats, acceptance_rate, mean_acceptance_length  # data only, no torch
from trtspec.errors import ConfigError, ServerError
from trtspec.methods import BASELINE, resolve
from trtspec.sweep.grid import Case, SweepSpec
from trtspec.sweep.prompts import PromptSuite
from trtspec.triton.client import PERF_OUTPUTS, TRTLLM_PERF_OUTPUTS, perf_values  # tritonclient loads lazily


class Client(Protocol):
    """What the sweep needs of trtspec.triton.client.TritonClient (which a test double may replace)."""

    def infer(self, model: str, inputs: Mapping[str, np.ndarray], outputs: Sequence[str]) -> dict[str, np.ndarray]: ...

    def ready(self, model: str) -> bool: ...

    def model_config(self, model: str) -> dict[str, Any]: ...

    def close(self) -> None: ...


def bls_request(client: Client, *, model: str, prompt: str, max_new_tokens: int, k: int, temperature: float,
                seed: int, outputs: Sequence[str] = ()) -> tuple[str, dict[str, float]]:
    """One request to a BLS model (text in, text out); returns (text_output, the perf-metric values it reported).

    With k > 0 the BLS runs draft-target and `outputs` names the acceptance outputs to ask for (its perf metrics
    count every iteration of its loop); with k = 0 it forwards to the target and nothing is counted.
    """
    inputs = {
        "text_input": np.array([[prompt.encode("utf-8")]], dtype=object),  # [1, 1] BYTES
        "max_tokens": np.array([[max_new_tokens]], dtype=np.int32),
        **_sampling_inputs(temperature, "top_k", "top_p"),
        "seed": np.array([[seed]], dtype=np.uint64),
        "exclude_input_in_output": np.array([[True]], dtype=bool),
    }
    if k > 0:
        inputs["num_draft_tokens"] = np.array([[k]], dtype=np.int32)
        inputs["return_perf_metrics"] = np.array([[True]], dtype=bool)
    out = client.infer(model, inputs, ["text_output", *(outputs if k > 0 else ())])
    raw = np.asarray(out["text_output"]).reshape(-1)[0]  # 1-D, one string per beam
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else str(raw)
    return text, perf_values(out) if k > 0 else {}


def plain_request(client: Client, *, model: str, prompt_ids: Sequence[int], max_new_tokens: int, temperature: float,
                  seed: int, end_id: int | None = None) -> list[int]:
    """One `tensorrt_llm` request without drafts (the TensorRT-LLM flavour's k = 0); returns the generated ids."""
    ids = np.asarray(prompt_ids, dtype=np.int32)
    inputs: dict[str, np.ndarray] = {
        "input_ids": ids[None, :],  # [1, prompt_len]
        "input_lengths": np.array([[len(ids)]], dtype=np.int32),
        "request_output_len": np.array([[max_new_tokens]], dtype=np.int32),
        "beam_width": np.array([[1]], dtype=np.int32),
        **_sampling_inputs(temperature),
        "seed": np.array([[seed]], dtype=np.uint64),
    }
    if end_id is not None:
        inputs["end_id"] = np.array([[end_id]], dtype=np.int32)
    out = client.infer(model, inputs, ["output_ids", "sequence_length"])
    output_ids = np.asarray(out["output_ids"]).reshape(-1)  # [1, beam 1, seq]: the prompt, then the generated ids
    seq_len = int(np.asarray(out["sequence_length"]).reshape(-1)[0])
    return output_ids[len(ids):seq_len].tolist()


def _sampling_inputs(temperature: float, top_k: str = "runtime_top_k",
                     top_p: str = "runtime_top_p") -> dict[str, np.ndarray]:
    """Sampling at `temperature` over the whole distribution, as TensorRT-LLM reads it (see the module docstring),
    under the names of the model asked (tensorrt_llm's runtime_top_k/p; the BLS's top_k/p)."""
    return {"temperature": np.array([[temperature]], dtype=np.float32),
            top_k: np.array([[0]], dtype=np.int32), top_p: np.array([[1.0]], dtype=np.float32)}


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
    """Sweep cases against a running tritonserver (see the module docstring for where a case goes and how its
    acceptance is counted)."""

    name = "triton"

    def __init__(self, client: Client | None = None, tokenizer: Any = None) -> None:
        self.client = client
        self.tokenizer = tokenizer
        self.url: str | None = None
        self.bls_outputs: list[str] = []  # the acceptance outputs the BLS declares (with num_drafts when it does)

    def preflight(self, spec: SweepSpec) -> None:
        self.url = spec.url
        models = sorted({self._model(spec, case) for case in spec.cases()})
        if self.client is None:
            from trtspec.triton.client import TritonClient

            self.client = TritonClient(spec.url or "", model=models[0], timeout_s=spec.timeout_s)
        for model in models:
            if not self.client.ready(model):
                raise ServerError(f"model {model!r} is not ready on {spec.url}",
                                  hint="check `model_name`/`bls_model_name` against the served repository")
        if spec.served_model_name in models:
            served = _parameters(self.client.model_config(spec.served_model_name)).get("method")  # torch flavour's
            wrong = [m for m in spec.methods if m != BASELINE and served is not None and m != served]
            if wrong:
                raise ConfigError("methods", wrong[0], f"model {spec.served_model_name!r} on {spec.url} serves method "
                                  f"{served!r} (a server-level setting); k and temperature vary per request",
                                  hint=f"sweep --method {served}, or deploy a repository per method")
        if spec.bls_model_name in models:
            self.bls_outputs = _bls_acceptance_outputs(self.client.model_config(spec.bls_model_name), spec)
        if self.tokenizer is None:
            self.tokenizer = _load_tokenizer(spec.model)

    def calibrate(self, spec: SweepSpec, model_set: Any) -> None:
        return None  # forward costs are measured in-process only; the report says so

    def run_case(self, case: Case, suite: PromptSuite, spec: SweepSpec) -> dict[str, Any]:
        """Every prompt of the suite, `concurrency` requests in flight (one client thread each)."""
        from concurrent.futures import ThreadPoolExecutor

        prompts = list(suite.prompts)
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=case.concurrency) as pool:
            results = list(pool.map(lambda i: self._one_request(case, spec, prompts[i], case.seed + i),
                                    range(len(prompts))))
        wall = time.perf_counter() - start
        counts = AcceptanceStats()
        perf = [p for _, _, p in results if p is not None]
        for _, one, _ in results:
            counts.merge(one)
        output_tokens = sum(tokens for tokens, _, _ in results)
        stats = counts.to_dict()
        if perf:
            accepted = sum(int(p["total_accepted_draft_tokens"]) for p in perf)
            drafted = sum(int(p["total_draft_tokens"]) for p in perf)
            # num_drafts where the model reports it (the torch flavour's engine, a BLS that declares it); otherwise
            # drafts (verifying iterations) ~ draft tokens / k, since each counts min(k, room left) draft tokens
            exact = all("num_drafts" in p for p in perf)
            drafts = sum(int(p["num_drafts"]) for p in perf) if exact else drafted / case.k if case.k else 0
            stats.update(num_draft_tokens=drafted, num_accepted_tokens=accepted, num_drafts=round(drafts),
                         num_drafts_estimated=not exact, num_accepted_tokens_per_pos=None,
                         acceptance_rate_per_pos=None, acceptance_rate=acceptance_rate(drafted, accepted),
                         mean_acceptance_length=mean_acceptance_length(drafts, accepted),
                         source="bls" if self._model(spec, case) == spec.bls_model_name else "perf_metrics")
        else:
            stats["source"] = "plain"
        return {"wall_time_s": wall, "num_requests": len(prompts), "output_tokens": output_tokens,
                "tokens_per_s": output_tokens / wall if wall > 0 else 0.0, "stats": stats}

    def _one_request(self, case: Case, spec: SweepSpec, prompt: str,
                     seed: int) -> tuple[int, AcceptanceStats, dict[str, float] | None]:
        """(output tokens, plain-decoding counts, perf metrics or None) of one request."""
        if self.client is None:
            raise ServerError("the Triton sweep backend has no client", hint="call preflight() before run_case()")
        counts = AcceptanceStats()
        model = self._model(spec, case)
        if model == spec.bls_model_name:
            text, perf = bls_request(self.client, model=model, prompt=prompt, max_new_tokens=case.max_new_tokens,
                                     k=case.k, temperature=case.temperature, seed=seed, outputs=self.bls_outputs)
            tokens = len(self.tokenizer.encode(text, add_special_tokens=False))
            if case.k > 0:
                return tokens, counts, perf
            counts.num_target_forwards = counts.num_emitted_tokens = tokens
            return tokens, counts, None
        prompt_ids = list(self.tokenizer.encode(prompt))
        end_id = getattr(self.tokenizer, "eos_token_id", None)
        if case.k == 0 and spec.flavour == "tensorrtllm":
            generated = plain_request(self.client, model=model, prompt_ids=prompt_ids,
                                      max_new_tokens=case.max_new_tokens, temperature=case.temperature, seed=seed,
                                      end_id=end_id)
            counts.num_target_forwards = counts.num_emitted_tokens = len(generated)
            return len(generated), counts, None
        generated, perf = perf_metrics_request(
            self.client, model=model, prompt_ids=prompt_ids, max_new_tokens=case.max_new_tokens,
            k=case.k if spec.flavour == "torch" else None, temperature=case.temperature, seed=seed, end_id=end_id)
        return len(generated), counts, perf

    def _model(self, spec: SweepSpec, case: Case) -> str:
        """The served model `case` goes to: the BLS for TensorRT-LLM draft-target and, in a sweep that has it, the
        k = 0 baseline; `model_name` otherwise."""
        bls = _uses_bls(spec, case.method) if case.k else any(_uses_bls(spec, m) for m in spec.methods)
        return spec.bls_model_name if bls else spec.served_model_name

    def info(self) -> dict[str, Any]:
        return {"name": self.name, "url": self.url}

    def close(self) -> None:
        if self.client is not None:
            self.client.close()


def _uses_bls(spec: SweepSpec, method: str) -> bool:
    """TensorRT-LLM draft-target runs in the BLS model; everything else reports perf metrics itself."""
    info = resolve(method)
    return spec.flavour == "tensorrtllm" and info.needs_draft_model and info.trtllm_build_mode == "draft_tokens_external"


def _parameters(config: Mapping[str, Any]) -> dict[str, str]:
    """A model configuration's (config.pbtxt as JSON) `parameters`, as strings."""
    return {key: value.get("string_value", "") for key, value in config.get("parameters", {}).items()}


def _bls_acceptance_outputs(config: Mapping[str, Any], spec: SweepSpec) -> list[str]:
    """The acceptance outputs to ask the BLS for (num_drafts where it declares it), or why it cannot serve the sweep:
    it has no draft model, or its release has no acceptance outputs (TensorRT-LLM 0.18.0)."""
    model = spec.bls_model_name
    if not _parameters(config).get("tensorrt_llm_draft_model_name"):
        raise ServerError(f"model {model!r} on {spec.url} has no draft model (its tensorrt_llm_draft_model_name "
                          "parameter is not set), so it cannot run draft-target",
                          hint="deploy a draft-target build (`trtspec deploy --build out/build/<draft-target build>`), "
                               "or sweep another method")
    inputs = {tensor["name"] for tensor in config.get("input", [])}
    outputs = {tensor["name"] for tensor in config.get("output", [])}
    missing = [n for n in ("num_draft_tokens", "return_perf_metrics") if n not in inputs]
    missing += [n for n in TRTLLM_PERF_OUTPUTS if n not in outputs]
    if missing:
        raise ServerError(f"model {model!r} on {spec.url} cannot report draft-target acceptance: its config declares "
                          f"no {', '.join(missing)} (TensorRT-LLM 0.18.0's BLS has no acceptance outputs)",
                          hint="deploy the repository for TensorRT-LLM 0.19.0 or later (`trtspec deploy "
                               "--trtllm-version 1.2.1 ...`), or sweep via engine")
    return [*TRTLLM_PERF_OUTPUTS, *(["num_drafts"] if "num_drafts" in outputs else [])]


def _load_tokenizer(model: str) -> Any:
    """The target's HF tokenizer, used exactly as the in-process engine uses it (special tokens added)."""
    from trtspec.models import load_tokenizer, resolve_model

    path = Path(resolve_model(model, field="model"))
    if not (path / "tokenizer.json").is_file() and not (path / "tokenizer_config.json").is_file():
        raise ServerError(f"model={model!r}: no tokenizer in {path} to tokenize prompts for the server",
                          hint="pass the target's local HF directory as --model (the one the repository serves)")
    return load_tokenizer(path)
