"""`make bench`: side-by-side benchmarks on the embedded models, printed as rich tables and written to
docs/benchmarks.md (one `##` section per benchmark, replaced in place on re-runs).

Sections (run all, or pick with --section):
  engine   reference engine at batch 1: plain decoding, draft_target and ngram at k = 1..8, and transformers'
           greedy / assisted generation / prompt lookup on the same models (tokens/s, speedup, acceptance, overhead)
  sweep    `trtspec sweep` on the same pair (draft_target + ngram, k = 0..8, temperature 0 and 1, code + grounded)
           and how close the cost model's predicted speedup comes to the measured one
  lookahead lookahead decoding on the embedded target alone: mean acceptance length per prompt suite, lossless check
  batching continuous batching at concurrency 1, 4, 16 (closed loop): no speculation vs fixed k vs adaptive k
           (output tokens/s, per-request latency p50/p99)

A new section is a function `(args) -> Section` registered in SECTIONS; it shares prompt loading and the writer.
Methodology: every configuration decodes the same prompts one at a time (batch 1) with EOS ignored, so all rows
produce the same number of tokens; configurations are interleaved per prompt and total tokens / total seconds is reported
(median over --repeats runs).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "benchmarks.md"


@dataclass
class Section:
    title: str  # the `##` heading (without the command)
    columns: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)


def load_prompts(tokenizer, num_prompts: int, max_prompt_tokens: int) -> list[list[int]]:
    """Held-out prompts, round-robin over the suites (code, prose, grounded), left-truncated to max_prompt_tokens."""
    from trtspec.models import PROMPTS

    suites = [[json.loads(line)["prompt"] for line in (PROMPTS / f"{s}.jsonl").read_text().splitlines() if line]
              for s in ("code", "prose", "grounded")]
    texts = [suites[i % 3][i // 3] for i in range(num_prompts)]
    return [tokenizer.encode(t)[-max_prompt_tokens:] for t in texts]


# ---------------------------------------------------------------------------------------------------------------
# section: engine


@dataclass
class _Run:
    tokens: int = 0
    seconds: float = 0.0
    stats: object = None  # merged AcceptanceStats (engine rows)
    outputs: list[list[int]] = field(default_factory=list)


def bench_engine(args: argparse.Namespace) -> Section:
    import torch
    from transformers import LlamaForCausalLM

    from trtspec.models import resolve_model
    from trtspec.spec.engine import SpecEngine
    from trtspec.spec.metrics import AcceptanceStats
    from trtspec.spec.params import SamplingParams, SpecParams

    target_path, draft_path = resolve_model(args.model), resolve_model(args.draft)
    engine = SpecEngine.from_pretrained(target_path, draft_path, max_k=max(args.ks),
                                        proposer_options={"max_ngram": args.max_ngram})
    hf_target = LlamaForCausalLM.from_pretrained(target_path, dtype=torch.float32).eval()
    hf_draft = LlamaForCausalLM.from_pretrained(draft_path, dtype=torch.float32).eval()
    for model in (hf_target, hf_draft):
        model.generation_config.eos_token_id = None  # ignore EOS, as the engine rows do
        model.generation_config.pad_token_id = 0
    prompts = load_prompts(engine.tokenizer, args.prompts, args.prompt_tokens)
    sampling = SamplingParams(max_new_tokens=args.max_new_tokens, ignore_eos=True)

    def engine_run(spec: SpecParams) -> Callable[[list[int], _Run], None]:
        def run(prompt: list[int], result: _Run) -> None:
            start = time.perf_counter()
            out = engine.generate([prompt], sampling, spec)[0]
            result.seconds += time.perf_counter() - start
            result.tokens += len(out.token_ids)
            result.stats = (result.stats or AcceptanceStats()).merge(out.stats)
            result.outputs.append(out.token_ids)
        return run

    def hf_run(**kwargs: object) -> Callable[[list[int], _Run], None]:
        def run(prompt: list[int], result: _Run) -> None:
            ids = torch.tensor([prompt])
            start = time.perf_counter()
            with torch.inference_mode():
                out = hf_target.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                         max_new_tokens=args.max_new_tokens, **kwargs)
            result.seconds += time.perf_counter() - start
            result.outputs.append(out[0, len(prompt):].tolist())
            result.tokens += len(result.outputs[-1])
        return run

    configs: dict[str, Callable[[list[int], _Run], None]] = {"engine: target only (k=0)": engine_run(SpecParams("none", 0))}
    for method in ("draft_target", "ngram"):
        for k in args.ks:
            configs[f"engine: {method} k={k}"] = engine_run(SpecParams(method, k))
    configs["transformers: greedy"] = hf_run()
    configs["transformers: assisted (defaults: 20, confidence 0.4)"] = hf_run(assistant_model=hf_draft)
    configs["transformers: assisted k=4 (constant)"] = hf_run(
        assistant_model=hf_draft, num_assistant_tokens=4, num_assistant_tokens_schedule="constant",
        assistant_confidence_threshold=0.0)
    for k in (4, 8):
        configs[f"transformers: prompt lookup k={k}"] = hf_run(prompt_lookup_num_tokens=k,
                                                                max_matching_ngram_size=args.max_ngram)

    # warm up, then interleave: for each prompt, every configuration in turn (load drift hits all rows alike)
    engine.generate([prompts[0]], SamplingParams(max_new_tokens=4), SpecParams("draft_target", 2))
    hf_target.generate(torch.tensor([prompts[0]]), max_new_tokens=4, do_sample=False)
    runs: dict[str, list[_Run]] = {name: [_Run() for _ in range(args.repeats)] for name in configs}
    progress = _progress()
    with progress:
        task = progress.add_task("engine section", total=len(configs) * args.repeats * len(prompts))
        for repeat in range(args.repeats):
            for p, prompt in enumerate(prompts):
                for name, run in configs.items():
                    progress.update(task, description=f"run {repeat + 1} prompt {p + 1}: {name}")
                    run(prompt, runs[name][repeat])
                    progress.advance(task)

    baseline = statistics.median(r.tokens / r.seconds for r in runs["engine: target only (k=0)"])
    reference = runs["engine: target only (k=0)"][0].outputs
    rows = []
    for name, results in runs.items():
        tok_s = statistics.median(r.tokens / r.seconds for r in results)
        stats = results[0].stats
        same = all(r.outputs == reference for r in results)
        rows.append([
            name,
            f"{tok_s:.1f}",
            f"{tok_s / baseline:.2f}x",
            f"{stats.mean_acceptance_length:.2f}" if stats is not None and stats.num_drafts else "-",
            f"{stats.acceptance_rate:.2f}" if stats is not None and stats.num_drafts else "-",
            f"{stats.tokens_per_target_forward:.2f}" if stats is not None else "-",
            f"{100 * stats.overhead_share:.0f}%" if stats is not None else "-",
            "yes" if same else "NO",
        ])
    hf_greedy = statistics.median(r.tokens / r.seconds for r in runs["transformers: greedy"])
    return Section(
        title=f"Reference engine vs transformers, batch 1 ({args.model} + {args.draft})",
        columns=["configuration", "tokens/s", "speedup vs engine plain", "mean acceptance length", "acceptance rate",
                 "tokens / target forward", "host overhead", "same tokens as plain"],
        rows=rows,
        notes=[
            f"{args.prompts} held-out prompts (code/prose/grounded round-robin, last {args.prompt_tokens} tokens), "
            f"{args.max_new_tokens} new tokens each, greedy, EOS ignored, batch 1; configurations interleaved per "
            f"prompt; tokens/s = total tokens / total seconds, median of {args.repeats} run(s).",
            f"Engine plain decoding runs at {baseline:.1f} tokens/s, transformers greedy at {hf_greedy:.1f} tokens/s "
            f"(engine / transformers = {baseline / hf_greedy:.2f}x).",
            "Mean acceptance length = 1 + accepted / drafts (vLLM definition); tokens / target forward includes the "
            "prefill forward. Host overhead = share of engine step time spent outside draft and target forwards "
            "(batch assembly, sampling, verification, bookkeeping).",
            f"n-gram lookup on both sides: max n-gram size {args.max_ngram}, min 1. transformers' assisted generation "
            "with defaults drafts up to 20 tokens and stops early when the draft's confidence drops below 0.4.",
            "On CPU a target forward over k + 1 tokens costs noticeably more than over one token (and the draft "
            "model is not free), so speedup grows much more slowly than tokens per target forward.",
            "'same tokens as plain' checks every configuration against the engine's plain greedy output "
            "(speculation must be lossless at temperature 0).",
            f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs (shared), "
            f"torch {torch.__version__} with {torch.get_num_threads()} thread(s), Python {platform.python_version()}.",
        ],
    )


# ---------------------------------------------------------------------------------------------------------------
# section: sweep


def bench_sweep(args: argparse.Namespace) -> Section:
    """`trtspec sweep` on the embedded pair (draft_target + ngram, k = 0..max, T 0/1, code + grounded suites) and
    the cost model's check: per configuration, the best measured k and the predicted speedup there."""
    from trtspec.sweep.analysis import TOLERANCE, load_results
    from trtspec.sweep.grid import SweepSpec
    from trtspec.sweep.runner import run_sweep

    spec = SweepSpec.build(model=args.model, drafts=[args.draft], methods=["draft_target", "ngram"],
                           k=[0, *args.ks], temperatures=[0.0, 1.0], suites=["code", "grounded"], concurrency=[1],
                           num_prompts=args.sweep_prompts, max_new_tokens=args.sweep_new_tokens,
                           max_draft_len=max(args.ks), threads=args.threads, calibration_batch_sizes=[1, 4, 16])
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "results.jsonl"
        summary = run_sweep(spec, out, show_progress=True)
        results = load_results(out)
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
        title=f"Sweep + cost model ({args.model} + {args.draft}, batch 1, {results.timing} time)",
        columns=["configuration", "best k", "mean acceptance length", "measured speedup", "predicted speedup",
                 "error", f"k = 1..{max(args.ks)} within {TOLERANCE:.0%}"],
        rows=rows,
        notes=[
            f"`trtspec sweep` with the engine backend: {args.sweep_prompts} prompts per suite, "
            f"{args.sweep_new_tokens} new tokens each, EOS ignored, {summary.errors} failed cases. Speedup = tokens "
            f"per {results.timing} second vs plain decoding (k = 0) of the same suite and temperature.",
            f"Cost model within {TOLERANCE:.0%} of measured for {sum(bool(r.within_tolerance) for r in checked)} of "
            f"{len(checked)} cases. Full report: `trtspec sweep ... --out results.jsonl && trtspec report "
            "results.jsonl --out report/`.",
        ],
    )


