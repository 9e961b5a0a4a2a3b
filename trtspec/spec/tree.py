"""Tree verification: a target forward over [root + draft nodes] -> the accepted path and the next token.

A tree has a root (the last committed token, index 0) and N draft nodes (indices 1..N, parents before children).
One target forward over [root + nodes] with the tree attention mask scores every node at once: row i of the target
logits is the target's next-token distribution after the path root -> ... -> i.

Verification (all return a `TreeVerdict`: accepted node path, emitted tokens, the next token):
- `verify_tree_greedy`: temperature 0; the longest root path whose tokens equal the target's argmax. Exact.
- `verify_tree_rejection`: recursive rejection sampling over siblings (SpecInfer, Miao et al. 2023; EAGLE's
  `evaluate_posterior` is its one-hot case). Lossless: the emitted tokens follow the target distribution exactly.
- `verify_tree_typical_lossy`: Medusa's typical acceptance (Cai et al. 2024, sec. 3.3.1). LOSSY: it accepts any
  plausible token (target prob > min(epsilon, alpha * exp(-entropy))), so outputs do NOT follow the target
  distribution at temperature > 0. Offered because Medusa ships it; always labelled lossy.

`verify_trees` verifies the sampled trees of a whole step in one walk (`ragged_rejection_walk`: each row its own tree,
padded; each request's uniforms drawn up front from its own generator).

`verify_tree` (the engine's entry point for one tree) takes processed target logits (spec/logits_process.py:
temperature and the request's logits processors applied, each node with its own root path as context); the
`verify_tree_*` functions take raw logits and apply temperature / top-k / top-p themselves.

Paper letters, for readers of SpecInfer: p = target, q = draft. In code: `target_*` / `draft_*` only.
`TokenTree` and `tree_layout` (the tree buffers, a batch's positions and masks) are spec/tree_build.py's, re-exported
here. This module knows nothing about proposers, KV caches or requests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from trtspec.spec.sampling import is_greedy, logits_to_probs, rows_to_probs, sample_inverse_cdf, scores_to_probs
from trtspec.spec.tree_build import (  # noqa: F401 (re-exported)
    DraftShape,
    TokenTree,
    tree_for_parents,
    tree_from_spec,
    tree_layout,
)

# Medusa's defaults (`medusa_generate`: posterior_threshold=0.09, posterior_alpha=0.3).
TYPICAL_POSTERIOR_THRESHOLD = 0.09
TYPICAL_POSTERIOR_ALPHA = 0.3


class SamplingLike(Protocol):
    """The request's sampling parameters as the verifiers read them (trtspec.spec.params.SamplingParams)."""

    temperature: float
    top_k: int
    top_p: float


# ---------------------------------------------------------------------------------------------------------------
# verdicts


@dataclass(frozen=True)
class TreeVerdict:
    """Outcome of verifying one tree draft.

    `accepted_nodes` are node indices (1..N) root-down along the accepted path; `next_token_id` is the recovered
    token (a rejection happened below the last accepted node) or the bonus token (a leaf was reached).
    """

    accepted_nodes: list[int]
    accepted_token_ids: list[int]
    next_token_id: int
    bonus: bool
    num_draft_tokens: int  # N, the nodes verified

    @property
    def num_accepted(self) -> int:
        return len(self.accepted_nodes)

    @property
    def accepted_offsets(self) -> list[int]:
        """Draft indices (0-based, as in Draft.token_ids) of the accepted nodes, root-down."""
        return [n - 1 for n in self.accepted_nodes]

    @property
    def token_ids(self) -> list[int]:
        """The emitted tokens: accepted draft tokens, then the recovered/bonus token."""
        return [*self.accepted_token_ids, self.next_token_id]


