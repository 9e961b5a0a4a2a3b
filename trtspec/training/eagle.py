"""Train an EAGLE-3 drafter on a frozen target with NVIDIA ModelOpt, by self-distillation; export the HF layout.

Pipeline (deterministic for a seed, interpreter and torch build; resumable from OUT/.trtspec-train/):
  1. prompts     windows of the training corpus (stdlib train files; random token ids for a tokenizer-less target)
  2. generate    the target continues them itself, half greedy and half sampled at T=1 (training.medusa helpers),
                 plus corpus windows of the same length; held-out prompts continued greedily for evaluation
  3. convert     `modelopt.torch.speculative.convert(model, [(EAGLE3.modelopt_mode, EAGLE3 config)])`: one decoder
                 layer whose attention reads cat(norm(embedding of token t+1), norm(fc(low, mid, high target
                 features at t)))
  4. train       ModelOpt's loss: soft labels from the target's next-token distributions, `ttt_steps` training-time-test
                 steps (the drafter's own output features fed back, weights 0.9**step), AdamW with warmup + cosine;
                 a checkpoint (drafter + optimizer + step) is written atomically every `checkpoint_every` steps
  5. evaluate    top-1 agreement with the target's greedy continuations of held-out prompts at draft depths 1..ttt
  6. export      ModelOpt's EAGLE-3 exporter (LlamaForCausalLMEagle3, fp16), layer-id conventions written for vLLM
                 (top level, input of layer i) and SGLang/ModelOpt (`eagle_config`, output of layer i)

Taps follow vLLM: tap i is the residual stream entering target layer i (`spec.model.LlamaModel.forward(taps=...)`);
ModelOpt hooks layer outputs, so it is given i - 1. The first layer's `input_layernorm` (applied by the HF decoder
layer before ModelOpt's EAGLE-3 hook, then again inside `hidden_norm`) is frozen at 1: RMSNorm of an RMS-normalised
vector is that vector, so the trained function equals vLLM's `cat(input_layernorm(e), hidden_norm(h))` exactly (the
qkv projection absorbs the per-channel scale a trainable weight would have given the embeddings).
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from trtspec.atomic import atomic_path, write_json
from trtspec.errors import ConfigError, ToolNotFoundError
from trtspec.methods.eagle import EAGLE3
from trtspec.training.recipe import Progress, SelfDistillRecipe, silent

CHECKPOINT_DIR = ".trtspec-train"  # inside OUT: the resumable training state
TRAINER = ("NVIDIA ModelOpt modelopt.torch.speculative (eagle mode, EAGLE-3 config: aux hidden states, "
           "training-time test), frozen target, soft-label self-distillation")


@dataclass
class EagleRecipe(SelfDistillRecipe):
    """The self-distillation data (`SelfDistillRecipe`; its held-out prompts are continued greedily to the training
    length prompt_len + gen_len: ModelOpt caches its training-time-test attention masks by step, for one sequence
    length) and the drafter's training settings."""

    taps: tuple[int, ...] | None = None  # target layers read (vLLM convention); None = default_taps(num_layers)
    intermediate_size: int | None = None  # drafter MLP width; None = the target's
    draft_vocab_size: int | None = None  # EAGLE-3's reduced draft vocabulary (d2t); None = the target's vocabulary
    ttt_steps: int = 3  # ModelOpt eagle_ttt_steps: draft depths trained on the drafter's own features
    steps: int = 240
    batch_size: int = 8
    lr: float = 2e-3
    checkpoint_every: int = 20
    stop_after: int | None = field(default=None, compare=False)  # stop (resumably) after this many steps: tests