# ---------------------------------------------------------------------------------------------------------------
# section: batching


@dataclass
class _LoadRun:
    tokens: int
    seconds: float
    latencies: list[float]
    outputs: dict[int, list[int]]
    mean_k: float


def closed_loop(engine, prompts: list[list[int]], sampling, spec, concurrency: int, num_requests: int) -> _LoadRun:
    """Keep `concurrency` requests in flight until `num_requests` finished; prompts are used round-robin."""
    submitted: dict[int, tuple[int, float]] = {}  # request id -> (request index, submit time)
    outputs: dict[int, list[int]] = {}
    latencies: list[float] = []
    drafted = steps = 0
    next_index = 0
    start = time.perf_counter()
    while len(latencies) < num_requests:
        while next_index < num_requests and len(submitted) - len(latencies) < concurrency:
            rid = engine.add_request(prompts[next_index % len(prompts)], sampling, spec)
            submitted[rid] = (next_index, time.perf_counter())
            outputs[next_index] = []
            next_index += 1
        for delta in engine.step():
            index, t0 = submitted[delta.request_id]
            outputs[index].extend(delta.token_ids)
            if delta.finished:
                latencies.append(time.perf_counter() - t0)
                drafted += delta.stats.num_draft_tokens
                steps += delta.stats.num_target_forwards
    seconds = time.perf_counter() - start
    return _LoadRun(sum(len(o) for o in outputs.values()), seconds, latencies, outputs, drafted / max(steps, 1))


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def bench_batching(args: argparse.Namespace) -> Section:
    import torch

    from trtspec.models import resolve_model
    from trtspec.spec.engine import SpecEngine
    from trtspec.spec.params import SamplingParams, SpecParams

    engine = SpecEngine.from_pretrained(resolve_model(args.model), resolve_model(args.draft), max_k=8)
    prompts = load_prompts(engine.tokenizer, max(args.concurrency) * 2, args.batching_prompt_tokens)
    sampling = SamplingParams(max_new_tokens=args.batching_new_tokens, ignore_eos=True)
    modes = {
        "no speculation": SpecParams("none", 0),
        f"fixed k={args.fixed_k} (draft_target)": SpecParams("draft_target", args.fixed_k),
        f"adaptive k<={args.adaptive_max_k} (draft_target)": SpecParams("draft_target", args.adaptive_max_k,
                                                                        adaptive=True),
    }
    # warm up every path (and the adaptive policy's acceptance and cost estimates) once
    for spec in modes.values():
        closed_loop(engine, prompts, SamplingParams(max_new_tokens=16, ignore_eos=True), spec, 4, 4)
    runs: dict[tuple[int, str], list[_LoadRun]] = {}
    progress = _progress()
    with progress:
        task = progress.add_task("batching section", total=len(args.concurrency) * len(modes) * args.batching_repeats)
        for _ in range(args.batching_repeats):
            for c in args.concurrency:
                for name, spec in modes.items():
                    progress.update(task, description=f"c={c} {name}")
                    runs.setdefault((c, name), []).append(
                        closed_loop(engine, prompts, sampling, spec, c, max(args.batching_min_requests, 2 * c)))
                    progress.advance(task)
    rows, checks = [], []
    for c in args.concurrency:
        rates = {}
        plain = runs[(c, "no speculation")][0].outputs
        for name in modes:
            results = runs[(c, name)]
            rates[name] = statistics.median(r.tokens / r.seconds for r in results)
            best = min(results, key=lambda r: abs(r.tokens / r.seconds - rates[name]))
            spread = [r.tokens / r.seconds for r in results]
            rows.append([name, str(c), f"{rates[name]:.1f}", f"{min(spread):.0f}-{max(spread):.0f}",
                         f"{1000 * _percentile(best.latencies, 50):.0f}",
                         f"{1000 * _percentile(best.latencies, 99):.0f}", f"{best.mean_k:.2f}",
                         "yes" if all(r.outputs == plain for r in results) else "NO"])
        adaptive = next(n for n in modes if n.startswith("adaptive"))
        best_other = max(rate for n, rate in rates.items() if n != adaptive)
        checks.append(f"c={c}: adaptive / best of the others = {rates[adaptive] / best_other:.2f}"
                      + ("" if rates[adaptive] >= 0.95 * best_other else " (more than 5% worse)"))
    return Section(
        title=f"Continuous batching: no speculation vs fixed k vs adaptive k ({args.model} + {args.draft})",
        columns=["configuration", "concurrency", "output tokens/s", "min-max over runs", "latency p50 (ms)", "latency p99 (ms)",
                 "draft tokens / step", "same tokens as plain"],
        rows=rows,
        notes=[
            f"Closed loop: `concurrency` requests in flight, a new one submitted when one finishes, "
            f"max(2 x concurrency, {args.batching_min_requests}) requests per cell; held-out prompts (last "
            f"{args.batching_prompt_tokens} tokens), {args.batching_new_tokens} new tokens each, greedy, EOS ignored. "
            f"Output tokens/s = all output tokens / wall time (median of {args.batching_repeats} interleaved runs); "
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
            f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs (shared), "
            f"torch {torch.__version__} with {torch.get_num_threads()} thread(s).",
        ],
    )


