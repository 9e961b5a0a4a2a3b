"""The sections of docs/benchmarks.md (`make bench`) as sweeps: each section is a SweepSpec, run by `run_sweep` (the
engine backend's closed loop), and a table made from its case records. No torch at import; the runs load it.

  engine     batch 1 (concurrency 1) on a code/prose/grounded mix: plain decoding, draft_target and ngram at k = 1..max
  batching   a closed loop at each concurrency: no speculation vs fixed k vs adaptive k (tokens/s, latency p50/p99)
             and the verdict of issue 15: adaptive k >= 0.95 x the best of the others
  lookahead  lookahead W,N,G variants, each suite's prompts as one continuous batch, k = G x (N - 1) (the full trie)
  sweep      the accept-rate sweep and the cost model's check (best k per configuration, predicted vs measured)
  suffix     suffix decoding with a cold and a warm cache, per suite at batch 1, beside n-gram, draft_target and
             adaptive k (and transformers' prompt lookup and assisted generation, from the caller)

What a sweep cannot measure (transformers' generate, as comparison rows) comes from the caller as `Comparison`s;
writing the sections into the Markdown file is the caller's too (scripts/bench.py).
"""

from __future__ import annotations

import os
import platform
import random
import statistics
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from trtspec.errors import TrtspecError
from trtspec.methods import lookahead_max_draft_len, lookahead_trie_nodes, parse_lookahead
from trtspec.sweep.analysis import TOLERANCE, Results, load_results
from trtspec.sweep.grid import BASELINE, SweepSpec
from trtspec.sweep.records import Record, read_records
from trtspec.sweep.runner import SweepSummary, run_sweep

MIXED = "code+prose+grounded"  # held-out prompts, round-robin over the shipped suites


@dataclass
class Section:
    """One `##` section: a table and the notes under it."""

    title: str  # the heading (without the command)
    columns: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)


@dataclass
class Comparison:
    """A configuration timed outside the sweep on the same prompts (e.g. transformers' generate), one entry per
    round, shown as a row beside the engine's."""

    name: str
    tokens_per_s: list[float]
    output_sha256: list[str]  # records.output_digest of the round's outputs, request order
    cpu_tokens_per_s: list[float] = field(default_factory=list)  # per process CPU second, when measured


@dataclass
class Measured:
    records: list[Record]  # ok case records, every round, in run order
    summary: SweepSummary
    results: Results  # the analysis of the same file (speedups; predictions when calibrated)


