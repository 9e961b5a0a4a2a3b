"""Lookahead decoding: the Jacobi window rides in the target pass with exact outputs, stays within TensorRT-LLM's
draft budget, harvests n-grams, and greedy lookahead equals the target's greedy decoding for any (W, N, G)."""

from __future__ import annotations

import json

import pytest
import torch

from tests.spec.conftest import hf_greedy
from trtspec.contracts.engine import Lookahead, ProposerOptions
from trtspec.methods import lookahead_max_draft_len, lookahead_trie_nodes, resolve
from trtspec.models import PROMPTS as PROMPT_SUITES
from trtspec.spec.engine import SpecEngine
from trtspec.spec.params import SamplingParams, SpecParams
from trtspec.spec.proposers import PROPOSERS
from trtspec.spec.proposers.lookahead import LookaheadProposer, build_trie
from trtspec.spec.scheduler import SchedulerConfig
from trtspec.spec.tree import tree_for_parents

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


def spy_engine(random_pair, wng, **kwargs) -> tuple[SpecEngine, SpyLookahead]:
    engine = SpecEngine.from_pretrained(random_pair[0], **{"max_k": 8, **kwargs})
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
        assert draft.num_tokens <= 8 and trie_depth(draft) <= wng[1] - 1
    if wng[1] >= 3:
        assert any(e["draft"].aux is not None for e in spy.log)


def trie_depth(draft) -> int:
    if draft.num_tokens == 0:
        return 0
    return draft.num_tokens if draft.parents is None else tree_for_parents(draft.parents).max_depth


def test_build_trie_merges_shared_prefixes_parents_first():
    token_ids, parents = build_trie([(7, 8, 9), (7, 8, 4), (7, 3, 9), (5, 6, 6), (7, 8, 9)], max_depth=3, max_nodes=99)
    assert token_ids == [7, 8, 9, 4, 3, 9, 5, 6, 6]
    assert parents == [-1, 0, 1, 1, 0, 4, -1, 6, 7]  # 7 and 7-8 shared; the repeat adds nothing
    assert all(p < i for i, p in enumerate(parents))
    # every root-to-node path is a prefix of some input, and no two siblings carry the same token
    siblings = [(p, t) for p, t in zip(parents, token_ids, strict=True)]
    assert len(set(siblings)) == len(siblings)
    # depth and node caps: sequences are cut to max_depth, later ones cut short at max_nodes; still parents-first
    assert build_trie([(1, 2, 3), (1, 4, 5)], max_depth=2, max_nodes=3) == ([1, 2, 4], [-1, 0, 0])
    assert build_trie([(1, 2, 3), (6, 4, 5)], max_depth=3, max_nodes=4) == ([1, 2, 3, 6], [-1, 0, 1, -1])
    # any prefix of the node list is itself a valid trie (the engine cuts drafts to k nodes)
    for n in range(1, len(parents) + 1):
        tree_for_parents(tuple(parents[:n]))


def test_all_candidates_verified_as_one_tree(random_pair, hf_target):
    """G > 1: drafts branch (several pooled n-grams per step), stay within k nodes and the TRT-LLM budget, carry the
    Jacobi window in the same pass, and greedy output still equals transformers'."""
    wng = (3, 4, 4)
    engine, spy = spy_engine(random_pair, wng, max_k=12)
    reference = [hf_greedy(hf_target, p, 32) for p in PROMPTS]
    outs = engine.generate(PROMPTS, SamplingParams(max_new_tokens=32), SpecParams("lookahead", 12))
    assert [o.token_ids for o in outs] == reference
    trees = [e["draft"] for e in spy.log if e["draft"].parents is not None]
    assert trees and any(d.aux is not None for d in trees)
    for draft in trees:
        assert draft.draft_probs is None and all(p < i for i, p in enumerate(draft.parents))
        assert draft.num_tokens + (draft.aux.num_tokens if draft.aux is not None else 0) <= lookahead_max_draft_len(*wng)
        assert trie_depth(draft) <= wng[1] - 1
    assert sum(o.stats.num_accepted_tokens for o in outs) > 0


