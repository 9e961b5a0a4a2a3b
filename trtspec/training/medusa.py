"""Train Medusa heads on a frozen target with NVIDIA ModelOpt, by self-distillation; export both layouts.

Pipeline (deterministic for a seed, interpreter and torch build):
  1. prompts     windows of the training corpus (stdlib train files; random token ids for a tokenizer-less target)
  2. generate    the target continues them itself, half greedy and half sampled at T=1 (self-distillation data);
                 plus corpus windows of the same length (cheap: no generation), also labelled by the target
  3. convert     `modelopt.torch.speculative.convert(model, [(MEDUSA.modelopt_mode, ...)])` adds the heads; each
                 head's LM head starts as a copy of the target's (Medusa's initialisation), its residual blocks as
                 the identity
  4. features    the target is frozen, so its last hidden states and next-token distributions are computed once
  5. train       head h at position t learns the target's distribution for the token at t + 2 + h (soft labels,
                 KL(target || head), weights 0.8**h as in Medusa/ModelOpt), AdamW with warmup + cosine
  6. evaluate    per-head top-1/top-5 agreement with the target's greedy continuations of held-out prompts
  7. export      HF Medusa layout (FasterDecoding names, fp16) and a TensorRT-LLM Medusa checkpoint written by
                 ModelOpt's `export_tensorrt_llm_checkpoint` (MedusaForCausalLM, base weights + heads)
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from trtspec.atomic import replace_dir, write_json
from trtspec.errors import ToolNotFoundError
from trtspec.methods.medusa import MEDUSA
from trtspec.spec.medusa_heads import MedusaHeads, MedusaShape, save_medusa_hf
from trtspec.targets import DEFAULT_TARGET
from trtspec.training.recipe import Progress, SelfDistillRecipe, silent

HEAD_LOSS_DECAY = 0.8  # Medusa / ModelOpt `medusa_decay_coefficient`


@dataclass
class MedusaRecipe(SelfDistillRecipe):
    num_heads: int = 4
    num_layers: int = 1
    steps: int = 150
    batch_size: int = 8
    lr: float = 3e-3
    eval_gen_len: int = 96
    max_draft_len: int = 63  # written to the TensorRT-LLM checkpoint (node budget of the tree)


# ---------------------------------------------------------------------------------------------------------------
# 1./2. self-distillation data


def corpus_prompts(tokenizer: Any, files: list[Path], num: int, length: int, gen: torch.Generator) -> torch.Tensor:
    """`num` windows of `length` tokens at random offsets, visiting `files` in random order (cycling if few).

    Returns [num, length] token ids. Only the files visited are tokenized.
    """
    from trtspec.training.corpus import read

    rows: list[list[int]] = []
    order = torch.randperm(len(files), generator=gen).tolist()
    encoded: dict[int, list[int]] = {}
    for visit in range(num * 4):
        index = order[visit % len(order)]
        if index not in encoded:
            encoded[index] = tokenizer(read(files[index]), add_special_tokens=False)["input_ids"]
        ids = encoded[index]
        if len(ids) >= length:
            start = int(torch.randint(0, len(ids) - length + 1, (1,), generator=gen))
            rows.append(ids[start : start + length])
        if len(rows) == num:
            return torch.tensor(rows, dtype=torch.long)
    raise ValueError(f"too few corpus files with {length} tokens for {num} prompts")


def distillation_prompts(target: Path, vocab_size: int, *, num_prompts: int, prompt_len: int, num_windows: int,
                         window_len: int, num_eval: int, gen: torch.Generator
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, str]:
    """Training prompts [n, P], corpus windows [w, window_len] and held-out prompts [m, P] for self-distillation,
    with a description of their source: stdlib corpus windows (train / held-out files) when the target has a
    tokenizer, random token ids otherwise (no windows)."""
    from trtspec.models import load_tokenizer
    from trtspec.training.corpus import stdlib_corpus

    windows = torch.zeros(0, window_len, dtype=torch.long)  # [w, window_len]
    if not (target / "tokenizer.json").is_file():
        return (random_prompts(vocab_size, num_prompts, prompt_len, gen), windows,
                random_prompts(vocab_size, num_eval, prompt_len, gen),
                "random token-id prompts (the target has no tokenizer)")
    tokenizer = load_tokenizer(target)
    corpus = stdlib_corpus()
    train = corpus_prompts(tokenizer, corpus.train_files, num_prompts, prompt_len, gen)
    if num_windows:
        windows = corpus_prompts(tokenizer, corpus.train_files, num_windows, window_len, gen)
    held_out = corpus_prompts(tokenizer, corpus.heldout_files, num_eval, prompt_len, gen)
    return train, windows, held_out, f"{corpus.source}: train files for prompts, held-out files (every 25th) for evaluation"


def random_prompts(vocab_size: int, num: int, length: int, gen: torch.Generator) -> torch.Tensor:
    """Random token ids, for targets without a tokenizer (test models).  # [num, length]"""
    return torch.randint(0, vocab_size, (num, length), generator=gen)


