"""The `headline` section of docs/benchmarks.md (`python scripts/bench.py --section headline`): issue 42's first
acceptance line in one command, one process, every configuration on the same held-out prompts.

Rows: the engine's plain decoding (the baseline of every ratio), draft_target at k, EAGLE-3 (chain and dynamic tree
at each k), n-gram, suffix decoding (its cache emptied at the start of every round: each round is a cold start, the
cache learning only from that round's earlier requests), every registered hybrid method (suffix + a model drafter),
and transformers' greedy `generate`, assisted generation and prompt lookup on the same models. With a baseline
revision, the engine's plain decoding of that git revision too (unpacked with `git archive` and run in a subprocess,
plain_worker.py), so "the engine's plain decoding is no slower than before" is measured in the same run.

Timing: per prompt, every configuration in turn (a burst of load from other processes hits all rows alike), the
prompts in `rounds` rounds; a row's ratio is the median over rounds of (its tokens/s / engine plain's tokens/s in the
same round), on wall time and on the timing thread's CPU time (other processes' time slices are not in the CPU clock); spread =
the lowest and highest round. Greedy, EOS ignored: every row generates the same number of tokens, and each row's
outputs are checked equal to the engine's plain output. No torch at import; `measure` loads it.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchlib.benchmarks import MIXED, Section, _machine

ROOT = Path(__file__).resolve().parents[2]
PLAIN = "engine: plain (k=0)"
BEFORE, NOW = "worker, baseline revision:", "worker, this tree:"  # the engine in a subprocess (plain_worker.py)
BEFORE_PLAIN, NOW_PLAIN = f"{BEFORE} plain (k=0)", f"{NOW} plain (k=0)"
# issue 42, acceptance line 1: ratios to the engine's plain decoding
GOALS = {"best method (hybrids included)": 3.0, "draft_target k=4": 1.8, "EAGLE-3 (best tree and k)": 1.5}
NO_SLOWER = 0.97  # plain now / plain before at least this (the machine's round-to-round noise is a few percent)
HYBRID_PROPOSERS = ("suffix_draft", "suffix_eagle3")  # picked up when registered (methods.hybrid)


@dataclass(frozen=True)
class HeadlineSpec:
    model: str = "tiny"
    draft: str = "tiny-draft"
    eagle: str = "tiny-eagle"
    num_prompts: int = 6  # held-out, code/prose/grounded round-robin
    prompt_tokens: int = 128  # the last tokens of each prompt
    new_tokens: int = 128
    rounds: int = 3
    draft_k: int = 4
    eagle_ks: tuple[int, ...] = (4, 8)
    ngram_k: int = 5
    suffix_k: int = 16
    lookup_k: int = 8  # transformers' prompt_lookup_num_tokens
    max_ngram: int = 3  # n-gram size matched by prompt lookup
    baseline_rev: str | None = None  # git revision whose plain decoding runs beside (None: not measured)
    threads: int = 1


@dataclass
class Row:
    """One configuration's results, per round: total tokens, wall and CPU seconds, outputs in prompt order."""

    name: str
    group: str  # "engine", "worker", "transformers"
    tokens: list[int] = field(default_factory=list)
    wall_s: list[float] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)
    outputs: list[list[list[int]]] = field(default_factory=list)
    drafts: int = 0  # engine rows: drafts and accepted draft tokens (last round: greedy, the same every round)
    accepted: int = 0

    def start_round(self) -> None:
        self.tokens.append(0)
        self.wall_s.append(0.0)
        self.cpu_s.append(0.0)
        self.outputs.append([])
        self.drafts = self.accepted = 0

    def add(self, tokens: list[int], wall_s: float, cpu_s: float, drafts: int = 0, accepted: int = 0) -> None:
        self.tokens[-1] += len(tokens)
        self.wall_s[-1] += wall_s
        self.cpu_s[-1] += cpu_s
        self.outputs[-1].append(tokens)
        self.drafts += drafts
        self.accepted += accepted

    def rates(self, clock: str) -> list[float]:
        seconds = self.wall_s if clock == "wall" else self.cpu_s
        return [t / s if s > 0 else 0.0 for t, s in zip(self.tokens, seconds, strict=True)]


