"""Auxiliary branches (Draft.aux) in the engine's single target forward: budget, layout, and hand-back.

A row of the target forward is (uncached context tokens, draft tokens, aux tokens). Aux tokens see the committed
context and the aux tokens their branch's mask allows, never the draft; draft tokens never see aux tokens (they come
later in the row, and the draft part of the mask is untouched). After the forward the target's argmax at every aux
token goes back to the proposer and the aux KV entries are dropped, so verification and commit see exactly what
they would without the branch. This module knows nothing about lookahead's window itself.
"""

from __future__ import annotations

import dataclasses

from torch import Tensor

from trtspec.spec.proposers.base import Draft


def fit_aux(drafts: list[Draft], tokens_left: int, rooms: list[int]) -> list[Draft]:
    """Drop aux branches that do not fit the step's leftover token budget or the sequence's context room.

    Args:
        tokens_left: target tokens left in this step's budget after context and draft tokens.
        rooms: [batch] KV positions left per sequence after its context and draft tokens.
    """
    out = []
    for draft, room in zip(drafts, rooms, strict=True):
        if draft.aux is not None:
            n = draft.aux.num_tokens
            if n > tokens_left or n > room:
                draft = dataclasses.replace(draft, aux=None)
            else:
                tokens_left -= n
        out.append(draft)
    return out


def apply_aux_layout(positions: Tensor, mask: Tensor, drafts: list[Draft], num_pending: list[int],
                     bases: list[int]) -> None:
    """Write the aux tokens' positions and mask rows in place.

    Args:
        positions: [batch, T] RoPE positions (filled for context + draft tokens).
        mask: [batch, T, T] bool mask over the new tokens (filled for context + draft tokens).
        num_pending: [batch] uncached context tokens per row; bases: [batch] cached tokens per row.
    """
    for b, (draft, n, base) in enumerate(zip(drafts, num_pending, bases, strict=True)):
        if draft.aux is None:
            continue
        start = n + draft.num_tokens  # first aux column
        end = start + draft.aux.num_tokens
        positions[b, start:end] = base + n - 1 + draft.aux.depths
        mask[b, start:end, :] = False
        mask[b, start:end, :n] = True  # the uncached context (the cached prefix is always visible)
        mask[b, start:end, start:end] = draft.aux.mask.to(mask.device)


def hand_back(proposer: object, request_id: int, draft: Draft, logits: Tensor, start: int) -> int:
    """Give the proposer the target's argmax at each aux token; returns how many KV entries to drop.

    Args:
        logits: [T, vocab] this row's target logits; start: the row index of the first aux token.
    """
    if draft.aux is None:
        return 0
    n = draft.aux.num_tokens
    argmax = logits[start : start + n].argmax(-1)  # [num_aux]
    proposer.observe_auxiliary(request_id, argmax.tolist())
    return n
