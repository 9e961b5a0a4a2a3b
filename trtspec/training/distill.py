"""Distil a draft on the traffic it serves: the target's own continuations of logged prompts (`trtspec train draft`).

Pipeline (deterministic for a seed; resumable):
  1. prompts    the log (contracts/prompt_log.py) -> token ids, de-duplicated, cut from the left to max_prompt_len; split
                by a hash of each prompt into train and held out (a prompt is on one side only, whatever its count)
  2. generate   the target continues every training prompt (reference engine, plain decoding): a share greedy, the
                rest sampled at temperature 1, so the draft learns the target's distribution, not one path
  3. before     acceptance of the current draft on the held-out prompts (speculative decoding, greedy, k)
  4. train      minimise KL(target || draft) over the generated sequences (AdamW, cosine schedule); a checkpoint
                every `checkpoint_every` steps: a re-run with the same inputs resumes from it
  5. after      acceptance of the trained draft on the same held-out prompts (never trained on)
  6. write      OUT (HF checkpoint + tokenizer + training-report.json + README.md) atomically: staged beside OUT,
                renamed into place; the resume state beside OUT is removed when OUT is complete
torch is imported by the functions that need it (DistillRecipe and the prompt split are torch-free).
Bad input fails before any work: a log with no usable prompt (or fewer than two distinct ones), a draft whose
vocabulary or tokenizer differs from the target's, an OUT that is not a draft this command wrote.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from trtspec.atomic import atomic_path, replace_dir
from trtspec.contracts.prompt_log import LoggedPrompt, read_prompt_log
from trtspec.errors import ConfigError, UsageError
from trtspec.methods.draft_target import DRAFT_TARGET
from trtspec.training.recipe import Progress, silent

REPORT = "training-report.json"
STATE = "state.pt"  # training checkpoint inside the resume directory
DATA = "data.pt"  # the generated sequences inside the resume directory


@dataclass(frozen=True)
class DistillRecipe:
    steps: int = 200  # optimizer steps
    batch_size: int = 8  # sequences per step
    lr: float = 1e-3  # peak AdamW learning rate
    gen_len: int = 64  # tokens the target generates per training prompt
    max_prompt_len: int = 128  # prompts are cut from the left to this many tokens
    heldout_fraction: float = 0.2  # share of the distinct prompts held out for the acceptance report
    greedy_fraction: float = 0.5  # share of training prompts continued greedily (the rest sampled at T=1)
    k: int = 4  # draft tokens per step in the acceptance report
    eval_new_tokens: int = 48  # tokens generated per held-out prompt in the acceptance report
    checkpoint_every: int = 25  # steps between resume checkpoints
    seed: int = 0

    def validate(self) -> DistillRecipe:
        for name in ("steps", "batch_size", "gen_len", "max_prompt_len", "k", "eval_new_tokens", "checkpoint_every"):
            if getattr(self, name) < 1:
                raise ConfigError(name, getattr(self, name), "must be >= 1", hint=f"e.g. {name}=8")
        for name in ("heldout_fraction", "greedy_fraction"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(name, getattr(self, name), "must be in [0, 1]", hint=f"e.g. {name}=0.2")
        if not self.lr > 0:
            raise ConfigError("lr", self.lr, "must be > 0", hint="e.g. 1e-3")
        return self


@dataclass(frozen=True)
class PromptSplit:
    train: list[list[int]]  # [num_train][prompt_len]
    heldout: list[list[int]]  # [num_heldout][prompt_len]
    num_logged: int  # usable lines of the log (duplicates included)
    num_skipped: int  # unusable lines


def split_prompts(logged: Sequence[LoggedPrompt], encode: Callable[[str], list[int]], vocab_size: int,
                  recipe: DistillRecipe, source: str = "--prompts",
                  render_chat: Callable[[list[dict[str, str]]], str] | None = None) -> PromptSplit:
    """Distinct prompts as token ids, split by hash: the first `heldout_fraction` in hash order are held out (at
    least one, at least one left to train). A prompt logged many times is one prompt, on one side. A chat's messages
    become text through `render_chat` (`chat_renderer`: as the server rendered the request); without it they are
    skipped."""
    distinct: dict[str, list[int]] = {}
    skipped = 0
    for item in logged:
        if item.messages is not None:
            if render_chat is None:
                skipped += 1
                continue
            ids = encode(render_chat(json.loads(item.messages)))
        else:
            ids = list(item.prompt_ids) if item.prompt_ids else encode(item.prompt or "")
        if not ids or max(ids) >= vocab_size:
            skipped += 1
            continue
        distinct.setdefault(item.key, ids[-recipe.max_prompt_len:])
    if len(distinct) < 2:
        raise ConfigError(source, f"{len(distinct)} distinct usable prompt(s)", "needs at least two distinct prompts "
                          "(one to train on, one held out)", hint="log more traffic (raise --log-sample-rate) or "
                          "pass a larger prompt file")
    order = sorted(distinct, key=lambda key: hashlib.sha256(key.encode()).hexdigest())
    num_heldout = min(max(1, round(len(order) * recipe.heldout_fraction)), len(order) - 1)
    return PromptSplit(train=[distinct[k] for k in order[num_heldout:]], heldout=[distinct[k] for k in order[:num_heldout]],
                       num_logged=len(logged), num_skipped=skipped)


def distill_draft(target: Path, draft: Path, prompts: Path, out: Path, recipe: DistillRecipe | None = None, *,
                  progress: Progress = silent) -> dict[str, Any]:
    """Run the pipeline (module docstring); returns the report written to OUT/training-report.json.

    Args:
        target, draft: checkpoint directories (embedded names resolved by the caller: trtspec.models.resolve_model).
        prompts: a prompt log directory (`trtspec deploy --log-prompts DIR`) or a JSONL file.
        out: where the distilled draft is written.
    """
    from trtspec.spec.engine import SpecEngine

    recipe = (recipe or DistillRecipe()).validate()
    t0 = time.time()
    # 1. prompts (and every check) before any work
    logged, skipped = check_inputs(target, draft, prompts, out)
    engine = SpecEngine.from_pretrained(target, draft, max_k=recipe.k)
    split = split_prompts(logged, engine.encode, engine.vocab_size, recipe, render_chat=chat_renderer(engine.tokenizer))
    split = PromptSplit(split.train, split.heldout, split.num_logged, split.num_skipped + skipped)
    resume = resume_dir(out)
    key = run_key(target, draft, prompts, recipe)
    data = load_state(resume, DATA, key)
    # 2. generate
    if data is None:
        data = {"key": key, "sequences": generate(engine, split.train, recipe, progress)}
        save_state(resume, DATA, data)
    # 3. before
    before = data.get("before") or acceptance(engine, split.heldout, recipe, progress, "before")
    if "before" not in data:
        save_state(resume, DATA, {**data, "before": before})
    # 4. train
    student, teacher = load_hf(draft), load_hf(target)
    losses = train(student, teacher, data["sequences"], recipe, resume, key, progress)
    # 5. after (the trained draft, staged in its final form) and 6. write
    staging = out.with_name(f".{out.name}.tmp{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        save_draft(student, draft, staging)
        trained = SpecEngine.from_pretrained(target, staging, max_k=recipe.k)
        after = acceptance(trained, split.heldout, recipe, progress, "after")
        report = {
            "target": str(target), "draft": str(draft), "prompts": str(prompts), "recipe": asdict(recipe),
            "data": {"logged_prompts": split.num_logged, "unusable_lines": split.num_skipped,
                     "train_prompts": len(split.train), "heldout_prompts": len(split.heldout),
                     "train_sequences": len(data["sequences"]),
                     "train_tokens": recipe.steps * recipe.batch_size * max(map(len, data["sequences"]))},
            "acceptance_before": before, "acceptance_after": after,
            "final_kl": sum(losses[-10:]) / max(1, len(losses[-10:])), "seconds": round(time.time() - t0, 1),
        }  # fmt: skip
        (staging / REPORT).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        (staging / "README.md").write_text(model_card(report), encoding="utf-8")
        replace_dir(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    shutil.rmtree(resume, ignore_errors=True)
    return report


def chat_renderer(tokenizer: Any) -> Callable[[list[dict[str, str]]], str] | None:
    """Messages -> the text the server rendered for that chat request (`trtspec.chat.chat_text` with the target's
    tokenizer), or None without a tokenizer (nothing to encode a chat with: chats are skipped)."""
    if tokenizer is None:
        return None
    from functools import partial

    from trtspec.chat import chat_text

    return partial(chat_text, tokenizer=tokenizer)


def check_inputs(target: Path, draft: Path, prompts: Path, out: Path) -> tuple[list[LoggedPrompt], int]:
    """The checks before any work (the CLI runs them before its progress display): the pair shares a vocabulary
    and tokenizer, OUT may be written, the log has a usable prompt. Returns read_prompt_log's result."""
    from trtspec.models import check_pair

    check_pair(target, draft)
    check_out(out, inputs=[target, draft, prompts])
    return read_prompt_log(prompts)


