"""Tune a Medusa tree for a node budget from measured per-head top-k acceptance (the Medusa paper's greedy search).

  1. calibrate  the target greedily continues held-out prompts (trtspec/assets/prompts/*.jsonl); at every position t
                of a continuation, record the rank of the token at t + 2 + h in head h's logits (ranks >= max_rank
                count as misses)
  2. estimate   rank accuracy acc[h][r] = P(rank == r); a node's path probability is the product of acc over its
                path (heads assumed independent, as in Medusa); expected accepted tokens = sum over nodes
  3. search     greedy: repeatedly add the candidate node (a child of a chosen node, or of the root) with the highest
                path probability until the budget is spent; the result is prefix-closed by construction
  4. replay     walk each calibration continuation as the engine would at temperature 0: at position t accept the
                deepest tree node whose path equals the observed ranks, emit it plus one target token, jump ahead;
                acceptance length = tokens / steps (per step, like the engine; a per-position average would
                over-weight the easy stretches the engine jumps over)

Greedy (temperature 0) acceptance of a node requires its token to be the target's own choice, so the replay is exact
for greedy decoding on these continuations; the estimate is the independence approximation of it.
"""

from __future__ import annotations

import heapq
import json
from pathlib import Path
from typing import Any

import torch

from trtspec import choices as choices_mod
from trtspec.spec.medusa_heads import MedusaHeads


def calibration_prompts(tokenizer: Any | None, vocab_size: int, num: int, length: int,
                        gen: torch.Generator) -> torch.Tensor:
    """The last `length` tokens of up to `num` held-out prompts (all suites, round robin).  # [n, length]

    Without a tokenizer (test models) the prompts are random token ids.
    """
    if tokenizer is None:
        return torch.randint(0, vocab_size, (num, length), generator=gen)
    from trtspec.models import PROMPTS

    suites = [[json.loads(line)["prompt"] for line in f.read_text().splitlines() if line.strip()]
              for f in sorted(PROMPTS.glob("*.jsonl"))]
    rows: list[list[int]] = []
    for i in range(max(len(s) for s in suites)):
        for suite in suites:
            if i < len(suite) and len(rows) < num:
                ids = tokenizer(suite[i], add_special_tokens=False)["input_ids"]
                if len(ids) >= length:
                    rows.append(ids[-length:])
    return torch.tensor(rows, dtype=torch.long)