# A configuration: prompt ids -> (output ids, wall s, cpu s, drafts, accepted draft tokens)
Runner = Callable[[list[int]], tuple[list[int], float, float, int, int]]


def run_rounds(runners: dict[str, Runner], rows: dict[str, Row], prompts: list[list[int]], rounds: int,
               resets: list[Callable[[], None]], label: str | None = None) -> None:
    """Every runner on every prompt, interleaved per prompt, `rounds` times; `resets` before each round (suffix
    caches cold at the start of every round). No live progress bar: its thread would share the timed core."""
    for round_number in range(rounds):
        if label:
            print(f"{label}: round {round_number + 1} of {rounds}", file=sys.stderr, flush=True)
        for reset in resets:
            reset()
        for row in rows.values():
            row.start_round()
        for prompt in prompts:
            for name, run in runners.items():
                rows[name].add(*run(prompt))


def measure(spec: HeadlineSpec) -> tuple[list[Row], dict[str, Any]]:
    """Run every configuration on every prompt, interleaved, in `spec.rounds` rounds; rows in table order and facts
    for the notes (prompt count, load averages, the baseline's package path)."""
    import os

    import torch

    from trtspec.models import resolve_model
    from trtspec.sweep.prompts import last_tokens, load_suite

    torch.set_num_threads(spec.threads)
    facts: dict[str, Any] = {"load": [os.getloadavg()[0]]}
    with ExitStack() as stack:
        runners, resets, engine = _engine_runners(spec)
        prompts = [last_tokens(engine.encode(text), spec.prompt_tokens)
                   for text in load_suite(MIXED, spec.num_prompts).prompts]
        if spec.baseline_rev:  # both revisions in a worker process each: the same conditions for the two
            before = stack.enter_context(_worker(spec, spec.baseline_rev))
            now = stack.enter_context(_worker(spec, None))
            facts["baseline_package"] = before.package
            draft_target = f"engine: draft_target k={spec.draft_k}"
            runners = {PLAIN: runners.pop(PLAIN), BEFORE_PLAIN: before.runner("none", 0), NOW_PLAIN: now.runner("none", 0),
                       draft_target: runners.pop(draft_target),
                       f"{BEFORE} draft_target k={spec.draft_k}": before.runner("draft_target", spec.draft_k),
                       f"{NOW} draft_target k={spec.draft_k}": now.runner("draft_target", spec.draft_k),
                       **runners}
        runners.update(_transformers_runners(spec))
        rows = {name: Row(name, "worker" if name.startswith("worker") else "transformers"
                          if name.startswith("transformers") else "engine") for name in runners}
        for run in runners.values():  # warm-up, untimed
            run(prompts[0][:16] if len(prompts[0]) > 16 else prompts[0])
        run_rounds(runners, rows, prompts, spec.rounds, resets, label="headline")
    facts["load"].append(os.getloadavg()[0])
    facts["num_prompts"] = len(prompts)
    facts["model_path"] = str(resolve_model(spec.model))
    return list(rows.values()), facts