def test_k_above_the_full_trie_drafts_nothing_more(random_pair):
    """k = G x (N - 1) (methods.lookahead_trie_nodes) already verifies every candidate: a larger k makes the same
    drafts, which is why sweeps cap lookahead's k there."""
    wng = (3, 4, 4)
    full = lookahead_trie_nodes(*wng)
    logs = []
    for k in (full, full + 8):
        engine, spy = spy_engine(random_pair, wng, max_k=full + 8)
        engine.generate(PROMPTS, SamplingParams(max_new_tokens=32), SpecParams("lookahead", k))
        logs.append([(e["draft"].token_ids.tolist(), e["draft"].parents) for e in spy.log])
    assert logs[0] == logs[1] and max(len(tokens) for tokens, _ in logs[0]) > 4


def held_out_prompts(engine, per_suite: int) -> list[list[int]]:
    prompts = []
    for suite in ("code", "prose", "grounded"):
        lines = (PROMPT_SUITES / f"{suite}.jsonl").read_text().splitlines()[-per_suite:]
        prompts += [engine.encode(json.loads(line)["prompt"])[-48:] for line in lines]
    return prompts


@pytest.mark.slow
def test_tiny_greedy_tree_lookahead_equals_plain_in_mixed_continuous_batch(embedded_pair):
    """Embedded `tiny`, held-out prompts: lookahead trees (alone, and mixed with plain and ngram requests in a
    continuous batch that admits requests as others finish) give exactly plain greedy decoding."""
    engine = SpecEngine.from_pretrained(embedded_pair[0], max_k=12, options=ProposerOptions(lookahead=Lookahead(4, 4, 4)),
                                        scheduler=SchedulerConfig(max_num_seqs=3, max_num_batched_tokens=4096))
    prompts = held_out_prompts(engine, 2)
    sampling = SamplingParams(max_new_tokens=24, ignore_eos=True)
    plain = [o.token_ids for o in engine.generate(prompts, sampling, SpecParams("none", 0))]
    alone = engine.generate(prompts, sampling, SpecParams("lookahead", 12))
    assert [o.token_ids for o in alone] == plain
    specs = [SpecParams("lookahead", 12), SpecParams("none", 0), SpecParams("ngram", 3)] * 2
    mixed = engine.generate(prompts, sampling, specs)
    assert [o.token_ids for o in mixed] == plain
    assert sum(o.stats.num_accepted_tokens for o in alone) > 0


def test_sampling_with_trees_is_seeded_deterministic(random_pair):
    sampling = SamplingParams(temperature=0.8, seed=1234, max_new_tokens=24, ignore_eos=True)
    runs = []
    for _ in range(2):
        engine, spy = spy_engine(random_pair, (3, 4, 4), max_k=12)
        runs.append([o.token_ids for o in engine.generate(PROMPTS, sampling, SpecParams("lookahead", 12))])
        assert any(e["draft"].parents is not None for e in spy.log)
    assert runs[0] == runs[1]
    other = SamplingParams(temperature=0.8, seed=99, max_new_tokens=24, ignore_eos=True)
    engine, _ = spy_engine(random_pair, (3, 4, 4), max_k=12)
    assert [o.token_ids for o in engine.generate(PROMPTS, other, SpecParams("lookahead", 12))] != runs[0]


def test_jacobi_pool_alone_drafts_accepted_tokens(random_pair):
    """Without pooling the context, drafts can only come from harvested window n-grams, and some are accepted."""
    engine, spy = spy_engine(random_pair, (4, 3, 4))
    spy.pool_from_context = False
    spy._pool_context = lambda state, token_ids: None
    out = engine.generate([PROMPTS[1]], SamplingParams(max_new_tokens=40, ignore_eos=True),
                          SpecParams("lookahead", 4))[0]
    assert out.stats.num_drafts > 0 and out.stats.num_accepted_tokens > 0