def default_taps(num_layers: int) -> tuple[int, ...]:
    """vLLM's default EAGLE-3 taps (2, L // 2, L - 3) when they are three distinct layers, else (1, L // 2, L - 1).

    The tiny 6-layer target gets (1, 3, 5): vLLM's rule gives (2, 3, 3) there.
    """
    vllm = (2, num_layers // 2, num_layers - 3)
    if len(set(vllm)) == 3 and all(0 < t < num_layers for t in vllm):
        return vllm
    taps = (1, num_layers // 2, num_layers - 1)
    if len(set(taps)) != 3:
        raise ConfigError("target.num_hidden_layers", num_layers, "an EAGLE-3 drafter reads three distinct layers",
                          hint="use a target with at least 4 layers")
    return taps


def check_taps(taps: tuple[int, ...], num_layers: int, *, field: str = "taps") -> tuple[int, ...]:
    """Three distinct layers in [1, num_layers) (0, the embeddings, has no layer output for ModelOpt to hook)."""
    if len(taps) != 3 or len(set(taps)) != 3 or not all(0 < t < num_layers for t in taps):
        raise ConfigError(field, list(taps), f"must be three distinct target layers in [1, {num_layers})",
                          hint=f"e.g. {','.join(map(str, default_taps(num_layers)))} (low, middle, high)")
    return tuple(sorted(taps))


# ---------------------------------------------------------------------------------------------------------------
# 3. ModelOpt conversion


def eagle3_config(target_config: Any, taps: tuple[int, ...], recipe: EagleRecipe) -> dict[str, Any]:
    """ModelOpt's EAGLE3_DEFAULT_CFG["config"] shaped like the target (heads, KV heads, head dim) for `taps`."""
    from modelopt.torch.speculative.config import EAGLE3_DEFAULT_CFG

    cfg = copy.deepcopy(EAGLE3_DEFAULT_CFG["config"])
    heads = target_config.num_attention_heads
    cfg["eagle_architecture_config"].update({
        "intermediate_size": recipe.intermediate_size or target_config.intermediate_size,
        "num_attention_heads": heads,
        "num_key_value_heads": getattr(target_config, "num_key_value_heads", None) or heads,
        "head_dim": getattr(target_config, "head_dim", None) or target_config.hidden_size // heads,
        "rms_norm_eps": target_config.rms_norm_eps,
        "eagle_aux_hidden_state_layer_ids": [t - 1 for t in taps],  # ModelOpt hooks the output of layer t - 1
        "torch_dtype": "float32",
    })
    if recipe.draft_vocab_size is not None and recipe.draft_vocab_size < target_config.vocab_size:
        cfg["eagle_architecture_config"]["draft_vocab_size"] = recipe.draft_vocab_size
    cfg["eagle_ttt_steps"] = recipe.ttt_steps
    cfg["eagle_use_torch_compile"] = False  # CPU training; compile adds minutes for a model this small
    cfg["eagle_export_rope_scaling"] = {}  # ModelOpt's default writes YaRN x32 into the export; we train default RoPE
    return cfg


def convert_with_modelopt(model: Any, taps: tuple[int, ...], recipe: EagleRecipe) -> Any:
    """Add an EAGLE-3 module with ModelOpt; only its parameters train (see the module docstring for the norm)."""
    try:
        import modelopt.torch.speculative as mtsp
    except ImportError as exc:
        raise ToolNotFoundError(f"NVIDIA ModelOpt is not importable ({exc})",
                                hint="pip install 'nvidia-modelopt>=0.40'") from None
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    # ModelOpt initialises the drafter from the global RNG: seed it (in a fork) so that a run is reproducible
    with contextlib.redirect_stdout(sys.stderr), torch.random.fork_rng():
        torch.manual_seed(recipe.seed + 1)
        model = mtsp.convert(model, [(EAGLE3.modelopt_mode, eagle3_config(model.config, taps, recipe))])
    module = model.eagle_module
    # ModelOpt 0.47 builds the rotary embedding with a `device=` argument transformers 5.x no longer takes; it only
    # builds one when the attribute is missing, so set it here (the same class, built the transformers-5 way).
    module.rotary_emb = LlamaRotaryEmbedding(config=module.config)
    first = module.layers[0]
    with torch.no_grad():
        first.input_layernorm.weight.fill_(1.0)
    first.input_layernorm.weight.requires_grad_(False)
    return model


def drafter_parameters(model: Any) -> list[torch.nn.Parameter]:
    return [p for p in model.eagle_module.parameters() if p.requires_grad]


def frequent_vocab(sequences: torch.Tensor, vocab_size: int, size: int) -> torch.Tensor:
    """The `size` most frequent token ids of `sequences` [n, T] (ties: lower id first), most frequent first:
    ModelOpt's `calibrate_frequent_vocab` on token ids instead of text.  # [size]"""
    counts = torch.bincount(sequences.flatten(), minlength=vocab_size)  # [vocab]
    return torch.sort(-counts, stable=True).indices[:size]


def set_draft_vocab(model: Any, sequences: torch.Tensor) -> torch.Tensor | None:
    """Give a reduced-vocabulary drafter its d2t (draft id i -> target id i + d2t[i], the `draft_vocab_size` most
    frequent tokens of the training data) and start its own lm_head from the target's rows for those tokens.
    Returns the target ids [draft_vocab] (None for a full-vocabulary drafter, which shares the target's lm_head)."""
    module = model.eagle_module
    if not hasattr(module, "d2t"):
        return None
    draft_ids = frequent_vocab(sequences, model.config.vocab_size, module.d2t.numel())  # [draft_vocab]
    with torch.no_grad():
        module.d2t.copy_(draft_ids - torch.arange(draft_ids.numel()))
        module.lm_head.weight.copy_(model.lm_head.weight[draft_ids])
    return draft_ids


def vocab_coverage(draft_ids: torch.Tensor | None, sequences: torch.Tensor) -> float:
    """Share of the token positions of `sequences` [n, T] whose token is in the draft vocabulary."""
    if draft_ids is None:
        return 1.0
    return round(float(torch.isin(sequences, draft_ids).float().mean()), 4)


# ---------------------------------------------------------------------------------------------------------------
# 4. training with a resumable checkpoint


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """torch.save to a temp file in the same directory, then rename (a kill leaves the previous checkpoint)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        torch.save(state, tmp)


def load_checkpoint(path: Path, recipe: EagleRecipe, target: str) -> dict[str, Any] | None:
    """The saved state if it was made by the same recipe for the same target, else None (start over)."""
    if not path.is_file():
        return None
    state = torch.load(path, weights_only=False)
    same = state.get("recipe") == _recipe_key(recipe) and state.get("target") == target
    return state if same else None


def _recipe_key(recipe: EagleRecipe) -> dict[str, Any]:
    key = asdict(recipe)
    key.pop("stop_after")
    return key


def lr_at(step: int, total: int, peak: float) -> float:
    from trtspec.training.tiny import lr_at as tiny_lr_at

    return tiny_lr_at(step, total, peak, warmup=max(1, min(30, total // 10)))


def train_drafter(model: Any, sequences: torch.Tensor, recipe: EagleRecipe, checkpoint: Path, target: str,
                  resume: dict[str, Any] | None, progress: Progress) -> tuple[list[float], list[list[float]], bool]:
    """ModelOpt's EAGLE-3 loss over batches of `sequences` [n, T]; returns (losses, per-step accuracies, finished).

    The batch order comes from a generator seeded by the recipe and advanced step by step, so a resumed run draws
    the same batches as an uninterrupted one.
    """
    params = drafter_parameters(model)
    opt = torch.optim.AdamW(params, lr=recipe.lr, betas=(0.9, 0.95), weight_decay=0.0)
    gen = torch.Generator().manual_seed(recipe.seed + 3)
    start, losses, accs = 0, [], []
    if resume is not None:
        model.eagle_module.load_state_dict(resume["drafter"])
        opt.load_state_dict(resume["optimizer"])
        gen.set_state(resume["generator"])
        start, losses, accs = resume["step"], resume["losses"], resume["accuracies"]
    model.train()
    for step in range(start, recipe.steps):
        if recipe.stop_after is not None and step >= recipe.stop_after:
            return losses, accs, False
        for group in opt.param_groups:
            group["lr"] = lr_at(step, recipe.steps, recipe.lr)
        rows = torch.randint(0, sequences.shape[0], (recipe.batch_size,), generator=gen)
        out = model(input_ids=sequences[rows])  # base forward (frozen) + ttt_steps drafter forwards
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        losses.append(out.loss.item())
        accs.append([round(float(a), 4) for a in out.train_acc[0]])
        progress("train", step + 1, recipe.steps, "loss {:.2f} acc {}".format(
            losses[-1], " ".join(f"{a:.2f}" for a in accs[-1])))
        if (step + 1) % recipe.checkpoint_every == 0 or step + 1 == recipe.steps:
            save_checkpoint(checkpoint, {"recipe": _recipe_key(recipe), "target": target, "step": step + 1,
                                         "drafter": model.eagle_module.state_dict(), "optimizer": opt.state_dict(),
                                         "generator": gen.get_state(), "losses": losses, "accuracies": accs})
    return losses, accs, True


@torch.no_grad()
def depth_accuracy(model: Any, sequences: torch.Tensor, chunk: int = 8) -> list[float]:
    """Top-1 agreement with the target at draft depths 1..ttt_steps (ModelOpt's training-time-test accuracies)
    on `sequences` [n, T], averaged over chunks; the drafter is not updated."""
    model.train()  # ModelOpt runs the training-time-test steps only in training mode
    rows = [model(input_ids=sequences[i : i + chunk]).train_acc[0] for i in range(0, sequences.shape[0], chunk)]
    return [round(sum(r[d] for r in rows) / len(rows), 4) for d in range(len(rows[0]))]


# ---------------------------------------------------------------------------------------------------------------
# 6. export


def export_hf(model: Any, out_dir: Path, taps: tuple[int, ...], extra: dict[str, Any]) -> dict[str, Any]:
    """ModelOpt's EAGLE-3 HF export into `out_dir` (files written to temps, then renamed), weights cast to fp16
    (ModelOpt 0.47 keeps the training dtype unless the model is quantized), config completed with both layer-id
    conventions and the target's special tokens. Returns the config."""
    from safetensors.torch import load_file, save_file

    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out_dir, prefix=".export."))
    try:
        with contextlib.redirect_stdout(sys.stderr):
            model.get_exporter().export(tmp)
        weights = tmp / "model.safetensors"
        state = {k: (v.to(torch.float16) if v.is_floating_point() else v).contiguous()
                 for k, v in load_file(weights).items()}
        if "d2t" in state:  # EAGLE-3's t2d beside d2t: which target ids the draft vocabulary holds
            state["t2d"] = torch.zeros(model.config.vocab_size, dtype=torch.bool)  # [vocab]
            state["t2d"][torch.arange(state["d2t"].numel()) + state["d2t"]] = True
        save_file(state, weights, metadata={"format": "pt"})
        config = json.loads((tmp / "config.json").read_text())
        base = model.config
        tokens = {"bos_token_id": base.bos_token_id, "eos_token_id": base.eos_token_id,
                  "pad_token_id": base.pad_token_id}
        config = complete_config(config, taps, tokens | extra)
        write_json(tmp / "config.json", config)
        for name in ("model.safetensors", "config.json"):
            (tmp / name).chmod(0o644)
            os.replace(tmp / name, out_dir / name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return config


def complete_config(config: dict[str, Any], taps: tuple[int, ...], extra: dict[str, Any]) -> dict[str, Any]:
    """Layer ids in the two conventions their readers use (facts: trtspec/targets/eagle3-facts.json): vLLM reads the
    top-level `eagle_aux_hidden_state_layer_ids` as the input of layer i; SGLang and ModelOpt read
    `eagle_config.eagle_aux_hidden_state_layer_ids` as the output of layer i (SGLang captures i + 1)."""
    out = dict(config)
    out["eagle_aux_hidden_state_layer_ids"] = list(taps)
    out["eagle_config"] = dict(out.get("eagle_config") or {}, eagle_aux_hidden_state_layer_ids=[t - 1 for t in taps])
    out["torch_dtype"] = "float16"
    out.update(extra)
    return out


# ---------------------------------------------------------------------------------------------------------------
# orchestration


def training_data(model: Any, target: Path, recipe: EagleRecipe, progress: Progress) -> dict[str, Any]:
    """Self-distillation sequences [n, P + G] and held-out greedy continuations [m, P + G], with their source."""
    from trtspec.training.medusa import continue_with_target, distillation_prompts, self_distillation_data

    gen = torch.Generator().manual_seed(recipe.seed)
    train_prompts, windows, eval_prompts, source = distillation_prompts(
        target, model.config.vocab_size, num_prompts=recipe.num_prompts, prompt_len=recipe.prompt_len,
        num_windows=recipe.num_corpus_windows, window_len=recipe.prompt_len + recipe.gen_len,
        num_eval=recipe.eval_prompts, gen=gen)
    progress("prompts", 1, 1, f"{train_prompts.shape[0]} train / {eval_prompts.shape[0]} held-out prompts")
    generated = self_distillation_data(model, train_prompts, recipe.gen_len, gen, progress)  # [n, P + G]
    evaluation = continue_with_target(model, eval_prompts, recipe.gen_len, sample=False, gen=gen)
    return {"sequences": torch.cat([generated, windows]), "eval_sequences": evaluation, "source": source,
            "generated": generated.shape[0], "windows": windows.shape[0]}


def train_eagle(target: Path, out_dir: Path, recipe: EagleRecipe, *, base_model_name: str | None = None,
                progress: Progress = silent) -> dict[str, Any] | None:
    """Run the pipeline into `out_dir` (HF EAGLE-3 layout + training-report.json). Returns the report, or None when
    `recipe.stop_after` stopped it early (the checkpoint in OUT/.trtspec-train/ resumes it)."""
    from transformers import LlamaForCausalLM

    t0 = time.time()
    name = str(base_model_name or target)
    state_dir = out_dir / CHECKPOINT_DIR
    model = LlamaForCausalLM.from_pretrained(target, dtype=torch.float32).eval()
    num_layers = model.config.num_hidden_layers
    taps = check_taps(recipe.taps, num_layers) if recipe.taps else default_taps(num_layers)
    vocab = model.config.vocab_size
    if recipe.draft_vocab_size is not None and not 1 <= recipe.draft_vocab_size <= vocab:
        raise ConfigError("draft_vocab_size", recipe.draft_vocab_size, f"must be in [1, the target's vocab_size {vocab}]",
                          hint=f"e.g. --draft-vocab-size {vocab // 2}")
    data_file = state_dir / "data.pt"
    data = torch.load(data_file, weights_only=False) if data_file.is_file() else None
    if data is None or data.get("recipe") != recipe.data_key() or data.get("target") != name:
        data = training_data(model, target, recipe, progress) | {"recipe": recipe.data_key(), "target": name}
        save_checkpoint(data_file, data)
    else:
        progress("generate", 1, 1, "reused the saved self-distillation data")
    t_data = time.time() - t0

    model = convert_with_modelopt(model, taps, recipe)
    draft_ids = set_draft_vocab(model, data["sequences"])
    checkpoint = state_dir / "state.pt"
    resume = load_checkpoint(checkpoint, recipe, name)
    before = depth_accuracy(model, data["eval_sequences"]) if resume is None else None
    t = time.time()
    losses, accs, finished = train_drafter(model, data["sequences"], recipe, checkpoint, name, resume, progress)
    if not finished:
        return None
    accuracy = depth_accuracy(model, data["eval_sequences"])
    progress("evaluate", 1, 1, " ".join(f"d{d + 1}:{a:.2f}" for d, a in enumerate(accuracy)))
    t_train = time.time() - t
    sequences = data["sequences"]
    report: dict[str, Any] = {
        "recipe": asdict(recipe) | {"taps": list(taps)},
        "target": name,
        "trainer": TRAINER,
        "data": {"source": data["source"], "sequences": sequences.shape[0], "sequence_len": sequences.shape[1],
                 "generated_sequences": data["generated"], "corpus_windows": data["windows"],
                 "greedy_and_sampled": "alternating chunks of greedy and T=1 continuations",
                 "train_tokens": recipe.steps * recipe.batch_size * (sequences.shape[1] - 1),
                 "draft_vocab_coverage": {"train": vocab_coverage(draft_ids, sequences),
                                          "held_out_greedy": vocab_coverage(draft_ids, data["eval_sequences"])}},
        "final_loss": sum(losses[-10:]) / len(losses[-10:]),
        "accuracy_before": before,
        "accuracy": accuracy,
        "accuracy_definition": "top-1 agreement of the drafter with the target's greedy continuation of held-out "
                               "prompts at draft depth d (depth > 1 drafts from the drafter's own features)",
        "parameters": sum(p.numel() for p in model.eagle_module.parameters())
                      + (0 if hasattr(model.eagle_module, "lm_head") else model.lm_head.weight.numel()),
    }
    config = export_hf(model, out_dir, taps, {"trtspec_training": {"base_model": name, "accuracy": accuracy}})
    report["config"] = {k: config[k] for k in ("architectures", "hidden_size", "intermediate_size", "vocab_size",
                                               "draft_vocab_size", "eagle_aux_hidden_state_layer_ids")}
    report["timings"] = {"data_s": t_data, "train_s": t_train, "total_s": time.time() - t0}
    write_json(out_dir / "training-report.json", report)
    shutil.rmtree(state_dir, ignore_errors=True)
    return report


def recipe_command(target: str, recipe: EagleRecipe, out: str) -> str:
    """The `trtspec train eagle` command line that trains with `recipe` (flags for non-default values)."""
    flags = {"taps": ",".join(map(str, recipe.taps)) if recipe.taps else None,
             "intermediate-size": recipe.intermediate_size, "draft-vocab-size": recipe.draft_vocab_size}
    default = EagleRecipe()
    for name, flag in (("ttt_steps", "ttt-steps"), ("steps", "steps"), ("batch_size", "batch-size"), ("lr", "lr"),
                       ("num_prompts", "prompts"), ("gen_len", "gen-len"), ("num_corpus_windows", "corpus-windows"),
                       ("checkpoint_every", "checkpoint-every"), ("seed", "seed")):
        if getattr(recipe, name) != getattr(default, name):
            flags[flag] = getattr(recipe, name)
    return " ".join(["trtspec train eagle --model", target, *(f"--{k} {v}" for k, v in flags.items() if v is not None),
                     "--out", out])


def _coverage(data: dict[str, Any]) -> str:
    cov = data.get("draft_vocab_coverage")
    if not cov or cov["train"] == 1.0:
        return ""
    return (f" (the most frequent in the training data; they cover {100 * cov['train']:.1f}% of its token positions "
            f"and {100 * cov['held_out_greedy']:.1f}% of the held-out greedy continuations)")


def model_card(report: dict[str, Any], acceptance: dict[str, Any] | None = None) -> str:
    """README.md for a trained drafter: shape, data, per-depth accuracy and (when measured) acceptance."""
    r, d, c = report["recipe"], report["data"], report["config"]
    before = report["accuracy_before"] or [None] * len(report["accuracy"])
    rows = "\n".join(f"| {i + 1} | {a:.3f} | {'-' if b is None else f'{b:.3f}'} |"
                     for i, (a, b) in enumerate(zip(report["accuracy"], before, strict=True)))
    card = f"""# EAGLE-3 drafter for `{report['target']}`

One decoder layer (hidden {c['hidden_size']}, MLP {c['intermediate_size']}) that reads the target's residual stream
entering layers {c['eagle_aux_hidden_state_layer_ids']} (low, middle, high; fused by `fc`) and the embedding of the
next token, and drafts autoregressively on its own output features. {report['parameters']:,} parameters, fp16, HF
layout `{c['architectures'][0]}` (ModelOpt's export: `layers.0.*`, `fc`, `norm`, `lm_head`; the embeddings are the
target's). Trained by `trtspec train eagle` with {report['trainer']}.

| | |
|---|---|
| training | {r['steps']} AdamW steps x {r['batch_size']} sequences, {d['train_tokens']:,} token positions, lr {r['lr']}, {r['ttt_steps']} training-time-test steps |
| data | {d['generated_sequences']} target continuations ({d['greedy_and_sampled']}) and {d['corpus_windows']} corpus windows, {d['sequence_len']} tokens each, labelled with the target's own distributions; {d['source']} |
| final loss | {report['final_loss']:.3f} (ModelOpt: sum over depths of 0.9^d soft cross-entropy) |
| time | {report['timings']['total_s'] / 60:.1f} min on this machine |
| draft vocabulary | {c.get('draft_vocab_size') or c['vocab_size']} of {c['vocab_size']} tokens{_coverage(d)} |
{f"| reproduce | `{report['command']}` |" + chr(10) if report.get('command') else ''}
## Per-depth accuracy (held-out prompts)
{report['accuracy_definition']}.

| depth | top-1 | untrained |
|---|---|---|
{rows}
"""
    if acceptance:
        card += "\n## Measured acceptance\n" + acceptance["markdown"] + "\n"
    return card
