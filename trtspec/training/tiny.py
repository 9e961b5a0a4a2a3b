"""Train the embedded tiny model pair: a Llama target and a much smaller Llama draft distilled from it.

Pipeline (deterministic for a given seed, interpreter and torch build):
  1. corpus     stdlib source, split train / held out (trtspec.training.corpus)
  2. tokenizer  byte-level BPE (Hugging Face `tokenizers`), vocab 4096
  3. target     LlamaForCausalLM trained from scratch with AdamW (next-token cross-entropy)
  4. draft      smaller LlamaForCausalLM distilled on the target: KL(target || draft) on corpus text and on the
                target's own generations (greedy and sampled), which is what raises acceptance
  5. evaluate   validation loss of both; greedy per-token agreement alpha of the draft along the target's greedy
                continuations of held-out prompts
  6. save       fp16 safetensors + tokenizer (with trtspec's chat template, trtspec/chat.py) + model card per model
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from trtspec.atomic import write_json
from trtspec.chat import write_chat_template
from trtspec.training.corpus import EOS, Corpus, stdlib_corpus
from trtspec.training.recipe import Progress, silent


@dataclass
class ModelShape:
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    num_key_value_heads: int | None = None


@dataclass
class TinyRecipe:
    seed: int = 0
    vocab_size: int = 4096
    seq_len: int = 256
    batch_size: int = 8
    target: ModelShape = field(default_factory=lambda: ModelShape(384, 6, 6, 1024))
    draft: ModelShape = field(default_factory=lambda: ModelShape(192, 2, 3, 512))
    target_steps: int = 500
    target_lr: float = 2e-3
    distill_prompts: int = 192      # target generations used as distillation data
    distill_prompt_len: int = 48
    distill_gen_len: int = 208
    draft_steps: int = 360
    draft_lr: float = 3e-3
    eval_prompts: int = 24
    eval_prompt_len: int = 64
    eval_new_tokens: int = 128
    corpus_limit: int | None = None


# ---------------------------------------------------------------------------------------------------------------
# 2. tokenizer


def train_tokenizer(corpus: Corpus, vocab_size: int) -> Any:
    """Byte-level BPE over the training files, wrapped as a transformers PreTrainedTokenizerFast."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from trtspec.training.corpus import read

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator((read(f) for f in corpus.train_files), trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=EOS, eos_token=EOS, pad_token=EOS, unk_token=None)


def encode_files(tokenizer: Any, files: list[Path]) -> torch.Tensor:
    """One flat token stream, files separated by EOS.  # [num_tokens]"""
    from trtspec.training.corpus import read

    eos = tokenizer.convert_tokens_to_ids(EOS)
    ids: list[int] = []
    for f in files:
        ids.extend(tokenizer(read(f), add_special_tokens=False)["input_ids"])
        ids.append(eos)
    return torch.tensor(ids, dtype=torch.long)


# ---------------------------------------------------------------------------------------------------------------
# 3./4. models and training


def make_model(shape: ModelShape, vocab_size: int, eos_id: int, seed: int) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_hidden_layers,
        num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_key_value_heads or shape.num_attention_heads,
        max_position_embeddings=1024,
        rope_theta=10000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        bos_token_id=eos_id,
        eos_token_id=eos_id,
        pad_token_id=eos_id,
    )
    torch.manual_seed(seed)  # scripts may seed; the library proper never does
    return LlamaForCausalLM(config)


def random_batches(stream: torch.Tensor, batch: int, seq_len: int, gen: torch.Generator) -> torch.Tensor:
    """Random windows of `seq_len + 1` tokens.  # [batch, seq_len + 1]"""
    starts = torch.randint(0, stream.numel() - seq_len - 1, (batch,), generator=gen)
    return torch.stack([stream[s : s + seq_len + 1] for s in starts.tolist()])