def measure(spec: SweepSpec, *, show_progress: bool = True) -> Measured:
    """Run a spec into a temporary results file and read it back; raises when any case failed."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "results.jsonl"
        summary = run_sweep(spec, out, show_progress=show_progress)
        records = [r for r in read_records(out) if r["kind"] == "case" and r.get("status") == "ok"]
        results = load_results(out)
    if summary.errors:
        raise TrtspecError(f"{summary.errors} benchmark case(s) failed: " + "; ".join(summary.error_messages[:3]),
                           hint="the message names the case; fix it and rerun the section")
    return Measured(records, summary, results)


# ---------------------------------------------------------------------------------------------------------------
# engine: batch 1


def engine_spec(*, model: str, draft: str, ks: Sequence[int], num_prompts: int, prompt_tokens: int,
                max_new_tokens: int, max_ngram: int, repeats: int, threads: int) -> SweepSpec:
    return SweepSpec.build(model=model, drafts=[draft], methods=["draft_target", "ngram"], k=[0, *ks], suites=[MIXED],
                           concurrency=[1], num_prompts=num_prompts, prompt_tokens=prompt_tokens,
                           max_new_tokens=max_new_tokens, max_ngram=max_ngram, max_draft_len=max(ks), repeats=repeats,
                           threads=threads, calibrate=False)


def engine_section(spec: SweepSpec, measured: Measured, comparisons: Sequence[Comparison] = (),
                   comparison_notes: Sequence[str] = ()) -> Section:
    groups = _by_case(measured.records)
    plain_runs = next(runs for runs in groups.values() if runs[0]["params"]["method"] == BASELINE)
    baseline = _median_rate(plain_runs)
    plain = plain_runs[0]["metrics"]["output_sha256"]
    rows = []
    for runs in groups.values():
        params, stats = runs[0]["params"], runs[0]["metrics"]["stats"]
        name = "engine: target only (k=0)" if params["method"] == BASELINE else f"engine: {params['method']} k={params['k']}"
        drafted = bool(stats["num_drafts"])
        rate = _median_rate(runs)
        rows.append([name, f"{rate:.1f}", f"{rate / baseline:.2f}x",
                     f"{stats['mean_acceptance_length']:.2f}" if drafted else "-",
                     f"{stats['acceptance_rate']:.2f}" if drafted else "-",
                     f"{stats['tokens_per_target_forward']:.2f}", f"{100 * stats['overhead_share']:.0f}%",
                     _yes(r["metrics"]["output_sha256"] == plain for r in runs)])
    for other in comparisons:
        rate = statistics.median(other.tokens_per_s)
        rows.append([other.name, f"{rate:.1f}", f"{rate / baseline:.2f}x", "-", "-", "-", "-",
                     _yes(digest == plain for digest in other.output_sha256)])
    speeds = f"Engine plain decoding runs at {baseline:.1f} tokens/s"
    if comparisons:
        first = statistics.median(comparisons[0].tokens_per_s)
        speeds += (f", {comparisons[0].name} at {first:.1f} tokens/s (engine plain / {comparisons[0].name} = "
                   f"{baseline / first:.2f}x)")
    return Section(
        title=f"Reference engine vs transformers, batch 1 ({spec.model} + {spec.drafts[0]})",
        columns=["configuration", "tokens/s", "speedup vs engine plain", "mean acceptance length", "acceptance rate",
                 "tokens / target forward", "host overhead", "same tokens as plain"],
        rows=rows,
        notes=[
            f"{spec.num_prompts} held-out prompts (code/prose/grounded round-robin, last {spec.prompt_tokens} tokens), "
            f"{spec.max_new_tokens} new tokens each, greedy, EOS ignored, batch 1. Engine rows: one `trtspec sweep` "
            f"case each (a closed loop at concurrency 1), the grid run {spec.repeats} time(s) in rounds; tokens/s = "
            "total tokens / total seconds, median over the rounds.",
            speeds + ".",
            "Mean acceptance length = 1 + accepted / drafts (vLLM definition); tokens / target forward includes the "
            "prefill forward. Host overhead = share of engine step time spent outside draft and target forwards "
            "(batch assembly, sampling, verification, bookkeeping).",
            *comparison_notes,
            "On CPU a target forward over k + 1 tokens costs noticeably more than over one token (and the draft "
            "model is not free), so speedup grows much more slowly than tokens per target forward.",
            "'same tokens as plain' checks every configuration against the engine's plain greedy output "
            "(speculation must be lossless at temperature 0).",
            _machine() + f", Python {platform.python_version()}.",
        ],
    )


# ---------------------------------------------------------------------------------------------------------------
# batching: closed loop at several concurrencies


BATCHING_WAVES = 4  # requests per cell >= 4 x concurrency: at 16 most of a cell is the steady loop, not its start/tail


def batching_spec(*, model: str, draft: str, concurrency: Sequence[int], fixed_ks: Sequence[int],
                  adaptive_max_k: int, max_new_tokens: int, prompt_tokens: int, min_requests: int, repeats: int,
                  threads: int) -> SweepSpec:
    """At each concurrency: no speculation, every fixed k in `fixed_ks` and adaptive k, max(BATCHING_WAVES x
    concurrency, min_requests) requests per case over 2 x max(concurrency) mixed prompts; the grid in `repeats` rounds, each
    concurrency's cases together in their own random order (grid.SweepSpec.cases), so the cells one round's ratio
    compares run close together and a burst of load from other processes hits one run of many rows."""
    return SweepSpec.build(model=model, drafts=[draft], methods=["draft_target"], k=[0, *fixed_ks],
                           adaptive=[adaptive_max_k], suites=[MIXED], concurrency=list(concurrency),
                           num_prompts=2 * max(concurrency), num_requests=min_requests, waves=BATCHING_WAVES,
                           prompt_tokens=prompt_tokens, max_new_tokens=max_new_tokens,
                           max_draft_len=max(8, *fixed_ks, adaptive_max_k), repeats=repeats, shuffle=True,
                           threads=threads, calibrate=False)


ADAPTIVE_MARGIN = 0.95  # issue 15: adaptive k >= 0.95 x the best of no speculation and every fixed k


def median_interval(values: Sequence[float], *, level: float = 0.9, draws: int = 2000,
                    seed: int = 0) -> tuple[float, float]:
    """Bootstrap interval (percentile method, seeded: the same numbers give the same interval) of the median."""
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(draws))
    tail = (1 - level) / 2
    return medians[int(tail * draws)], medians[min(draws - 1, int((1 - tail) * draws))]


@dataclass
class BatchingVerdict:
    """Adaptive k against the best other configuration at one concurrency.

    The best other configuration is the one with the highest median on the judged clock; the verdict is the median
    over rounds of adaptive / that configuration in the same round (a paired ratio: the rounds are shuffled and
    short, so the machine's slower drift cancels in each ratio). Ratios of the medians are shown beside it.
    """

    concurrency: int
    best: str  # the best other configuration on the judged clock
    per_round: list[float]  # adaptive / best in the same round, judged clock, round order
    wall_ratio: float  # adaptive median / the best other median, wall tokens/s (shown, not judged)
    cpu_ratio: float  # the same on tokens per CPU second (shown, not judged)

    @property
    def paired(self) -> float:
        return statistics.median(self.per_round) if self.per_round else 0.0

    @property
    def passed(self) -> bool:
        return self.paired >= ADAPTIVE_MARGIN

    def line(self) -> str:
        spread = ""
        if self.per_round:
            low, high = median_interval(self.per_round)
            spread = (f" (90% interval {low:.2f}-{high:.2f}, rounds {min(self.per_round):.2f}-"
                      f"{max(self.per_round):.2f})")
        return (f"c={self.concurrency}: adaptive / best ({self.best}) = {self.paired:.2f}, median of "
                f"{len(self.per_round)} paired rounds{spread}; ratio of medians {self.cpu_ratio:.2f} CPU, "
                f"{self.wall_ratio:.2f} wall: {'PASS' if self.passed else 'FAIL'}")


def _batching_name(params: dict[str, Any]) -> tuple[tuple[int, int], str]:
    """(sort key, row name): no speculation, fixed k ascending, then adaptive."""
    if params["method"] == BASELINE:
        return (0, 0), "no speculation"
    if params.get("adaptive"):
        return (2, params["k"]), f"adaptive k<={params['k']} ({params['method']})"
    return (1, params["k"]), f"fixed k={params['k']} ({params['method']})"


def batching_section(spec: SweepSpec, measured: Measured, *, min_requests: int) -> Section:
    by_concurrency: dict[int, list[tuple[tuple[int, int], str, list[Record]]]] = {}
    for runs in _by_case(measured.records).values():
        params = runs[0]["params"]
        by_concurrency.setdefault(params["concurrency"], []).append((*_batching_name(params), runs))
    rows, verdicts = [], []
    # what the verdict judges: CPU time with one torch thread (time-slicing by other processes is not the engine's
    # cost), else wall time
    clock = "cpu" if spec.threads == 1 else "wall"
    metric = "tokens_per_cpu_s" if clock == "cpu" else "tokens_per_s"
    for c in sorted(by_concurrency):
        modes = [(name, runs) for _, name, runs in sorted(by_concurrency[c], key=lambda mode: mode[0])]
        plain = modes[0][1][0]["metrics"]["output_sha256"]  # no speculation sorts first
        wall = {name: _median_rate(runs) for name, runs in modes}
        cpu = {name: _median_cpu_rate(runs) for name, runs in modes}
        adaptive = next(n for n in wall if n.startswith("adaptive"))
        judged = cpu if clock == "cpu" else wall
        best = max((n for n in judged if n != adaptive), key=judged.__getitem__)
        best_wall = max(rate for n, rate in wall.items() if n != adaptive)
        best_cpu = max(rate for n, rate in cpu.items() if n != adaptive)
        by_round = {name: {r["params"].get("repeat", 0): r["metrics"].get(metric, 0.0) for r in runs}
                    for name, runs in modes}
        per_round = [rate / by_round[best][r] for r, rate in sorted(by_round[adaptive].items())
                     if by_round[best].get(r, 0.0) > 0]
        verdict = BatchingVerdict(c, best.split(" (")[0], per_round, wall[adaptive] / best_wall,
                                  cpu[adaptive] / best_cpu if best_cpu else 0.0)
        verdicts.append(verdict)
        for name, runs in modes:
            spread = [r["metrics"]["tokens_per_s"] for r in runs]
            typical = min(runs, key=lambda r: abs(r["metrics"]["tokens_per_s"] - wall[name]))
            latencies, stats = typical["metrics"]["latencies_s"], typical["metrics"]["stats"]
            drafted = stats["num_draft_tokens"] / max(stats["num_target_forwards"], 1)
            mark = ("PASS" if verdict.passed else "FAIL") if name == adaptive else ("best" if name == best else "")
            rows.append([name, str(c), f"{wall[name]:.1f}", f"{min(spread):.0f}-{max(spread):.0f}",
                         f"{100 * (max(spread) - min(spread)) / wall[name]:.0f}%", f"{cpu[name]:.1f}",
                         f"{judged[name] / judged[best]:.2f}", f"{1000 * percentile(latencies, 50):.0f}",
                         f"{1000 * percentile(latencies, 99):.0f}", f"{drafted:.2f}",
                         _yes(r["metrics"]["output_sha256"] == plain for r in runs), mark])
    passed = all(v.passed for v in verdicts)
    return Section(
        title=f"Continuous batching: no speculation vs fixed k vs adaptive k ({spec.model} + {spec.drafts[0]})",
        columns=["configuration", "concurrency", "output tokens/s", "min-max over runs", "spread",
                 "tokens per CPU s", "vs best", "latency p50 (ms)", "latency p99 (ms)", "draft tokens / step",
                 "same tokens as plain", "verdict"],
        rows=rows,
        notes=[
            f"Verdict (adaptive k >= {ADAPTIVE_MARGIN:.2f} x the best of no speculation and every fixed k, judged on "
            f"{'tokens per CPU second' if clock == 'cpu' else 'wall tokens/s'}: the best is the other configuration "
            "with the highest median, and the verdict the median over rounds of adaptive / that configuration in the "
            "same round, with a 90% bootstrap interval of that median): "
            + "; ".join(v.line() for v in verdicts) + (". PASS." if passed else ". FAIL.")
            + (" With one torch thread, CPU seconds are the engine's own work: on this shared machine wall time "
               "also counts the time other processes held the cores (see the spread column)." if clock == "cpu"
               else ""),
            f"Closed loop: `concurrency` requests in flight, a new one submitted when one finishes, "
            f"max({BATCHING_WAVES} x concurrency, {min_requests}) requests per cell; held-out prompts (last "
            f"{spec.prompt_tokens} tokens), {spec.max_new_tokens} new tokens each, greedy, EOS ignored. "
            f"The whole grid runs once per round, {spec.repeats} rounds; in each round every concurrency's cells run "
            "together in their own random order, so the cells a round's ratio compares run seconds apart and no "
            "configuration always follows the same one (adaptive k learns from every step the engine runs). "
            "Output tokens/s = all output tokens / wall time, median over the rounds; spread = (max - min) / median "
            "over them; tokens per CPU s = the same tokens per process CPU second (with one torch thread this "
            "ignores time-slicing by other processes, so it is the steadier comparison on a shared machine); vs "
            "best = median / the best non-adaptive median on the judged clock (a ratio of medians: the machine's "
            "speed moves between rounds, which the paired verdict cancels); latency = submit to last token of each "
            "request (p50/p99 over the requests of the run nearest the median).",
            "Adaptive k: each step the engine picks one draft cap K in [0, max k] maximising predicted output "
            "tokens/s from per-request acceptance estimates, decode-step costs measured per load level and K, and "
            "the measured cost of admitting a request with and without speculation (trtspec/spec/adaptive.py); it "
            "learns from every step the engine runs, the fixed-k rows' included. Draft tokens / step = drafted "
            "tokens per target forward per request.",
            _machine() + ".",
        ],
    )


def dynamo_spec(*, url: str, model: str, k: int, concurrency: Sequence[int], max_new_tokens: int,
                min_requests: int) -> SweepSpec:
    """Via openai against a running deployment: plain decoding and draft_target k, at every concurrency."""
    return SweepSpec.build(via="openai", url=url, model=model, methods=["draft_target"], k=[0, k], suites=[MIXED],
                           concurrency=list(concurrency), num_prompts=2 * max(concurrency), num_requests=min_requests,
                           waves=2, max_new_tokens=max_new_tokens, calibrate=False)


def dynamo_section(spec: SweepSpec, by_workers: dict[int, Measured], aiperf: Sequence[list[str]] = ()) -> Section:
    """Rows per (workers, configuration, concurrency): output tokens/s and latency, from the openai sweep records."""
    rows, rates = [], {}
    for workers, measured in by_workers.items():
        for runs in _by_case(measured.records).values():
            params, metrics = runs[0]["params"], runs[0]["metrics"]
            name = "no speculation" if params["method"] == BASELINE else f"{params['method']} k={params['k']}"
            rate = _median_rate(runs)
            rates[workers, name, params["concurrency"]] = rate
            stats, latencies = metrics["stats"], metrics["latencies_s"]
            rows.append([str(workers), name, str(params["concurrency"]), f"{rate:.1f}",
                         f"{1000 * percentile(latencies, 50):.0f}", f"{1000 * percentile(latencies, 99):.0f}",
                         f"{stats['mean_acceptance_length']:.2f}" if stats["num_draft_tokens"] else "-"])
    scaling = [f"{name} c={c}: {rate / rates[1, name, c]:.2f}x" for (w, name, c), rate in rates.items()
               if w == 2 and (1, name, c) in rates]
    notes = [f"`trtspec serve --dynamo N` (Dynamo {_dynamo_version()} frontend, round-robin, N trtspec workers with 1 "
             f"torch thread each) on {spec.model} + tiny-draft; the load is `trtspec sweep --via openai`: a closed loop "
             f"of `concurrency` clients, max(2 x concurrency, {spec.num_requests or spec.num_prompts}) requests per "
             f"cell, held-out prompts, {spec.max_new_tokens} new tokens each, greedy, EOS ignored. Latency = request "
             "sent to response received (p50/p99); mean acceptance length estimated from usage (drafted / k).",
             "2 workers / 1 worker: " + "; ".join(scaling) + ". What limits it here: 2 CPU cores shared by the "
             "frontend, the client threads and the workers (and by other jobs on this machine, so the same cell "
             "varies by tens of percent between runs). A second worker can use the second core when at least two "
             "requests are in flight; at concurrency 1 one request runs on one worker, so it cannot help.",
             _machine() + "."]
    if aiperf:
        notes.append("aiperf (NVIDIA's benchmark client, from the package index) against the same frontend: "
                     + "; ".join(" ".join(row) for row in aiperf) + ".")
    return Section(title=f"NVIDIA Dynamo: 1 vs 2 workers behind the OpenAI frontend ({spec.model})",
                   columns=["workers", "configuration", "concurrency", "output tokens/s", "latency p50 (ms)",
                            "latency p99 (ms)", "mean acceptance length"],
                   rows=rows, notes=notes)


def _dynamo_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ai-dynamo")
    except PackageNotFoundError:
        return "(not installed)"


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty sample."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


# ---------------------------------------------------------------------------------------------------------------
# lookahead


def lookahead_spec(*, model: str, configs: Sequence[str], num_prompts: int, prompt_tokens: int, max_new_tokens: int,
                   threads: int) -> SweepSpec:
    """Each suite's first num_prompts prompts as one batch; k = the full trie of each W,N,G (the grid caps the
    largest at each variant's)."""
    nodes = [lookahead_trie_nodes(*parse_lookahead(c, field="lookahead")) for c in configs]
    return SweepSpec.build(model=model, drafts=[], methods=["lookahead"], lookahead=list(configs), k=[0, max(nodes)],
                           suites=["code", "prose", "grounded"], concurrency=[num_prompts], num_prompts=num_prompts,
                           prompt_tokens=prompt_tokens, max_new_tokens=max_new_tokens,
                           max_draft_len=max(8, *nodes), threads=threads, calibrate=False)


def lookahead_section(spec: SweepSpec, measured: Measured) -> Section:
    from trtspec.contracts.metrics import AcceptanceStats

    rows = []
    overall = {config: AcceptanceStats() for config in spec.lookahead}
    plain: Record | None = None
    for runs in _by_case(measured.records).values():
        rec = runs[0]
        if rec["params"]["method"] == BASELINE:
            plain = rec  # each suite's baseline runs before its lookahead cases
            continue
        assert plain is not None and plain["params"]["suite"] == rec["params"]["suite"]
        config, metrics = rec["params"]["lookahead"], rec["metrics"]
        stats = AcceptanceStats(**{f.name: metrics["stats"][f.name] for f in fields(AcceptanceStats)
                                   if f.name in metrics["stats"]})  # records older than a field lack it
        overall[config].merge(stats)
        rows.append([f"W,N,G={config}", rec["params"]["suite"], str(metrics["num_requests"]),
                     str(lookahead_max_draft_len(*parse_lookahead(config))), f"{stats.mean_acceptance_length:.2f}",
                     f"{stats.acceptance_rate:.2f}", f"{stats.tokens_per_target_forward:.2f}",
                     f"{metrics['tokens_per_s']:.1f}", f"{plain['metrics']['tokens_per_s']:.1f}",
                     _yes([metrics["output_sha256"] == plain["metrics"]["output_sha256"]])])
    for config, stats in overall.items():
        rows.append([f"W,N,G={config}", "all", "-", str(lookahead_max_draft_len(*parse_lookahead(config))),
                     f"{stats.mean_acceptance_length:.2f}", f"{stats.acceptance_rate:.2f}",
                     f"{stats.tokens_per_target_forward:.2f}", "-", "-", "-"])
    return Section(
        title=f"Lookahead decoding on the held-out prompts ({spec.model} alone)",
        columns=["lookahead", "suite", "prompts", "max_draft_len (TRT-LLM)", "mean acceptance length",
                 "acceptance rate", "tokens / target forward", "tokens/s (batched)", "plain tokens/s (batched)",
                 "same tokens as plain"],
        rows=rows,
        notes=[
            f"First {spec.num_prompts} prompts of each suite (last {spec.prompt_tokens} tokens), "
            f"{spec.max_new_tokens} new tokens, greedy, EOS ignored; every suite's prompts run as one "
            "continuous batch, k = G x (N - 1): every step verifies all (up to G) pooled n-grams that start with "
            "the last token, merged into one token trie (a tree draft; shared prefixes verified once).",
            "Mean acceptance length = 1 + accepted / drafts over the steps that had a candidate n-gram; acceptance "
            "rate = accepted / trie nodes (all branches count as drafted); tokens / target forward counts every "
            "forward (prefill and steps without a candidate included).",
            "The Jacobi window (N - 1 levels x W columns) rides in the same target forward as the draft, so each step "
            "forwards up to max_draft_len extra tokens per sequence; on a CPU that compute is not free (compare "
            "the two tokens/s columns: the suite's plain run comes just before its lookahead runs, on the same "
            "batch).",
            _torch() + ".",
        ],
    )


# ---------------------------------------------------------------------------------------------------------------
# sweep + cost model


def sweep_spec(*, model: str, draft: str, ks: Sequence[int], num_prompts: int, max_new_tokens: int, repeats: int,
               threads: int, calibration_slices: int = 4) -> SweepSpec:
    """draft_target and ngram at each k (and plain decoding) on code and grounded at batch 1, greedy, in `repeats`
    shuffled rounds: each case's measured speedup is the median of its rounds' ratios to the same round's baseline.
    The calibration: 4 interleaved repeats in each of `calibration_slices` slices spread over the rounds."""
    return SweepSpec.build(model=model, drafts=[draft], methods=["draft_target", "ngram"], k=[0, *ks],
                           temperatures=[0.0], suites=["code", "grounded"], concurrency=[1], num_prompts=num_prompts,
                           max_new_tokens=max_new_tokens, max_draft_len=max(ks), repeats=repeats, shuffle=True,
                           threads=threads, calibration_batch_sizes=[1, 4, 16],
                           calibration_repeats=4 * calibration_slices, calibration_slices=calibration_slices)


def sweep_section(spec: SweepSpec, measured: Measured, load: tuple[float, float] | None = None) -> Section:
    """Per speculative case: measured speedup (median of the rounds) and how well it repeats (the medians of its even
    and odd rounds), the cost model's prediction and its error; the notes hold the error distribution."""
    from trtspec.sweep.analysis import error_distribution

    results = measured.results
    cases = sorted((r for r in results.rows if r.k and r.error is not None),
                   key=lambda r: (r.suite, r.variant, r.k))
    rows = [[f"{r.variant} {r.suite}", str(r.k), f"{r.tokens_per_step:.2f}", f"{r.measured_speedup:.2f}x",
             _halves(r.round_speedups),
             f"{r.predicted_speedup:.2f}x", f"{100 * (r.error or 0.0):+.1f}%"] for r in cases]
    distribution = error_distribution(cases)
    tokens = spec.num_prompts * spec.max_new_tokens
    state = (f"load average {load[0]:.1f} before and {load[1]:.1f} after the run on {os.cpu_count()} CPUs"
             if load else f"{os.cpu_count()} CPUs")
    inside = sum(bool(r.within_tolerance) for r in cases)
    return Section(
        title=f"Sweep + cost model ({spec.model} + {spec.drafts[0]}, batch 1, {results.timing} time)",
        columns=["configuration", "k", "mean acceptance length", "measured speedup", "even / odd rounds",
                 "predicted speedup", "error"],
        rows=rows,
        notes=[
            f"`trtspec sweep` with the engine backend: draft_target and ngram at k = {min(spec.k[1:])}.."
            f"{max(spec.k)}, code and grounded, greedy, batch 1: {len(cases)} cases, each {spec.num_prompts} prompts x "
            f"{spec.max_new_tokens} new tokens = {tokens} tokens per round, {spec.repeats} shuffled rounds "
            f"({tokens * spec.repeats} tokens per case), EOS ignored, {measured.summary.errors} failed cases. "
            f"Measured speedup = tokens per {results.timing} second vs plain decoding of the same suite, the median "
            "of the rounds' ratios to the same round's baseline; even / odd rounds = the median of the even rounds' "
            "ratios / the odd rounds' - 1 (how well the measurement repeats with half the tokens).",
            f"Cost model within {TOLERANCE:.0%} of measured for **{inside} of {len(cases)}** cases. Predictions come "
            f"from the calibration (forward costs and host time per step at batch 1/4/16: "
            + (f"{spec.calibration_slices} slices spread over the rounds, the first before them, each the median of "
               f"{spec.calibration_repeats // spec.calibration_slices} interleaved repeats, every cost the median over "
               "the slices, so the calibration spans the time of the runs it prices"
               if spec.calibration_slices > 1 else
               f"one snapshot before the rounds, medians of {spec.calibration_repeats} interleaved repeats")
            + ") and each run's counts (steps, admission steps and their prompts, drafts, draft tokens, accepted "
            "tokens), never its time.",
            *(distribution.lines() if distribution else []),
            f"Machine state: {state}; {_torch()}. Full report: `trtspec sweep ... --repeats N --shuffle --out "
            "results.jsonl && trtspec report results.jsonl --out report/`.",
        ],
    )


def _halves(ratios: Sequence[float]) -> str:
    """|median of the even rounds' ratios / the odd rounds' - 1| as a percentage, '-' with one round."""
    if len(ratios) < 2:
        return "-"
    return f"{100 * abs(statistics.median(ratios[0::2]) / statistics.median(ratios[1::2]) - 1):.1f}%"


# ---------------------------------------------------------------------------------------------------------------
# suffix decoding: cold vs warm cache, per suite, batch 1

SUFFIX_SUITES = ("code", "prose", "grounded", "repetitive")


def suffix_specs(*, model: str, draft: str, suite: str, num_prompts: int, prompt_tokens: int, max_new_tokens: int,
                 suffix_k: int, fixed_k: int, ngram_k: int, adaptive_max_k: int, repeats: int,
                 threads: int) -> list[SweepSpec]:
    """One suite's sweeps at batch 1, each with its own plain baseline (k lists are per sweep): draft_target at a
    fixed k and adaptive, ngram at its k, suffix at its k with a cold and a warm cache."""
    common = dict(model=model, suites=[suite], concurrency=[1], num_prompts=num_prompts, prompt_tokens=prompt_tokens,
                  max_new_tokens=max_new_tokens, repeats=repeats, threads=threads, calibrate=False)
    return [SweepSpec.build(**common, drafts=[draft], methods=["draft_target"], k=[0, fixed_k],
                            adaptive=[adaptive_max_k], max_draft_len=max(fixed_k, adaptive_max_k)),
            SweepSpec.build(**common, drafts=[], methods=["ngram"], k=[0, ngram_k], max_draft_len=ngram_k),
            SweepSpec.build(**common, drafts=[], methods=["suffix"], k=[0, suffix_k], max_draft_len=suffix_k)]


def suffix_section(specs: Sequence[SweepSpec], measured: dict[str, list[Measured]],
                   comparisons: dict[str, Sequence[Comparison]], comparison_notes: Sequence[str] = ()) -> Section:
    """Rows per suite: the engine's plain decoding (median of the sweeps' baselines), every speculative case against
    its own sweep's baseline, then the comparisons against the suite's engine plain; notes check the goals."""
    rows: list[list[str]] = []
    # suite -> (configuration, wall speedup, cpu speedup): the fastest by CPU time (steadier on a shared machine),
    # warm suffix caches left out (a warm cache is repeated traffic, not a setting)
    best: dict[str, tuple[str, float, float]] = {}
    rates: dict[str, dict[str, tuple[float, float]]] = {}  # suite -> configuration -> (wall, cpu) tokens/s
    for suite, parts in measured.items():
        plain_wall, plain_cpu, plain_digest, cases = [], [], None, []
        for part in parts:
            groups = list(_by_case(part.records).values())
            base = next(runs for runs in groups if runs[0]["params"]["method"] == BASELINE)
            plain_wall.append(_median_rate(base))
            plain_cpu.append(_median_cpu_rate(base))
            plain_digest = plain_digest or base[0]["metrics"]["output_sha256"]
            cases += [(runs, _median_rate(base), _median_cpu_rate(base), base[0]["metrics"]["output_sha256"])
                      for runs in groups if runs[0]["params"]["method"] != BASELINE]
        wall, cpu = statistics.median(plain_wall), statistics.median(plain_cpu)
        rates[suite] = {"engine: plain": (wall, cpu)}
        rows.append([suite, "engine: plain (k=0)", f"{wall:.1f}", "1.00x", "1.00x", "-", "1.00", "yes"])
        for runs, base_wall, base_cpu, digest in cases:
            name, stats = _suffix_row_name(runs[0]["params"]), runs[0]["metrics"]["stats"]
            rate, cpu_rate = _median_rate(runs), _median_cpu_rate(runs)
            rates[suite][name] = (rate, cpu_rate)
            speedup, cpu_speedup = rate / base_wall, cpu_rate / base_cpu if base_cpu else 0.0
            if runs[0]["params"].get("suffix_cache") != "warm" and cpu_speedup > best.get(suite, ("", 0.0, 0.0))[2]:
                best[suite] = (name, speedup, cpu_speedup)
            rows.append([suite, name, f"{rate:.1f}", f"{speedup:.2f}x", f"{cpu_speedup:.2f}x",
                         f"{stats['mean_acceptance_length']:.2f}" if stats["num_drafts"] else "-",
                         f"{stats['tokens_per_target_forward']:.2f}",
                         _yes(r["metrics"]["output_sha256"] == digest == plain_digest for r in runs)])
        for other in comparisons.get(suite, ()):
            rate = statistics.median(other.tokens_per_s)
            cpu_rate = statistics.median(other.cpu_tokens_per_s) if other.cpu_tokens_per_s else None
            rates[suite][other.name] = (rate, cpu_rate or 0.0)
            rows.append([suite, other.name, f"{rate:.1f}", f"{rate / wall:.2f}x",
                         f"{cpu_rate / cpu:.2f}x" if cpu_rate and cpu else "-", "-", "-",
                         _yes(digest == plain_digest for digest in other.output_sha256)])
    spec = specs[0]
    notes = [
        f"Batch 1 (one request at a time), greedy, EOS ignored: the first {spec.num_prompts} prompts of each suite "
        f"(last {spec.prompt_tokens} tokens), {spec.max_new_tokens} new tokens each, {spec.repeats} round(s) "
        "(medians). Engine rows are `trtspec sweep` cases: per suite, one sweep for draft_target (fixed and adaptive "
        "k), one for ngram, one for suffix, each with its own plain run; a row's speedup is against its own sweep's "
        "plain run, the 'engine: plain' row is their median. Speedup (CPU time) divides tokens per process CPU "
        "second, which other processes on this shared machine do not inflate; speedup (wall) is what a user waits.",
        "Suffix cache: **cold** = emptied before the case; it still learns from the case's own requests as they "
        "finish (request i can draft from the outputs of requests 0..i-1), which is how a fresh server warms up. "
        "**warm** = the same requests ran once just before (retries, regenerations, a repeated template). "
        "Defaults otherwise (vLLM's): max_tree_depth 24, max_cached_requests 10000, max_spec_factor 1, "
        "min_token_prob 0.1, tree drafts; k caps the draft's nodes.",
        *comparison_notes,
    ]
    def verdict(wall_x: float, cpu_x: float, goal: float) -> str:
        return ("met" if min(wall_x, cpu_x) >= goal else "met in one timing only" if max(wall_x, cpu_x) >= goal
                else "not met")

    if "repetitive" in best:
        name, wall_x, cpu_x = best["repetitive"]
        notes.append(f"Goal 1, best trtspec method (cold caches) >= 2.0x plain decoding on the repetitive suite at "
                     f"batch 1: {name} at {cpu_x:.2f}x CPU time / {wall_x:.2f}x wall: "
                     f"{verdict(wall_x, cpu_x, 2.0)}.")
    lookup = next((n for n in rates.get("code", {}) if "prompt lookup" in n), None)
    if "code" in best and lookup:
        name = best["code"][0]
        (wall, cpu), (lookup_wall, lookup_cpu) = rates["code"][name], rates["code"][lookup]
        wall_x, cpu_x = wall / lookup_wall, cpu / lookup_cpu if lookup_cpu else 0.0
        notes.append(f"Goal 2, best trtspec method (cold caches) >= 1.3x transformers prompt lookup on code at batch "
                     f"1: {name} vs {lookup}: {cpu_x:.2f}x CPU time / {wall_x:.2f}x wall "
                     f"({cpu:.1f} vs {lookup_cpu:.1f} tokens per CPU second): {verdict(wall_x, cpu_x, 1.3)}.")
    winners = [f"{suite}: {name} ({cpu_x:.2f}x CPU time, {wall_x:.2f}x wall)"
               for suite, (name, wall_x, cpu_x) in best.items()]
    notes += ["Fastest engine configuration per suite, warm caches left out: " + "; ".join(winners) + ".",
              "The embedded target is a 12M-parameter model trained on the CPython standard library: at temperature 0 "
              "it soon repeats itself (loops of the same lines), and those loops recur across prompts, which is "
              "exactly what the cross-request cache learns; larger models repeat less on prose and more on code, "
              "tool calls and templates. Where suffix decoding does not pay (temperature 1, free-form prose), see "
              "the sweep report's 'Where each method wins' (`trtspec sweep --method ngram,suffix --temperature 0,1`).",
              _machine() + f", Python {platform.python_version()}."]
    return Section(
        title=f"Suffix decoding: cold vs warm cache, per suite, batch 1 ({spec.model} + {specs[0].drafts[0]})",
        columns=["suite", "configuration", "tokens/s", "speedup (wall)", "speedup (CPU time)",
                 "mean acceptance length", "tokens / target forward", "same tokens as plain"],
        rows=rows, notes=notes)


def _suffix_row_name(params: dict[str, Any]) -> str:
    if params.get("adaptive"):
        return f"engine: adaptive k<={params['k']} ({params['method']})"
    cache = f" ({params['suffix_cache']} cache)" if params.get("suffix_cache") else ""
    return f"engine: {params['method']} k={params['k']}{cache}"


# ---------------------------------------------------------------------------------------------------------------
# helpers


def _by_case(records: list[Record]) -> dict[tuple, list[Record]]:
    """Case records grouped by case (every parameter but the round), in run order; rounds in order."""
    groups: dict[tuple, list[Record]] = {}
    for rec in sorted(records, key=lambda r: r["params"].get("repeat", 0)):  # stable: run order within a round
        key = tuple(sorted((k, str(v)) for k, v in rec["params"].items() if k != "repeat"))
        groups.setdefault(key, []).append(rec)
    return groups


def _median_rate(runs: list[Record]) -> float:
    return statistics.median(r["metrics"]["tokens_per_s"] for r in runs)


def _median_cpu_rate(runs: list[Record]) -> float:
    return statistics.median(r["metrics"].get("tokens_per_cpu_s", 0.0) for r in runs)


def _yes(same: Any) -> str:
    return "yes" if all(same) else "NO"


def _torch() -> str:
    import torch

    return f"torch {torch.__version__} with {torch.get_num_threads()} thread(s)"


def _machine() -> str:
    return f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs (shared), {_torch()}"
