#!/usr/bin/env python
"""Draft cost per drafted token of `tiny-eagle` vs `tiny-draft` in CPU time, the proposers called directly and
interleaved: steadier on a shared machine than the engine's wall-clock draft time (docs/eagle.md, "Measured").

    python scripts/eagle_draft_cost.py              # ~2-4 min on 2 shared CPU cores

Contexts: the target's greedy continuations of held-out prompts (training.eagle_tree_tune.calibrate_eagle). At each
commit point (every second token) each proposer drafts k nodes for the same context, timed with the thread's CPU
clock (one torch thread); the context then advances by two tokens for both (the draft model's cache catches up as in
the engine). Per configuration: the median milliseconds per step over all steps, median over rounds, and that divided
by the tokens actually drafted per step.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from trtspec.models import embedded_path  # noqa: E402


def timed_steps(proposer, cal, k: int, *, eagle: bool) -> tuple[float, float]:
    """(median CPU ms per step, mean drafted tokens per step) over every commit point of every continuation."""
    from trtspec.spec.params import SamplingParams
    from trtspec.spec.proposers.base import ProposeInput

    times, drafted = [], []
    for i, row in enumerate(cal.sequences.tolist()):
        proposer.add_request(i)
        length = cal.prompt_len
        if eagle:
            proposer.observe_target(i, 0, cal.aux[i, : length - 1])
        else:  # the draft model's prompt prefill, untimed (the engine's first step)
            proposer.propose([ProposeInput(i, row[:length], k, SamplingParams(), None)])
            proposer.commit(i, row[:length])
        while length + k + 2 <= len(row):
            new_length = length + 2
            if eagle:
                proposer.observe_target(i, length - 1, cal.aux[i, length - 1 : new_length - 1])
            proposer.commit(i, row[:new_length])
            length = new_length
            start = time.thread_time()
            draft = proposer.propose([ProposeInput(i, row[:length], k, SamplingParams(), None)])[0]
            times.append(time.thread_time() - start)
            drafted.append(draft.num_tokens)
            proposer.commit(i, row[:length])
        proposer.free(i)
    return 1e3 * statistics.median(times), statistics.fmean(drafted)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--ks", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    from trtspec.spec.model import LlamaModel
    from trtspec.spec.proposers.draft_model import DraftModelProposer
    from trtspec.spec.proposers.eagle import EagleProposer
    from trtspec.training.eagle_tree_tune import calibrate_eagle

    cal = calibrate_eagle(embedded_path("tiny"), "tiny-eagle", num_prompts=args.prompts, prompt_len=48,
                          new_tokens=args.new_tokens)
    draft = LlamaModel.from_pretrained(embedded_path("tiny-draft"))
    configs = {"draft_target (chain)": lambda: DraftModelProposer(draft, draft.config.vocab_size, max_num_seqs=8),
               "eagle3 chain": lambda: EagleProposer(cal.drafter, cal.taps, max_num_seqs=8, topk=1),
               "eagle3 dynamic tree": lambda: EagleProposer(cal.drafter, cal.taps, max_num_seqs=8)}
    print("| configuration | k | CPU ms / step | drafted tokens / step | CPU ms / drafted token |\n|---|---|---|---|---|")
    for k in args.ks:
        runs: dict[str, list[tuple[float, float]]] = {name: [] for name in configs}
        for _ in range(args.rounds):  # interleaved: a burst of load hits every configuration
            for name, make in configs.items():
                runs[name].append(timed_steps(make(), cal, k, eagle=name.startswith("eagle")))
        for name, results in runs.items():
            ms, tokens = statistics.median(r[0] for r in results), results[0][1]
            print(f"| {name} | {k} | {ms:.2f} | {tokens:.2f} | {ms / tokens:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
