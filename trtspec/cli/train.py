"""`trtspec train medusa | eagle | draft`: Medusa heads / an EAGLE-3 drafter for a frozen target (NVIDIA ModelOpt);
a draft distilled on the target's continuations of logged prompts (trtspec.training.distill)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from trtspec.cli._types import FiniteFloat
from trtspec.methods.eagle import EAGLE3
from trtspec.methods.medusa import MEDUSA
from trtspec.training.distill import DistillRecipe


def _distillation_data(command: Callable[..., Any]) -> Callable[..., Any]:
    """The self-distillation data options both trainers share (training.medusa.distillation_prompts)."""
    for option in reversed([
        click.option("--prompts", "num_prompts", type=click.IntRange(1), default=64, show_default=True,
                     help="Self-distillation sequences: corpus prompts the target continues itself (greedy and "
                          "sampled)."),
        click.option("--gen-len", type=click.IntRange(2), default=96, show_default=True,
                     help="Tokens the target generates per self-distillation prompt."),
        click.option("--corpus-windows", type=click.IntRange(0), default=64, show_default=True,
                     help="Extra training-corpus windows (same length), labelled by the target's distributions."),
    ]):
        command = option(command)
    return command


@click.group()
def train() -> None:
    """Train speculation modules for a target model.

    Examples:

    \b
        trtspec train medusa --model tiny --heads 4 --out runs/medusa
        trtspec train eagle --model tiny --out runs/eagle
        trtspec train draft --model tiny --draft tiny-draft --prompts /var/log/trtspec/prompts --out out/draft-v2
    """


@train.command(MEDUSA.train_command)
@click.option("--model", "target", default="tiny", show_default=True,
              help="Target: embedded name or local HF Llama directory (kept frozen).")
@click.option("--heads", "num_heads", type=click.IntRange(1, 16), default=4, show_default=True,
              help="Number of Medusa heads (head h predicts the token h+2 ahead).")
@click.option("--layers", "num_layers", type=click.IntRange(1, 8), default=1, show_default=True,
              help="Residual blocks per head.")
@click.option("--steps", type=click.IntRange(1), default=150, show_default=True, help="Optimizer steps.")
@click.option("--batch-size", type=click.IntRange(1), default=8, show_default=True,
              help="Sequences per step.")
@click.option("--lr", type=click.FloatRange(min=0, min_open=True), default=3e-3, show_default=True,
              help="Peak AdamW learning rate.")
@_distillation_data
@click.option("--max-draft-len", type=click.IntRange(1), default=63, show_default=True,
              help="Tree node budget written to the TensorRT-LLM checkpoint (max_draft_len).")
@click.option("--out", "out_dir", type=click.Path(path_type=Path, file_okay=False), required=True,
              help="Output directory: HF Medusa layout (config.json + medusa_lm_head.safetensors).")
@click.option("--trtllm-out", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="TensorRT-LLM Medusa checkpoint directory [default: OUT/trtllm-ckpt].")
@click.option("--no-trtllm", is_flag=True, help="Skip the TensorRT-LLM checkpoint (it includes the base weights).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of data sampling and batch order.")
@click.option("--json", "as_json", is_flag=True, help="Print the training report as JSON.")
def medusa(target: str, num_heads: int, num_layers: int, steps: int, batch_size: int, lr: float, num_prompts: int,
           gen_len: int, corpus_windows: int, max_draft_len: int, out_dir: Path, trtllm_out: Path | None, no_trtllm: bool, seed: int,
           as_json: bool) -> None:
    """Train Medusa heads on a frozen target by self-distillation (NVIDIA ModelOpt).

    Reports per-head top-1/top-5 accuracy on held-out prompts and writes OUT (HF Medusa layout, usable as
    `trtspec generate --method medusa --medusa OUT`) and a TensorRT-LLM Medusa checkpoint for `trtllm-build`.

    Examples:

    \b
        trtspec train medusa --model tiny --heads 4 --out runs/medusa
        trtspec train medusa --model tiny --heads 3 --steps 300 --out runs/medusa-3
    """
    from trtspec.atomic import write_text
    from trtspec.cli._progress import stage_progress
    from trtspec.models import resolve_model
    from trtspec.training.medusa import MedusaRecipe, model_card, train_medusa

    path = resolve_model(target)
    recipe = MedusaRecipe(num_heads=num_heads, num_layers=num_layers, steps=steps, batch_size=batch_size, lr=lr,
                          num_prompts=num_prompts, gen_len=gen_len, num_corpus_windows=corpus_windows,
                          max_draft_len=max_draft_len, seed=seed)
    trtllm_dir = None if no_trtllm else (trtllm_out or out_dir / "trtllm-ckpt")
    with stage_progress(disable=as_json) as progress:
        report = train_medusa(path, out_dir, recipe, base_model_name=target, trtllm_dir=trtllm_dir,
                              progress=progress)
    write_text(out_dir / "README.md", model_card(report))
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    click.echo(f"Medusa heads for {target}: {num_heads} heads x {num_layers} layers, "
               f"{report['data']['train_tokens']:,} training tokens, {report['timings']['total_s']:.0f} s")
    for h, (before, after) in enumerate(zip(report["accuracy_before"], report["accuracy"], strict=True)):
        click.echo(f"  head {h}: top-1 {after['top1']:.3f} top-5 {after['top5']:.3f} "
                   f"(untrained {before['top1']:.3f} / {before['top5']:.3f})")
    click.echo(f"HF Medusa layout: {out_dir}")
    if trtllm_dir is not None:
        click.echo(f"TensorRT-LLM checkpoint: {trtllm_dir} (max_draft_len {max_draft_len})")


@train.command(EAGLE3.train_command)
@click.option("--model", "target", default="tiny", show_default=True,
              help="Target: embedded name or local HF Llama directory (kept frozen).")
@click.option("--taps", default=None, metavar="L,M,H",
              help="Three target layers whose input the drafter reads (vLLM's eagle_aux_hidden_state_layer_ids) "
                   "[default: vLLM's (2, L/2, L-3), or (1, L/2, L-1) when those repeat].")
@click.option("--intermediate-size", type=click.IntRange(1), default=None,
              help="Drafter MLP width [default: the target's].")
@click.option("--draft-vocab-size", type=click.IntRange(1), default=None,
              help="EAGLE-3's reduced draft vocabulary: the N most frequent tokens of the training data (d2t/t2d in "
                   "the export; a smaller lm_head) [default: the target's vocabulary, sharing its lm_head].")
@click.option("--ttt-steps", type=click.IntRange(1, 8), default=3, show_default=True,
              help="Training-time-test steps (draft depths trained on the drafter's own features).")
@click.option("--steps", type=click.IntRange(1), default=240, show_default=True, help="Optimizer steps.")
@click.option("--batch-size", type=click.IntRange(1), default=8, show_default=True, help="Sequences per step.")
@click.option("--lr", type=click.FloatRange(min=0, min_open=True), default=2e-3, show_default=True,
              help="Peak AdamW learning rate.")
@_distillation_data
@click.option("--checkpoint-every", type=click.IntRange(1), default=20, show_default=True,
              help="Steps between resumable checkpoints (OUT/.trtspec-train/state.pt).")
@click.option("--out", "out_dir", type=click.Path(path_type=Path, file_okay=False), required=True,
              help="Output directory: HF EAGLE-3 layout (config.json + model.safetensors) and a model card.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of data sampling and batch order.")
@click.option("--json", "as_json", is_flag=True, help="Print the training report as JSON.")
def eagle(target: str, taps: str | None, intermediate_size: int | None, draft_vocab_size: int | None, ttt_steps: int,
          steps: int, batch_size: int, lr: float, num_prompts: int, gen_len: int, corpus_windows: int, checkpoint_every: int, out_dir: Path,
          seed: int, as_json: bool) -> None:
    """Train an EAGLE-3 drafter on a frozen target by self-distillation (NVIDIA ModelOpt).

    Re-running the same command after an interruption resumes from the last checkpoint. Writes OUT, usable as
    `trtspec generate --method eagle3 --eagle OUT` and loadable by vLLM / SGLang as an EAGLE-3 draft model.

    Examples:

    \b
        trtspec train eagle --model tiny --out runs/eagle
        trtspec train eagle --model tiny --ttt-steps 2 --steps 120 --out runs/eagle-quick
    """
    from trtspec.atomic import write_json, write_text
    from trtspec.cli._progress import stage_progress
    from trtspec.errors import ConfigError
    from trtspec.models import resolve_model
    from trtspec.training.eagle import EagleRecipe, model_card, recipe_command, train_eagle

    path = resolve_model(target)
    tap_ids = None
    if taps is not None:
        try:
            tap_ids = tuple(int(t) for t in taps.split(","))
        except ValueError:
            raise ConfigError("--taps", taps, "must be three integers L,M,H", hint="e.g. --taps 1,3,5") from None
    recipe = EagleRecipe(taps=tap_ids, intermediate_size=intermediate_size, draft_vocab_size=draft_vocab_size,
                         ttt_steps=ttt_steps, steps=steps,
                         batch_size=batch_size, lr=lr, num_prompts=num_prompts, gen_len=gen_len,
                         num_corpus_windows=corpus_windows, checkpoint_every=checkpoint_every, seed=seed)
    with stage_progress(disable=as_json) as progress:
        report = train_eagle(path, out_dir, recipe, base_model_name=target, progress=progress)
    assert report is not None  # stop_after is not a CLI option
    report["command"] = recipe_command(target, recipe, str(out_dir))
    write_json(out_dir / "training-report.json", report)
    write_text(out_dir / "README.md", model_card(report))
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    click.echo(f"EAGLE-3 drafter for {target}: taps {report['recipe']['taps']}, {report['parameters']:,} parameters, "
               f"{report['data']['train_tokens']:,} training tokens, {report['timings']['total_s']:.0f} s")
    click.echo("  top-1 by draft depth: " + " ".join(f"{a:.3f}" for a in report["accuracy"]))
    click.echo(f"HF EAGLE-3 layout: {out_dir}")


@train.command("draft")
@click.option("--model", "target", default="tiny", show_default=True,
              help="Target: embedded name or local HF Llama directory (the teacher; kept frozen).")
@click.option("--draft", default="tiny-draft", show_default=True,
              help="The draft to start from: embedded name or local HF directory (same vocabulary as the target).")
@click.option("--prompts", type=click.Path(path_type=Path, exists=True), required=True,
              help="The prompt log directory (`trtspec deploy --log-prompts DIR`) or a JSONL file with \"prompt\" "
                   "or \"prompt_ids\" per line.")
@click.option("--out", "out_dir", type=click.Path(path_type=Path, file_okay=False), required=True,
              help="Where the distilled draft goes (an HF checkpoint; roll it out with `trtspec rollout-draft`).")
@click.option("--steps", type=click.IntRange(1), default=DistillRecipe.steps, show_default=True,
              help="Optimizer steps.")
@click.option("--batch-size", type=click.IntRange(1), default=DistillRecipe.batch_size, show_default=True,
              help="Sequences per step.")
@click.option("--lr", type=FiniteFloat(min=1e-8, max=1.0), default=DistillRecipe.lr, show_default=True,
              help="Peak AdamW learning rate.")
@click.option("--gen-len", type=click.IntRange(1, 4096), default=DistillRecipe.gen_len, show_default=True,
              help="Tokens the target generates per training prompt.")
@click.option("--max-prompt-len", type=click.IntRange(1, 4096), default=DistillRecipe.max_prompt_len,
              show_default=True, help="Prompts are cut from the left to this many tokens.")
@click.option("--heldout-fraction", type=FiniteFloat(min=0.0, max=1.0), default=DistillRecipe.heldout_fraction,
              show_default=True, help="Share of the distinct prompts held out for the before/after acceptance.")
@click.option("--k", type=click.IntRange(1, 64), default=DistillRecipe.k, show_default=True,
              help="Draft tokens per step when measuring acceptance.")
@click.option("--eval-new-tokens", type=click.IntRange(1, 4096), default=DistillRecipe.eval_new_tokens,
              show_default=True, help="Tokens generated per held-out prompt when measuring acceptance.")
@click.option("--seed", type=click.IntRange(0, 2**63 - 1), default=0, show_default=True,
              help="Seed of sampling and batch order.")
@click.option("--json", "as_json", is_flag=True, help="Print the training report as JSON.")
def draft(target: str, draft: str, prompts: Path, out_dir: Path, steps: int, batch_size: int, lr: float,
          gen_len: int, max_prompt_len: int, heldout_fraction: float, k: int, eval_new_tokens: int, seed: int,
          as_json: bool) -> None:
    """Distil DRAFT on TARGET's own continuations of logged prompts; report acceptance on held-out ones.

    Held-out prompts (a hash split of the distinct prompts) are never trained on. Interrupted, the same command
    resumes from its last checkpoint (kept beside OUT until OUT is written).

    Examples:

    \b
        trtspec train draft --model tiny --draft tiny-draft --prompts /var/log/trtspec/prompts --out out/draft-v2
        trtspec train draft --prompts shifted-html.jsonl --steps 60 --out out/draft-html
    """
    from trtspec.cli._progress import stage_progress
    from trtspec.models import resolve_model
    from trtspec.training.distill import check_inputs, distill_draft

    recipe = DistillRecipe(steps=steps, batch_size=batch_size, lr=lr, gen_len=gen_len, max_prompt_len=max_prompt_len,
                           heldout_fraction=heldout_fraction, k=k, eval_new_tokens=eval_new_tokens, seed=seed)
    target_path, draft_path = resolve_model(target, field="target"), resolve_model(draft, field="draft")
    check_inputs(target_path, draft_path, prompts, out_dir)  # bad input: one line, before the progress display
    with stage_progress(disable=as_json) as progress:
        report = distill_draft(target_path, draft_path, prompts, out_dir, recipe, progress=progress)
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    before, after, data = report["acceptance_before"], report["acceptance_after"], report["data"]
    click.echo(f"draft distilled on {data['train_prompts']} logged prompts ({data['heldout_prompts']} held out), "
               f"{steps} steps, {report['seconds']:.0f} s")
    click.echo(f"held-out acceptance rate (greedy, k={k}): {before['acceptance_rate']:.3f} -> "
               f"{after['acceptance_rate']:.3f}; mean acceptance length {before['mean_acceptance_length']:.2f} -> "
               f"{after['mean_acceptance_length']:.2f}")
    click.echo(f"wrote {out_dir}; serve it with `trtspec rollout-draft --repo REPO --draft {out_dir}`")