# ---------------------------------------------------------------------------------------------------------------------
# 2./3./5. the target's continuations and acceptance, on the reference engine


def generate(engine: Any, prompts: list[list[int]], recipe: DistillRecipe, progress: Progress) -> list[list[int]]:
    """prompt + the target's continuation of each prompt: the first greedy_fraction greedy, the rest sampled at T=1
    (seeded per prompt). Plain decoding: the draft plays no part.  # [num_prompts][prompt_len + gen_len]"""
    from trtspec.spec.params import SamplingParams, SpecParams

    num_greedy = round(len(prompts) * recipe.greedy_fraction)
    sequences: list[list[int]] = []
    chunk = 16
    for start in range(0, len(prompts), chunk):
        batch = prompts[start:start + chunk]
        samplings = [SamplingParams(temperature=0.0 if start + i < num_greedy else 1.0, seed=recipe.seed + start + i,
                                    max_new_tokens=recipe.gen_len, ignore_eos=True) for i in range(len(batch))]
        outs = engine.generate(batch, samplings, SpecParams(method="none", k=0))
        sequences += [list(p) + list(o.token_ids) for p, o in zip(batch, outs, strict=True)]
        progress("generate", len(sequences), len(prompts), "target continuations")
    return sequences


def acceptance(engine: Any, prompts: list[list[int]], recipe: DistillRecipe, progress: Progress,
               stage: str) -> dict[str, Any]:
    """Acceptance of the engine's draft on `prompts`: greedy speculative decoding with k draft tokens."""
    from trtspec.contracts.metrics import AcceptanceStats
    from trtspec.spec.params import SamplingParams, SpecParams

    stats = AcceptanceStats()
    chunk = 16
    for start in range(0, len(prompts), chunk):
        outs = engine.generate(prompts[start:start + chunk], SamplingParams(max_new_tokens=recipe.eval_new_tokens,
                                                                           ignore_eos=True),
                               SpecParams(method=DRAFT_TARGET.name, k=recipe.k))
        for out in outs:
            stats.merge(out.stats)
        progress(stage, min(start + chunk, len(prompts)), len(prompts), f"acceptance {stats.acceptance_rate:.3f}")
    return {"acceptance_rate": stats.acceptance_rate, "mean_acceptance_length": stats.mean_acceptance_length,
            "acceptance_rate_per_pos": stats.acceptance_rate_per_pos, "num_drafts": stats.num_drafts,
            "num_draft_tokens": stats.num_draft_tokens, "num_accepted_tokens": stats.num_accepted_tokens,
            "k": recipe.k, "prompts": len(prompts), "new_tokens": recipe.eval_new_tokens}


