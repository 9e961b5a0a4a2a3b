"""Adaptive k against fixed k in finely interleaved short cells: paired ratios per round, with a bootstrap interval.

    python scripts/adaptive_paired_ab.py --concurrency 4 --rounds 60 --requests 8 --ks 2,3,4 [--pin 3]

This machine's speed swings by 15-25% with a correlation time of 1-2 s (docs/benchmarks.md, "The bench's noise"),
so comparing a few configurations needs many short cells run close together. Here every round draws `requests`
of the bench's held-out prompts (`adaptive_side_by_side.bench_inputs`), runs each
configuration once on them as a closed loop at `concurrency`, in a shuffled order, and each round's adaptive / fixed
ratio is one paired sample (cells of ~1 s sit within one period of the drift). One SpecEngine and one AdaptiveK
for every cell, as in the bench. `--pin K` adds adaptive requests pinned at K without the policy ("pin": the engine's
adaptive mode alone) and after the policy's work ("pinwork": what the policy's own computation costs).
"""

from __future__ import annotations

import argparse
import collections
import random
import statistics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--requests", type=int, default=8, help="requests per cell")
    parser.add_argument("--ks", default="2,3,4", help="fixed k to compare with (0 = no speculation)")
    parser.add_argument("--pin", type=int, default=None, help="also adaptive pinned at this K (see above)")
    args = parser.parse_args()

    from adaptive_side_by_side import bench_inputs  # scripts/ (the script's own folder) is on sys.path

    engine, prompts, samplings = bench_inputs(max(args.requests, 32))
    from trtspec.spec.adaptive import AdaptiveK, cpu_clock
    from trtspec.spec.params import SpecParams
    from trtspec.sweep.backend_engine import closed_loop
    from trtspec.sweep.benchmarks import median_interval

    policy = engine.k_policy = AdaptiveK(clock=cpu_clock)
    choose, mode = policy.choose, {"now": "adaptive"}

    def pinned(batch):
        ks = choose(batch) if mode["now"] != "pin" else None
        if mode["now"] in ("pin", "pinwork"):
            return [min(args.pin, r.cap) if r.adaptive else r.cap for r in batch]
        return ks

    policy.choose = pinned
    adaptive = SpecParams(method="draft_target", k=8, adaptive=True)
    configs = [(f"k={k}", SpecParams(method="draft_target", k=k) if k else SpecParams(method="none", k=0))
               for k in map(int, args.ks.split(","))]
    configs.append(("adaptive", adaptive))
    if args.pin is not None:
        configs += [("pin", adaptive), ("pinwork", adaptive)]
    rng = random.Random(0)
    rates: dict[str, list[float]] = collections.defaultdict(list)
    for _ in range(args.rounds):
        chosen = rng.sample(range(len(prompts)), args.requests)
        order = configs[:]
        rng.shuffle(order)
        for name, spec in order:
            mode["now"] = name
            run = closed_loop(engine, [prompts[i] for i in chosen], [samplings[i] for i in chosen], spec,
                              args.concurrency)
            rates[name].append(run.output_tokens / run.cpu_s)
    for name, values in rates.items():
        print(f"{name:>9}: tokens/CPU s median {statistics.median(values):.0f}")
    tested = [n for n in ("adaptive", "pin", "pinwork") if n in rates]
    for name in tested:
        for other in rates:
            if other in tested[: tested.index(name) + 1]:
                continue
            ratios = [a / b for a, b in zip(rates[name], rates[other], strict=True)]
            lo, hi = median_interval(ratios)
            print(f"{name} / {other}: median paired ratio {statistics.median(ratios):.3f} (90% interval {lo:.3f}-{hi:.3f})")


if __name__ == "__main__":
    main()