# ---------------------------------------------------------------------------------------------------------------
# section: lookahead


def bench_lookahead(args: argparse.Namespace) -> Section:
    import torch

    from trtspec.methods import lookahead_max_draft_len
    from trtspec.models import PROMPTS, resolve_model
    from trtspec.spec.engine import SpecEngine
    from trtspec.spec.metrics import AcceptanceStats
    from trtspec.spec.params import SamplingParams, SpecParams

    configs = [tuple(int(v) for v in c.split(",")) for c in args.lookahead_configs]
    rows = []
    sampling = SamplingParams(max_new_tokens=args.lookahead_new_tokens, ignore_eos=True)
    overall: dict[tuple[int, ...], AcceptanceStats] = {c: AcceptanceStats() for c in configs}
    for suite in ("code", "prose", "grounded"):
        texts = [json.loads(line)["prompt"] for line in (PROMPTS / f"{suite}.jsonl").read_text().splitlines() if line]
        for config in configs:
            trie_nodes = max(1, config[2] * (config[1] - 1))  # k caps the trie: G n-grams of N - 1 tokens
            engine = SpecEngine.from_pretrained(resolve_model(args.model), max_k=max(8, trie_nodes),
                                                proposer_options={"lookahead": config})
            prompts = [engine.encode(t)[-args.batching_prompt_tokens:] for t in texts[: args.lookahead_prompts]]
            start = time.perf_counter()
            plain = engine.generate(prompts, sampling, SpecParams("none", 0))
            plain_seconds = time.perf_counter() - start
            start = time.perf_counter()
            outs = engine.generate(prompts, sampling, SpecParams("lookahead", trie_nodes))
            seconds = time.perf_counter() - start
            stats = AcceptanceStats()
            for out in outs:
                stats.merge(out.stats)
            overall[config].merge(stats)
            rows.append([f"W,N,G={','.join(map(str, config))}", suite, str(len(prompts)),
                         str(lookahead_max_draft_len(*config)), f"{stats.mean_acceptance_length:.2f}",
                         f"{stats.acceptance_rate:.2f}", f"{stats.tokens_per_target_forward:.2f}",
                         f"{sum(len(o.token_ids) for o in outs) / seconds:.1f}",
                         f"{sum(len(o.token_ids) for o in plain) / plain_seconds:.1f}",
                         "yes" if [o.token_ids for o in outs] == [o.token_ids for o in plain] else "NO"])
    for config in configs:
        stats = overall[config]
        rows.append([f"W,N,G={','.join(map(str, config))}", "all", "-", str(lookahead_max_draft_len(*config)),
                     f"{stats.mean_acceptance_length:.2f}", f"{stats.acceptance_rate:.2f}",
                     f"{stats.tokens_per_target_forward:.2f}", "-", "-", "-"])
    return Section(
        title=f"Lookahead decoding on the held-out prompts ({args.model} alone)",
        columns=["lookahead", "suite", "prompts", "max_draft_len (TRT-LLM)", "mean acceptance length",
                 "acceptance rate", "tokens / target forward", "tokens/s (batched)", "plain tokens/s (batched)",
                 "same tokens as plain"],
        rows=rows,
        notes=[
            f"First {args.lookahead_prompts} prompts of each suite (last {args.batching_prompt_tokens} tokens), "
            f"{args.lookahead_new_tokens} new tokens, greedy, EOS ignored; every suite's prompts run as one "
            "continuous batch, k = G x (N - 1): every step verifies all (up to G) pooled n-grams that start with "
            "the last token, merged into one token trie (a tree draft; shared prefixes verified once).",
            "Mean acceptance length = 1 + accepted / drafts over the steps that had a candidate n-gram; acceptance "
            "rate = accepted / trie nodes (all branches count as drafted); tokens / target forward counts every "
            "forward (prefill and steps without a candidate included).",
            "The Jacobi window (N - 1 levels x W columns) rides in the same target forward as the draft, so each step "
            "forwards up to max_draft_len extra tokens per sequence; on a CPU that compute is not free (compare "
            "the two tokens/s columns, measured back to back on the same batch).",
            f"torch {torch.__version__} with {torch.get_num_threads()} thread(s).",
        ],
    )