def lr_at(step: int, total: int, peak: float, warmup: int = 30) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def optimizer_step(opt: Any, model: Any, loss: torch.Tensor, max_norm: float = 1.0) -> None:
    """One AdamW step on `loss`, gradients clipped to `max_norm` (every training loop of trtspec.training)."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()


def train_target(model: Any, stream: torch.Tensor, recipe: TinyRecipe, progress: Progress) -> list[float]:
    gen = torch.Generator().manual_seed(recipe.seed + 1)
    opt = torch.optim.AdamW(model.parameters(), lr=recipe.target_lr, betas=(0.9, 0.95), weight_decay=0.1)
    model.train()
    losses = []
    for step in range(recipe.target_steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, recipe.target_steps, recipe.target_lr)
        batch = random_batches(stream, recipe.batch_size, recipe.seq_len, gen)  # [B, T+1]
        logits = model(input_ids=batch[:, :-1]).logits  # [B, T, vocab]
        loss = F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())
        optimizer_step(opt, model, loss)
        losses.append(loss.item())
        progress("target", step + 1, recipe.target_steps, f"loss {loss.item():.3f}")
    model.eval()
    return losses


@torch.no_grad()
def target_generations(model: Any, stream: torch.Tensor, recipe: TinyRecipe, eos_id: int,
                       progress: Progress) -> torch.Tensor:
    """The target's own continuations of corpus prompts: half greedy, half sampled at T=1.  # [n, P + G]"""
    gen = torch.Generator().manual_seed(recipe.seed + 2)
    n, plen, glen = recipe.distill_prompts, recipe.distill_prompt_len, recipe.distill_gen_len
    starts = torch.randint(0, stream.numel() - plen, (n,), generator=gen).tolist()
    prompts = torch.stack([stream[s : s + plen] for s in starts])  # [n, P]
    out = []
    chunk = 32
    for i in range(0, n, chunk):
        greedy = (i // chunk) % 2 == 0
        torch.manual_seed(recipe.seed + 100 + i)  # HF generate samples from the global generator
        seqs = model.generate(
            prompts[i : i + chunk], attention_mask=torch.ones_like(prompts[i : i + chunk]),
            max_new_tokens=glen, min_new_tokens=glen, do_sample=not greedy, temperature=1.0, top_k=0,
            top_p=1.0, pad_token_id=eos_id, eos_token_id=None,
        )  # fmt: skip
        out.append(seqs)
        progress("generate", min(i + chunk, n), n, "greedy" if greedy else "sampled")
    return torch.cat(out)


def distill_draft(draft: Any, target: Any, stream: torch.Tensor, generations: torch.Tensor, recipe: TinyRecipe,
                  progress: Progress) -> list[float]:
    """Minimise KL(target || draft) on a 50/50 mix of corpus windows and target generations."""
    gen = torch.Generator().manual_seed(recipe.seed + 3)
    opt = torch.optim.AdamW(draft.parameters(), lr=recipe.draft_lr, betas=(0.9, 0.95), weight_decay=0.0)
    draft.train()
    losses = []
    glen = generations.shape[1]
    for step in range(recipe.draft_steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, recipe.draft_steps, recipe.draft_lr)
        if step % 2 == 0:
            batch = random_batches(stream, recipe.batch_size, recipe.seq_len, gen)[:, :-1]  # [B, T]
        else:
            rows = torch.randint(0, generations.shape[0], (recipe.batch_size,), generator=gen)
            batch = generations[rows][:, : min(glen, recipe.seq_len)]  # [B, T]
        with torch.no_grad():
            target_logp = F.log_softmax(target(input_ids=batch).logits.float(), dim=-1)  # [B, T, vocab]
        draft_logp = F.log_softmax(draft(input_ids=batch).logits, dim=-1)  # [B, T, vocab]
        loss = F.kl_div(draft_logp.flatten(0, 1), target_logp.flatten(0, 1), log_target=True, reduction="batchmean")
        optimizer_step(opt, draft, loss)
        losses.append(loss.item())
        progress("draft", step + 1, recipe.draft_steps, f"kl {loss.item():.3f}")
    draft.eval()
    return losses


# ---------------------------------------------------------------------------------------------------------------
# 5. evaluation


@torch.no_grad()
def validation_loss(model: Any, stream: torch.Tensor, seq_len: int, max_windows: int = 64) -> float:
    windows = stream[: (stream.numel() // (seq_len + 1)) * (seq_len + 1)].view(-1, seq_len + 1)[:max_windows]
    losses = []
    for i in range(0, windows.shape[0], 8):
        batch = windows[i : i + 8]  # [b, T+1]
        logits = model(input_ids=batch[:, :-1]).logits
        losses.append(F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten()).item())
    return sum(losses) / len(losses)


def heldout_prompts(stream: torch.Tensor, n: int, length: int) -> torch.Tensor:
    """Evenly spaced windows of the held-out stream.  # [n, length]"""
    stride = (stream.numel() - length) // n
    return torch.stack([stream[i * stride : i * stride + length] for i in range(n)])


@torch.no_grad()
def greedy_alpha(target: Any, draft: Any, prompts: torch.Tensor, new_tokens: int, eos_id: int) -> dict[str, Any]:
    """Per-token greedy agreement of the draft with the target along the target's greedy continuations.

    alpha = P(draft argmax == target argmax) at each generated position, teacher-forced on the target's output.
    """
    seqs = target.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=new_tokens,
                           min_new_tokens=new_tokens, do_sample=False, pad_token_id=eos_id, eos_token_id=None)
    plen = prompts.shape[1]
    t_next = target(input_ids=seqs).logits[:, plen - 1 : -1].argmax(-1)  # [n, new]
    d_next = draft(input_ids=seqs).logits[:, plen - 1 : -1].argmax(-1)  # [n, new]
    per_prompt = (t_next == d_next).float().mean(-1)  # [n]
    return {"alpha_greedy": per_prompt.mean().item(), "alpha_min": per_prompt.min().item(),
            "alpha_max": per_prompt.max().item()}


# ---------------------------------------------------------------------------------------------------------------
# orchestration


def train_pair(out_dir: Path, recipe: TinyRecipe, progress: Progress = silent) -> dict[str, Any]:
    """Run the whole pipeline and write `out_dir/tiny` and `out_dir/tiny-draft`. Returns the report dict."""
    t0 = time.time()
    timings: dict[str, float] = {}
    corpus = stdlib_corpus(limit=recipe.corpus_limit)
    progress("corpus", 1, 1, f"{len(corpus.train_files)} train / {len(corpus.heldout_files)} held-out files")

    tokenizer = train_tokenizer(corpus, recipe.vocab_size)
    eos_id = tokenizer.convert_tokens_to_ids(EOS)
    train_stream = encode_files(tokenizer, corpus.train_files)  # [N]
    heldout_stream = encode_files(tokenizer, corpus.heldout_files)  # [M]
    timings["tokenize_s"] = time.time() - t0

    t = time.time()
    target = make_model(recipe.target, len(tokenizer), eos_id, recipe.seed)
    target_losses = train_target(target, train_stream, recipe, progress)
    timings["target_s"] = time.time() - t

    t = time.time()
    generations = target_generations(target, train_stream, recipe, eos_id, progress)
    timings["generate_s"] = time.time() - t

    t = time.time()
    draft = make_model(recipe.draft, len(tokenizer), eos_id, recipe.seed + 10)
    draft_losses = distill_draft(draft, target, train_stream, generations, recipe, progress)
    timings["draft_s"] = time.time() - t

    t = time.time()
    prompts = heldout_prompts(heldout_stream, recipe.eval_prompts, recipe.eval_prompt_len)
    report: dict[str, Any] = {
        "recipe": asdict(recipe),
        "corpus": {"source": corpus.source, "train_files": len(corpus.train_files),
                   "heldout_files": len(corpus.heldout_files), "train_tokens": train_stream.numel(),
                   "heldout_tokens": heldout_stream.numel(), "holdout_rule": "every 25th file (sorted by path)"},
        "target": {"params": sum(p.numel() for p in target.parameters()),
                   "train_tokens": recipe.target_steps * recipe.batch_size * recipe.seq_len,
                   "final_train_loss": sum(target_losses[-20:]) / len(target_losses[-20:]),
                   "val_loss": validation_loss(target, heldout_stream, recipe.seq_len)},
        "draft": {"params": sum(p.numel() for p in draft.parameters()),
                  "distill_tokens": recipe.draft_steps * recipe.batch_size * recipe.seq_len,
                  "final_kl": sum(draft_losses[-20:]) / len(draft_losses[-20:]),
                  "val_loss": validation_loss(draft, heldout_stream, recipe.seq_len)},
        "acceptance": greedy_alpha(target, draft, prompts, recipe.eval_new_tokens, eos_id),
    }
    timings["eval_s"] = time.time() - t
    timings["total_s"] = time.time() - t0
    report["timings"] = timings

    for name, model in (("tiny", target), ("tiny-draft", draft)):
        path = out_dir / name
        path.mkdir(parents=True, exist_ok=True)
        model.to(torch.float16).save_pretrained(path, safe_serialization=True)
        tokenizer.save_pretrained(path)
        write_chat_template(path)  # OpenAI-style servers (NVIDIA Dynamo) require one
        model.to(torch.float32)
    write_json(out_dir / "training-report.json", report)
    return report