@torch.no_grad()
def calibrate(target: Path, heads: MedusaHeads, *, num_prompts: int, prompt_len: int, new_tokens: int,
              max_rank: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy continuations of held-out prompts by the target, then head ranks and rank accuracies.

    Returns (accuracy [heads, max_rank], ranks [prompts, positions, heads]).
    """
    from transformers import LlamaForCausalLM

    from trtspec.models import load_tokenizer
    from trtspec.training.medusa import continue_with_target

    gen = torch.Generator().manual_seed(seed)
    model = LlamaForCausalLM.from_pretrained(target, dtype=torch.float32).eval()
    tokenizer = load_tokenizer(target) if (target / "tokenizer.json").is_file() else None
    prompts = calibration_prompts(tokenizer, model.config.vocab_size, num_prompts, prompt_len, gen)  # [n, P]
    sequences = continue_with_target(model, prompts, new_tokens, sample=False, gen=gen)  # [n, P + new]
    with torch.no_grad():
        features = model.model(input_ids=sequences).last_hidden_state  # [n, P + new, hidden]
    ranks = head_ranks(heads.float(), features, sequences, prompt_len, max_rank)  # [positions, heads]
    return rank_accuracy(ranks.flatten(0, 1), max_rank), ranks


def head_ranks(heads: MedusaHeads, features: torch.Tensor, sequences: torch.Tensor, start: int,
               max_rank: int) -> torch.Tensor:
    """Rank of the token at t + 2 + h in head h's logits at t, for continuation positions t.  # [n, span, heads]

    Positions where t + 1 + num_heads runs past the sequence are dropped; ranks >= max_rank are clamped to max_rank
    (a miss). features: [n, T, hidden] target last hidden states of `sequences` [n, T].
    """
    num_heads, length = heads.num_heads, sequences.shape[1]
    span = length - 1 - num_heads - (start - 1)
    if span <= 0:
        raise ValueError(f"sequences of {length} tokens are too short for {num_heads} heads after {start} prompt tokens")
    positions = torch.arange(start - 1, start - 1 + span)  # [span]
    logits = heads(features[:, positions])  # [heads, n, span, vocab]
    ranks = []
    for h in range(num_heads):
        truth = sequences[:, positions + 2 + h]  # [n, span]
        truth_logit = logits[h].gather(-1, truth[..., None])  # [n, span, 1]
        ranks.append((logits[h] > truth_logit).sum(-1).clamp(max=max_rank))  # [n, span]
    return torch.stack(ranks, dim=-1)  # [n, span, heads]


def rank_accuracy(ranks: torch.Tensor, max_rank: int) -> torch.Tensor:
    """acc[h][r] = P(rank of the true token in head h == r), r < max_rank.  # [heads, max_rank]"""
    counts = torch.stack([torch.bincount(ranks[:, h], minlength=max_rank + 1)[:max_rank]
                          for h in range(ranks.shape[1])])
    return counts.double() / ranks.shape[0]


def greedy_tree(accuracy: torch.Tensor, budget: int) -> choices_mod.Choices:
    """The Medusa paper's greedy construction: add the node of highest path probability until `budget` nodes.

    accuracy: [heads, max_rank] rank accuracies. Returns choices sorted by (depth, path).
    """
    num_heads, max_rank = accuracy.shape
    acc = accuracy.tolist()
    # max-heap of (-path probability, path); the path tuple breaks ties deterministically
    frontier: list[tuple[float, tuple[int, ...]]] = [(-acc[0][r], (r,)) for r in range(max_rank)]
    heapq.heapify(frontier)
    chosen: list[list[int]] = []
    while frontier and len(chosen) < budget:
        neg_prob, path = heapq.heappop(frontier)
        chosen.append(list(path))
        if len(path) < num_heads:
            for r in range(max_rank):
                heapq.heappush(frontier, (neg_prob * acc[len(path)][r], (*path, r)))
    return sorted(chosen, key=lambda p: (len(p), p))


def expected_accept_length(tree_choices: choices_mod.Choices, accuracy: torch.Tensor) -> float:
    """1 + sum over nodes of the product of rank accuracies along the node's path (independence estimate)."""
    acc = accuracy.tolist()
    total = 1.0
    for path in tree_choices:
        prob = 1.0
        for depth, rank in enumerate(path):
            prob *= acc[depth][rank] if rank < len(acc[depth]) else 0.0
        total += prob
    return total


def replay_accept_length(tree_choices: choices_mod.Choices, ranks: torch.Tensor) -> float:
    """Tokens per step of a greedy engine walk over each continuation. ranks: [n, span, heads].

    At position t the step accepts the deepest tree node whose path equals the observed ranks (d tokens), emits
    d + 1 tokens and moves to t + d + 1.
    """
    nodes = {tuple(p) for p in tree_choices}
    tokens = steps = 0
    for sequence in ranks.tolist():
        t = 0
        while t < len(sequence):
            depth = 0
            while depth < len(sequence[t]) and tuple(sequence[t][: depth + 1]) in nodes:
                depth += 1
            tokens, steps, t = tokens + depth + 1, steps + 1, t + depth + 1
    return tokens / max(1, steps)


def tune_tree(accuracy: torch.Tensor, ranks: torch.Tensor, budget: int, *,
              key: str = "medusa_choices") -> dict[str, Any]:
    """The greedy tree for `budget` with its estimated and replayed acceptance, next to the chain and mc_sim_7b_63.
    `key` names the tree (medusa_choices, or eagle_choices for an EAGLE tree: accuracy rows are draft depths)."""
    tree = greedy_tree(accuracy, budget)
    num_heads = accuracy.shape[0]
    result: dict[str, Any] = {
        key: tree,
        "budget": budget,
        "num_nodes": len(tree),
        "depth": choices_mod.depth(tree),
        "estimated_acceptance_length": expected_accept_length(tree, accuracy),
        "replayed_acceptance_length": replay_accept_length(tree, ranks),
        "triton": choices_mod.to_triton(tree),
        "rank_accuracy": [[round(x, 4) for x in row] for row in accuracy.tolist()],
        "calibration_positions": ranks.shape[0] * ranks.shape[1],
    }
    baselines = {f"chain_{min(budget, num_heads)}": choices_mod.chain(min(budget, num_heads))}
    if num_heads >= 4 and budget >= len(choices_mod.MC_SIM_7B_63):
        baselines["mc_sim_7b_63"] = choices_mod.MC_SIM_7B_63
    result["baselines"] = {name: {"num_nodes": len(c), "estimated_acceptance_length": expected_accept_length(c, accuracy),
                                  "replayed_acceptance_length": replay_accept_length(c, ranks)}
                           for name, c in baselines.items()}
    return result


def dynamic_tree(dynamic: dict[str, Any]) -> dict[str, Any]:
    """The best dynamic (EAGLE-2) tree of an EAGLE tuning (`tune_dynamic`'s result) as a build reads it
    (`eagle.dynamic_tree: FILE`): top-k, depth and max_total_draft_tokens, the nodes it drafts at the tuned budget
    (at most top-k x depth), with the replayed acceptance length it was chosen by."""
    best = dynamic["best"]  # a replay row: the tree's values by parameter name (EagleTree.values)
    topk, depth = best["eagle_topk"], best["eagle_depth"]
    return {"topk": topk, "depth": depth, "max_total_draft_tokens": min(dynamic["budget"], topk * depth),
            "replayed_acceptance_length": round(best["replayed_acceptance_length"], 4)}


def write_choices(path: Path, result: dict[str, Any]) -> None:
    """Write the tuned tree as YAML (.yaml/.yml) or JSON (anything else); `choices.parse` reads either."""
    from trtspec.atomic import write_text

    key = "eagle_choices" if "eagle_choices" in result else "medusa_choices"
    doc = {key: result[key], "budget": result["budget"],
           "estimated_acceptance_length": round(result["estimated_acceptance_length"], 4),
           "replayed_acceptance_length": round(result["replayed_acceptance_length"], 4),
           "triton": result["triton"], **({"dynamic_tree": dynamic_tree(result["dynamic"]),
                                           "dynamic": result["dynamic"]} if "dynamic" in result else {})}
    if path.suffix in (".yaml", ".yml"):
        import yaml

        paths = "\n".join(f"  - {p}" for p in result[key])  # one path per line, flow style
        rest = yaml.safe_dump({k: v for k, v in doc.items() if k != key}, sort_keys=False, width=1 << 16)
        what = "EAGLE" if key == "eagle_choices" else "Medusa"
        text = f"# {what} tree tuned by `trtspec tune tree`\n{key}:\n{paths}\n{rest}"
    else:
        paths = ",\n    ".join(json.dumps(p) for p in result[key])
        rest = json.dumps({k: v for k, v in doc.items() if k != key}, indent=2)[1:]
        text = f'{{\n  "{key}": [\n    {paths}\n  ],{rest}\n'
    text = text if text.endswith("\n") else text + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, text)