@dataclass(frozen=True)
class TreeWalk:
    """Batched verification result (B independent trials of the same tree shape)."""

    accepted_nodes: torch.Tensor  # [B, max_depth] long; accepted node indices root-down, padded with -1
    num_accepted: torch.Tensor  # [B] long
    next_token_ids: torch.Tensor  # [B] long

    def verdict(self, tree: TokenTree, draft_token_ids: torch.Tensor, row: int = 0) -> TreeVerdict:
        """Trial `row` as a TreeVerdict. draft_token_ids: [N] or [B, N]."""
        tokens = draft_token_ids if draft_token_ids.dim() == 1 else draft_token_ids[row]  # [N]
        nodes = self.accepted_nodes[row, : int(self.num_accepted[row])].tolist()
        last = nodes[-1] if nodes else 0
        return TreeVerdict(nodes, [int(tokens[n - 1]) for n in nodes], int(self.next_token_ids[row]),
                           bonus=bool((tree.children[last] < 0).all()), num_draft_tokens=tree.num_nodes)


# ---------------------------------------------------------------------------------------------------------------
# greedy (temperature 0): exact


def verify_tree_greedy(tree: TokenTree, draft_token_ids: torch.Tensor, target_logits: torch.Tensor) -> TreeVerdict:
    """The longest root path whose draft tokens all equal the target's argmax; then the target's argmax after it.

    Args:
        draft_token_ids: [N] token of each node (node i+1 at index i).
        target_logits: [N + 1, vocab] target logits of [root + nodes] under the tree mask.
    """
    walk = greedy_walk(tree, draft_token_ids[None], target_logits[None])
    return walk.verdict(tree, draft_token_ids)


def greedy_walk(tree: TokenTree, draft_token_ids: torch.Tensor, target_logits: torch.Tensor) -> TreeWalk:
    """Batched greedy verification. draft_token_ids: [B, N]; target_logits: [B, N + 1, vocab]."""
    target_argmax = target_logits.argmax(-1)  # [B, N + 1]
    parent_argmax = target_argmax[:, tree.parents.clamp(min=0)]  # [B, N + 1] argmax at each node's parent
    match = torch.cat([torch.ones_like(draft_token_ids[:, :1], dtype=torch.bool),
                       draft_token_ids == parent_argmax[:, 1:]], dim=1)  # [B, N + 1]
    accepted, num_accepted, last = _longest_path(tree, match)
    return TreeWalk(accepted, num_accepted, target_argmax.gather(1, last[:, None])[:, 0])


