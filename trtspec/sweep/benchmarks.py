"""The sections of docs/benchmarks.md (`make bench`) as sweeps: each section is a SweepSpec, run by `run_sweep` (the
engine backend's closed loop), and a table made from its case records. No torch at import; the runs load it.

  engine     batch 1 (concurrency 1) on a code/prose/grounded mix: plain decoding, draft_target and ngram at k = 1..max
  batching   a closed loop at each concurrency: no speculation vs fixed k vs adaptive k (tokens/s, latency p50/p99)
  lookahead  lookahead W,N,G variants, each suite's prompts as one continuous batch, k = G x (N - 1) (the full trie)
  sweep      the accept-rate sweep and the cost model's check (best k per configuration, predicted vs measured)

What a sweep cannot measure (transformers' generate, as comparison rows) comes from the caller as `Comparison`s;
writing the sections into the Markdown file is the caller's too (scripts/bench.py).
"""

from __future__ import annotations

import os
import platform
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


def batching_spec(*, model: str, draft: str, concurrency: Sequence[int], fixed_k: int, adaptive_max_k: int,
                  max_new_tokens: int, prompt_tokens: int, min_requests: int, repeats: int, threads: int) -> SweepSpec:
    """max(2 x concurrency, min_requests) requests per case over 2 x max(concurrency) mixed prompts."""
    return SweepSpec.build(model=model, drafts=[draft], methods=["draft_target"], k=[0, fixed_k],
                           adaptive=[adaptive_max_k], suites=[MIXED], concurrency=list(concurrency),
                           num_prompts=2 * max(concurrency), num_requests=min_requests, waves=2,
                           prompt_tokens=prompt_tokens, max_new_tokens=max_new_tokens,
                           max_draft_len=max(8, fixed_k, adaptive_max_k), repeats=repeats, threads=threads,
                           calibrate=False)


def batching_section(spec: SweepSpec, measured: Measured, *, min_requests: int) -> Section:
    by_concurrency: dict[int, list[tuple[str, list[Record]]]] = {}
    for runs in _by_case(measured.records).values():
        params = runs[0]["params"]
        if params["method"] == BASELINE:
            name = "no speculation"
        elif params.get("adaptive"):
            name = f"adaptive k<={params['k']} ({params['method']})"
        else:
            name = f"fixed k={params['k']} ({params['method']})"
        by_concurrency.setdefault(params["concurrency"], []).append((name, runs))
    rows, checks = [], []
    for c, modes in by_concurrency.items():
        plain = modes[0][1][0]["metrics"]["output_sha256"]  # the baseline runs first
        rates = {}
        for name, runs in modes:
            spread = [r["metrics"]["tokens_per_s"] for r in runs]
            rates[name] = statistics.median(spread)
            typical = min(runs, key=lambda r: abs(r["metrics"]["tokens_per_s"] - rates[name]))
            latencies, stats = typical["metrics"]["latencies_s"], typical["metrics"]["stats"]
            drafted = stats["num_draft_tokens"] / max(stats["num_target_forwards"], 1)
            rows.append([name, str(c), f"{rates[name]:.1f}", f"{min(spread):.0f}-{max(spread):.0f}",
                         f"{1000 * percentile(latencies, 50):.0f}", f"{1000 * percentile(latencies, 99):.0f}",
                         f"{drafted:.2f}", _yes(r["metrics"]["output_sha256"] == plain for r in runs)])
        adaptive = next(n for n in rates if n.startswith("adaptive"))
        best_other = max(rate for n, rate in rates.items() if n != adaptive)
        checks.append(f"c={c}: adaptive / best of the others = {rates[adaptive] / best_other:.2f}"
                      + ("" if rates[adaptive] >= 0.95 * best_other else " (more than 5% worse)"))
    return Section(
        title=f"Continuous batching: no speculation vs fixed k vs adaptive k ({spec.model} + {spec.drafts[0]})",
        columns=["configuration", "concurrency", "output tokens/s", "min-max over runs", "latency p50 (ms)",
                 "latency p99 (ms)", "draft tokens / step", "same tokens as plain"],
        rows=rows,
        notes=[
            f"Closed loop: `concurrency` requests in flight, a new one submitted when one finishes, "
            f"max(2 x concurrency, {min_requests}) requests per cell; held-out prompts (last "
            f"{spec.prompt_tokens} tokens), {spec.max_new_tokens} new tokens each, greedy, EOS ignored. "
            f"Output tokens/s = all output tokens / wall time (median of {spec.repeats} interleaved runs); "
            "latency = submit to last token of each request (p50/p99 over the requests of the median run).",
            "Adaptive k: each step the engine picks one draft cap K in [0, max k] maximising predicted tokens/s from "
            "per-request acceptance EMAs and online fits of its own step costs (trtspec/spec/adaptive.py); "
            "draft tokens / step = drafted tokens per target forward per request.",
            "Check (adaptive within 5% of the better of the others): " + "; ".join(checks) + "."
            + ("" if all("worse" not in c for c in checks) else
               " Where adaptive trails: it learns acceptance and step costs online and spends every 8th step on a "
               "neighbouring K (exploration), so when the best choice sits at an edge (K = 0 at high concurrency, "
               "where every draft token costs target compute, or a fixed k that happens to be optimal) it pays a few "
               "percent for staying adaptive; and the min-max column shows how much the same configuration varies "
               "between runs on this shared machine, which is often more than 5%."),
            _machine() + ".",
        ],
    )


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
    from trtspec.spec.metrics import AcceptanceStats

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


