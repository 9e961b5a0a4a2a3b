"""`trtspec tune tree`: the Medusa or EAGLE tree that maximises accepted length for a node budget (EAGLE: static
choices and the dynamic tree's top-k / depth)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from trtspec.cli._engine import eagle_tree_grid, tree_grid


@click.group()
def tune() -> None:
    """Tune speculation settings on calibration prompts.

    Examples:

    \b
        trtspec tune tree --model tiny --medusa tiny-medusa --budget 63 --out tree.yaml
        trtspec tune tree --model tiny --eagle tiny-eagle --budget 8 --out eagle-tree.yaml
    """


@tune.command("tree")
@click.option("--model", "target", default="tiny", show_default=True,
              help="Target: embedded name or local HF Llama directory.")
@click.option("--medusa", "medusa_dir", default=None,
              help="Medusa heads directory (HF Medusa layout or TensorRT-LLM checkpoint), or an embedded name.")
@click.option("--eagle", default=None,
              help="EAGLE-3 drafter (embedded name or directory): tune static eagle_choices and the dynamic tree.")
@eagle_tree_grid
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
@click.option("--threads", type=click.IntRange(1, 4096), default=None,
              help="torch intra-op threads (EAGLE's proposer timings; 1 is steadiest on a shared CPU) [default: torch's].")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def tree(target: str, medusa_dir: str | None, eagle: str | None, budget: int, out_file: Path | None,
         num_prompts: int, prompt_len: int, new_tokens: int, max_rank: int, threads: int | None, as_json: bool,
         **grid: str) -> None:
    """Measure per-head (Medusa) or per-depth (EAGLE) top-k acceptance and build the best tree for --budget nodes
    (Medusa's greedy search); for EAGLE also replay the dynamic tree at each top-k x depth.

    Prints the tree in the `{0}, {0, 0}, {1}` form that Triton's `medusa_choices` / `eagle_choices` parameter takes.
    An EAGLE --out file is a build config's `eagle.choices` (with eagle.eagle3: true it becomes the LLM API's
    eagle_choices for TensorRT-LLM); its `dynamic_tree` block records the best dynamic shape (topk, depth,
    max_total_draft_tokens), which a build config takes as `eagle.dynamic_tree: FILE` (use_dynamic_tree):
    docs/eagle.md, "EAGLE-3 trees in the LLM API".

    Examples:

    \b
        trtspec tune tree --model tiny --medusa tiny-medusa --budget 63 --out tree.yaml
        trtspec tune tree --model tiny --eagle tiny-eagle --budget 8 --out eagle-tree.yaml
    """
    from trtspec.errors import UsageError
    from trtspec.models import read_config, resolve_model
    from trtspec.spec.medusa_heads import resolve_heads
    from trtspec.training.tree_tune import calibrate, tune_tree

    if (medusa_dir is None) == (eagle is None):
        raise UsageError("tune tree needs exactly one of --medusa and --eagle",
                         hint="e.g. --medusa tiny-medusa, or --eagle tiny-eagle")
    path = resolve_model(target)
    if threads is not None:
        import torch

        torch.set_num_threads(threads)  # the application's choice (as `generate --threads`)
    if eagle is not None:
        _eagle_tree(path, eagle, tree_grid(grid), budget, out_file, num_prompts, prompt_len, new_tokens, max_rank,
                    as_json)
        return
    cfg = read_config(path)
    heads = resolve_heads(medusa_dir, target_hidden_size=cfg["hidden_size"], target_vocab_size=cfg["vocab_size"])
    accuracy, ranks = calibrate(path, heads, num_prompts=num_prompts, prompt_len=prompt_len, new_tokens=new_tokens,
                                max_rank=max_rank)
    result = tune_tree(accuracy, ranks, budget)
    if _written(result, out_file, as_json):
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


def _written(result: dict, out_file: Path | None, as_json: bool) -> bool:
    """Write the tuned tree to `out_file` (when given); print the result as JSON and return True when `as_json`."""
    from trtspec.training.tree_tune import write_choices

    if out_file is not None:
        write_choices(out_file, result)
    if as_json:
        click.echo(json.dumps(result, indent=2))
    return as_json


def _eagle_tree(path: Path, eagle: str, trees: list[Any], budget: int, out_file: Path | None, num_prompts: int,
                prompt_len: int, new_tokens: int, max_rank: int, as_json: bool) -> None:
    """Static eagle_choices (greedy search over per-depth rank accuracy) and the dynamic tree's best top-k / depth,
    both replayed on the target's greedy continuations; the one with the longer replayed acceptance is recommended."""
    from trtspec.errors import ConfigError
    from trtspec.training.eagle_tree_tune import calibrate_eagle, tune_dynamic, tune_static

    deepest = max(tree.depth for tree in trees)
    if new_tokens <= deepest + 1:
        raise ConfigError("new_tokens", new_tokens, f"leaves no commit point for depth {deepest}",
                          hint=f"use --new-tokens {deepest + 16} or more")
    cal = calibrate_eagle(path, eagle, num_prompts=num_prompts, prompt_len=prompt_len, new_tokens=new_tokens)
    result = tune_static(cal, budget, deepest, max_rank)
    dynamic = tune_dynamic(cal, budget, trees, horizon=deepest)
    result["dynamic"] = dynamic
    static_len, best = result["replayed_acceptance_length"], dynamic["best"]
    shape = trees[dynamic["shapes"].index(best)].values()
    result["recommended"] = shape if best["replayed_acceptance_length"] > static_len else {
        "eagle_choices": result["eagle_choices"]}
    if _written(result, out_file, as_json):
        return
    click.echo(f"calibration: {result['calibration_positions']} commit points; top-1 accuracy per depth: "
               + ", ".join(f"{row[0]:.3f}" for row in result["rank_accuracy"]))
    click.echo(f"static tree: {result['num_nodes']} nodes, depth {result['depth']}; acceptance length estimated "
               f"{result['estimated_acceptance_length']:.3f} (depths independent), replayed {static_len:.3f}")
    click.echo(f"eagle_choices (Triton): {result['triton']}")
    click.echo(f"dynamic tree at {budget} nodes (replayed acceptance length, proposer ms / step):")
    for row in dynamic["shapes"]:
        mark = "  <- best" if row == best else ""
        click.echo(f"  {row['tree']}: {row['replayed_acceptance_length']:.3f}, "
                   f"{1e3 * row['draft_s_per_step']:.1f} ms{mark}")
    click.echo(f"recommended at {budget} nodes: {json.dumps(result['recommended'])}")
    if out_file is not None:
        click.echo(f"written: {out_file}")
