"""Token tree structure: choices or parents -> tree buffers (mask, positions, retrieve indices), and a batch's layout.

A tree has a root (the last committed token, index 0) and N draft nodes (indices 1..N, parents before children).
`TokenTree` holds its static buffers, built once per shape (`from_choices`, `from_parents`; `tree_from_spec` parses
a choices spec first, `tree_for_parents` caches the tree of a Draft's `parents`). `tree_layout` places a batch of
drafts (chains and trees) in one target forward: positions and attention masks. Verification is spec/tree.py's
(which re-exports these names). This module knows nothing about proposers, KV caches or requests.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from trtspec import choices as choices_mod

# ---------------------------------------------------------------------------------------------------------------
# structure


@dataclass(frozen=True)
class TokenTree:
    """Static tree buffers for [root + N nodes]; index 0 is the root.

    Built once per tree shape (from choices or from a parents list) and reused every step.
    """

    parents: torch.Tensor  # [N + 1] long; parents[0] = -1, parents[i] < i
    depth: torch.Tensor  # [N + 1] long; depth[0] = 0
    attention_mask: torch.Tensor  # [N + 1, N + 1] bool; [i, j] = j is i or an ancestor of i
    retrieve_indices: torch.Tensor  # [num_leaves, max_depth + 1] long; root-to-leaf node paths, padded with -1
    children: torch.Tensor  # [N + 1, max_children] long; child node indices in sibling order, padded with -1
    node_head: torch.Tensor | None  # [N] long; Medusa head that proposes node i+1 (= depth - 1); None w/o choices
    node_rank: torch.Tensor | None  # [N] long; rank of node i+1's token in its head's top-k; None w/o choices

    @property
    def num_nodes(self) -> int:
        """N, the number of draft nodes (the root excluded)."""
        return self.parents.numel() - 1

    @property
    def max_depth(self) -> int:
        return int(self.depth.max())

    def position_ids(self, root_position: int) -> torch.Tensor:
        """Positions of [root + nodes] when the root sits at `root_position`.  # [N + 1]"""
        return self.depth + root_position

    def path(self, node: int) -> list[int]:
        """Node indices from the first node below the root down to `node` (root excluded)."""
        out = []
        while node > 0:
            out.append(node)
            node = int(self.parents[node])
        return out[::-1]

    @classmethod
    def from_choices(cls, tree_choices: choices_mod.Choices, *, max_depth: int | None = None,
                     max_nodes: int | None = None) -> TokenTree:
        """The tree of Medusa/EAGLE choices (`[[0], [0, 0], [1], ...]`), validated first.

        Args:
            max_depth: number of heads; deeper paths are refused (ConfigError naming the path).
            max_nodes: node budget (max_draft_len); larger trees are refused.
        """
        paths = choices_mod.validate(tree_choices, max_depth=max_depth, max_nodes=max_nodes)  # sorted (depth, path)
        index = {(): 0} | {tuple(p): i + 1 for i, p in enumerate(paths)}
        parents = [-1] + [index[tuple(p[:-1])] for p in paths]
        tree = cls.from_parents(parents)
        return cls(tree.parents, tree.depth, tree.attention_mask, tree.retrieve_indices, tree.children,
                   node_head=torch.tensor([len(p) - 1 for p in paths]), node_rank=torch.tensor([p[-1] for p in paths]))

    @classmethod
    def from_parents(cls, parents: Sequence[int]) -> TokenTree:
        """The tree given each node's parent, root-inclusive indexing: parents[0] = -1, 0 <= parents[i] < i."""
        parent_list = [int(x) for x in parents]
        if not parent_list or parent_list[0] != -1 or any(not 0 <= p < i for i, p in enumerate(parent_list) if i):
            raise ValueError(f"parents={parent_list}: need parents[0] == -1 and 0 <= parents[i] < i")
        size = len(parent_list)
        depth = [0] * size
        mask = torch.zeros(size, size, dtype=torch.bool)  # [N + 1, N + 1]
        mask[0, 0] = True
        kids: list[list[int]] = [[] for _ in range(size)]
        for i in range(1, size):
            parent = parent_list[i]
            depth[i] = depth[parent] + 1
            mask[i] = mask[parent]
            mask[i, i] = True
            kids[parent].append(i)
        max_depth = max(depth)
        leaves = [i for i in range(size) if not kids[i]]
        retrieve = torch.full((len(leaves), max_depth + 1), -1, dtype=torch.long)  # [num_leaves, max_depth + 1]
        for row, leaf in enumerate(leaves):
            chain = mask[leaf].nonzero().flatten()  # ancestors-or-self, in index order = root-to-leaf order
            retrieve[row, : chain.numel()] = chain
        children = torch.full((size, max(1, max(len(k) for k in kids))), -1, dtype=torch.long)
        for i, k in enumerate(kids):
            children[i, : len(k)] = torch.tensor(k, dtype=torch.long)
        return cls(torch.tensor(parent_list), torch.tensor(depth), mask, retrieve, children, None, None)


def tree_from_spec(spec: str | choices_mod.Choices, *, num_heads: int, max_nodes: int | None = None) -> TokenTree:
    """Parse (preset name, file, JSON/YAML/Triton text or list) and build; depth limited to the number of heads."""
    return TokenTree.from_choices(choices_mod.parse(spec), max_depth=num_heads, max_nodes=max_nodes)


@functools.lru_cache(maxsize=64)
def tree_for_parents(parents: tuple[int, ...]) -> TokenTree:
    """The TokenTree of a Draft's `parents` (-1 = the root), cached: proposers reuse one static shape."""
    return TokenTree.from_parents((-1, *(p + 1 for p in parents)))


class DraftShape(Protocol):
    """What `tree_layout` reads of a draft (proposers' `Draft`): its node count and parents (None = a chain)."""

    @property
    def num_tokens(self) -> int: ...

    @property
    def parents(self) -> tuple[int, ...] | None: ...


def tree_layout(drafts: Sequence[DraftShape], num_pending: list[int], bases: list[int],
                width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions [batch, T] and mask [batch, T, T] for the target rows of a batch: (pending chain + draft tree).

    Pending tokens are causal; draft node i sees every pending token, its ancestors and itself, at position
    (last pending position + depth of i). A chain draft gets the causal mask and sequential positions.

    Args:
        num_pending: uncached context tokens per row; bases: cached tokens per row; width: T.
    """
    positions = torch.zeros(len(drafts), width, dtype=torch.long)  # [batch, T]
    mask = torch.ones(width, width, dtype=torch.bool).tril().repeat(len(drafts), 1, 1)  # [batch, T, T]
    for b, (draft, n, base) in enumerate(zip(drafts, num_pending, bases, strict=True)):
        positions[b] = base + torch.arange(width)
        parents = draft.parents or tuple(range(-1, draft.num_tokens - 1))
        depth: list[int] = []
        for i, parent in enumerate(parents):
            depth.append(1 if parent < 0 else depth[parent] + 1)
            row = mask[b, n + i]
            row[n:] = False
            row[n + i] = True
            if parent >= 0:
                row[n:n + draft.num_tokens] |= mask[b, n + parent, n:n + draft.num_tokens]
            positions[b, n + i] = base + n - 1 + depth[i]
    return positions, mask
