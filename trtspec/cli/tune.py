"""`trtspec tune tree`: the Medusa tree that maximises expected accepted length for a node budget."""

from __future__ import annotations

import json
from pathlib import Path

import click


@click.group()
def tune() -> None:
    """Tune speculation settings on calibration prompts."""


@tune.command("tree")
@click.option("--model", "target", default="tiny", show_default=True,
              help="Target: embedded name or local HF Llama directory.")
@click.option("--medusa", "medusa_dir", required=True,
              help="Medusa heads directory (HF Medusa layout or TensorRT-LLM checkpoint), or an embedded name.")
@click.option("--budget", type=click.IntRange(1, 1024), default=63, show_default=True,
              help="Tree size in draft nodes (the engine's max_draft_len).")
@click.option("--out", "out_file", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Write the choices here: .yaml/.yml as YAML, otherwise JSON (usable by --choices and build configs).")
@click.option("--prompts", "num_prompts", type=click.IntRange(1), default=48, show_default=True,
              help="Held-out calibration prompts (trtspec/assets/prompts).")
@click.option("--prompt-len", type=click.IntRange(2), default=48, show_default=True,
              help="Tokens of each prompt kept (its end); shorter prompts are skipped.")
@click.option("--new-tokens", type=click.IntRange(8), default=96, show_default=True,
              help="Greedy tokens the target generates per prompt; head ranks are measured along them.")
@click.option("--max-rank", type=click.IntRange(1, 64), default=10, show_default=True,
              help="Top-k candidates per head considered (Medusa uses 10).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def tree(target: str, medusa_dir: str, budget: int, out_file: Path | None, num_prompts: int, prompt_len: int,
         new_tokens: int, max_rank: int, as_json: bool) -> None:
    """Measure per-head top-k acceptance and build the best tree for --budget nodes (Medusa's greedy search).

    Prints the tree in the `{0}, {0, 0}, {1}` form that Triton's `medusa_choices` parameter takes.
    """
    from trtspec.models import read_config, resolve_model
    from trtspec.spec.medusa_heads import resolve_heads
    from trtspec.training.tree_tune import calibrate, tune_tree, write_choices

    path = resolve_model(target)
    cfg = read_config(path)
    heads = resolve_heads(medusa_dir, target_hidden_size=cfg["hidden_size"], target_vocab_size=cfg["vocab_size"])
    accuracy, ranks = calibrate(path, heads, num_prompts=num_prompts, prompt_len=prompt_len, new_tokens=new_tokens,
                                max_rank=max_rank)
    result = tune_tree(accuracy, ranks, budget)
    result["rank_accuracy"] = [[round(x, 4) for x in row] for row in accuracy.tolist()]
    result["calibration_positions"] = ranks.shape[0] * ranks.shape[1]
    if out_file is not None:
        write_choices(out_file, result)
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    click.echo(f"calibration: {result['calibration_positions']} positions; top-1 accuracy per head: "
               + ", ".join(f"{row[0]:.3f}" for row in accuracy.tolist()))
    click.echo(f"tree: {result['num_nodes']} nodes, depth {result['depth']}; acceptance length (tokens per target "
               f"forward, greedy) estimated {result['estimated_acceptance_length']:.3f} (per position, heads "
               f"independent), replayed {result['replayed_acceptance_length']:.3f} (engine walk)")
    for name, b in result["baselines"].items():
        click.echo(f"  {name}: {b['num_nodes']} nodes, estimated {b['estimated_acceptance_length']:.3f}, "
                   f"replayed {b['replayed_acceptance_length']:.3f}")
    click.echo(f"medusa_choices (Triton): {result['triton']}")
    if out_file is not None:
        click.echo(f"written: {out_file}")
