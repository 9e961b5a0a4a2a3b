"""How fast this machine's speed moves: one short closed loop (k = 3, 4 requests of 16 tokens) timed over and over.

    python scripts/machine_drift.py --seconds 90

Prints tokens per CPU second in 2-second bins, the min-max over all runs and the autocorrelation of consecutive
runs at a few lags: a correlation time of a few runs means a bench cell must last many times that long before its
rate stops depending on when it ran (docs/benchmarks.md, "The bench's noise, and a freeze at K = 0").
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=90.0)
    args = parser.parse_args()

    from adaptive_side_by_side import bench_inputs  # scripts/ (the script's own folder) is on sys.path

    engine, prompts, samplings = bench_inputs(4, new_tokens=16)
    from trtspec.spec.params import SpecParams
    from trtspec.sweep.backend_engine import closed_loop
    spec = SpecParams(method="draft_target", k=3)
    start, runs = time.perf_counter(), []
    while time.perf_counter() - start < args.seconds:
        run = closed_loop(engine, prompts, samplings, spec, 4)
        runs.append((time.perf_counter() - start, run.output_tokens / run.cpu_s, run.cpu_s))
    bins: dict[int, list[float]] = {}
    for at, rate, _ in runs:
        bins.setdefault(int(at // 2), []).append(rate)
    rates = [rate for _, rate, _ in runs]
    print(f"{len(runs)} runs of {statistics.median(c for _, _, c in runs):.3f} CPU s each; tokens/CPU s min "
          f"{min(rates):.0f}, median {statistics.median(rates):.0f}, max {max(rates):.0f}")
    print("per 2 s: " + " ".join(f"{statistics.median(v):.0f}" for _, v in sorted(bins.items())))
    mean, var = statistics.mean(rates), statistics.pvariance(rates)
    for lag in (1, 5, 20, 50):
        if len(rates) > lag and var > 0:
            acf = sum((rates[i] - mean) * (rates[i + lag] - mean) for i in range(len(rates) - lag)) / (len(rates) - lag)
            print(f"autocorrelation at lag {lag} runs: {acf / var:.2f}")


if __name__ == "__main__":
    main()
