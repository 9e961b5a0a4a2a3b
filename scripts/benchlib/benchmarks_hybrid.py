"""`bench.py --section hybrid`: hybrid drafting (methods suffix_draft, suffix_eagle3) beside its parts alone, on the
embedded models, held-out prompts of the code, prose and grounded suites mixed, batch 1, greedy, interleaved per
prompt over rounds, every suffix cache emptied at the start of each round (cold). Ratios are each row's tokens/s over
the engine's plain decoding in the same round (headline's Row and ratios)."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

from benchlib.benchmarks import MIXED, Section
from benchlib.benchmarks_headline import PLAIN, Row, Runner, ratios, run_rounds


@dataclass(frozen=True)
class HybridSpec:
    model: str = "tiny"
    draft: str = "tiny-draft"
    eagle: str = "tiny-eagle"
    num_prompts: int = 6
    prompt_tokens: int = 128
    new_tokens: int = 128
    rounds: int = 3
    suffix_k: int = 16  # the suffix tree's draft length at most (the hybrids' request k)
    drafter_k: int = 4  # the model drafter's k, alone and inside the hybrids (hybrid_drafter_k)
    threads: int = 1


def measure(spec: HybridSpec) -> list[Row]:
    import torch

    from trtspec.contracts.engine import EagleTree, Hybrid, ProposerOptions
    from trtspec.spec.engine import SpecEngine
    from trtspec.spec.params import SamplingParams, SpecParams
    from trtspec.sweep.prompts import last_tokens, load_suite

    torch.set_num_threads(spec.threads)
    # EAGLE-3 as a chain of drafter_k (alone and in suffix_eagle3), the hybrids' model drafter at drafter_k
    options = ProposerOptions(hybrid=Hybrid(drafter_k=spec.drafter_k), eagle_tree=EagleTree.parse("chain"))
    engine = SpecEngine.from_pretrained(spec.model, draft=spec.draft, eagle=spec.eagle, options=options,
                                        max_k=max(spec.suffix_k, spec.drafter_k))
    sampling = SamplingParams(temperature=0.0, max_new_tokens=spec.new_tokens, ignore_eos=True)
    prompts = [last_tokens(engine.encode(text), spec.prompt_tokens)
               for text in load_suite(MIXED, spec.num_prompts).prompts]

    def runner(method: str, k: int) -> Runner:
        params = SpecParams(method=method, k=k)

        def run(prompt: list[int]) -> tuple[list[int], float, float, int, int]:
            start, cpu = time.perf_counter(), time.process_time()
            out = engine.generate([prompt], sampling, params)[0]
            wall_s, cpu_s = time.perf_counter() - start, time.process_time() - cpu
            used[method][0] += out.stats.num_hybrid_suffix_drafts
            used[method][1] += out.stats.num_hybrid_model_drafts
            return out.token_ids, wall_s, cpu_s, out.stats.num_drafts, out.stats.num_accepted_tokens

        return run

    configs = [(PLAIN, "none", 0), (f"engine: suffix k={spec.suffix_k}", "suffix", spec.suffix_k),
               (f"engine: draft_target k={spec.drafter_k}", "draft_target", spec.drafter_k),
               (f"engine: eagle3 chain k={spec.drafter_k}", "eagle3", spec.drafter_k),
               (f"engine: suffix_draft k={spec.suffix_k} (drafter k={spec.drafter_k})", "suffix_draft", spec.suffix_k),
               (f"engine: suffix_eagle3 k={spec.suffix_k} (drafter k={spec.drafter_k})", "suffix_eagle3",
                spec.suffix_k)]
    used: dict[str, list[int]] = {method: [0, 0] for _, method, _ in configs}
    runners = {name: runner(method, k) for name, method, k in configs}
    rows = {name: Row(name, "engine") for name in runners}
    for run in runners.values():  # warm-up, untimed
        run(prompts[0][:16])
    for counts in used.values():
        counts[:] = [0, 0]
    resets = [p.reset for p in engine.proposers.values() if hasattr(p, "reset")]
    run_rounds(runners, rows, prompts, spec.rounds, resets)
    out = list(rows.values())
    for row, (_, method, _) in zip(out, configs, strict=True):
        row.used = used[method]  # type: ignore[attr-defined]
    return out


def section(spec: HybridSpec, rows: list[Row]) -> Section:
    plain = next(r for r in rows if r.name == PLAIN)
    reference = plain.outputs[0]
    table = []
    for row in rows:
        wall, cpu = ratios(row, plain, "wall"), ratios(row, plain, "cpu")
        suffix, model = getattr(row, "used", (0, 0))
        share = f"{suffix / (suffix + model):.0%} / {model / (suffix + model):.0%}" if suffix + model else "-"
        table.append([row.name, f"{statistics.median(row.rates('wall')):.1f}", f"{statistics.median(wall):.2f}x",
                      f"{statistics.median(cpu):.2f}x", f"{min(cpu):.2f}-{max(cpu):.2f}",
                      f"{1 + row.accepted / row.drafts:.2f}" if row.drafts else "-", share,
                      "yes" if all(o == reference for o in row.outputs) else "NO"])
    notes = [f"{len(plain.outputs[0])} held-out prompts ({MIXED}, last {spec.prompt_tokens} tokens), "
             f"{spec.new_tokens} new tokens, greedy, batch 1, {spec.rounds} rounds, configurations interleaved per "
             "prompt; suffix caches emptied at the start of every round (cold)",
             "speedup: tokens/s over the engine's plain decoding in the same round, median over rounds (CPU: range "
             "beside it); drafts suffix / model: the share of the hybrids' verified drafts from each drafter",
             f"hybrids: the suffix tree's draft (up to k={spec.suffix_k}) wins when its score (sum of its tokens' "
             f"estimated acceptance) >= the model drafter's k ({spec.drafter_k}), arctic-inference's rule; else the "
             f"model drafter drafts {spec.drafter_k} (hybrid_drafter_k)"]
    return Section(title="Hybrid drafting: suffix where its match is strong, a model drafter elsewhere",
                   columns=["configuration", "tokens/s", "speedup (wall)", "speedup (CPU)", "CPU range", "MAL",
                            "drafts suffix / model", "same output as plain"], rows=table, notes=notes)
