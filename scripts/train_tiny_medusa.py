#!/usr/bin/env python
"""Train the embedded Medusa heads `tiny-medusa`, tune their tree, and measure acceptance against the draft model.

    python scripts/train_tiny_medusa.py                      # train + tune + measure, ~10-15 min on 2 CPU cores
    python scripts/train_tiny_medusa.py --measure-only       # re-measure the shipped heads

Writes trtspec/assets/models/tiny-medusa/{config.json, medusa_lm_head.safetensors, medusa_choices.yaml,
training-report.json, acceptance.json, README.md}. Measurement: the reference engine, greedy (T=0) and T=1 exact
sampling, on held-out prompts (trtspec/assets/prompts), Medusa trees vs. the tiny-draft chain at equal node budgets.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from trtspec.models import PROMPTS, embedded_path  # noqa: E402

OUT = embedded_path("tiny-medusa")


def held_out_prompts(per_suite: int) -> list[str]:
    prompts = []
    for suite in sorted(PROMPTS.glob("*.jsonl")):
        rows = [json.loads(line) for line in suite.read_text().splitlines() if line.strip()]
        prompts += [r["prompt"] for r in rows[:per_suite]]
    return prompts


def measure(budgets: list[int], per_suite: int, new_tokens: int, accuracy: torch.Tensor, ranks: torch.Tensor) -> dict:
    """Mean acceptance length of Medusa trees and the draft-model chain at equal node budgets (engine runs)."""
    from trtspec import choices as tree_choices
    from trtspec.contracts.engine import MedusaTree, ProposerOptions
    from trtspec.spec.engine import SpecEngine
    from trtspec.spec.params import SamplingParams, SpecParams
    from trtspec.training.tree_tune import tune_tree

    prompts = held_out_prompts(per_suite)
    rows = []

    def run(label: str, method: str, k: int, temperature: float, choices: object = None,
            acceptance: str = "exact") -> None:
        options = ProposerOptions(medusa_tree=MedusaTree() if choices is None else MedusaTree(
            choices=tuple(map(tuple, tree_choices.parse(choices)))))
        engine = SpecEngine.from_pretrained("tiny", "tiny-draft" if method == "draft_target" else None,
                                            "tiny-medusa" if method == "medusa" else None, max_k=max(8, k),
                                            options=options)
        sampling = SamplingParams(temperature=temperature, max_new_tokens=new_tokens, seed=0)
        t = time.perf_counter()
        outs = engine.generate(prompts, sampling, SpecParams(method=method, k=k, acceptance=acceptance))
        stats = outs[0].stats
        for o in outs[1:]:
            stats.merge(o.stats)
        rows.append({"label": label, "method": method, "nodes": k, "temperature": temperature,
                     "acceptance": acceptance, "mean_acceptance_length": round(stats.mean_acceptance_length, 3),
                     "tokens_per_target_forward": round(stats.tokens_per_target_forward, 3),
                     "wall_s": round(time.perf_counter() - t, 1)})
        print(rows[-1], flush=True)

    tuned = {budget: tune_tree(accuracy, ranks, budget)["medusa_choices"] for budget in budgets}
    for temperature in (0.0, 1.0):
        for budget in budgets:
            if temperature == 0.0 or budget <= 8:
                run(f"draft_target k={budget}", "draft_target", budget, temperature)
            run(f"medusa tuned-{budget}", "medusa", budget, temperature, tuned[budget])
    if accuracy.shape[0] >= 4:  # mc_sim_7b_63 is 4 levels deep
        run("medusa mc_sim_7b_63", "medusa", 63, 0.0, "mc_sim_7b_63")
    run("medusa tuned-63, typical acceptance (LOSSY)", "medusa", 63, 1.0, tuned[63], "typical_lossy")
    return {"prompts": len(prompts), "new_tokens": new_tokens, "rows": rows,
            "rank_accuracy_top1": [round(row[0], 4) for row in accuracy.tolist()],
            "tuned_trees": {str(b): t for b, t in tuned.items()}}


def acceptance_markdown(result: dict) -> str:
    lines = [f"Reference engine, {result['prompts']} held-out prompts (code, prose, grounded suites), "
             f"{result['new_tokens']} new tokens each; mean acceptance length = tokens per target forward "
             "(1 + accepted / drafts). Medusa trees are tuned by `trtspec tune tree` for each node budget; the "
             "draft-target chain uses `tiny-draft` with k = the same number of draft tokens.", "",
             "| configuration | draft nodes | temperature | mean acceptance length |", "|---|---|---|---|"]
    for r in result["rows"]:
        lines.append(f"| {r['label']} | {r['nodes']} | {r['temperature']} | {r['mean_acceptance_length']:.3f} |")
    lines += ["", "Per-head top-1 rank accuracy on the calibration continuations: "
              + ", ".join(f"{a:.3f}" for a in result["rank_accuracy_top1"]) + ".", "",
              "At equal node budgets the `tiny-draft` chain accepts more than these heads. The draft is an "
              "autoregressive model distilled from `tiny` (greedy per-token agreement 0.84) that conditions every "
              "drafted token on the ones before it; a Medusa head predicts the token h+2 ahead from one hidden state "
              "of a 12M-parameter target, without the intermediate tokens. Steps start right after a miss, where "
              "the heads are weakest, so per-step acceptance sits below what the per-position accuracies suggest. "
              "At temperature 1 the exact (lossless) verifier accepts a one-hot top-k child with the target's "
              "probability of that token, which is small for this high-entropy target; typical acceptance accepts "
              "far more but is lossy."]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--measure-only", action="store_true")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--heads", type=int, default=4,
                        help="4 heads (13.8 MB fp16) allow the default 63-node tree; 2 heads: 6.9 MB, depth 2")
    parser.add_argument("--per-suite", type=int, default=6, help="held-out prompts per suite for the measurement")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on shared cores)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from trtspec.atomic import write_json, write_text
    from trtspec.cli._progress import stage_progress
    from trtspec.spec.medusa_heads import resolve_heads
    from trtspec.training.medusa import MedusaRecipe, model_card, train_medusa
    from trtspec.training.tree_tune import calibrate, tune_tree, write_choices

    if not args.measure_only:
        recipe = MedusaRecipe(num_heads=args.heads, steps=args.steps)
        with stage_progress() as progress:
            train_medusa(embedded_path("tiny"), OUT, recipe, base_model_name="tiny", trtllm_dir=None,
                         progress=progress)
    heads = resolve_heads("tiny-medusa")
    accuracy, ranks = calibrate(embedded_path("tiny"), heads, num_prompts=48, prompt_len=48, new_tokens=96,
                                max_rank=10)
    write_choices(OUT / "medusa_choices.yaml", tune_tree(accuracy, ranks, 63))  # the heads' default tree
    result = measure([4, 8, 16, 63], args.per_suite, args.new_tokens, accuracy, ranks)
    write_json(OUT / "acceptance.json", result)
    report = json.loads((OUT / "training-report.json").read_text())
    write_text(OUT / "README.md", model_card(report, {"markdown": acceptance_markdown(result)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