def _engine_runners(spec: HeadlineSpec) -> tuple[dict[str, Runner], list[Callable[[], None]], Any]:
    """The engine rows (one engine with the draft model and the EAGLE-3 drafter as a dynamic tree, one with the
    drafter as a chain, sharing the target's weights), the suffix caches' resets, and the main engine."""
    from trtspec.contracts.engine import EagleTree, Hybrid, ProposerOptions
    from trtspec.methods import METHODS
    from trtspec.models import resolve_eagle
    from trtspec.spec.engine import SpecEngine
    from trtspec.spec.params import SamplingParams, SpecParams

    max_k = max(spec.draft_k, *spec.eagle_ks, spec.ngram_k, spec.suffix_k)
    # the hybrids' model drafter drafts draft_k tokens where the suffix tree does not (its k caps the suffix tree)
    engine = SpecEngine.from_pretrained(spec.model, draft=spec.draft, eagle=spec.eagle, max_k=max_k,
                                        options=ProposerOptions(hybrid=Hybrid(drafter_k=spec.draft_k)))
    chain = SpecEngine(engine.target, tokenizer=engine.tokenizer, max_k=max_k, eagle=resolve_eagle(spec.eagle),
                       options=ProposerOptions(eagle_tree=EagleTree.parse("chain")))
    sampling = SamplingParams(temperature=0.0, max_new_tokens=spec.new_tokens, ignore_eos=True)

    def runner(eng: Any, method: str, k: int) -> Runner:
        params = SpecParams(method=method, k=k)

        def run(prompt: list[int]) -> tuple[list[int], float, float, int, int]:
            start, cpu = time.perf_counter(), time.thread_time()
            out = eng.generate([prompt], sampling, params)[0]
            wall_s, cpu_s = time.perf_counter() - start, time.thread_time() - cpu
            return out.token_ids, wall_s, cpu_s, out.stats.num_drafts, out.stats.num_accepted_tokens

        return run

    runners = {PLAIN: runner(engine, "none", 0),
               f"engine: draft_target k={spec.draft_k}": runner(engine, "draft_target", spec.draft_k)}
    for k in spec.eagle_ks:
        runners[f"engine: eagle3 chain k={k}"] = runner(chain, "eagle3", k)
        runners[f"engine: eagle3 dynamic tree k={k}"] = runner(engine, "eagle3", k)
    runners[f"engine: ngram k={spec.ngram_k}"] = runner(engine, "ngram", spec.ngram_k)
    if "suffix" in engine.available_methods:
        runners[f"engine: suffix k={spec.suffix_k} (cold cache)"] = runner(engine, "suffix", spec.suffix_k)
    for name in HYBRID_PROPOSERS:  # another change adds them; measured when registered and runnable here
        if name in METHODS and name in engine.available_methods:
            runners[f"engine: {name} k={spec.suffix_k}, drafter k={spec.draft_k} (hybrid, cold cache)"] = \
                runner(engine, name, spec.suffix_k)
    resets = [p.reset for p in engine.proposers.values() if hasattr(p, "reset")]
    return runners, resets, engine


def _transformers_runners(spec: HeadlineSpec) -> dict[str, Runner]:
    """transformers' greedy, assisted (defaults) and prompt-lookup `generate` on the same models, EOS ignored."""
    import torch
    from transformers import LlamaForCausalLM

    from trtspec.models import resolve_model

    target = LlamaForCausalLM.from_pretrained(resolve_model(spec.model), dtype=torch.float32).eval()
    draft = LlamaForCausalLM.from_pretrained(resolve_model(spec.draft), dtype=torch.float32).eval()
    for model in (target, draft):
        model.generation_config.eos_token_id = None  # ignore EOS, as the engine rows do
        model.generation_config.pad_token_id = 0

    def runner(**kwargs: Any) -> Runner:
        def run(prompt: list[int]) -> tuple[list[int], float, float, int, int]:
            ids = torch.tensor([prompt])  # [1, prompt]
            start, cpu = time.perf_counter(), time.thread_time()
            with torch.inference_mode():
                out = target.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                      max_new_tokens=spec.new_tokens, **kwargs)  # [1, prompt + new]
            wall_s, cpu_s = time.perf_counter() - start, time.thread_time() - cpu
            return out[0, len(prompt):].tolist(), wall_s, cpu_s, 0, 0

        return run

    return {"transformers: greedy": runner(),
            "transformers: assisted generation (tiny-draft, defaults: 20, confidence 0.4)": runner(assistant_model=draft),
            f"transformers: prompt lookup k={spec.lookup_k}": runner(prompt_lookup_num_tokens=spec.lookup_k,
                                                                     max_matching_ngram_size=spec.max_ngram)}


