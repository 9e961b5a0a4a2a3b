#!/usr/bin/env python
"""Train the embedded default model pair (tiny / tiny-draft) and write the shipped prompt suites.

    python scripts/train_tiny_models.py                # full recipe, ~20 min on 2 CPU cores
    python scripts/train_tiny_models.py --quick --out /tmp/tiny   # seconds: smoke test of the pipeline

Deterministic: seeded, single process, fixed thread count. Corpus: this interpreter's standard library (no download).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

ROOT = Path(__file__).resolve().parents[1]


def model_card(name: str, report: dict, other: str) -> str:
    r, c, a = report["recipe"], report["corpus"], report["acceptance"]
    m = report["target" if name == "tiny" else "draft"]
    shape = r["target" if name == "tiny" else "draft"]
    role = ("Target model" if name == "tiny" else f"Draft model, distilled from `{other}`")
    train = (f"{m['train_tokens']:,} tokens of next-token cross-entropy ({r['target_steps']} AdamW steps, batch "
             f"{r['batch_size']} x {r['seq_len']})" if name == "tiny" else
             f"{m['distill_tokens']:,} tokens of KL(target ‖ draft) distillation ({r['draft_steps']} steps): half "
             f"corpus windows, half the target's own continuations ({r['distill_prompts']} prompts, greedy and T=1)")
    t = report["timings"]
    return f"""# trtspec embedded model `{name}`

{role}. Llama architecture (`LlamaForCausalLM`), fp16 safetensors, byte-level BPE tokenizer shared by
`tiny` and `tiny-draft`. Made by `scripts/train_tiny_models.py` (seed {r['seed']}); loads with
`AutoModelForCausalLM.from_pretrained` and `AutoTokenizer.from_pretrained`. It is a test and demo model: it writes
Python-looking text and loops under greedy decoding; it is not useful for anything else.

| | |
|---|---|
| parameters | {m['params']:,} |
| shape | hidden {shape['hidden_size']}, {shape['num_hidden_layers']} layers, {shape['num_attention_heads']} heads, ffn {shape['intermediate_size']}, vocab {r['vocab_size']}, tied embeddings |
| training | {train} |
| validation loss (held-out files) | {m['val_loss']:.3f} (perplexity {2.718281828 ** m['val_loss']:.0f}) |
| greedy acceptance of tiny-draft vs tiny | alpha = {a['alpha_greedy']:.3f} (per prompt {a['alpha_min']:.2f}-{a['alpha_max']:.2f}), {r['eval_prompts']} held-out prompts of {r['eval_prompt_len']} tokens, {r['eval_new_tokens']} greedy tokens |
| training time (whole pipeline, 2 CPU cores shared with other jobs) | {t['total_s'] / 60:.1f} min |

## Data
{c['source']}: `.py` files, excluding `test/`, `site-packages/`, `idlelib/`, `lib2to3/`, `turtledemo/`, `ensurepip/`.
Sorted by path; {c['holdout_rule']} is held out ({c['heldout_files']} files, {c['heldout_tokens']:,} tokens) and used
only for prompts and evaluation; {c['train_files']} files ({c['train_tokens']:,} tokens) are for training.
License of the data: Python Software Foundation License Version 2 (the weights are derived from it).
"""


def write_prompt_suites(out: Path) -> dict[str, int]:
    """Prompt suites from the held-out files: code completion, prose (docstrings), input-grounded (copy/edit)."""
    import ast

    from trtspec.training.corpus import read, stdlib_corpus

    corpus = stdlib_corpus()
    code, prose, grounded = [], [], []
    for path in corpus.heldout_files:
        text = read(path)
        rel = path.relative_to(corpus.root).as_posix()
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        lines = text.splitlines(keepends=True)
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.ClassDef)) or node.end_lineno is None:
                continue
            src = "".join(lines[node.lineno - 1 : node.end_lineno])
            if 300 <= len(src) <= 1500 and len(code) < 64:
                code.append({"prompt": src[: len(src) // 2], "source": rel, "suite": "code"})
            doc = ast.get_docstring(node)
            if doc and 200 <= len(doc) <= 1200 and len(prose) < 64:
                prose.append({"prompt": doc[: len(doc) // 2], "source": rel, "suite": "prose"})
            if 300 <= len(src) <= 1000 and len(grounded) < 64 and isinstance(node, ast.FunctionDef):
                # the model sees a function, then the start of a near-copy of it: lookup drafts shine here
                head = "".join(lines[node.lineno - 1 : node.lineno + 1])
                grounded.append({"prompt": src + "\n\n" + head, "source": rel, "suite": "grounded"})
    out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for name, rows in (("code", code), ("prose", prose), ("grounded", grounded)):
        (out / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        counts[name] = len(rows)
    return counts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "trtspec" / "assets" / "models")
    ap.add_argument("--prompts-out", type=Path, default=ROOT / "trtspec" / "assets" / "prompts")
    ap.add_argument("--quick", action="store_true", help="tiny recipe for smoke tests (seconds)")
    ap.add_argument("--only", choices=["models", "prompts"], default=None)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from trtspec.training.tiny import ModelShape, TinyRecipe, train_pair

    torch.set_num_threads(args.threads)
    if args.only != "models" and not args.quick:
        print("prompt suites:", write_prompt_suites(args.prompts_out))
    if args.only == "prompts":
        return 0
    recipe = TinyRecipe()
    if args.quick:
        recipe = TinyRecipe(vocab_size=300, seq_len=32, batch_size=2, target=ModelShape(32, 1, 2, 64),
                            draft=ModelShape(16, 1, 1, 32), target_steps=3, distill_prompts=4,
                            distill_prompt_len=8, distill_gen_len=8, draft_steps=3, eval_prompts=2,
                            eval_prompt_len=8, eval_new_tokens=4, corpus_limit=30)
    columns = [TextColumn("{task.description:10}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
               TextColumn("{task.fields[info]}"), TimeElapsedColumn(), TimeRemainingColumn()]
    with Progress(*columns) as bar:
        tasks: dict[str, int] = {}

        def progress(stage: str, done: int, total: int, info: str) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage, total=total, info="")
            bar.update(tasks[stage], completed=done, info=info)

        report = train_pair(args.out, recipe, progress)
    for name in ("tiny", "tiny-draft"):
        (args.out / name / "README.md").write_text(model_card(name, report, "tiny"))
    print(json.dumps({k: report[k] for k in ("target", "draft", "acceptance", "timings")}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
