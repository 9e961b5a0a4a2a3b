"""Lookahead decoding (Fu et al. 2024, "Break the Sequential Dependency of LLM Inference Using Lookahead Decoding").

No draft model: the target itself guesses ahead by Jacobi iteration, and the guesses become an n-gram pool.
Per request the proposer keeps
  - a 2D Jacobi window of N - 1 levels x W columns. Token (level j, column i) sits `1 + i + j` positions after the
    last committed token and attends to level 0's columns 0..i and to its own column's levels 1..j, i.e. to the
    contiguous guess sequence in front of it. The engine forwards the window as an AuxBranch in the same target pass
    as the draft (masked apart from it) and hands back the target's argmax at every window token;
  - an n-gram pool keyed by first token (at most G continuations per key, most recent first). Once the window has all
    N - 1 levels, column i yields the n-gram (level 0..N-2 at column i, argmax after level N-2 at column i); then the
    window slides: level 0 is dropped and the argmax after the top level becomes the new top level (during warm-up
    the levels are only appended). The prompt's n-grams (and the committed tokens') seed the pool.
The verification branch: all (up to G) n-grams whose first token is the last committed token, each cut to
min(k, N - 1) tokens, merged into one token trie (shared prefixes become one node; most recent n-gram first, so node
order is parents-first and any prefix of the nodes is still a trie). The trie is a one-hot tree Draft (`parents`;
a plain chain when it does not branch), which the engine verifies with trtspec.spec.tree (greedy at T = 0, lossless
recursive rejection otherwise) and whose accepted path's KV it compacts. `k` caps the trie's node count.

Draft + window never exceed TensorRT-LLM's budget `methods.lookahead_max_draft_len(W, N, G)`: the window gets its
full width first (the trie keeps at least one n-gram), the trie the rest, and columns are dropped from the window
when they would still not fit. The pool and window are per request, so a request's drafts never depend on its batch
neighbours.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from trtspec.methods import lookahead_max_draft_len, validate_lookahead
from trtspec.methods.lookahead import LOOKAHEAD
from trtspec.spec.proposers.base import AuxBranch, Draft, ProposeInput, Proposer, ProposerContext


@dataclass
class _LookaheadState:
    levels: list[list[int]] = field(default_factory=list)  # [num_levels][W] Jacobi guesses
    pool: dict[int, OrderedDict[tuple[int, ...], None]] = field(default_factory=dict)  # first token -> continuations
    num_pooled: int = 0  # context tokens whose n-grams are already in the pool
    branch_levels: int = 0  # levels forwarded in the last branch (0 = none)
    branch_width: int = 0  # columns forwarded in the last branch
    argmax: list[int] | None = None  # target argmax at each forwarded window token, level-major


class LookaheadProposer(Proposer):
    """Lookahead decoding: Jacobi window + n-gram pool (see module docstring).

    Example:
        W=2, N=3, G=2, context [5, 6, 7, 5]: the prompt seeds the pool with {5: [(6, 7)], 6: [(7, 5)], 7: [(5,)...]};
        propose(k=2) drafts [6, 7] (the n-gram starting with the last token 5) and forwards the window level 0 =
        [7, 5] (from the context) as an AuxBranch. The target's argmax after each window token becomes level 1.
    """

    name: ClassVar[str] = LOOKAHEAD.proposer_key()  # its method home names it

    def __init__(self, window: int = 4, ngram: int = 4, verification_set: int = 4, *,
                 pool_from_context: bool = True) -> None:
        validate_lookahead(window, ngram, verification_set)
        self.window, self.ngram, self.verification_set = window, ngram, verification_set
        self.max_draft_len = lookahead_max_draft_len(window, ngram, verification_set)
        self.pool_from_context = pool_from_context
        self.states: dict[int, _LookaheadState] = {}

    @classmethod
    def create(cls, ctx: ProposerContext) -> LookaheadProposer:
        return cls(*ctx.options.lookahead.as_tuple())

    # -- lifecycle -----------------------------------------------------------------------------------------------
    def add_request(self, request_id: int) -> None:
        self.states.setdefault(request_id, _LookaheadState())  # kept across a preemption

    def preempt(self, request_id: int) -> None:
        """The request lost its KV (recompute preemption): keep the window and pool, which live on the host, so that
        its drafts, and hence its sampled output, are the same as without the preemption."""

    def free(self, request_id: int) -> None:
        self.states.pop(request_id, None)

    def observe_auxiliary(self, request_id: int, argmax_ids: list[int]) -> None:
        self.states[request_id].argmax = list(argmax_ids)

    def commit(self, request_id: int, token_ids: list[int]) -> None:
        """Advance the window with the stored argmax outputs, harvest n-grams, and pool new context n-grams."""
        state = self.states[request_id]
        if state.argmax is not None and state.branch_levels:
            width, levels = state.branch_width, state.branch_levels
            rows = [state.argmax[j * width : (j + 1) * width] for j in range(levels)]  # [levels][width]
            top = rows[-1]  # argmax after the top level: the next Jacobi guess for every column
            if levels == self.ngram - 1:
                for i in range(width):
                    gram = [state.levels[j][i] for j in range(levels)] + [top[i]]
                    self._add(state, gram)
                state.levels = state.levels[1:]
            state.levels = [level[:width] for level in state.levels] + [top]
        state.argmax = None
        if self.pool_from_context:
            self._pool_context(state, token_ids)

    # -- proposing -----------------------------------------------------------------------------------------------
    def propose(self, batch: list[ProposeInput]) -> list[Draft]:
        return [self._propose_one(item) for item in batch]

    def _propose_one(self, item: ProposeInput) -> Draft:
        state = self.states[item.request_id]
        context = item.token_ids
        if state.num_pooled == 0:
            self._pool_context(state, context)
        if not state.levels:  # level 0 from the context (LADE starts from prompt tokens)
            state.levels = [[context[(len(context) - self.window + i) % len(context)] for i in range(self.window)]]
        # verification branch: every pooled n-gram that starts with the last committed token, merged into a trie
        levels = len(state.levels)
        full_width = min(len(level) for level in state.levels)
        depth = min(item.k, self.ngram - 1)
        max_nodes = min(item.k, max(self.max_draft_len - levels * full_width, min(depth, self.max_draft_len)))
        candidates = state.pool.get(context[-1]) if self.verification_set else None
        token_ids, parents = build_trie(reversed(candidates), depth, max_nodes) if candidates else ([], [])
        # lookahead branch: as many columns as the budget allows after the draft
        width = min(full_width, (self.max_draft_len - len(token_ids)) // levels)
        state.branch_levels, state.branch_width = (levels, width) if width else (0, 0)
        aux = self._branch(state.levels, width) if width else None
        is_chain = all(p == i - 1 for i, p in enumerate(parents))
        return Draft(token_ids=torch.tensor(token_ids, dtype=torch.long), parents=None if is_chain else tuple(parents),
                     aux=aux)

    @staticmethod
    def _branch(levels: list[list[int]], width: int) -> AuxBranch:
        """The window as an AuxBranch, level-major: token (j, i) at index j * width + i, depth 1 + i + j."""
        num_levels = len(levels)
        n = num_levels * width
        token_ids = torch.tensor([levels[j][i] for j in range(num_levels) for i in range(width)], dtype=torch.long)
        level = torch.arange(n) // width  # [n]
        column = torch.arange(n) % width  # [n]
        depths = 1 + column + level  # [n]
        # (j, i) sees (0, i') for i' <= i, and (j', i) for 1 <= j' <= j
        sees_level0 = (level[None, :] == 0) & (column[None, :] <= column[:, None])  # [n, n]
        sees_column = (column[None, :] == column[:, None]) & (level[None, :] >= 1) & (level[None, :] <= level[:, None])
        return AuxBranch(token_ids=token_ids, depths=depths, mask=sees_level0 | sees_column)

    # -- pool ----------------------------------------------------------------------------------------------------
    def _add(self, state: _LookaheadState, gram: list[int]) -> None:
        continuations = state.pool.setdefault(gram[0], OrderedDict())
        key = tuple(gram[1:])
        continuations.pop(key, None)
        continuations[key] = None  # most recent last
        while len(continuations) > max(self.verification_set, 1):
            continuations.popitem(last=False)

    def _pool_context(self, state: _LookaheadState, token_ids: list[int]) -> None:
        """Add every complete n-gram of the context not pooled yet (n = N)."""
        n = self.ngram
        start = max(0, state.num_pooled - n + 1)
        for i in range(start, len(token_ids) - n + 1):
            self._add(state, token_ids[i : i + n])
        state.num_pooled = len(token_ids)


def build_trie(candidates: Iterable[Sequence[int]], max_depth: int, max_nodes: int) -> tuple[list[int], list[int]]:
    """Merge token sequences (in priority order) into one trie: (token_ids, parents), parents[i] = -1 for the root.

    Each sequence is cut to `max_depth` tokens; a node is added only while there are fewer than `max_nodes`, so a
    late sequence may be cut short. Nodes are numbered in insertion order, hence parents-first (parents[i] < i), the
    first sequence is the chain 0, 1, ..., and every prefix of the node list is itself a trie.

    Example:
        build_trie([(7, 8, 9), (7, 8, 4), (5,)], 3, 8) -> ([7, 8, 9, 4, 5], [-1, 0, 1, 1, -1])
    """
    token_ids: list[int] = []
    parents: list[int] = []
    child: dict[tuple[int, int], int] = {}  # (parent node, token) -> node
    for sequence in candidates:
        parent = -1
        for token in list(sequence)[:max_depth]:
            node = child.get((parent, token))
            if node is None:
                if len(token_ids) >= max_nodes:
                    break
                node = child[(parent, token)] = len(token_ids)
                token_ids.append(token)
                parents.append(parent)
            parent = node
    return token_ids, parents
