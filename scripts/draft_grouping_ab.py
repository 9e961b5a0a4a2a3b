"""The draft model's catch-up forward split from the one-token rows (forward_grouped) vs one padded pass, side by side.

    python scripts/draft_grouping_ab.py --concurrency 16 --rounds 6 --requests 64 --k 2

The batching bench's closed loop (`adaptive_side_by_side.bench_inputs`: tiny + tiny-draft, one torch thread): each
round runs fixed k with the draft's forwards grouped (what `DraftModelProposer` does), fixed k with one padded pass
(every row padded to the widest feed: a newly admitted row's prompt), and plain decoding. Prints tokens per CPU
second per round and the grouped / padded ratio (docs/benchmarks.md, "Concurrency 16: a padded draft catch-up").
"""

from __future__ import annotations

import argparse
import collections
import statistics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--k", type=int, default=2)
    args = parser.parse_args()

    from adaptive_side_by_side import bench_inputs  # scripts/ (the script's own folder) is on sys.path

    engine, prompts, samplings = bench_inputs(args.requests)
    import trtspec.spec.proposers.draft_model as draft_model
    from trtspec.spec.model import forward_grouped
    from trtspec.spec.params import SpecParams
    from trtspec.sweep.backend_engine import closed_loop

    grouped = {"on": True}

    def forward(model, input_ids, cache, slots, *, num_tokens):
        if grouped["on"]:
            return forward_grouped(model, input_ids, cache, slots, num_tokens=num_tokens)
        return model(input_ids, cache, slots, num_tokens=num_tokens)

    draft_model.forward_grouped = forward  # the proposer's module-level name: this run only
    speculating = SpecParams(method="draft_target", k=args.k)
    configs = [("grouped", True, speculating), ("padded", False, speculating),
               ("plain", True, SpecParams(method="none", k=0))]
    rates: dict[str, list[float]] = collections.defaultdict(list)
    for r in range(args.rounds):
        for name, on, spec in configs:
            grouped["on"] = on
            run = closed_loop(engine, prompts, samplings, spec, args.concurrency)
            rates[name].append(run.output_tokens / run.cpu_s)
        print(f"round {r}: " + ", ".join(f"{n} {v[-1]:.0f}" for n, v in rates.items())
              + f"; grouped / padded {rates['grouped'][-1] / rates['padded'][-1]:.3f}")
    for name, values in rates.items():
        print(f"{name:>8}: tokens/CPU s median {statistics.median(values):.0f} (min-max {min(values):.0f}-{max(values):.0f})")


if __name__ == "__main__":
    main()