@dataclass
class _Worker:
    package: str
    runner: Callable[[str, int], Runner]  # (method, k) -> the baseline engine's runner


@contextmanager
def _worker(spec: HeadlineSpec, rev: str | None) -> Iterator[_Worker]:
    """plain_worker.py over `git archive <rev> trtspec` unpacked into a temporary directory (rev None: this tree)."""
    with tempfile.TemporaryDirectory(prefix="trtspec-baseline-") as tmp:
        if rev is not None:
            archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", rev, "trtspec"],
                                     check=True, capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        path = tmp if rev is not None else str(ROOT)
        env = {**__import__("os").environ, "PYTHONPATH": path, "OMP_NUM_THREADS": str(spec.threads)}
        proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("plain_worker.py")), spec.model,
                                 spec.draft, str(spec.threads)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                                cwd=tmp)
        try:
            assert proc.stdout is not None and proc.stdin is not None
            package = json.loads(proc.stdout.readline())["trtspec"]
            if not package.startswith(path):
                raise RuntimeError(f"the worker imported {package}, not the package under {path}")

            def runner(method: str, k: int) -> Runner:
                def run(prompt: list[int]) -> tuple[list[int], float, float, int, int]:
                    request = {"prompt": prompt, "new_tokens": spec.new_tokens, "method": method, "k": k}
                    proc.stdin.write(json.dumps(request) + "\n")  # type: ignore[union-attr]
                    proc.stdin.flush()  # type: ignore[union-attr]
                    reply = json.loads(proc.stdout.readline())  # type: ignore[union-attr]
                    return reply["tokens"], reply["wall_s"], reply["cpu_s"], reply["drafts"], reply["accepted"]

                return run

            yield _Worker(package=f"{rev or 'this tree'} ({package})", runner=runner)
        finally:
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(timeout=60)


# ---------------------------------------------------------------------------------------------------------------
# the table


def ratios(row: Row, plain: Row, clock: str) -> list[float]:
    """Per round: the row's tokens/s / the engine plain's in the same round."""
    return [r / p if p else 0.0 for r, p in zip(row.rates(clock), plain.rates(clock), strict=True)]


def _verdict(wall: float, cpu: float, goal: float) -> str:
    return ("met" if min(wall, cpu) >= goal else "met in one timing only" if max(wall, cpu) >= goal
            else "not met")