def sweep_spec(*, model: str, draft: str, ks: Sequence[int], num_prompts: int, max_new_tokens: int,
               threads: int) -> SweepSpec:
    return SweepSpec.build(model=model, drafts=[draft], methods=["draft_target", "ngram"], k=[0, *ks],
                           temperatures=[0.0, 1.0], suites=["code", "grounded"], concurrency=[1],
                           num_prompts=num_prompts, max_new_tokens=max_new_tokens, max_draft_len=max(ks),
                           threads=threads, calibration_batch_sizes=[1, 4, 16])


def sweep_section(spec: SweepSpec, measured: Measured) -> Section:
    """Per (suite, temperature, variant): the best measured k and the cost model's predicted speedup there."""
    results = measured.results
    groups: dict[tuple, list] = {}
    for row in results.rows:
        if row.k:
            groups.setdefault((row.suite, float(row.params["temperature"]), row.variant), []).append(row)
    rows = []
    checked = [r for r in results.rows if r.k and r.error is not None]
    for (suite, temperature, variant), group in sorted(groups.items()):
        best = max(group, key=lambda r: r.measured_speedup or 0.0)
        inside = sum(bool(r.within_tolerance) for r in group)
        rows.append([f"{variant} T={temperature:g} {suite}", str(best.k), f"{best.tokens_per_step:.2f}",
                     f"{best.measured_speedup:.2f}x", f"{best.predicted_speedup:.2f}x", f"{100 * best.error:+.0f}%",
                     f"{inside}/{len(group)}"])
    return Section(
        title=f"Sweep + cost model ({spec.model} + {spec.drafts[0]}, batch 1, {results.timing} time)",
        columns=["configuration", "best k", "mean acceptance length", "measured speedup", "predicted speedup",
                 "error", f"k = 1..{max(spec.k)} within {TOLERANCE:.0%}"],
        rows=rows,
        notes=[
            f"`trtspec sweep` with the engine backend: {spec.num_prompts} prompts per suite, "
            f"{spec.max_new_tokens} new tokens each, EOS ignored, {measured.summary.errors} failed cases. Speedup = "
            f"tokens per {results.timing} second vs plain decoding (k = 0) of the same suite and temperature.",
            f"Cost model within {TOLERANCE:.0%} of measured for {sum(bool(r.within_tolerance) for r in checked)} of "
            f"{len(checked)} cases. Full report: `trtspec sweep ... --out results.jsonl && trtspec report "
            "results.jsonl --out report/`.",
        ],
    )


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


def _yes(same: Any) -> str:
    return "yes" if all(same) else "NO"


def _torch() -> str:
    import torch

    return f"torch {torch.__version__} with {torch.get_num_threads()} thread(s)"


def _machine() -> str:
    return f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs (shared), {_torch()}"
