"""The `verify` section of docs/benchmarks.md (issue 42, item 2): the host cost of an engine step's phase 4 (logits
processing + verification) with the batched verifier over the step's ragged batch, beside the same verifier called
once per request (what a per-request loop costs), on the same captured steps.

Steps are captured from real engine runs (draft_target at k on the embedded pair, held-out prompts, every request
decoding: one pending token each) at each batch size and temperature; then each captured step is verified both ways,
interleaved, timed with the thread's CPU clock (steadier than wall time on a shared machine). The generators advance
as they would in a run; the timing does not depend on the tokens drawn. No torch at import.
"""

from __future__ import annotations

import itertools
import statistics
import time
from dataclasses import dataclass
from typing import Any

from benchlib.benchmarks import MIXED, Section, _machine


@dataclass(frozen=True)
class VerifyBench:
    """What the section runs (scripts/bench.py flags)."""

    model: str = "tiny"
    draft: str = "tiny-draft"
    medusa: str = "tiny-medusa"
    cases: tuple[tuple[str, int], ...] = (("draft_target", 4), ("medusa", 8))  # (method, k): chains, then trees
    batches: tuple[int, ...] = (1, 4, 16)
    temperatures: tuple[float, ...] = (0.0, 1.0)
    prompt_tokens: int = 64
    new_tokens: int = 16
    steps: int = 4  # captured decode steps per (temperature, batch)
    rounds: int = 30  # passes over the captured steps, both ways each
    threads: int = 1


Measured = dict[tuple[str, int, float, int], tuple[list[float], list[float]]]  # (method, k, T, batch) -> seconds


def measure(bench: VerifyBench) -> Measured:
    """CPU seconds of phase 4 per step, one entry per (round, captured step): per-request calls, batched call."""
    import torch

    from trtspec.spec.engine import SpecEngine
    from trtspec.spec.params import SamplingParams, SpecParams
    from trtspec.sweep.prompts import load_suite

    torch.set_num_threads(bench.threads)
    engine = SpecEngine.from_pretrained(bench.model, bench.draft, medusa=bench.medusa,
                                        max_k=max(k for _, k in bench.cases))
    prompts = [engine.encode(p)[: bench.prompt_tokens] for p in load_suite(MIXED, max(bench.batches)).prompts]
    verify_batch = engine._verify_batch
    captured: list[tuple[Any, ...]] = []

    def capture(batch, drafts, logits, num_pending):  # decode steps only: every request has one pending token
        if all(n == 1 for n in num_pending):
            captured.append((list(batch), list(drafts), logits.clone(), list(num_pending)))
        return verify_batch(batch, drafts, logits, num_pending)

    engine._verify_batch = capture
    out: Measured = {}
    for (method, k), temperature, size in itertools.product(bench.cases, bench.temperatures, bench.batches):
        captured.clear()
        samplings = [SamplingParams(temperature=temperature, seed=i, max_new_tokens=bench.new_tokens,
                                    ignore_eos=True) for i in range(size)]
        engine.generate([prompts[i % len(prompts)] for i in range(size)], samplings, SpecParams(method, k))
        steps = [step for step in captured if len(step[0]) == size][: bench.steps]
        per_request, batched = [], []
        for round_ in range(bench.rounds):
            for batch, drafts, logits, num_pending in steps:
                one_by_one = [([batch[i]], [drafts[i]], logits[i : i + 1], [num_pending[i]]) for i in range(size)]
                for way in (0, 1) if round_ % 2 else (1, 0):  # alternate which goes first
                    start = time.thread_time()
                    for args in one_by_one if way == 0 else [(batch, drafts, logits, num_pending)]:
                        verify_batch(*args)
                    (per_request if way == 0 else batched).append(time.thread_time() - start)
        out[method, k, temperature, size] = (per_request, batched)
    return out


def section(bench: VerifyBench, measured: Measured) -> Section:
    rows = []
    for (method, k, temperature, size), (per_request, batched) in measured.items():
        alone, together = statistics.median(per_request), statistics.median(batched)
        ratios = [b / a for a, b in zip(per_request, batched, strict=True) if a]
        rows.append([f"{method} k={k}", f"{temperature:g}", str(size), f"{1e3 * alone:.3f}", f"{1e3 * together:.3f}",
                     f"{1e3 * together / size:.3f}", f"{statistics.median(ratios):.2f}x"])
    return Section(
        title=f"Batched verification: host cost of logits processing + verification per step ({bench.model}, "
              f"{bench.draft}, {bench.medusa})",
        columns=["method", "temperature", "batch", "per-request calls CPU ms / step", "batched CPU ms / step",
                 "batched CPU ms / request", "batched / per-request"],
        rows=rows,
        notes=[
            f"Phase 4 of SpecEngine.step (step_phases._verify_batch: the target rows gathered into one ragged batch, "
            "logits_process.process_batch, verify.verify_chains) on decode steps captured from engine runs of "
            f"{bench.new_tokens} new tokens over held-out {MIXED} prompts ({bench.prompt_tokens} prompt tokens): "
            f"{bench.steps} steps per row, each verified once for the whole batch and once per request (the same "
            f"verifier on one request at a time), interleaved over {bench.rounds} rounds (which goes first "
            "alternates); medians of the thread's CPU time, and the median of the paired ratios.",
            "Temperature 0 is greedy (no randomness drawn); at temperature 1 each request draws its uniforms from its "
            "own generator. Medusa drafts trees: sampled trees of a step share one walk over their padded trees "
            "(tree.verify_trees); a step of greedy trees verifies each request on its own (logits processing "
            "included), so those rows compare the same work.",
            "The per-request code this replaced, timed side by side with it: docs/history/batched-verification.md.",
            _machine() + ".",
        ],
    )
