"""What adaptive k chooses in the batching bench's sequence, and why: K per step at full load and the acceptance it saw.

    python scripts/adaptive_trace.py --concurrency 4 --rounds 3 [--requests 32]

One SpecEngine (tiny + tiny-draft, one torch thread) and ONE AdaptiveK for every run, as in `scripts/bench.py
--section batching`: each round runs plain decoding, fixed k = 1..8 and adaptive k <= 8 as closed loops
(`sweep.backend_engine.closed_loop`: `concurrency` requests in flight, held-out prompts of 64 tokens, 32 greedy
tokens each), so the policy learns from the fixed-k runs too. Prints tokens per CPU second per run, the share of
full-load adaptive steps at each K, and the mean acceptance estimate of the batch on the steps that chose K = 0 and
on those that drafted (docs/benchmarks.md, "The bench's noise, and a freeze at K = 0").
"""

from __future__ import annotations

import argparse
import collections
import statistics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=32)
    args = parser.parse_args()

    from adaptive_side_by_side import bench_inputs  # scripts/ (the script's own folder) is on sys.path

    engine, prompts, samplings = bench_inputs(args.requests)
    from trtspec.spec.adaptive import AdaptiveK, cpu_clock
    from trtspec.spec.params import SpecParams
    from trtspec.sweep.backend_engine import closed_loop
    policy = AdaptiveK(clock=cpu_clock)
    engine.k_policy = policy
    seen: list[tuple[int, float]] = []  # (step cap, mean acceptance estimate of the batch) at full load
    choose = policy.choose

    def traced(batch):
        ks = choose(batch)
        if any(r.adaptive for r in batch) and len(batch) == args.concurrency:
            seen.append((max(ks), statistics.mean(policy.alpha(r.request_id, r.method) for r in batch)))
        return ks

    policy.choose = traced
    configs = [("plain", SpecParams(method="none", k=0))]
    configs += [(f"k={k}", SpecParams(method="draft_target", k=k)) for k in range(1, 9)]
    configs += [("adaptive", SpecParams(method="draft_target", k=8, adaptive=True))]
    rates: dict[str, list[float]] = collections.defaultdict(list)
    for _ in range(args.rounds):
        for name, spec in configs:
            run = closed_loop(engine, prompts, samplings, spec, args.concurrency)
            rates[name].append(run.output_tokens / run.cpu_s)
    for name, values in rates.items():
        print(f"{name:>9}: tokens/CPU s per round {[round(v) for v in values]}, median {statistics.median(values):.0f}")
    shares = collections.Counter(k for k, _ in seen)
    print(f"adaptive at {args.concurrency} rows: share of steps per K "
          f"{ {k: round(n / len(seen), 2) for k, n in sorted(shares.items())} }")
    for label, picked in (("K = 0", [a for k, a in seen if k == 0]), ("K > 0", [a for k, a in seen if k > 0])):
        if picked:
            print(f"mean acceptance estimate of the batch on steps at {label}: {statistics.mean(picked):.2f}")


if __name__ == "__main__":
    main()
