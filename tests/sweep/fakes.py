"""Test doubles for the sweep runner and the Triton backend (tests only; never imported by the package).

`FakeSweepBackend` returns synthetic metrics from a geometric acceptance model and synthetic costs, so runner and
report tests need no model. `FakeTritonClient` plays a draft and a target `tensorrt_llm` model over a toy
vocabulary with deterministic greedy "models", so the client-side draft-target loop can be checked exactly.
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
    drafts = round(steps_per_request * num_requests) if k else 0
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


def toy_target_next(prefix: Sequence[int]) -> int:
    """A deterministic greedy 'target' over vocab 50."""
    return (prefix[-1] * 7 + len(prefix)) % 50


def toy_draft_next(prefix: Sequence[int]) -> int:
    """A 'draft' that agrees with the target except when the prefix length is a multiple of 3."""
    t = toy_target_next(prefix)
    return t if len(prefix) % 3 else (t + 1) % 50


class FakeTritonClient:
    """Plays `tensorrt_llm`-style draft and target models: greedy, output_ids include the prompt."""

    def __init__(self, draft_model: str = "tensorrt_llm_draft", target_model: str = "tensorrt_llm") -> None:
        self.models = {draft_model: toy_draft_next, target_model: toy_target_next}
        self.calls: list[tuple[str, dict[str, np.ndarray]]] = []

    def ready(self, model: str) -> bool:
        return model in self.models

    def model_parameters(self, model: str) -> dict[str, str]:
        return {}  # tensorrt_llm models name no method

    def infer(self, model: str, inputs: Mapping[str, np.ndarray], outputs: Sequence[str]) -> dict[str, np.ndarray]:
        self.calls.append((model, dict(inputs)))
        ids = inputs["input_ids"][0].tolist()
        assert inputs["input_lengths"][0, 0] == len(ids)
        out_len = int(inputs["request_output_len"][0, 0])
        seq = list(ids)
        if "draft_input_ids" in inputs:
            # target with external drafts: accept the longest matching prefix, then add one target token
            for tok in inputs["draft_input_ids"][0].tolist():
                want = self.models[model](seq)
                seq.append(want)
                if want != tok:
                    break
            else:
                seq.append(self.models[model](seq))
            assert len(seq) - len(ids) <= out_len
        else:
            for _ in range(out_len):
                seq.append(self.models[model](seq))
        arr = np.array(seq, dtype=np.int32)[None, None, :]  # [batch, beam, seq]
        return {"output_ids": arr, "sequence_length": np.array([[len(seq)]], dtype=np.int32)}

    def close(self) -> None:
        pass
