#!/usr/bin/env python
"""Measure `tiny-eagle` side by side with the `tiny-draft` chain and the `tiny-medusa` tree, and write its card.

    python scripts/eagle_acceptance.py                  # ~5-10 min on 2 shared CPU cores
    python scripts/eagle_acceptance.py --prompts 3      # quicker

The measurement is the `eagle` bench section (scripts/benchlib/benchmarks_eagle.py: one sweep, engine backend, batch 1,
greedy, held-out code/prose/grounded prompts, every method at the same node budgets k), so the model card, this
file's acceptance.json and docs/benchmarks.md (`scripts/bench.py --section eagle`) share one definition. Writes
trtspec/assets/models/tiny-eagle/{acceptance.json, README.md}.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from trtspec.models import embedded_path  # noqa: E402

OUT = embedded_path("tiny-eagle")


def measure(args: argparse.Namespace) -> dict:
    from benchlib import benchmarks, benchmarks_eagle

    spec = benchmarks_eagle.eagle_spec(model="tiny", draft="tiny-draft", medusa="tiny-medusa", eagle=str(OUT),
                                       trees=args.trees, ks=args.ks, num_prompts=args.prompts,
                                       prompt_tokens=args.prompt_tokens, max_new_tokens=args.new_tokens,
                                       repeats=args.repeats, threads=1)
    measured = benchmarks.measure(spec)
    section = benchmarks_eagle.eagle_section(spec, measured)
    rows = benchmarks_eagle.eagle_rows(measured)
    lines = ["| " + " | ".join(section.columns) + " |", "|" + "---|" * len(section.columns)]
    lines += ["| " + " | ".join(row) + " |" for row in section.rows]
    command = (f"python scripts/eagle_acceptance.py --prompts {args.prompts} --new-tokens {args.new_tokens} "
               f"--ks {' '.join(map(str, args.ks))}")
    markdown = "\n".join(lines + ["", *[f"- {note}" for note in section.notes], f"- Measured by `{command}`.",
                                  "", WHY])
    return {"rows": rows, "verdicts": [n for n in section.notes if n.startswith("Goal")], "command": command,
            "definition": next(n for n in section.notes if n.startswith("Mean acceptance length")),
            "markdown": markdown}


WHY = """Why the cost goal is out of reach on this pair: draft cost per drafted token = the cost of a drafter forward /
the nodes it drafts. At k=4 the EAGLE row that meets the acceptance goal is the chain, one node per forward like the
draft model, so a third of the draft model's cost would need an EAGLE forward three times cheaper than a draft-model
forward. On this CPU a forward of a few tokens costs about what reading its weights costs plus a fixed cost per op:
one EAGLE step reads a 384-wide layer (2.2 M weights) and its 2048-row lm_head (0.8 M; 1.6 M with the full
vocabulary) = 3.0 M weights, 1.8 x the draft model's whole forward (2 layers x 192 + a 192 x 4096 head = 1.67 M),
with about half its ops (one layer instead of two). Measured on this shared machine the k=4 ratio moved between
0.71 x and 1.76 x over four runs (1.33, 1.76, 0.71, 1.30), never near 1/3. Trees draft several nodes per forward and
cut the cost per drafted token (dynamic tree at k=16: about 0.9 ms against the chain's 2.3 ms) but accept less at
the same k with a drafter this accurate. EAGLE's structural advantage shows on large targets, where one target-width
layer is a small share of the target while a useful draft model is not."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=6, help="held-out prompts (code/prose/grounded round-robin)")
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--ks", type=int, nargs="+", default=[4, 8], help="node budgets")
    parser.add_argument("--trees", nargs="+", default=["chain", "dynamic"], help="EAGLE trees")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    from trtspec.atomic import write_json, write_text
    from trtspec.training.eagle import model_card

    result = measure(args)
    write_json(OUT / "acceptance.json", result)
    report = json.loads((OUT / "training-report.json").read_text())
    write_text(OUT / "README.md", model_card(report, result))
    print(result["markdown"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