@torch.no_grad()
def continue_with_target(model: Any, prompts: torch.Tensor, new_tokens: int, *, sample: bool,
                         gen: torch.Generator) -> torch.Tensor:
    """The target's own continuation (greedy or T=1 sampling) of equal-length prompts.  # [n, P + new_tokens]"""
    from transformers import DynamicCache

    cache = DynamicCache()
    logits = model(input_ids=prompts, cache=cache, use_cache=True).logits[:, -1]  # [n, vocab]
    out = [prompts]
    for _ in range(new_tokens):
        if sample:
            next_ids = torch.multinomial(torch.softmax(logits.float(), -1), 1, generator=gen)  # [n, 1]
        else:
            next_ids = logits.argmax(-1, keepdim=True)  # [n, 1]
        out.append(next_ids)
        logits = model(input_ids=next_ids, cache=cache, use_cache=True).logits[:, -1]
    return torch.cat(out, dim=1)


def self_distillation_data(model: Any, prompts: torch.Tensor, new_tokens: int, gen: torch.Generator,
                           progress: Progress, *, stage: str = "generate", chunk: int = 32) -> torch.Tensor:
    """Alternating chunks of greedy and sampled continuations.  # [n, P + new_tokens]"""
    out = []
    for i in range(0, prompts.shape[0], chunk):
        sample = (i // chunk) % 2 == 1
        out.append(continue_with_target(model, prompts[i : i + chunk], new_tokens, sample=sample, gen=gen))
        progress(stage, min(i + chunk, prompts.shape[0]), prompts.shape[0], "sampled" if sample else "greedy")
    return torch.cat(out)


# ---------------------------------------------------------------------------------------------------------------
# 3./4. ModelOpt conversion and frozen features


def convert_with_modelopt(model: Any, num_heads: int, num_layers: int) -> Any:
    """Add Medusa heads with ModelOpt; initialise each head's LM head from the target's (Medusa's init)."""
    try:
        import modelopt.torch.speculative as mtsp
    except ImportError as exc:
        raise ToolNotFoundError(f"NVIDIA ModelOpt is not importable ({exc})",
                                hint="pip install 'nvidia-modelopt>=0.40' requests") from None
    model = mtsp.convert(model, [(MEDUSA.modelopt_mode, {"medusa_num_heads": num_heads,
                                                          "medusa_num_layers": num_layers})])
    with torch.no_grad():
        for head in model.medusa_heads:
            head[-1].weight.copy_(model.lm_head.weight)
    for p in model.parameters():
        p.requires_grad_(False)
    for p in model.medusa_heads.parameters():
        p.requires_grad_(True)
    return model


@torch.no_grad()
def target_features(model: Any, sequences: torch.Tensor, chunk: int = 16) -> torch.Tensor:
    """Last hidden states (after the final norm) of the frozen target.  # [n, T, hidden]"""
    return torch.cat([model.model(input_ids=sequences[i : i + chunk]).last_hidden_state
                      for i in range(0, sequences.shape[0], chunk)])


def medusa_loss(medusa_heads: Any, lm_head: Any, hidden: torch.Tensor) -> tuple[torch.Tensor, list[float]]:
    """Soft-label self-distillation loss. hidden: [B, T, H] frozen target features.

    Head h at position t predicts the token at t + 2 + h, whose target distribution is lm_head(hidden[t + 1 + h]).
    Returns the weighted loss and the per-head KL values.
    """
    with torch.no_grad():
        target_logp = F.log_softmax(lm_head(hidden).float(), dim=-1)  # [B, T, vocab]
    total = hidden.new_zeros(())
    per_head = []
    for h, head in enumerate(medusa_heads):
        span = hidden.shape[1] - 1 - h
        head_logp = F.log_softmax(head(hidden[:, :span]).float(), dim=-1)  # [B, span, vocab]
        teacher = target_logp[:, 1 + h : 1 + h + span]  # [B, span, vocab]
        kl = F.kl_div(head_logp.flatten(0, 1), teacher.flatten(0, 1), log_target=True, reduction="batchmean")
        total = total + kl * HEAD_LOSS_DECAY**h
        per_head.append(kl.item())
    return total, per_head


def lr_at(step: int, total: int, peak: float) -> float:
    from trtspec.training.tiny import lr_at as tiny_lr_at

    return tiny_lr_at(step, total, peak, warmup=max(1, min(30, total // 10)))


def train_heads(model: Any, features: torch.Tensor, recipe: MedusaRecipe, progress: Progress) -> list[float]:
    gen = torch.Generator().manual_seed(recipe.seed + 3)
    params = list(model.medusa_heads.parameters())
    opt = torch.optim.AdamW(params, lr=recipe.lr, betas=(0.9, 0.95), weight_decay=0.0)
    losses = []
    for step in range(recipe.steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, recipe.steps, recipe.lr)
        rows = torch.randint(0, features.shape[0], (recipe.batch_size,), generator=gen)
        loss, per_head = medusa_loss(model.medusa_heads, model.lm_head, features[rows])  # features: [B, T, H]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        losses.append(loss.item())
        progress("train", step + 1, recipe.steps, "kl " + " ".join(f"{x:.2f}" for x in per_head))
    return losses


# ---------------------------------------------------------------------------------------------------------------
# 6. evaluation


@torch.no_grad()
def head_accuracy(heads: MedusaHeads, features: torch.Tensor, sequences: torch.Tensor, start: int,
                  ks: tuple[int, ...] = (1, 5)) -> list[dict[str, float]]:
    """Per head, how often the token at t + 2 + h is in the head's top-k at positions t >= start - 1.

    features: [n, T, H] target hidden states of `sequences` [n, T] (target greedy continuations, so the token at
    t + 2 + h is the target's own choice).
    """
    out = []
    for h in range(heads.num_heads):
        first, span = start - 1, sequences.shape[1] - 2 - h - (start - 1)
        logits = heads.heads[h](features[:, first : first + span])  # [n, span, vocab]
        labels = sequences[:, first + 2 + h : first + 2 + h + span]  # [n, span]
        top = logits.topk(max(ks), dim=-1).indices  # [n, span, kmax]
        out.append({f"top{k}": (top[..., :k] == labels[..., None]).any(-1).float().mean().item() for k in ks})
    return out


# ---------------------------------------------------------------------------------------------------------------
# 7. export


def export_trtllm_checkpoint(model: Any, out_dir: Path, *, max_draft_len: int) -> dict[str, Any]:
    """A TensorRT-LLM Medusa checkpoint (config.json + rank0.safetensors, fp16) via ModelOpt, written atomically."""
    from modelopt.torch.export import export_tensorrt_llm_checkpoint

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}."))
    try:
        with contextlib.redirect_stdout(sys.stderr):  # ModelOpt prints rank info; keep stdout for our output
            export_tensorrt_llm_checkpoint(model, decoder_type="llama", dtype=torch.float16, export_dir=tmp,
                                           inference_tensor_parallel=1)
        config = json.loads((tmp / "config.json").read_text())
        config["max_draft_len"] = max_draft_len  # ModelOpt hard-codes 63; the tree's node budget belongs here
        rope = getattr(model.config, "rope_parameters", None) or {}
        rope_theta = rope.get("rope_theta", getattr(model.config, "rope_theta", None))
        if "rotary_base" not in config and rope_theta is not None:
            config["rotary_base"] = float(rope_theta)  # ModelOpt 0.47 omits it; TensorRT-LLM defaults to 10000
        config = target_checkpoint_config(config, mlp_bias=bool(getattr(model.config, "mlp_bias", False)))
        write_json(tmp / "config.json", config)
        for path in (tmp, *tmp.iterdir()):
            path.chmod(0o755 if path.is_dir() else 0o644)  # mkdtemp creates 0700
        replace_dir(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return config


def target_checkpoint_config(config: dict[str, Any], *, mlp_bias: bool) -> dict[str, Any]:
    """ModelOpt's config.json with only the keys the TensorRT-LLM targets read (trtspec.targets checkpoint facts):
    its `bias` becomes LLaMAConfig's `attn_bias` (a `bias` key is ignored), `mlp_bias` is stated, and ModelOpt's own
    bookkeeping keys (producer, decoder, rank, rmsnorm, lm_head_bias, base_architecture, share_embedding_table),
    which TensorRT-LLM does not read, are dropped."""
    from trtspec.targets import checkpoint_keys

    out = dict(config)
    out["attn_bias"] = bool(out.pop("bias", False)) or bool(out.get("attn_bias", False))
    out["mlp_bias"] = bool(out.get("mlp_bias", mlp_bias))
    read = checkpoint_keys(DEFAULT_TARGET, out["architecture"])
    return {key: value for key, value in out.items() if key in read}


def heads_from_modelopt(model: Any, shape: MedusaShape) -> MedusaHeads:
    heads = MedusaHeads(shape)
    heads.heads.load_state_dict(model.medusa_heads.state_dict())  # identical FasterDecoding names
    return heads.eval()


# ---------------------------------------------------------------------------------------------------------------
# orchestration


def train_medusa(target: Path, out_dir: Path, recipe: MedusaRecipe, *, base_model_name: str | None = None,
                 trtllm_dir: Path | None = None, progress: Progress = silent) -> dict[str, Any]:
    """Run the pipeline: HF Medusa heads in `out_dir` (+ TensorRT-LLM checkpoint in `trtllm_dir`). Returns the report."""
    from transformers import LlamaForCausalLM

    t0 = time.time()
    timings: dict[str, float] = {}
    model = LlamaForCausalLM.from_pretrained(target, dtype=torch.float32).eval()
    vocab, hidden_size = model.config.vocab_size, model.config.hidden_size
    gen = torch.Generator().manual_seed(recipe.seed)
    train_prompts, windows, eval_prompts, data_source = distillation_prompts(
        target, vocab, num_prompts=recipe.num_prompts, prompt_len=recipe.prompt_len,
        num_windows=recipe.num_corpus_windows, window_len=recipe.prompt_len + recipe.gen_len,
        num_eval=recipe.eval_prompts, gen=gen)
    progress("prompts", 1, 1, f"{train_prompts.shape[0]} train / {eval_prompts.shape[0]} held-out prompts")

    t = time.time()
    generated = self_distillation_data(model, train_prompts, recipe.gen_len, gen, progress)  # [n, P + G]
    sequences = torch.cat([generated, windows])  # [n + w, P + G]
    eval_sequences = continue_with_target(model, eval_prompts, recipe.eval_gen_len, sample=False, gen=gen)
    timings["generate_s"] = time.time() - t

    t = time.time()
    model = convert_with_modelopt(model, recipe.num_heads, recipe.num_layers)
    features = target_features(model, sequences)  # [n, T, H]
    eval_features = target_features(model, eval_sequences)  # [n_eval, T_eval, H]
    timings["features_s"] = time.time() - t

    shape = MedusaShape(recipe.num_heads, recipe.num_layers, hidden_size, vocab)
    before = head_accuracy(heads_from_modelopt(model, shape), eval_features, eval_sequences, recipe.prompt_len)
    t = time.time()
    losses = train_heads(model, features, recipe, progress)
    timings["train_s"] = time.time() - t
    heads = heads_from_modelopt(model, shape)
    accuracy = head_accuracy(heads, eval_features, eval_sequences, recipe.prompt_len)
    progress("evaluate", 1, 1, " ".join(f"h{h}:{a['top1']:.2f}" for h, a in enumerate(accuracy)))

    tokens_per_step = recipe.batch_size * (sequences.shape[1] - 1)
    report: dict[str, Any] = {
        "recipe": asdict(recipe),
        "target": str(base_model_name or target),
        "trainer": "NVIDIA ModelOpt modelopt.torch.speculative (medusa mode), frozen target, soft-label "
                   "self-distillation on cached target features",
        "data": {"source": data_source, "sequences": sequences.shape[0], "sequence_len": sequences.shape[1],
                 "generated_sequences": generated.shape[0], "corpus_windows": windows.shape[0],
                 "greedy_and_sampled": "alternating chunks of greedy and T=1 continuations",
                 "data_tokens": sequences.numel(), "train_tokens": recipe.steps * tokens_per_step},
        "final_loss": sum(losses[-10:]) / len(losses[-10:]),
        "accuracy_before": before,
        "accuracy": accuracy,
        "accuracy_definition": "per head h: the token at t+2+h of the target's greedy continuation of held-out "
                               "prompts is in the head's top-k at t (positions of the continuation only)",
    }
    t = time.time()
    save_medusa_hf(heads, out_dir, base_model=str(base_model_name or target),
                   extra_config={"trtspec_training": {"train_tokens": report["data"]["train_tokens"],
                                                      "top1": [round(a["top1"], 4) for a in accuracy],
                                                      "top5": [round(a["top5"], 4) for a in accuracy]}})
    if trtllm_dir is not None:
        config = export_trtllm_checkpoint(model, trtllm_dir, max_draft_len=recipe.max_draft_len)
        report["trtllm_checkpoint"] = {"path": str(trtllm_dir), "architecture": config["architecture"],
                                       "num_medusa_heads": config["num_medusa_heads"],
                                       "num_medusa_layers": config["num_medusa_layers"],
                                       "max_draft_len": config["max_draft_len"]}
    timings["export_s"] = time.time() - t
    timings["total_s"] = time.time() - t0
    report["timings"] = timings
    write_json(out_dir / "training-report.json", report)
    return report


def model_card(report: dict[str, Any], acceptance: dict[str, Any] | None = None) -> str:
    """README.md for a trained head set: shape, data, per-head accuracy and (when measured) acceptance."""
    r, d = report["recipe"], report["data"]
    rows = "\n".join(
        f"| {h} | t+{h + 2} | {a['top1']:.3f} | {a['top5']:.3f} | {b['top1']:.3f} / {b['top5']:.3f} |"
        for h, (a, b) in enumerate(zip(report["accuracy"], report["accuracy_before"], strict=True)))
    card = f"""# Medusa heads for `{report['target']}`

{r['num_heads']} Medusa heads x {r['num_layers']} residual block(s), fp16, HF Medusa layout (FasterDecoding names:
`config.json` + `medusa_lm_head.safetensors`). Trained by `trtspec train medusa` with {report['trainer']}.
Head h reads the target's last hidden state at the last committed token and proposes the token h+2 positions ahead.

| | |
|---|---|
| training | {r['steps']} AdamW steps x {r['batch_size']} sequences, {d['train_tokens']:,} token positions, lr {r['lr']} |
| data | {d['generated_sequences']} target continuations ({d['greedy_and_sampled']}) and {d['corpus_windows']} corpus windows, {d['sequence_len']} tokens each, all labelled with the target's own distributions; {d['source']} |
| final loss | {report['final_loss']:.3f} (sum over heads of 0.8^h KL(target || head)) |
| time | {report['timings']['total_s'] / 60:.1f} min on this machine |

## Per-head accuracy (held-out prompts)
{report['accuracy_definition']}.

| head | predicts | top-1 | top-5 | untrained (target LM head copy) top-1 / top-5 |
|---|---|---|---|---|
{rows}
"""
    if acceptance:
        card += "\n## Measured acceptance\n" + acceptance["markdown"] + "\n"
    return card