def section(spec: HeadlineSpec, rows: list[Row], facts: dict[str, Any]) -> Section:
    plain = next(r for r in rows if r.name == PLAIN)
    reference = plain.outputs[0]
    table, speed, lossless = [], {}, set()
    for row in rows:
        wall, cpu = ratios(row, plain, "wall"), ratios(row, plain, "cpu")
        speed[row.name] = (statistics.median(wall), statistics.median(cpu))
        same = all(outputs == reference for outputs in row.outputs)
        if same:
            lossless.add(row.name)
        table.append([row.name, f"{statistics.median(row.rates('wall')):.1f}", f"{speed[row.name][0]:.2f}x",
                      f"{speed[row.name][1]:.2f}x", f"{min(cpu):.2f}-{max(cpu):.2f}",
                      f"{1 + row.accepted / row.drafts:.2f}" if row.drafts else "-", "yes" if same else "NO"])
    # goal candidates: this process's engine rows whose outputs equal plain decoding's (speculation is lossless)
    engine_rows = [r.name for r in rows if r.group == "engine" and r.name != PLAIN and r.name in lossless]

    def best(names: list[str]) -> str:
        return max(names, key=lambda n: min(speed[n]))

    goals = []
    candidates = {"best method (hybrids included)": engine_rows,
                  "draft_target k=4": [n for n in engine_rows if n == f"engine: draft_target k={spec.draft_k}"],
                  "EAGLE-3 (best tree and k)": [n for n in engine_rows if n.startswith("engine: eagle3 ")]}
    for goal, names in candidates.items():
        if not names:
            goals.append(f"{goal} >= {GOALS[goal]:.1f}x: not measured")
            continue
        name = best(names)
        wall, cpu = speed[name]
        goals.append(f"{goal} >= {GOALS[goal]:.1f}x: {name} at {cpu:.2f}x CPU time / {wall:.2f}x wall: "
                     f"**{_verdict(wall, cpu, GOALS[goal])}**")
    before = next((r for r in rows if r.name == BEFORE_PLAIN), None)
    now = next((r for r in rows if r.name == NOW_PLAIN), None)
    if before is not None and now is not None:
        wall, cpu = (statistics.median(ratios(now, before, clock)) for clock in ("wall", "cpu"))
        goals.append(f"engine plain decoding no slower than before (this tree / {spec.baseline_rev}, both in a worker "
                     f"process, >= {NO_SLOWER}, paired per round): {cpu:.2f}x CPU time / {wall:.2f}x wall: "
                     f"**{_verdict(wall, cpu, NO_SLOWER)}**")
    tf_names = [r.name for r in rows if r.group == "transformers"]
    beside = "; ".join(f"{n.split(' (')[0]} {speed[n][1]:.2f}x" for n in tf_names)
    load = facts["load"]
    notes = [
        *[f"Goal (issue 42): {g}" for g in goals],
        f"transformers beside it (CPU time ratio to the engine's plain): {beside}.",
        f"{facts['num_prompts']} held-out prompts ({MIXED} round-robin, the last {spec.prompt_tokens} tokens), "
        f"{spec.new_tokens} new tokens each, greedy, EOS ignored, batch 1, {spec.rounds} round(s). Per prompt every "
        "configuration in turn (interleaved, so load drift hits all rows alike); tokens/s per round = the round's "
        "tokens / its seconds; a ratio is the median over rounds of the row's tokens/s / engine plain's in the same "
        "round (wall time, and the timing thread's CPU time, which other processes' time slices do not inflate); spread = the "
        "lowest and highest round's CPU-time ratio.",
        f"Suffix decoding (and the hybrids' suffix trees): the cache is emptied at the start of every round, so each "
        f"round starts cold and learns only from that round's earlier requests (vLLM's defaults otherwise); k caps "
        f"the draft tree's nodes. EAGLE-3 chain = top-1, min(k, 6) levels; dynamic tree = EAGLE-2 (top-4 children "
        f"per frontier node, up to 6 levels, the k best nodes). n-gram: the engine's lookup, k={spec.ngram_k}.",
        f"transformers rows: `generate()` on the same models and prompts; assisted generation with {spec.draft} "
        f"and its defaults; prompt lookup with max n-gram size {spec.max_ngram}.",
        "Mean acceptance length = 1 + accepted / drafts (vLLM's definition), over the last round.",
        ("'worker' rows: the engine (plain decoding and draft_target k=" + str(spec.draft_k) + ") of "
         + facts["baseline_package"] + " and of this tree, each in its own worker process (plain_worker.py: one "
         "engine, nothing else loaded), timed inside it, interleaved with the others per prompt; the no-slower check "
         "pairs the two workers. Their ratios to the in-process plain row mix processes: a lean worker runs a few "
         "percent faster than the bench process, which holds every model.") if "baseline_package" in facts else
        "No baseline revision measured (--headline-baseline REV runs that revision's engine beside).",
        f"Load average {load[0]:.1f} before and {load[-1]:.1f} after the run; {_machine()}.",
    ]
    return Section(
        title=f"Headline: every method vs the engine's plain decoding, batch 1, {spec.new_tokens} tokens ({spec.model} + "
              f"{spec.draft}, {spec.eagle})",
        columns=["configuration", "tokens/s (wall)", "speedup (wall)", "speedup (CPU time)", "CPU ratio min-max",
                 "mean acceptance length", "same tokens as plain"],
        rows=table, notes=notes)
