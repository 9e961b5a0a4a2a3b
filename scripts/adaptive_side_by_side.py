"""Adaptive k side by side: fixed k, this checkout's AdaptiveK and (optionally) a git revision's, interleaved rounds.

    python scripts/adaptive_side_by_side.py --concurrency 4 --rounds 5 [--fixed-ks 2,3,4] [--baseline-rev REV]

One SpecEngine (tiny + tiny-draft, one torch thread), the batching bench's closed loop (`sweep.backend_engine.
closed_loop`: `concurrency` requests in flight, max(2 x concurrency, 6) held-out prompts of 64 tokens, 32 greedy
tokens each), every configuration once per round, the first round a warm-up. Each policy learns only from its own
runs (the fixed-k runs feed a scratch policy). Prints tokens per CPU second per run, medians, each policy / the best
fixed k (ratio of medians and per-round ratio to the same round's best fixed k: the machine's speed moves between
rounds) and the K each policy chose by running requests. `--baseline-rev` loads spec/adaptive.py and
spec/paired_costs.py as they were at that revision (docs/benchmarks.md, "Adaptive k at concurrency 4").
"""

from __future__ import annotations

import argparse
import collections
import statistics
import subprocess
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def policy_at(rev: str) -> type:
    """AdaptiveK as it was at git revision `rev` (its paired_costs too), loaded under other module names."""
    def source(path: str) -> str | None:
        shown = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{path}"], capture_output=True, text=True)
        return shown.stdout if shown.returncode == 0 else None

    if source("trtspec/spec/adaptive.py") is None:
        sys.exit(f"error: --baseline-rev {rev!r}: no trtspec/spec/adaptive.py there (give a revision of this repository)")
    modules = {}
    for name, path in (("rev_paired_costs", "trtspec/spec/paired_costs.py"), ("rev_adaptive", "trtspec/spec/adaptive.py")):
        if source(path) is None:
            continue  # older revisions have no paired_costs.py
        module = types.ModuleType(name)
        sys.modules[name] = module
        text = source(path).replace("from trtspec.spec.paired_costs import", "from rev_paired_costs import")
        exec(compile(text, f"{rev}:{path}", "exec"), module.__dict__)  # noqa: S102 - the project's own source
        modules[name] = module
    return modules["rev_adaptive"].AdaptiveK


def bench_inputs(requests: int, new_tokens: int = 32):
    """(engine, prompts, samplings) of the batching bench's closed loop: one SpecEngine on tiny + tiny-draft (one
    torch thread), `requests` held-out prompts of the mixed suite cut to their last 64 tokens, greedy, EOS ignored."""
    import torch

    torch.set_num_threads(1)
    from trtspec.spec.engine import SpecEngine
    from trtspec.spec.params import SamplingParams
    from trtspec.sweep.backend_engine import encode_prompt
    from trtspec.sweep.benchmarks import MIXED
    from trtspec.sweep.prompts import last_tokens, load_suite

    engine = SpecEngine.from_pretrained("tiny", draft="tiny-draft", max_k=8)
    suite = load_suite(MIXED, max(32, requests)).prompts
    prompts = [last_tokens(encode_prompt(engine, p), 64) for p in suite][:requests]
    samplings = [SamplingParams(temperature=0.0, seed=i, max_new_tokens=new_tokens, ignore_eos=True)
                 for i in range(len(prompts))]
    return engine, prompts, samplings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--fixed-ks", default="2,3,4")
    parser.add_argument("--baseline-rev", default=None, help="a git revision whose AdaptiveK runs beside this one")
    args = parser.parse_args()

    engine, prompts, samplings = bench_inputs(max(2 * args.concurrency, 6))
    from trtspec.spec.adaptive import AdaptiveK, cpu_clock
    from trtspec.spec.params import SpecParams
    from trtspec.sweep.backend_engine import closed_loop

    fixed = [int(k) for k in args.fixed_ks.split(",")]
    policies = {"adaptive": AdaptiveK(clock=cpu_clock)}
    if args.baseline_rev:
        policies[f"adaptive@{args.baseline_rev}"] = policy_at(args.baseline_rev)(clock=cpu_clock)
    chosen = {name: collections.Counter() for name in policies}
    for name, policy in policies.items():
        def choose(batch, _choose=policy.choose, _name=name):
            ks = _choose(batch)
            if any(r.adaptive for r in batch):
                chosen[_name][(len(batch), max(ks))] += 1  # (running requests, step cap)
            return ks
        policy.choose = choose
    scratch = AdaptiveK(clock=cpu_clock)
    configs = {f"k={k}": (SpecParams(method="draft_target", k=k), scratch) for k in fixed}
    configs |= {name: (SpecParams(method="draft_target", k=8, adaptive=True), p) for name, p in policies.items()}
    rates: dict[str, list[float]] = {name: [] for name in configs}
    for round_ in range(args.rounds + 1):  # round 0: warm-up
        for name, (spec, policy) in configs.items():
            engine.k_policy = policy
            run = closed_loop(engine, prompts, samplings, spec, args.concurrency)
            if round_:
                rates[name].append(run.output_tokens / run.cpu_s)
        if round_:
            print(f"round {round_}: " + "  ".join(f"{k} {v[-1]:.0f}" for k, v in rates.items()), flush=True)
    median = {name: statistics.median(v) for name, v in rates.items()}
    best = max((f"k={k}" for k in fixed), key=median.__getitem__)
    for name, values in rates.items():
        print(f"c={args.concurrency} {name:>24}: median {median[name]:6.1f} tokens/CPU s, min-max {min(values):.0f}-"
              f"{max(values):.0f}, / best fixed ({best}) {median[name] / median[best]:.3f}")
    for name in policies:
        per_round = [a / max(rates[f"k={k}"][i] for k in fixed) for i, a in enumerate(rates[name])]
        print(f"{name}: per-round ratio to that round's best fixed k, median {statistics.median(per_round):.3f} "
              f"(min {min(per_round):.3f}, max {max(per_round):.3f}); K chosen (rows, K): {sorted(chosen[name].items())}")


if __name__ == "__main__":
    main()
