"""`make bench`: side-by-side benchmarks on the embedded models, printed as rich tables and written to
docs/benchmarks.md (one `##` section per benchmark, replaced in place on re-runs).

Sections (run all, or pick with --section):
  engine   reference engine at batch 1: plain decoding, draft_target and ngram at k = 1..8, and transformers'
           greedy / assisted generation / prompt lookup on the same models (tokens/s, speedup, acceptance, overhead)
  sweep    `trtspec sweep` on the same pair (draft_target + ngram, k = 0..8, temperature 0 and 1, code + grounded)
           and how close the cost model's predicted speedup comes to the measured one

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


SECTIONS: dict[str, Callable[[argparse.Namespace], Section]] = {"engine": bench_engine, "sweep": bench_sweep}


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
