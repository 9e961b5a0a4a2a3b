#!/usr/bin/env python
"""Measure `tiny-eagle` side by side with the `tiny-draft` chain and the `tiny-medusa` tree, and write its card.

    python scripts/eagle_acceptance.py                 # ~5-10 min on 2 shared CPU cores
    python scripts/eagle_acceptance.py --per-suite 1   # quicker

One process, one engine per configuration over the same held-out prompts (trtspec/assets/prompts, greedy, one
request at a time so that draft time is not shared between requests): mean acceptance length (1 + accepted /
drafts), draft seconds per drafted token, and wall-clock speedup over plain decoding of the same prompts. Writes
trtspec/assets/models/tiny-eagle/{acceptance.json, README.md}.
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

from trtspec.models import embedded_path  # noqa: E402

OUT = embedded_path("tiny-eagle")
# (label, method, k, proposer options)
CONFIGS = [
    ("plain", "none", 0, {}),
    ("draft_target k=4", "draft_target", 4, {}),
    ("medusa tuned tree, first 4 nodes", "medusa", 4, {}),
    ("eagle3 chain k=4", "eagle3", 4, {"eagle_topk": 1}),
    ("eagle3 dynamic tree, 4 nodes", "eagle3", 4, {"eagle_topk": 4, "eagle_depth": 4}),
    ("draft_target k=8", "draft_target", 8, {}),
    ("eagle3 dynamic tree, 8 nodes", "eagle3", 8, {"eagle_topk": 4, "eagle_depth": 6}),
    ("eagle3 dynamic tree, 16 nodes", "eagle3", 16, {"eagle_topk": 4, "eagle_depth": 6}),
]


def measure(per_suite: int, new_tokens: int) -> dict:
    from scripts.train_tiny_medusa import held_out_prompts
    from trtspec.spec.engine import SpecEngine
    from trtspec.spec.params import SamplingParams, SpecParams

    torch.set_num_threads(1)
    prompts = held_out_prompts(per_suite)
    sampling = SamplingParams(max_new_tokens=new_tokens, ignore_eos=True)
    rows, reference = [], None
    for label, method, k, options in CONFIGS:
        engine = SpecEngine.from_pretrained("tiny", "tiny-draft", "tiny-medusa", eagle="tiny-eagle", max_k=16,
                                            proposer_options=options)
        engine.generate([prompts[0]], SamplingParams(max_new_tokens=4), SpecParams(method, k))  # warm-up
        t = time.perf_counter()
        outs = [engine.generate([p], sampling, SpecParams(method, k))[0] for p in prompts]
        wall = time.perf_counter() - t
        tokens = [o.token_ids for o in outs]
        reference = tokens if reference is None else reference
        drafted = sum(o.stats.num_draft_tokens for o in outs)
        drafts = sum(o.stats.num_drafts for o in outs)
        draft_s = sum(o.stats.draft_time_s for o in outs)
        rows.append({"label": label, "method": method, "k": k, "options": options,
                     "mean_acceptance_length": 1 + sum(o.stats.num_accepted_tokens for o in outs) / drafts if drafts
                     else 1.0,
                     "tokens_per_target_forward": sum(len(x) for x in tokens)
                     / sum(o.stats.num_target_forwards for o in outs),
                     "draft_s_per_drafted_token": draft_s / drafted if drafted else 0.0,
                     "draft_s_per_step": draft_s / drafts if drafts else 0.0,
                     "wall_s": wall, "greedy_equals_plain": tokens == reference})
        print(f"{label:32} MAL {rows[-1]['mean_acceptance_length']:.3f}  "
              f"draft {1e3 * rows[-1]['draft_s_per_drafted_token']:.2f} ms/token  wall {wall:.1f}s", flush=True)
    plain = rows[0]["wall_s"]
    for row in rows:
        row["speedup"] = plain / row["wall_s"]
    return {"prompts": len(prompts), "new_tokens": new_tokens, "rows": rows,
            "definition": "greedy, one request at a time, held-out prompts; mean acceptance length = 1 + accepted / "
                          "drafts; draft cost = draft forward seconds / drafted tokens; speedup = plain wall / wall"}


def markdown(result: dict) -> str:
    lines = ["| configuration | mean acceptance length | draft ms / drafted token | draft ms / step | speedup vs plain "
             "| greedy == plain |", "|---|---|---|---|---|---|"]
    for r in result["rows"][1:]:
        lines.append(f"| {r['label']} | {r['mean_acceptance_length']:.3f} | {1e3 * r['draft_s_per_drafted_token']:.2f} "
                     f"| {1e3 * r['draft_s_per_step']:.2f} | {r['speedup']:.2f} | {r['greedy_equals_plain']} |")
    by = {r["label"]: r for r in result["rows"]}
    dt, eagle = by["draft_target k=4"], max((by["eagle3 chain k=4"], by["eagle3 dynamic tree, 4 nodes"]),
                                           key=lambda r: r["mean_acceptance_length"])
    ratio = eagle["draft_s_per_drafted_token"] / dt["draft_s_per_drafted_token"]
    lines += ["", f"{result['definition']}; {result['prompts']} prompts x {result['new_tokens']} tokens, measured in one "
              "process by `python scripts/eagle_acceptance.py`.", "",
              f"Goal (issue 17): EAGLE's mean acceptance length >= the draft model's at k=4 with a draft cost per drafted "
              f"token <= 1/3 of it. Measured: {eagle['label']} {eagle['mean_acceptance_length']:.3f} vs draft_target "
              f"{dt['mean_acceptance_length']:.3f} ({'met' if eagle['mean_acceptance_length'] >= dt['mean_acceptance_length'] else 'short by ' + format(dt['mean_acceptance_length'] - eagle['mean_acceptance_length'], '.3f')}); "
              f"draft cost ratio {ratio:.2f} ({'met' if ratio <= 1 / 3 else 'not met'}).", "",
              WHY]
    return "\n".join(lines)


WHY = """Why it falls short here: (1) data and steps. The drafter saw 76,200 token positions (100 steps x 6 sequences,
cut from 240 x 8 to fit the shared 2-core machine: ~10-15 s per ModelOpt step with three training-time-test
passes); `tiny-draft` was distilled on 737,280. Its held-out top-1 agreement is 0.58 at depth 1 (0.57, 0.50 at
depths 2, 3) against the draft model's 0.84 per-token greedy agreement. (2) Cost. EAGLE's advantage is a drafter
that is one target layer of a large target; here the target is 6 layers x 384 and the draft model is already 1/7 of
it (2 layers x 192), so one EAGLE step (fc + a 384-wide layer + a 384 x 4096 LM head, plus the tree mask bookkeeping
in Python) costs about what a draft-model step costs. What was traded for the size budget: the full 4096-token LM
head is kept (no reduced draft vocabulary / d2t), 8.5 MB in fp16, embedded models 48 MiB of 56."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-suite", type=int, default=2, help="held-out prompts per suite")
    parser.add_argument("--new-tokens", type=int, default=64)
    args = parser.parse_args()
    from trtspec.spec.medusa_heads import write_json, write_text
    from trtspec.training.eagle import model_card

    result = measure(args.per_suite, args.new_tokens)
    result["markdown"] = markdown(result)
    write_json(OUT / "acceptance.json", result)
    report = json.loads((OUT / "training-report.json").read_text())
    write_text(OUT / "README.md", model_card(report, result))
    print(result["markdown"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
