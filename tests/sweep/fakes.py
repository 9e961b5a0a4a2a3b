"""Test doubles for the sweep runner and the Triton backend (tests only; never imported by the package).

`FakeSweepBackend` returns synthetic metrics from a geometric acceptance model and synthetic costs, so runner and
report tests need no model. `FakeBLSClient` plays the TensorRT-LLM flavour's BLS model (text in, text out, its
acceptance totals), so the sweep's reading of it can be checked without a server.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from trtspec.contracts import costmodel

ALPHA = {"draft_target": 0.7, "ngram": 0.4, "none": 0.0}


def synthetic_costs(batch: int, max_k: int = 8) -> costmodel.StepCosts:
    """A made-up machine: a target forward costs 10 ms * (1 + 0.05 b) * (1 + 0.08 (n - 1)); a draft one 2 ms."""
    base = 0.010 * (1 + 0.05 * batch)
    return costmodel.StepCosts(batch, {n: base * (1 + 0.08 * (n - 1)) for n in range(1, max_k + 2)},
                               0.002 * (1 + 0.02 * batch))


def calibration_fields(batch_sizes: Sequence[int], max_k: int = 8) -> dict[str, Any]:
    out: dict[str, Any] = {"batch_sizes": list(batch_sizes), "target_s": {}, "draft_s": {}}
    for b in batch_sizes:
        c = synthetic_costs(b, max_k)
        out["target_s"][str(b)] = {str(n): t for n, t in c.target_s.items()}
        out["draft_s"][str(b)] = c.draft_s
    return out


def synthetic_metrics(method: str, k: int, temperature: float, concurrency: int, num_requests: int = 4,
                      max_new_tokens: int = 64, noise: float = 0.0) -> dict[str, Any]:
    """Metrics a case would report if the synthetic machine ran it; predicted == measured when noise == 0."""
    alpha = ALPHA[method] * (0.9 if temperature > 0 else 1.0)
    per_pos = [alpha ** i for i in range(1, k + 1)]
    tokens_per_step = 1.0 + sum(per_pos)
    costs = synthetic_costs(concurrency)
    overhead = 0.001
    draft = k * costs.draft_s if method == "draft_target" else 0.0003 * (k > 0)
    step = (draft + costs.target(k + 1) + overhead) * (1 + noise * (k > 0))  # noise: an unmodelled spec cost
    steps_per_request = max_new_tokens / tokens_per_step
    num_steps = max(1, round(steps_per_request * num_requests / concurrency))
    wall = num_steps * step
    drafts = min(round(steps_per_request * num_requests), num_steps * concurrency) if k else 0  # once per row and step
    return {
        "wall_time_s": wall, "num_requests": num_requests, "output_tokens": max_new_tokens * num_requests,
        "tokens_per_s": max_new_tokens * num_requests / wall, "num_steps": num_steps,
        "stats": {"num_drafts": drafts, "num_draft_tokens": drafts * k,
                  "num_accepted_tokens": round(drafts * (tokens_per_step - 1)),
                  "num_accepted_tokens_per_pos": [round(drafts * r) for r in per_pos],
                  "mean_acceptance_length": tokens_per_step,
                  "acceptance_rate": (tokens_per_step - 1) / k if k else 0.0,
                  "num_target_forwards": num_steps * concurrency,
                  "draft_time_s": draft * num_steps * concurrency if method != "draft_target" else 0.0,
                  "overhead_time_s": overhead * num_steps * concurrency},
    }


class FakeSweepBackend:
    """A Backend test double: synthetic numbers, optional per-case delay, failures and an interruption."""

    name = "fake"

    def __init__(self, *, delay_s: float = 0.0, fail_methods: Sequence[str] = (), interrupt_after: int | None = None,
                 noise: float = 0.0) -> None:
        self.delay_s, self.fail_methods, self.interrupt_after, self.noise = delay_s, fail_methods, interrupt_after, noise
        self.ran: list[str] = []
        self.calibrated: list[Any] = []

    def preflight(self, spec: Any) -> None:
        pass

    def calibrate(self, spec: Any, model_set: Any) -> dict[str, Any]:
        self.calibrated.append(model_set)
        return calibration_fields(spec.calibration_batch_sizes)

    def run_case(self, case: Any, suite: Any, spec: Any) -> dict[str, Any]:
        if self.interrupt_after is not None and len(self.ran) >= self.interrupt_after:
            raise KeyboardInterrupt
        time.sleep(self.delay_s)
        self.ran.append(case.case_id)
        if case.method in self.fail_methods:
            raise RuntimeError(f"synthetic failure for {case.method}")
        return synthetic_metrics(case.method, case.k, case.temperature, case.concurrency,
                                 num_requests=len(suite.prompts), max_new_tokens=case.max_new_tokens, noise=self.noise)

    def info(self) -> dict[str, Any]:
        return {"name": self.name, "device": "synthetic"}

    def close(self) -> None:
        pass


# ---------------------------------------------------------------------------------------------------------------
# Triton client double (the part of TritonClient the sweep uses)

BLS_INPUTS = ("text_input", "max_tokens", "exclude_input_in_output", "top_k", "top_p", "temperature", "seed",
              "num_draft_tokens", "return_perf_metrics")
ACCEPTANCE_OUTPUTS = ("acceptance_rate", "total_accepted_draft_tokens", "total_draft_tokens")


class FakeBLSClient:
    """Plays the TensorRT-LLM flavour's `tensorrt_llm_bls` for the sweep: text in, `max_tokens` letters out; with
    num_draft_tokens k > 0 and return_perf_metrics it reports `per_request` = (drafts, draft tokens, accepted) as its
    totals. `num_drafts` is declared (and sent) only with `declares_num_drafts`; `acceptance=False` declares no
    acceptance inputs or outputs (TensorRT-LLM 0.18.0's BLS); `draft_model=None` sets no draft model. Like Triton, it
    refuses an input or an asked output its config does not declare. Records every call."""

    def __init__(self, *, per_request: tuple[int, int, int] = (4, 14, 8), declares_num_drafts: bool = False,
                 acceptance: bool = True, draft_model: str | None = "tensorrt_llm_draft",
                 name: str = "tensorrt_llm_bls") -> None:
        self.per_request, self.name = per_request, name
        inputs = [n for n in BLS_INPUTS if acceptance or n != "return_perf_metrics"]
        outputs = ["text_output", *(ACCEPTANCE_OUTPUTS if acceptance else ()),
                   *(["num_drafts"] if declares_num_drafts else [])]
        self.config = {"name": name, "input": [{"name": n} for n in inputs], "output": [{"name": n} for n in outputs],
                       "parameters": {"tensorrt_llm_model_name": {"string_value": "tensorrt_llm"}}}
        if draft_model is not None:
            self.config["parameters"]["tensorrt_llm_draft_model_name"] = {"string_value": draft_model}
        self.calls: list[tuple[dict[str, np.ndarray], list[str]]] = []

    def ready(self, model: str) -> bool:
        return model == self.name

    def model_config(self, model: str) -> dict[str, Any]:
        assert model == self.name
        return self.config

    def infer(self, model: str, inputs: Mapping[str, np.ndarray], outputs: Sequence[str]) -> dict[str, np.ndarray]:
        assert model == self.name
        declared_in = {t["name"] for t in self.config["input"]}
        declared_out = {t["name"] for t in self.config["output"]}
        assert set(inputs) <= declared_in and set(outputs) <= declared_out, (set(inputs), list(outputs))
        self.calls.append((dict(inputs), list(outputs)))
        n = int(inputs["max_tokens"][0, 0])
        sent = {"text_output": np.array(["ab" * n], dtype=object)}  # 1-D: one string per beam
        k = int(inputs["num_draft_tokens"][0, 0]) if "num_draft_tokens" in inputs else 0
        if k and bool(inputs["return_perf_metrics"][0, 0]):
            drafts, drafted, accepted = self.per_request
            sent |= {"acceptance_rate": np.array([[accepted / drafted]], dtype=np.float32),
                     "total_accepted_draft_tokens": np.array([[accepted]], dtype=np.int32),
                     "total_draft_tokens": np.array([[drafted]], dtype=np.int32),
                     "num_drafts": np.array([[drafts]], dtype=np.int32)}
        return {name: value for name, value in sent.items() if name in outputs}

    def close(self) -> None:
        pass