SECTIONS: dict[str, Callable[[argparse.Namespace], Section]] = {
    "engine": bench_engine, "sweep": bench_sweep, "batching": bench_batching, "lookahead": bench_lookahead,
}


# ---------------------------------------------------------------------------------------------------------------
# output


def _progress():
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description:<75}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())


def print_section(section: Section) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=section.title)
    for i, column in enumerate(section.columns):
        table.add_column(column, justify="left" if i == 0 else "right")
    for row in section.rows:
        table.add_row(*row)
    Console(width=200).print(table)


def to_markdown(section: Section, command: str) -> str:
    lines = [f"## {section.title}", "", f"Command: `{command}`", ""]
    lines.append("| " + " | ".join(section.columns) + " |")
    lines.append("|" + "|".join("---" if i == 0 else "---:" for i in range(len(section.columns))) + "|")
    lines += ["| " + " | ".join(row) + " |" for row in section.rows]
    lines += [""] + [f"- {note}" for note in section.notes] + [""]
    return "\n".join(lines)


def write_section(path: Path, section: Section, command: str) -> None:
    """Replace (or append) the `## <title>` section of `path`, atomically."""
    text = path.read_text() if path.exists() else "# Benchmarks\n\nMeasured with `make bench` (scripts/bench.py).\n"
    heading = f"## {section.title}"
    body = to_markdown(section, command)
    if heading in text:
        start = text.index(heading)
        end = text.find("\n## ", start + len(heading))
        text = text[:start] + body + (text[end + 1 :] if end != -1 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + body
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as tmp:
        tmp.write(text)
    os.replace(tmp.name, path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--section", choices=sorted(SECTIONS), action="append",
                        help="section(s) to run (default: all)")
    parser.add_argument("--model", default="tiny", help="target (embedded name or HF directory)")
    parser.add_argument("--draft", default="tiny-draft", help="draft model")
    parser.add_argument("--prompts", type=int, default=6, help="number of held-out prompts")
    parser.add_argument("--prompt-tokens", type=int, default=128, help="prompt length cap (tokens)")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="tokens generated per prompt")
    parser.add_argument("--ks", type=int, nargs="+", default=list(range(1, 9)), help="draft lengths to measure")
    parser.add_argument("--max-ngram", type=int, default=3, help="largest n-gram matched by prompt lookup")
    parser.add_argument("--repeats", type=int, default=1, help="runs over all prompts per configuration (median)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16], help="batching: requests in flight")
    parser.add_argument("--fixed-k", type=int, default=4, help="batching: k of the fixed-k rows")
    parser.add_argument("--adaptive-max-k", type=int, default=8, help="batching: largest k adaptive may choose")
    parser.add_argument("--batching-new-tokens", type=int, default=32, help="batching: tokens generated per request")
    parser.add_argument("--batching-prompt-tokens", type=int, default=64, help="batching: prompt length cap")
    parser.add_argument("--batching-min-requests", type=int, default=6, help="batching: requests per cell at least")
    parser.add_argument("--batching-repeats", type=int, default=1, help="batching: interleaved runs per cell")
    parser.add_argument("--lookahead-configs", nargs="+", default=["4,4,4", "7,5,7"], help="lookahead: W,N,G")
    parser.add_argument("--lookahead-prompts", type=int, default=8, help="lookahead: prompts per suite")
    parser.add_argument("--lookahead-new-tokens", type=int, default=48, help="lookahead: tokens per prompt")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--sweep-prompts", type=int, default=4, help="sweep section: prompts per suite")
    parser.add_argument("--sweep-new-tokens", type=int, default=64, help="sweep section: tokens per request")
    parser.add_argument("--out", type=Path, default=DOCS, help="markdown file to update")
    parser.add_argument("--no-write", action="store_true", help="print only; do not update the markdown file")
    args = parser.parse_args(argv)

    import torch

    torch.manual_seed(0)  # scripts may seed globally; the library never does
    torch.set_num_threads(args.threads)
    command = "python scripts/bench.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    for name in args.section or sorted(SECTIONS):
        section = SECTIONS[name](args)
        print_section(section)
        for note in section.notes:
            print(f"  - {note}")
        if not args.no_write:
            write_section(args.out, section, command.strip())
            print(f"wrote section '{section.title}' to {args.out}")


if __name__ == "__main__":
    main()
