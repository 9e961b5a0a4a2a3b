"""Tune EAGLE trees for a node budget: static choices (EAGLE-1) from measured per-depth rank accuracy, and the dynamic
tree's shape (EAGLE-2 top-k per node, depth) by replaying the proposer on the target's own greedy continuations.

  1. calibrate  the target greedily continues held-out prompts (tree_tune.calibration_prompts); its tapped hidden
                states of each continuation are computed once
  2. ranks      at every commit point of a continuation, the drafter drafts along the target's own path (each level
                fed the true token and its parent's output feature, as the proposer feeds an accepted node); the rank
                of the true token at depths 1..D in the drafter's logits (outside the draft vocabulary or >= max_rank:
                a miss). One prefill forward and D - 1 tree-masked forwards per batch of continuations.
  3. static     Medusa's greedy search over those rank accuracies (tree_tune.greedy_tree), with the exact replay:
                greedy acceptance of a node needs its path to equal the observed ranks (tree_tune)
  4. dynamic    for each (top-k, depth), the EAGLE proposer drafts at each commit point of each continuation and the
                walk accepts the deepest node on the target's path (exact greedy acceptance, no target forwards);
                acceptance length = tokens / steps, with the proposer's seconds per step

Greedy acceptance of an EAGLE node needs its token to be the target's own choice and its ancestors to be accepted, so
along the accepted path the drafter sees exactly what the replay feeds it: both replays are exact for greedy decoding
(up to floating-point differences between one batched pass and the engine's incremental ones).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trtspec.contracts.engine import EagleTree
from trtspec.training.tree_tune import calibration_prompts, rank_accuracy, tune_tree


@dataclass
class EagleCalibration:
    drafter: Any  # spec.eagle_model.EagleDrafter
    taps: tuple[int, ...]
    sequences: torch.Tensor  # [n, T] prompts + greedy continuations
    aux: torch.Tensor  # [n, T, taps * hidden] the target's tapped hidden states
    prompt_len: int


@torch.no_grad()
def calibrate_eagle(target: Path, eagle: str | Path, *, num_prompts: int, prompt_len: int, new_tokens: int,
                    seed: int = 0) -> EagleCalibration:
    """Greedy continuations of held-out prompts by the target, with its taps, and the drafter checked against it."""
    from transformers import LlamaForCausalLM

    from trtspec.models import load_tokenizer
    from trtspec.spec.eagle_model import load_drafter
    from trtspec.spec.model import LlamaModel
    from trtspec.training.medusa import continue_with_target

    gen = torch.Generator().manual_seed(seed)
    hf = LlamaForCausalLM.from_pretrained(target, dtype=torch.float32).eval()
    tokenizer = load_tokenizer(target) if (target / "tokenizer.json").is_file() else None
    prompts = calibration_prompts(tokenizer, hf.config.vocab_size, num_prompts, prompt_len, gen)  # [n, P]
    sequences = continue_with_target(hf, prompts, new_tokens, sample=False, gen=gen)  # [n, P + new]
    model = LlamaModel.from_pretrained(target, field="target")
    drafter, taps = load_drafter(eagle, model.config, model.embed_tokens)
    cache = model.new_cache(num_slots=sequences.shape[0], max_slots=sequences.shape[0])
    slots = torch.tensor([cache.alloc() for _ in range(sequences.shape[0])])
    aux = model(sequences, cache, slots, taps=taps).aux  # [n, T, taps * hidden]
    return EagleCalibration(drafter, taps, sequences, aux, prompt_len)


@torch.no_grad()
def eagle_ranks(cal: EagleCalibration, depth: int, max_rank: int, chunk: int = 8) -> torch.Tensor:
    """Rank of the target's token at depths 1..depth along its own path, at every commit point.  # [n, span, depth]

    Commit point c (context = the first c tokens, c from prompt_len to T - depth) feeds features 0..P, P = c - 2;
    depth d predicts token c - 1 + d. Ranks >= max_rank (and tokens outside the draft vocabulary) are max_rank.
    """
    drafter, seq = cal.drafter, cal.sequences
    n, T = seq.shape
    first_p = cal.prompt_len - 2
    span = T - depth - cal.prompt_len + 1
    if span <= 0:
        raise ValueError(f"continuations of {T} tokens are too short for depth {depth} after {cal.prompt_len} tokens")
    p = torch.arange(first_p, first_p + span)  # [span] last fed feature position P of each commit point
    vocab = drafter.config.layer.vocab_size
    to_draft = torch.full((vocab,), -1, dtype=torch.long)  # [vocab] target id -> draft id (-1: not drafted)
    to_draft[drafter.draft_ids] = torch.arange(drafter.config.draft_vocab_size)
    out = []
    for lo in range(0, n, chunk):
        rows = seq[lo : lo + chunk]  # [b, T]
        b = rows.shape[0]
        cache = drafter.new_cache(num_slots=b, max_slots=b, max_seq_len=T - 1 + (depth - 1) * span)
        slots = torch.tensor([cache.alloc() for _ in range(b)])
        hidden = drafter.combine(cal.aux[lo : lo + chunk, : T - 1])  # [b, T - 1, hidden]
        logits, prenorm = drafter(rows[:, 1:], hidden, cache, slots)  # feature p with token p + 1
        level_logits, parent = logits[:, p], prenorm[:, p]  # [b, span, V'], [b, span, hidden]
        ranks = [_rank(level_logits, rows[:, p + 2], to_draft, max_rank)]
        ctx = T - 1
        ancestors = torch.zeros(span, 0, dtype=torch.long)  # [span, levels so far] cache columns of the chain
        for d in range(2, depth + 1):
            mine = ctx + torch.arange(span)  # [span] this level's cache columns
            cols = torch.arange(ctx + span)
            mask = cols[None, :] <= p[:, None]  # [span, ctx + span] the verified context up to P
            mask[torch.arange(span)[:, None], torch.cat([ancestors, mine[:, None]], dim=1)] = True
            level_logits, parent = drafter(rows[:, p + d], parent, cache, slots, positions=(p + d - 1).expand(b, span),
                                           attn_mask=mask.expand(b, 1, span, ctx + span))
            ranks.append(_rank(level_logits, rows[:, p + d + 1], to_draft, max_rank))
            ancestors, ctx = torch.cat([ancestors, mine[:, None]], dim=1), ctx + span
        out.append(torch.stack(ranks, dim=-1))  # [b, span, depth]
    return torch.cat(out)


def _rank(logits: torch.Tensor, truth: torch.Tensor, to_draft: torch.Tensor, max_rank: int) -> torch.Tensor:
    """Rank of `truth` [b, span] (target ids) in `logits` [b, span, V'] (draft vocabulary); misses = max_rank."""
    ids = to_draft[truth]  # [b, span]
    truth_logit = logits.gather(-1, ids.clamp(min=0)[..., None])  # [b, span, 1]
    ranks = (logits > truth_logit).sum(-1).clamp(max=max_rank)  # [b, span]
    return torch.where(ids < 0, max_rank, ranks)


def tune_static(cal: EagleCalibration, budget: int, depth: int, max_rank: int) -> dict[str, Any]:
    """The greedy static tree for `budget` over per-depth rank accuracies, with its estimate and exact replay."""
    ranks = eagle_ranks(cal, depth, max_rank)  # [n, span, depth]
    accuracy = rank_accuracy(ranks.flatten(0, 1), max_rank)  # [depth, max_rank]
    return tune_tree(accuracy, ranks, budget, key="eagle_choices")


@torch.no_grad()
def replay_proposer(cal: EagleCalibration, budget: int, tree: EagleTree, *, horizon: int) -> dict[str, Any]:
    """The EAGLE proposer with `tree` (static or dynamic), `budget` nodes, walked along each greedy continuation while
    a commit point is at most T - horizon (eagle_ranks' span for the deepest tree tried): mean acceptance length
    (tokens / steps) and proposer seconds per step, with the tree's parameters."""
    from trtspec.spec.params import SamplingParams
    from trtspec.spec.proposers.base import ProposeInput
    from trtspec.spec.proposers.eagle import EagleProposer

    seq, aux = cal.sequences, cal.aux
    n, T = seq.shape
    proposer = EagleProposer(cal.drafter, cal.taps, tree=tree, max_num_seqs=n, max_seq_len=T + 64)
    tokens = steps = 0
    draft_s = 0.0
    for i in range(n):
        row = seq[i].tolist()
        proposer.add_request(i)
        length = cal.prompt_len
        proposer.observe_target(i, 0, aux[i, : length - 1])
        while length + horizon <= T:
            t = time.perf_counter()
            draft = proposer.propose([ProposeInput(i, row[:length], budget, SamplingParams(), None)])[0]
            draft_s += time.perf_counter() - t
            accepted = _walk(draft.token_ids.tolist(), draft.parents or (), row[length:])
            new_length = length + accepted + 1
            proposer.observe_target(i, length - 1, aux[i, length - 1 : new_length - 1])
            proposer.commit(i, row[:new_length])
            tokens, steps, length = tokens + accepted + 1, steps + 1, new_length
        proposer.free(i)
    return {**tree.values(), "tree": tree.label, "budget": budget,
            "replayed_acceptance_length": tokens / max(1, steps), "draft_s_per_step": draft_s / max(1, steps)}


def _walk(tokens: list[int], parents: tuple[int, ...], truth: list[int]) -> int:
    """Accepted draft tokens of a tree at temperature 0: the deepest node chain equal to `truth`."""
    node, accepted = -1, 0
    while accepted < len(truth):
        child = next((j for j, (t, p) in enumerate(zip(tokens, parents, strict=True))
                      if p == node and t == truth[accepted]), None)
        if child is None:
            break
        node, accepted = child, accepted + 1
    return accepted


def tune_dynamic(cal: EagleCalibration, budget: int, trees: list[EagleTree], *, horizon: int) -> dict[str, Any]:
    """Every dynamic tree shape at `budget` nodes, replayed; the best by acceptance length (ties: cheaper per step)."""
    rows = [replay_proposer(cal, budget, tree, horizon=horizon) for tree in trees]
    best = max(rows, key=lambda r: (round(r["replayed_acceptance_length"], 4), -r["draft_s_per_step"]))
    return {"budget": budget, "shapes": rows, "best": dict(best)}  # a copy: YAML writes no anchors
