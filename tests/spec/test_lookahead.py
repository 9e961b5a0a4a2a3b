"""Lookahead decoding: the Jacobi window rides in the target pass with exact outputs, stays within TensorRT-LLM's
draft budget, harvests n-grams, and greedy lookahead equals the target's greedy decoding for any (W, N, G)."""

from __future__ import annotations

import pytest
import torch

from tests.spec.conftest import hf_greedy
from trtspec.methods import lookahead_max_draft_len, resolve
from trtspec.spec.engine import SpecEngine
from trtspec.spec.params import SamplingParams, SpecParams
from trtspec.spec.proposers import PROPOSERS
from trtspec.spec.proposers.lookahead import LookaheadProposer

PROMPTS = [[5, 9, 3, 7, 5, 9, 3, 2, 11], [17, 30, 2, 8, 41, 8, 41, 8, 63, 12, 30, 2, 8], [4, 4]]


class SpyLookahead(LookaheadProposer):
    """Records every step's context, draft, window branch and the target argmax handed back."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.log: list[dict] = []

    def propose(self, batch):
        drafts = super().propose(batch)
        for item, draft in zip(batch, drafts, strict=True):
            self.log.append({"rid": item.request_id, "context": list(item.token_ids), "draft": draft})
        return drafts

    def observe_auxiliary(self, request_id, argmax_ids):
        next(e for e in reversed(self.log) if e["rid"] == request_id)["argmax"] = list(argmax_ids)
        super().observe_auxiliary(request_id, argmax_ids)


def spy_engine(random_pair, wng) -> tuple[SpecEngine, SpyLookahead]:
    engine = SpecEngine.from_pretrained(random_pair[0], max_k=8)
    spy = SpyLookahead(*wng)
    engine.proposers["lookahead"] = spy
    return engine, spy


def test_registered_and_resolved():
    assert resolve("lookahead").proposer == "lookahead" and PROPOSERS["lookahead"] is LookaheadProposer


def test_window_mask_is_the_guess_sequence():
    branch = LookaheadProposer._branch([[10, 11, 12], [20, 21, 22]], width=3)
    assert branch.token_ids.tolist() == [10, 11, 12, 20, 21, 22]
    assert branch.depths.tolist() == [1, 2, 3, 2, 3, 4]
    # (level 1, column 1) = token 21 sees 10, 11 (level 0, columns <= 1) and itself: the sequence 10 11 21
    assert branch.mask[4].nonzero().flatten().tolist() == [0, 1, 4]
    assert branch.mask[2].nonzero().flatten().tolist() == [0, 1, 2]


def test_window_outputs_equal_separate_target_forwards(random_pair, hf_target):
    """Every argmax handed back equals transformers' argmax after (context + that token's guess sequence)."""
    engine, spy = spy_engine(random_pair, (3, 3, 2))
    engine.generate(PROMPTS[:2], SamplingParams(max_new_tokens=10), SpecParams("lookahead", 2))
    checked = 0
    for entry in spy.log:
        aux = entry["draft"].aux
        if aux is None or "argmax" not in entry:
            continue
        ids = aux.token_ids.tolist()
        for a in range(len(ids)):
            seen = [ids[j] for j in aux.mask[a].nonzero().flatten().tolist()]
            with torch.no_grad():
                logits = hf_target(torch.tensor([entry["context"] + seen])).logits[0, -1]
            assert int(logits.argmax()) == entry["argmax"][a]
            checked += 1
    assert checked > 20


@pytest.mark.parametrize("wng", [(1, 1, 0), (2, 2, 1), (3, 3, 2), (4, 4, 4), (5, 3, 7)])
def test_greedy_equals_transformers_and_budget(random_pair, hf_target, wng):
    engine, spy = spy_engine(random_pair, wng)
    reference = [hf_greedy(hf_target, p, 24) for p in PROMPTS]
    outs = engine.generate(PROMPTS, SamplingParams(max_new_tokens=24), SpecParams("lookahead", 8))
    assert [o.token_ids for o in outs] == reference
    budget = lookahead_max_draft_len(*wng)
    for entry in spy.log:
        draft = entry["draft"]
        assert draft.num_tokens + (draft.aux.num_tokens if draft.aux is not None else 0) <= budget
        assert draft.num_tokens <= wng[1] - 1
    if wng[1] >= 3:
        assert any(e["draft"].aux is not None for e in spy.log)


def test_jacobi_pool_alone_drafts_accepted_tokens(random_pair):
    """Without pooling the context, drafts can only come from harvested window n-grams, and some are accepted."""
    engine, spy = spy_engine(random_pair, (4, 3, 4))
    spy.pool_from_context = False
    spy._pool_context = lambda state, token_ids: None
    out = engine.generate([PROMPTS[1]], SamplingParams(max_new_tokens=40, ignore_eos=True),
                          SpecParams("lookahead", 4))[0]
    assert out.stats.num_drafts > 0 and out.stats.num_accepted_tokens > 0
