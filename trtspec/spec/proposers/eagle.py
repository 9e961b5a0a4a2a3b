"""EAGLE proposer: an EAGLE-3 drafter drafts autoregressively on features, as a static or a dynamic token tree.

Data flow per request (positions are the target's):
  - after each target forward the engine hands over the target's tapped hidden states (low, middle, high layers) of
    every position it committed (`observe_target`); the drafter feeds them with the token that followed, feature at p
    with token p + 1, into its own KV cache (position p). Those entries are final: the target verified them.
  - `propose` feeds the features not yet fed (the last one is at P = len(context) - 2, the position before the last
    committed token), whose logits give the first draft tokens, then drafts deeper on its own output features:
    a node at depth d is fed at position P + d with its parent's pre-norm output and its own token, attending to the
    cached context and to its ancestors only (an explicit mask over the draft cache keeps sibling branches apart).
  - after drafting the drafter's cache is rolled back to the verified context (the draft nodes' entries are dropped);
    a commit that contradicts cached entries (never in normal operation) rolls back to the common prefix.

Trees:
  - static (EAGLE-1): the tree's `choices`, Medusa-style paths; node [a, .., r] is the rank-r token of its parent's
    distribution. The first k nodes (parents-first order) are drafted.
  - dynamic (EAGLE-2): each expansion takes the `topk` children of every frontier node, scored by cumulative
    log-probability; the top `topk` of them form the next frontier, up to `depth` levels; the k best nodes overall
    are drafted (a child never outscores its parent, so they form a tree).
The tree is the engine configuration's `EagleTree` (trtspec.contracts.engine), unset fields taking the defaults here.
Drafts are one-hot (top-k children are not samples), so the tree verifier's recursive rejection is exact at any
temperature. The first step of a request has no features yet: it drafts nothing and the engine decodes one token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch
from torch import Tensor

from trtspec import choices as choices_mod
from trtspec.contracts.engine import MAX_DEPTH, EagleTree
from trtspec.errors import ConfigError
from trtspec.methods.eagle import EAGLE3
from trtspec.spec.eagle_model import EagleDrafter, load_drafter
from trtspec.spec.proposers.base import Draft, ProposeInput, Proposer, ProposerContext

DEFAULT_TOPK = 4  # EAGLE-2 / vLLM / SGLang default branching
DEFAULT_DEPTH = 6  # levels of a dynamic tree (SGLang's --speculative-num-steps is of this order)


@dataclass
class _EagleState:
    slot: int
    fed: int = 0  # drafter cache holds positions [0, fed): feature p with token p + 1
    pending: Tensor | None = None  # [m, taps * hidden] target features of positions [fed, fed + m), not fed yet


@dataclass
class _Tree:
    """One row's draft tree while it grows; node i: token (target id), parent (-1 = root), cumulative log-prob,
    depth, rank path; and, once fed to the drafter, its cache entries (its own and its ancestors')."""

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    depths: list[int] = field(default_factory=list)
    paths: list[tuple[int, ...]] = field(default_factory=list)  # rank path (static trees)
    seen: dict[int, list[int]] = field(default_factory=lambda: {-1: []})  # fed node -> cache entries of its path
    output: dict[int, Tensor] = field(default_factory=dict)  # node (-1 = root) -> pre-norm output [hidden]

    def add(self, token: int, parent: int, score: float, rank: int) -> int:
        self.tokens.append(token)
        self.parents.append(parent)
        self.scores.append(score)
        self.depths.append(1 if parent < 0 else self.depths[parent] + 1)
        self.paths.append((self.paths[parent] if parent >= 0 else ()) + (rank,))
        return len(self.tokens) - 1

    def kth_score(self, k: int) -> float:
        """The k-th best cumulative score so far (-inf with fewer than k nodes)."""
        return sorted(self.scores, reverse=True)[k - 1] if len(self.scores) >= k else float("-inf")


class EagleProposer(Proposer):
    """EAGLE-3 drafter + static choices or a dynamic tree (see module docstring).

    Example:
        context [5, 9, 2], target features of positions 0-1 observed, k=3, topk 1 (a chain): the drafter feeds
        (f0, 9), (f1, 2); its logits at position 1 give d1 = 7; it feeds (g1, 7) at position 2 -> d2 = 4, then
        (g2, 4) -> d3 = 8. Draft(token_ids=[7, 4, 8], parents=(-1, 0, 1)); the drafter cache keeps positions 0-1.
    """

    name: ClassVar[str] = EAGLE3.proposer_key()  # its method home names it


    def __init__(self, drafter: EagleDrafter, taps: tuple[int, ...], *, tree: EagleTree = EagleTree(),
                 max_num_seqs: int = 256, max_seq_len: int = 2048) -> None:
        vocab = drafter.config.draft_vocab_size  # ranks index the draft vocabulary
        self.drafter = drafter
        self.draft_ids = drafter.draft_ids  # [draft vocab] target id of each draft id
        self.target_taps = taps  # the engine asks the target's forward for the input of these layers
        self.choices = None if tree.choices is None else choices_mod.validate(
            [list(p) for p in tree.choices], max_depth=MAX_DEPTH, max_rank=vocab, field="eagle_choices")
        self.topk, self.depth = tree.topk or DEFAULT_TOPK, tree.depth or DEFAULT_DEPTH
        if self.topk > vocab:
            raise ConfigError("eagle_topk", self.topk, f"exceeds the drafter's vocabulary of {vocab} tokens",
                              hint=f"use at most {vocab}")
        self.cache = drafter.new_cache(num_slots=min(4, max_num_seqs), max_slots=max_num_seqs,
                                       max_seq_len=max_seq_len)
        self.states: dict[int, _EagleState] = {}

    @classmethod
    def create(cls, ctx: ProposerContext) -> EagleProposer:
        """Drafter from ctx.eagle, checked against the target; the tree from ctx.options.eagle_tree."""
        if ctx.eagle is None or ctx.target_config is None or ctx.target_embed is None:
            raise ConfigError(EAGLE3.checkpoint, None, f"method {EAGLE3.name} needs an EAGLE-3 drafter",
                              hint="pass eagle='tiny-eagle' (or a directory from `trtspec train eagle`)")
        weight = ctx.target_embed.weight
        drafter, taps = load_drafter(ctx.eagle, ctx.target_config, ctx.target_embed, dtype=weight.dtype,
                                     device=weight.device)
        return cls(drafter, taps, tree=ctx.options.eagle_tree, max_num_seqs=ctx.max_num_seqs,
                   max_seq_len=ctx.target_config.max_position_embeddings + MAX_DEPTH * 64)

    # -- per-request state ---------------------------------------------------------------------------------------
    def add_request(self, request_id: int) -> None:
        self.states[request_id] = _EagleState(slot=self.cache.alloc())

    def free(self, request_id: int) -> None:
        state = self.states.pop(request_id, None)
        if state is not None:
            self.cache.free(state.slot)

    def observe_target(self, request_id: int, start: int, features: Tensor) -> None:
        """The target's taps at positions [start, start + n) just committed: features [n, taps * hidden]."""
        state = self.states[request_id]
        keep = start - state.fed  # pending features before `start` stay
        if keep < 0:  # the target recomputed positions the drafter has fed: drop them and what follows
            self.cache.rollback(state.slot, start)
            state.fed, state.pending, keep = start, None, 0
        pending = state.pending[:keep] if state.pending is not None else features[:0]
        if pending.shape[0] != keep:
            raise ValueError(f"eagle request {request_id}: features from position {start}, the drafter expects "
                             f"{state.fed + pending.shape[0]}")
        state.pending = torch.cat([pending, features.to(pending.dtype)])

    def commit(self, request_id: int, token_ids: list[int]) -> None:
        """Fed entries pair feature p with token p + 1: keep the ones whose token is still in the context."""
        state = self.states[request_id]
        if state.fed > len(token_ids) - 1:
            self.cache.rollback(state.slot, len(token_ids) - 1)
            state.fed, state.pending = len(token_ids) - 1, None

    # -- drafting ----------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def propose(self, batch: list[ProposeInput]) -> list[Draft]:
        drafts = [Draft.empty() for _ in batch]
        states = [self.states[item.request_id] for item in batch]
        feed = [i for i, s in enumerate(states) if s.pending is not None and s.pending.shape[0] > 0]
        if not feed:
            return drafts
        logits, outputs = self._feed([batch[i] for i in feed], [states[i] for i in feed])  # [F, V'], [F, hidden]
        ready = [(j, i) for j, i in enumerate(feed) if states[i].fed == len(batch[i].token_ids) - 1]
        if not ready:
            return drafts
        rows = [i for _, i in ready]
        ks = [batch[i].k for i in rows]
        trees = [_Tree(output={-1: outputs[j]}) for j, _ in ready]
        self._grow(trees, [[-1] for _ in rows], logits[[j for j, _ in ready]][:, None], ks)
        for _ in range(1, self._max_depth(max(ks))):
            frontiers = [self._frontier(tree, k) for tree, k in zip(trees, ks, strict=True)]
            if not any(frontiers):
                break
            self._expand(trees, frontiers, [states[i] for i in rows], ks)
        for tree, i, k in zip(trees, rows, ks, strict=True):
            self.cache.rollback(states[i].slot, states[i].fed)  # drop the draft nodes' entries
            drafts[i] = self._select(tree, k)
        return drafts

    def _feed(self, items: list[ProposeInput], states: list[_EagleState]) -> tuple[Tensor, Tensor]:
        """Feed each row's pending features with their next tokens; logits [rows, V'] (draft vocabulary) and pre-norm
        outputs [rows, hidden] at each row's last fed position."""
        counts = [s.pending.shape[0] for s in states]  # type: ignore[union-attr]
        width = max(counts)
        device = self.drafter.lm_head.weight.device
        input_ids = torch.zeros(len(items), width, dtype=torch.long)  # [rows, width]
        aux = torch.cat([s.pending for s in states]).to(device)  # type: ignore[misc]  # [sum(counts), taps * hidden]
        features = self.drafter.combine(aux)  # [sum(counts), hidden], one fc over every row's features
        hidden = features.new_zeros(len(items), width, features.shape[-1])  # [rows, width, hidden]
        hidden[torch.arange(width)[None, :] < torch.tensor(counts)[:, None]] = features
        for r, (item, state, n) in enumerate(zip(items, states, counts, strict=True)):
            input_ids[r, :n] = torch.tensor(item.token_ids[state.fed + 1 : state.fed + 1 + n])
        num_tokens = torch.tensor(counts, device=device)
        slots = torch.tensor([s.slot for s in states], device=device)
        logits, prenorm = self.drafter(input_ids.to(device), hidden, self.cache, slots, num_tokens=num_tokens)
        for state, n in zip(states, counts, strict=True):
            state.fed += n
            state.pending = None
        last = num_tokens - 1
        rows = torch.arange(len(items), device=device)
        return logits[rows, last], prenorm[rows, last]

    def _max_depth(self, k: int) -> int:
        if self.choices is not None:
            return max(len(p) for p in self.choices[:k])
        return min(self.depth, k)

    def _frontier(self, tree: _Tree, k: int) -> list[int]:
        """Nodes to expand next: the deepest level's nodes that have children in the tree (static) or its top-k
        by cumulative score (dynamic), minus those scoring below the k-th best node so far. A child never outscores
        its parent, so such a node's children could not be drafted: the pruned tree drafts the same nodes, with
        fewer drafter forwards when the drafter is unsure."""
        deepest = max(tree.depths)
        level = [n for n, d in enumerate(tree.depths) if d == deepest]
        if self.choices is not None:
            parents = {tuple(p[:-1]) for p in self.choices[:k] if len(p) == deepest + 1}
            return [n for n in level if tree.paths[n] in parents]
        floor = tree.kth_score(k)
        return [n for n in sorted(level, key=lambda n: (-tree.scores[n], n))[: min(self.topk, k)]
                if tree.scores[n] >= floor]

    def _expand(self, trees: list[_Tree], frontiers: list[list[int]], states: list[_EagleState],
                ks: list[int]) -> None:
        """One drafter forward over every row's frontier nodes (tree-masked), then their children."""
        device = self.drafter.lm_head.weight.device
        rows = [r for r, f in enumerate(frontiers) if f]
        width = max(len(frontiers[r]) for r in rows)
        prefix = [self.cache.length(states[r].slot) for r in rows]  # base context + earlier draft nodes
        ids, positions = [[0] * width for _ in rows], [[0] * width for _ in rows]  # [rows][width]
        parents_out, seen = [], ([], [], [])  # mask entries (row, query, key) of each node's ancestors and itself
        for j, r in enumerate(rows):
            tree, fed = trees[r], states[r].fed
            for t, node in enumerate(frontiers[r]):
                ids[j][t] = tree.tokens[node]
                positions[j][t] = fed - 1 + tree.depths[node]  # feature position P + depth, P = fed - 1
                parents_out.append(tree.output[tree.parents[node]])
                tree.seen[node] = tree.seen[tree.parents[node]] + [prefix[j] + t]
                seen[0].extend([j] * len(tree.seen[node]))
                seen[1].extend([t] * len(tree.seen[node]))
                seen[2].extend(tree.seen[node])
        input_ids = torch.tensor(ids, device=device)  # [rows, width]
        slots = torch.tensor([states[r].slot for r in rows], device=device)  # [rows]
        # a chain (one frontier node per row whose ancestors are every draft entry cached): the default positions
        # (the cache length) and mask (the whole cache) are the tree's, and cheaper to build and attend with
        chain = width == 1 and all(len(trees[r].seen[frontiers[r][0]]) == prefix[j] - states[r].fed + 1
                                   for j, r in enumerate(rows))
        if chain:
            hidden = torch.stack(parents_out)[:, None]  # [rows, 1, hidden]
            logits, prenorm = self.drafter(input_ids, hidden, self.cache, slots)
        else:
            ctx = max(p + len(frontiers[r]) for p, r in zip(prefix, rows, strict=True))
            base = torch.tensor([states[r].fed for r in rows])  # [rows] verified context in the drafter cache
            counts = torch.tensor([len(frontiers[r]) for r in rows])  # [rows]
            valid = torch.arange(width)[None, :] < counts[:, None]  # [rows, width]
            hidden = parents_out[0].new_zeros(len(rows), width, parents_out[0].shape[-1])  # [rows, width, hidden]
            hidden[valid] = torch.stack(parents_out)
            mask = torch.arange(ctx)[None, None, :] < base[:, None, None]  # [rows, 1 -> width, ctx]: verified context
            mask = mask.expand(len(rows), width, ctx).clone()
            mask[seen] = True
            mask[~valid] = False
            mask[..., 0] |= ~valid  # padding queries see key 0 (their outputs are ignored)
            logits, prenorm = self.drafter(input_ids, hidden, self.cache, slots, num_tokens=counts.to(device),
                                           positions=torch.tensor(positions, device=device),
                                           attn_mask=mask[:, None].to(device))
        for j, r in enumerate(rows):
            for t, node in enumerate(frontiers[r]):
                trees[r].output[node] = prenorm[j, t]
        self._grow([trees[r] for r in rows], [frontiers[r] for r in rows], logits, [ks[r] for r in rows])

    def _grow(self, trees: list[_Tree], nodes: list[list[int]], logits: Tensor, ks: list[int]) -> None:
        """Add the children of `nodes[j]` (node -1 = the root) from their next-token logits [rows, width, V'] over
        the draft vocabulary: the ranks the static choices use, or the top `eagle_topk` (dynamic). One log-softmax
        and one top-k for the whole batch; draft ids become target ids."""
        logp = torch.log_softmax(logits, dim=-1)  # [rows, width, V']
        if self.choices is not None:
            wanted = [[[p[-1] for p in self.choices[:k] if len(p) == len(tree.paths[n] if n >= 0 else ()) + 1
                        and tuple(p[:-1]) == (tree.paths[n] if n >= 0 else ())] for n in row]
                      for tree, row, k in zip(trees, nodes, ks, strict=True)]
            width = 1 + max((r for row in wanted for ranks in row for r in ranks), default=-1)
        else:
            wanted = [[list(range(min(self.topk, k)))] * len(row) for row, k in zip(nodes, ks, strict=True)]
            width = min(self.topk, max(ks))
        if width == 0:
            return
        top = logp.topk(width, dim=-1)  # values, indices [rows, width, ranks]
        values, tokens = top.values.tolist(), self.draft_ids[top.indices].tolist()
        for j, (tree, row) in enumerate(zip(trees, nodes, strict=True)):
            for t, node in enumerate(row):
                base = tree.scores[node] if node >= 0 else 0.0
                for r in wanted[j][t]:
                    tree.add(tokens[j][t][r], node, base + values[j][t][r], r)

    def _select(self, tree: _Tree, k: int) -> Draft:
        """The drafted nodes, parents first: the first k choices (static) or the k best scores (dynamic)."""
        if self.choices is not None:
            index = {path: n for n, path in enumerate(tree.paths)}
            nodes = [index[tuple(p)] for p in self.choices[:k] if tuple(p) in index]
        else:
            best = sorted(range(len(tree.tokens)), key=lambda n: (-tree.scores[n], n))[:k]
            nodes = sorted(best)  # creation order is parents-first; a parent outscores (or ties and precedes) a child
        position = {n: i for i, n in enumerate(nodes)}
        parents = tuple(position[tree.parents[n]] if tree.parents[n] >= 0 else -1 for n in nodes)
        return Draft(token_ids=torch.tensor([tree.tokens[n] for n in nodes], dtype=torch.long), draft_probs=None,
                     parents=parents)