def _longest_path(tree: TokenTree, match: torch.Tensor,
                  score: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per trial, the root path with the longest prefix of matching nodes (ties: highest summed `score`, then first).

    Args:
        match: [B, N + 1] bool, node accepted given its parent is (column 0, the root, is ignored).
        score: [B, N + 1] per-node log-likelihood for tie-breaking, or None.
    Returns:
        accepted [B, max_depth] node indices root-down (-1 padded), num_accepted [B], last accepted node [B] (0 = root).
    """
    nodes = tree.retrieve_indices[:, 1:]  # [L, D] node indices of each root-to-leaf path, -1 padded
    safe = nodes.clamp(min=0)
    path_match = match[:, safe] & (nodes >= 0)  # [B, L, D]
    path_len = path_match.long().cumprod(-1).sum(-1)  # [B, L]
    best_len = path_len.max(-1, keepdim=True).values  # [B, 1]
    key = (path_len == best_len).float()  # [B, L]
    if score is not None:
        within = torch.arange(nodes.shape[1])[None, None] < path_len[..., None]  # [B, L, D]
        likelihood = (score[:, safe] * within).sum(-1)  # [B, L]
        key = torch.where(path_len == best_len, likelihood, torch.full_like(likelihood, -float("inf")))
    best = key.argmax(-1)  # [B] first maximum
    num_accepted = best_len[:, 0]  # [B]
    accepted = torch.where(torch.arange(nodes.shape[1])[None] < num_accepted[:, None], nodes[best], -1)  # [B, D]
    last = accepted.gather(1, (num_accepted - 1).clamp(min=0)[:, None])[:, 0]  # [B]
    return accepted, num_accepted, torch.where(num_accepted > 0, last, torch.zeros_like(last))


# ---------------------------------------------------------------------------------------------------------------
# recursive rejection sampling: lossless


def verify_tree_rejection(tree: TokenTree, draft_token_ids: torch.Tensor, draft_probs: torch.Tensor | None,
                          target_logits: torch.Tensor, sampling: SamplingLike,
                          generator: torch.Generator | None) -> TreeVerdict:
    """Lossless tree verification by recursive rejection sampling (temperature 0 falls back to greedy).

    Args:
        draft_token_ids: [N] node tokens.
        draft_probs: [N, vocab] the distribution each node's token was sampled from, or None for one-hot drafts
            (Medusa/EAGLE top-k children, n-gram guesses: q = delta at the token).
        target_logits: [N + 1, vocab] raw target logits of [root + nodes]; the request's temperature/top-k/top-p
            are applied here.
    """
    if sampling.temperature == 0:
        return verify_tree_greedy(tree, draft_token_ids, target_logits)
    target_probs = logits_to_probs(target_logits, sampling.temperature, sampling.top_k, sampling.top_p)  # [N+1, V]
    walk = rejection_walk(tree, draft_token_ids[None], None if draft_probs is None else draft_probs[None],
                          target_probs[None], generator)
    return walk.verdict(tree, draft_token_ids)


def rejection_walk(tree: TokenTree, draft_token_ids: torch.Tensor, draft_probs: torch.Tensor | None,
                   target_probs: torch.Tensor, generator: torch.Generator | None) -> TreeWalk:
    """Batched recursive rejection sampling over siblings: B independent trials of one tree shape, their uniforms
    from one generator (`ragged_rejection_walk` on B copies of the tree).

    Args:
        draft_token_ids: [B, N]; draft_probs: [B, N, vocab] or None (one-hot); target_probs: [B, N + 1, vocab].
    """
    batch = target_probs.shape[0]
    children = tree.children.expand(batch, -1, -1)  # [B, N + 1, max_children]
    uniforms = torch.rand(batch, tree.num_nodes + 1, generator=generator)  # [B, N + 1]
    return ragged_rejection_walk(children, tree.max_depth, draft_token_ids, draft_probs, target_probs,
                                 torch.full((batch,), tree.num_nodes), uniforms)


def ragged_rejection_walk(children: torch.Tensor, max_depth: int, draft_token_ids: torch.Tensor,
                          draft_probs: torch.Tensor | None, target_probs: torch.Tensor, num_nodes: torch.Tensor,
                          uniforms: torch.Tensor) -> TreeWalk:
    """Recursive rejection sampling over siblings (SpecInfer), one walk per row, each row its own tree (padded).

    At the current node, try its children in sibling order: accept child token x with probability
    min(1, residual(x) / draft(x)); on rejection set residual <- norm(max(0, residual - draft)) and try the next
    sibling (one-hot draft: residual(x) <- 0, renormalised). An accepted child becomes the current node and its
    residual restarts from the target's distribution there. When no child is accepted, the next token is
    sampled from the residual (recovered); at a leaf, from the target (bonus). Each node is tried at most once, so
    node i's test uses uniforms[:, i - 1] and the last token uniforms[:, N_b]: the walks draw nothing themselves.

    Args:
        children: [B, N_max + 1, max_children] each row's child node indices in sibling order, padded with -1.
        max_depth: the deepest tree's depth.
        draft_token_ids: [B, N_max]; draft_probs: [B, N_max, vocab] or None (every draft one-hot);
        target_probs: [B, N_max + 1, vocab] (rows past a tree's nodes are never read).
        num_nodes: [B] N_b, each row's node count.
        uniforms: [B, N_max + 1] in [0, 1), each row's from its own request's generator.
    Returns a TreeWalk whose emitted tokens follow the target distribution exactly.
    """
    batch = target_probs.shape[0]
    rows = torch.arange(batch)
    current = torch.zeros(batch, dtype=torch.long)  # [B] current node (0 = root)
    residual = target_probs[:, 0].clone()  # [B, vocab]
    searching = torch.ones(batch, dtype=torch.bool)  # [B] still walking down
    accepted = torch.full((batch, max(1, max_depth)), -1, dtype=torch.long)  # [B, D]
    num_accepted = torch.zeros(batch, dtype=torch.long)  # [B]
    for _ in range(max_depth):
        moved = torch.zeros(batch, dtype=torch.bool)  # [B] accepted a child at this level
        for slot in range(children.shape[2]):
            child = children[rows, current, slot]  # [B] node index or -1
            trying = searching & ~moved & (child >= 0)  # [B]
            if not trying.any():
                break  # children are packed left and walkers only drop out: later slots have none either
            node = child.clamp(min=1) - 1  # [B] index into the draft nodes
            token = draft_token_ids[rows, node]  # [B]
            residual_at_token = residual[rows, token]  # [B]
            if draft_probs is None:
                draft_at_token = torch.ones(batch)  # [B] one-hot: q(x) = 1
            else:
                draft_at_token = draft_probs[rows, node, token]  # [B]
            accept_prob = (residual_at_token / draft_at_token.clamp(min=1e-30)).clamp(max=1.0)  # [B]
            accept = trying & (uniforms[rows, node] < accept_prob)  # [B]
            reject = trying & ~accept  # [B]
            if draft_probs is None:
                updated = residual.scatter(1, token[:, None], 0.0)  # [B, vocab]
            else:
                updated = (residual - draft_probs[rows, node]).clamp(min=0)  # [B, vocab]
            residual = torch.where(reject[:, None], _normalise(updated, fallback=residual), residual)
            accepted[rows[accept], num_accepted[accept]] = child[accept]
            num_accepted = num_accepted + accept.long()
            current = torch.where(accept, child, current)
            moved |= accept
        residual = torch.where(moved[:, None], target_probs[rows, current], residual)  # restart below the child
        searching &= moved
        if not searching.any():
            break
    next_token_ids = sample_inverse_cdf(residual, uniforms[rows, num_nodes])  # [B]
    return TreeWalk(accepted, num_accepted, next_token_ids)


def verify_trees(trees: Sequence[TokenTree], draft_token_ids: Sequence[torch.Tensor],
                 draft_probs: Sequence[torch.Tensor | None], target_scores: Sequence[torch.Tensor],
                 sampling: Sequence[SamplingLike], generators: Sequence[torch.Generator | None]) -> list[TreeVerdict]:
    """Lossless verification of a batch of tree drafts at temperature > 0 in one walk (each request its own tree,
    top-k / top-p and generator); the engine's entry point for sampled trees with acceptance "exact".

    Args:
        trees: [batch]; draft_token_ids: [batch] x [N_b]; draft_probs: [batch] x ([N_b, vocab] or None: one-hot);
        target_scores: [batch] x [N_b + 1, vocab] processed target logits of [root + nodes].
        sampling: [batch] top_k, top_p of each request (none greedy); generators: [batch].
    """
    batch, vocab = len(trees), target_scores[0].shape[-1]
    sizes = [tree.num_nodes for tree in trees]
    width = max(sizes)
    rows = [n + 1 for n in sizes]
    flat = rows_to_probs(torch.cat(list(target_scores)), greedy=torch.zeros(sum(rows), dtype=torch.bool),
                         top_k=torch.tensor([s.top_k for s, r in zip(sampling, rows, strict=True) for _ in range(r)]),
                         top_p=torch.tensor([float(s.top_p) for s, r in zip(sampling, rows, strict=True)
                                             for _ in range(r)]))  # [sum(N_b + 1), vocab]
    target_probs = flat.new_zeros(batch, width + 1, vocab)  # [B, N_max + 1, vocab]
    tokens = torch.zeros(batch, width, dtype=torch.long)  # [B, N_max]
    children = torch.full((batch, width + 1, max(t.children.shape[1] for t in trees)), -1, dtype=torch.long)
    uniforms = torch.zeros(batch, width + 1)  # [B, N_max + 1]
    with_probs = any(p is not None for p in draft_probs)
    probs = flat.new_zeros(batch, width, vocab) if with_probs else None  # [B, N_max, vocab]
    for b, (tree, ids, part, generator) in enumerate(zip(trees, draft_token_ids, flat.split(rows), generators,
                                                         strict=True)):
        n = tree.num_nodes
        target_probs[b, : n + 1] = part
        tokens[b, :n] = ids
        children[b, : n + 1, : tree.children.shape[1]] = tree.children
        uniforms[b, : n + 1] = torch.rand(n + 1, generator=generator)  # [N_b + 1] from the request's own generator
        if probs is not None:
            probs[b, :n] = (torch.zeros(n, vocab).scatter_(1, ids[:, None], 1.0) if draft_probs[b] is None
                            else draft_probs[b])
    walk = ragged_rejection_walk(children, max(t.max_depth for t in trees), tokens, probs, target_probs,
                                 torch.tensor(sizes), uniforms)
    return [walk.verdict(tree, ids, row) for row, (tree, ids) in enumerate(zip(trees, draft_token_ids, strict=True))]


def _normalise(weights: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
    """Rows of `weights` scaled to sum 1; rows summing to 0 (numerically exhausted residual) keep `fallback`."""
    total = weights.sum(-1, keepdim=True)  # [B, 1]
    return torch.where(total > 0, weights / total.clamp(min=1e-30), fallback)


# ---------------------------------------------------------------------------------------------------------------
# Medusa typical acceptance: LOSSY


def verify_tree_typical_lossy(tree: TokenTree, draft_token_ids: torch.Tensor, target_logits: torch.Tensor,
                              sampling: SamplingLike, generator: torch.Generator | None, *,
                              posterior_threshold: float = TYPICAL_POSTERIOR_THRESHOLD,
                              posterior_alpha: float = TYPICAL_POSTERIOR_ALPHA) -> TreeVerdict:
    """Medusa typical acceptance (LOSSY at temperature > 0; exact greedy at temperature 0).

    A node is accepted when the target's probability of its token (at its parent, after temperature) exceeds
    min(posterior_threshold, posterior_alpha * exp(-entropy)). The longest accepted path wins (ties: the higher
    target log-likelihood); the next token is sampled from the target distribution at the last accepted node,
    truncated to tokens above the same threshold. Outputs do NOT follow the target distribution. As in Medusa,
    only the temperature shapes the target distribution here (top-k / top-p are not applied).
    """
    if sampling.temperature == 0:
        return verify_tree_greedy(tree, draft_token_ids, target_logits)
    walk = typical_walk_lossy(tree, draft_token_ids[None], target_logits[None], sampling, generator,
                              posterior_threshold=posterior_threshold, posterior_alpha=posterior_alpha)
    return walk.verdict(tree, draft_token_ids)


def typical_walk_lossy(tree: TokenTree, draft_token_ids: torch.Tensor, target_logits: torch.Tensor,
                       sampling: SamplingLike, generator: torch.Generator | None, *,
                       posterior_threshold: float = TYPICAL_POSTERIOR_THRESHOLD,
                       posterior_alpha: float = TYPICAL_POSTERIOR_ALPHA) -> TreeWalk:
    """Batched typical acceptance (LOSSY). draft_token_ids: [B, N]; target_logits: [B, N + 1, vocab]."""
    target_probs = torch.softmax(target_logits.float() / sampling.temperature, dim=-1)  # [B, N + 1, vocab]
    return _typical_walk(tree, draft_token_ids, target_probs, generator, posterior_threshold=posterior_threshold,
                         posterior_alpha=posterior_alpha)


def _typical_walk(tree: TokenTree, draft_token_ids: torch.Tensor, target_probs: torch.Tensor,
                  generator: torch.Generator | None, *, posterior_threshold: float,
                  posterior_alpha: float) -> TreeWalk:
    """Typical acceptance on target distributions (temperature applied, no top-k/top-p). target_probs: [B, N + 1, V]."""
    batch = draft_token_ids.shape[0]
    entropy = -(target_probs * torch.log(target_probs + 1e-5)).sum(-1)  # [B, N + 1]
    threshold = torch.clamp(posterior_alpha * torch.exp(-entropy), max=posterior_threshold)  # [B, N + 1]
    parent = tree.parents[1:].clamp(min=0)  # [N]
    rows = torch.arange(batch)[:, None]  # [B, 1]
    token_prob = target_probs[rows, parent[None], draft_token_ids]  # [B, N] target prob of each node at its parent
    match = torch.cat([torch.ones(batch, 1, dtype=torch.bool), token_prob > threshold[:, parent]], dim=1)
    score = torch.cat([torch.zeros(batch, 1), torch.log(token_prob.clamp(min=1e-30))], dim=1)  # [B, N + 1]
    accepted, num_accepted, last = _longest_path(tree, match, score)
    last_probs = target_probs[torch.arange(batch), last]  # [B, vocab]
    typical = torch.where(last_probs > threshold[torch.arange(batch), last][:, None], last_probs, 0.0)  # [B, vocab]
    next_token_ids = torch.multinomial(_normalise(typical, fallback=last_probs), 1, generator=generator)[:, 0]
    return TreeWalk(accepted, num_accepted, next_token_ids)


# ---------------------------------------------------------------------------------------------------------------
# dispatch (the engine's entry point)

# Acceptance rules for tree drafts at temperature > 0; the key is SpecParams.acceptance. Greedy is always exact.
TREE_ACCEPTANCE = ("exact", "typical_lossy")


def verify_tree(tree: TokenTree, draft_token_ids: torch.Tensor, draft_probs: torch.Tensor | None,
                target_scores: torch.Tensor, sampling: SamplingLike, generator: torch.Generator | None,
                acceptance: str = "exact") -> TreeVerdict:
    """Verify one tree draft (the engine's entry point): greedy, else `acceptance` ("exact" lossless, "typical_lossy").

    Args:
        draft_token_ids: [N]; draft_probs: [N, vocab] or None (one-hot drafts).
        target_scores: [N + 1, vocab] processed target logits of [root + nodes] (spec/logits_process.py: temperature
            and the request's logits processors applied, each node with its own root path as context); greedy is
            their argmax, "exact" verifies against their top-k/top-p distribution, "typical_lossy" their softmax.
        sampling: temperature, top_k, top_p of the request.
    """
    if is_greedy(sampling.temperature, sampling.top_k):
        return verify_tree_greedy(tree, draft_token_ids, target_scores)
    if acceptance == "typical_lossy":
        walk = _typical_walk(tree, draft_token_ids[None], torch.softmax(target_scores.float(), dim=-1)[None],
                             generator, posterior_threshold=TYPICAL_POSTERIOR_THRESHOLD,
                             posterior_alpha=TYPICAL_POSTERIOR_ALPHA)
        return walk.verdict(tree, draft_token_ids)
    if acceptance != "exact":
        raise ValueError(f"acceptance={acceptance!r}: use one of {TREE_ACCEPTANCE}")
    target_probs = scores_to_probs(target_scores, greedy=False, top_k=sampling.top_k, top_p=sampling.top_p)
    walk = rejection_walk(tree, draft_token_ids[None], None if draft_probs is None else draft_probs[None],
                          target_probs[None], generator)
    return walk.verdict(tree, draft_token_ids)