# ---------------------------------------------------------------------------------------------------------------------
# 4. training


def train(student: Any, teacher: Any, sequences: list[list[int]], recipe: DistillRecipe, resume: Path, key: str,
          progress: Progress) -> list[float]:
    """KL(teacher || student) over padded batches of `sequences`, from the resume checkpoint when there is one."""
    import torch
    import torch.nn.functional as F

    from trtspec.training.tiny import lr_at, optimizer_step

    gen = torch.Generator().manual_seed(recipe.seed)
    opt = torch.optim.AdamW(student.parameters(), lr=recipe.lr, betas=(0.9, 0.95), weight_decay=0.0)
    losses: list[float] = []
    start = 0
    state = load_state(resume, STATE, key)
    if state is not None:
        student.load_state_dict(state["student"])
        opt.load_state_dict(state["optimizer"])
        gen.set_state(state["generator"])
        losses, start = state["losses"], state["step"]
    student.train()
    for step in range(start, recipe.steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, recipe.steps, recipe.lr, warmup=min(30, recipe.steps // 10))
        rows = torch.randint(0, len(sequences), (recipe.batch_size,), generator=gen).tolist()
        input_ids, mask = pad([sequences[r] for r in rows])  # [B, T], [B, T]
        with torch.no_grad():
            teacher_logp = F.log_softmax(teacher(input_ids=input_ids).logits.float(), dim=-1)  # [B, T, vocab]
        student_logp = F.log_softmax(student(input_ids=input_ids).logits, dim=-1)  # [B, T, vocab]
        kl = F.kl_div(student_logp, teacher_logp, log_target=True, reduction="none").sum(-1)  # [B, T]
        loss = (kl * mask).sum() / mask.sum()
        optimizer_step(opt, student, loss)
        losses.append(loss.item())
        progress("train", step + 1, recipe.steps, f"kl {loss.item():.3f}")
        if (step + 1) % recipe.checkpoint_every == 0 or step + 1 == recipe.steps:
            save_state(resume, STATE, {"key": key, "step": step + 1, "student": student.state_dict(),
                                       "optimizer": opt.state_dict(), "generator": gen.get_state(), "losses": losses})
    student.eval()
    return losses


def pad(rows: list[list[int]]) -> tuple[Any, Any]:
    """Right-padded ids and their mask (1 = a real token).  # [B, T], [B, T]"""
    import torch

    width = max(map(len, rows))
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros(len(rows), width)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1.0
    return ids, mask


def load_hf(path: Path) -> Any:
    import torch
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


# ---------------------------------------------------------------------------------------------------------------------
# files: OUT, the resume directory, the model card


def save_draft(student: Any, draft: Path, dest: Path) -> None:
    """The trained draft as an HF checkpoint with the original draft's tokenizer and generation files."""
    dest.mkdir(parents=True)
    for src in Path(draft).iterdir():
        if src.is_file() and (src.name.startswith("tokenizer") or src.name in ("special_tokens_map.json",
                                                                              "generation_config.json")):
            shutil.copy2(src, dest / src.name)
    student.save_pretrained(dest, safe_serialization=True)


def check_out(out: Path, inputs: Sequence[Path]) -> None:
    """OUT may be new, empty, or a draft this command wrote (it has training-report.json), and overlaps no input."""
    out = Path(out).resolve()
    for path in inputs:
        other = Path(path).resolve()
        if out == other or other.is_relative_to(out) or out.is_relative_to(other):
            raise UsageError(f"--out {out} overlaps the input {other}", hint="write the new draft to a directory of "
                                                                                "its own")
    if out.exists() and not (out.is_dir() and (not any(out.iterdir()) or (out / REPORT).is_file())):
        raise UsageError(f"--out {out} exists and is not a draft `trtspec train draft` wrote",
                         hint="choose a new --out directory")


def resume_dir(out: Path) -> Path:
    return Path(out).with_name(f".{Path(out).name}.trtspec-train")


def run_key(target: Path, draft: Path, prompts: Path, recipe: DistillRecipe) -> str:
    """What a resume checkpoint must match: the recipe and the content of every input file."""
    from trtspec.contracts.prompt_log import log_files

    digest = hashlib.sha256(json.dumps(asdict(recipe), sort_keys=True).encode())
    for path in [*sorted(Path(target).glob("*")), *sorted(Path(draft).glob("*")), *log_files(prompts)]:
        if path.is_file():
            digest.update(path.name.encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def load_state(resume: Path, name: str, key: str) -> dict[str, Any] | None:
    """A saved state whose key matches this run (None: none, or one of another run)."""
    import torch

    path = resume / name
    if not path.is_file():
        return None
    try:
        state = torch.load(path, weights_only=False)
    except Exception:  # a damaged checkpoint is redone, never trusted
        return None
    return state if isinstance(state, dict) and state.get("key") == key else None


def save_state(resume: Path, name: str, state: dict[str, Any]) -> None:
    import torch

    resume.mkdir(parents=True, exist_ok=True)
    with atomic_path(resume / name) as tmp:
        torch.save(state, tmp)


def model_card(report: dict[str, Any]) -> str:
    before, after, data = report["acceptance_before"], report["acceptance_after"], report["data"]
    return (f"# Draft distilled by `trtspec train draft`\n\nTarget: {report['target']}\nStarting draft: "
            f"{report['draft']}\nPrompts: {report['prompts']} ({data['train_prompts']} trained on, "
            f"{data['heldout_prompts']} held out)\n\n| held-out prompts, greedy, k={before['k']} | acceptance rate | "
            f"mean acceptance length |\n|---|---:|---:|\n| before | {before['acceptance_rate']:.3f} | "
            f"{before['mean_acceptance_length']:.2f} |\n| after | {after['acceptance_rate']:.3f} | "
            f"{after['mean_acceptance_length']:.2f} |\n\nRecipe and data: training-report.json.\n")
