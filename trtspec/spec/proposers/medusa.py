"""Medusa proposer: heads on the target's last hidden state propose a token tree (one-hot draft).

Each step it reads the hidden state the target produced at the position before the last committed token (the one
from which that token was predicted; the engine keeps it on the sequence state), runs every head once, and fills the
tree: node i takes rank `node_rank[i]` of head `node_head[i]`'s top-k. The draft is one-hot (Medusa's top-k
children are not samples), so exact verification uses q = delta at each node's token.

Stateless per request: nothing to roll back on commit. The first step of a request has no hidden state yet (the
prompt is not in the target's cache), so it drafts nothing and the engine decodes one plain token.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import torch

from trtspec import choices as choices_mod
from trtspec.errors import ConfigError
from trtspec.methods.medusa import MEDUSA
from trtspec.spec.medusa_heads import MedusaHeads, resolve_heads
from trtspec.spec.proposers.base import Draft, ProposeInput, Proposer, ProposerContext
from trtspec.spec.tree import TokenTree

CHOICES_FILE = "medusa_choices.yaml"  # a tuned tree shipped next to the heads (`trtspec tune tree --out`)


class MedusaProposer(Proposer):
    """Medusa heads + a static tree (choices).

    Example:
        choices [[0], [1], [0, 0]] (3 nodes), head 0 top-2 = [17, 4], head 1 top-1 = [9]:
        Draft(token_ids=[17, 4, 9], draft_probs=None, parents=(-1, -1, 0)); node 2 (token 9) continues node 0.
    """

    name: ClassVar[str] = MEDUSA.proposer_key()  # its method home names it
    needs_hidden_states: ClassVar[bool] = True

    def __init__(self, heads: MedusaHeads, tree_choices: choices_mod.Choices) -> None:
        self.heads = heads
        self.tree = TokenTree.from_choices(tree_choices, max_depth=heads.num_heads)
        self.choices = choices_mod.validate(tree_choices, max_depth=heads.num_heads)
        self.parents = tuple(int(p) - 1 for p in self.tree.parents[1:])  # Draft convention: -1 = last committed
        self.top_k = int(self.tree.node_rank.max()) + 1

    @classmethod
    def create(cls, ctx: ProposerContext) -> MedusaProposer:
        """Heads from ctx.medusa (either layout); tree from options.medusa_tree, the heads' tuned tree, or
        mc_sim_7b_63 cut to the number of heads."""
        if ctx.medusa is None:
            raise ConfigError(MEDUSA.checkpoint, None, f"method {MEDUSA.name} needs Medusa heads",
                              hint="pass medusa='tiny-medusa' (or a directory from `trtspec train medusa`)")
        heads = resolve_heads(ctx.medusa, target_hidden_size=ctx.hidden_size, target_vocab_size=ctx.vocab_size)
        given = ctx.options.medusa_tree.choices
        tree_choices = ([list(p) for p in given] if given is not None
                        else default_choices(Path(ctx.medusa), heads.num_heads))
        choices_mod.validate(tree_choices, max_depth=heads.num_heads, max_rank=heads.shape.vocab_size,
                             field="medusa_choices")
        return cls(heads, tree_choices)

    @torch.inference_mode()
    def propose(self, batch: list[ProposeInput]) -> list[Draft]:
        """One tree Draft per input (empty without a target hidden state). Only the first `k` nodes are kept."""
        ready = [i for i, item in enumerate(batch) if item.target_hidden is not None]
        drafts = [Draft.empty() for _ in batch]
        if not ready:
            return drafts
        hidden = torch.stack([batch[i].target_hidden for i in ready])  # [B, hidden]
        self.heads.to(device=hidden.device, dtype=hidden.dtype)
        logits = self.heads(hidden)  # [heads, B, vocab]
        top_ids = logits.topk(self.top_k, dim=-1).indices  # [heads, B, top_k]
        node_tokens = top_ids[self.tree.node_head.to(hidden.device), :, self.tree.node_rank.to(hidden.device)]  # [N, B]
        for column, i in enumerate(ready):
            n = min(batch[i].k, self.tree.num_nodes)  # nodes are parents-first, so a prefix is still a tree
            drafts[i] = Draft(token_ids=node_tokens[:n, column].clone(), draft_probs=None, parents=self.parents[:n])
        return drafts


def default_choices(medusa_dir: Path, num_heads: int) -> choices_mod.Choices:
    """The heads' own tuned tree if shipped (medusa_choices.yaml), else mc_sim_7b_63 restricted to `num_heads`."""
    from trtspec.models import resolve_medusa

    tuned = resolve_medusa(medusa_dir) / CHOICES_FILE
    if tuned.is_file():
        return choices_mod.parse(tuned, field="medusa_choices")
    return [p for p in choices_mod.MC_SIM_7B_63 if len(p) <= num_heads]
