"""The batched tree verifier (tree.verify_trees): sampled tree drafts of many requests in one walk, each request its
own tree shape, top-k, draft distributions and generator.

Chi-square: on a batch that mixes three tree shapes (one with a duplicate sibling token), one-hot and sampled drafts
and different top-k, the first emitted token follows each request's target at the root, and the second follows the
target below the accepted first node. A lossy walk (a rejected sibling's mass left in the residual) must fail. A
request's verdict does not depend on the rest of the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from scipy.stats import chisquare

from trtspec.spec import tree as tree_module
from trtspec.spec.sampling import logits_to_probs
from trtspec.spec.tree import TokenTree, verify_trees

VOCAB = 8
PER_KIND = 4_000


@dataclass(frozen=True)
class Sampling:
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0


# kind -> (parents with root -1 = node indices 0.., fixed node tokens or None = sampled from the draft, top_k)
KINDS = {
    "wide-one-hot": ((-1, -1, -1, 0, 1), (3, 6, 2, 5, 6), 0),
    "duplicate-sibling-one-hot-top_k5": ((-1, -1, 0, 0, 2), (1, 1, 4, 0, 7), 5),
    "chain-and-branch-sampled": ((-1, 0, 1, -1), None, 0),
}


def _tree(parents) -> TokenTree:
    return TokenTree.from_parents((-1, *(p + 1 for p in parents)))


def _kind_case(name: str, seed: int):
    """Raw target logits [N + 1, V] (each node's row is the target after its path), draft distributions [N, V]."""
    parents, _, top_k = KINDS[name]
    gen = torch.Generator().manual_seed(seed)
    raw = torch.randn(len(parents) + 1, VOCAB, generator=gen) * 1.5  # [N + 1, V]
    draft = torch.softmax(torch.randn(len(parents), VOCAB, generator=gen) * 1.5, -1)  # [N, V]
    return raw, draft, top_k


def _run(seed: int = 0):
    """One verify_trees call over len(KINDS) x PER_KIND requests interleaved by kind; per kind the verdicts."""
    cases = {name: _kind_case(name, i + 1) for i, name in enumerate(KINDS)}
    gen = torch.Generator().manual_seed(seed)
    trees, tokens, probs, scores, samplings, generators, names = [], [], [], [], [], [], []
    for r in range(len(KINDS) * PER_KIND):
        name = list(KINDS)[r % len(KINDS)]
        parents, fixed, top_k = KINDS[name]
        raw, draft, _ = cases[name]
        if fixed is None:
            ids = torch.multinomial(draft, 1, generator=gen)[:, 0]  # [N] each node sampled from its draft row
        else:
            ids = torch.tensor(fixed)
        trees.append(_tree(parents))
        tokens.append(ids)
        probs.append(None if fixed is not None else draft)
        scores.append(raw)  # processed logits at temperature 1: the raw ones
        samplings.append(Sampling(top_k=top_k))
        generators.append(torch.Generator().manual_seed(seed * 1_000_003 + r))
        names.append(name)
    verdicts = verify_trees(trees, tokens, probs, scores, samplings, generators)
    return cases, {name: [(t, v) for t, v, n in zip(tokens, verdicts, names, strict=True) if n == name]
                   for name in KINDS}


def _p_value(tokens: list[int], probs: torch.Tensor) -> float:
    counts = torch.bincount(torch.tensor(tokens), minlength=VOCAB).double()
    if counts[probs == 0].sum() > 0:
        return 0.0
    support = probs > 0
    expected = probs[support].double() / probs[support].double().sum() * counts.sum()
    return float(chisquare(counts[support].numpy(), expected.numpy()).pvalue)


def _assert_follows_targets(cases, results) -> None:
    for name, pairs in results.items():
        parents, _, top_k = KINDS[name]
        raw, _, _ = cases[name]
        target = logits_to_probs(raw, 1.0, top_k)  # [N + 1, V] the target at the root and below each node
        assert _p_value([v.token_ids[0] for _, v in pairs], target[0]) > 1e-3, name
        # second token given the first: below the accepted first node, the target at that node's row
        first_nodes = {n for n in range(1, len(parents) + 1) if parents[n - 1] == -1}
        for node in first_nodes:
            below = [v.token_ids[1] for _, v in pairs if v.accepted_nodes[:1] == [node]]
            if len(below) > 300:
                assert _p_value(below, target[node]) > 1e-3, (name, node)


def test_batched_tree_walk_follows_each_requests_target():
    cases, results = _run()
    for pairs in results.values():  # both accept and reject paths are exercised
        accepted = [v.num_accepted for _, v in pairs]
        assert 0 < sum(accepted) < len(accepted) * 2
    _assert_follows_targets(cases, results)


def test_a_lossy_walk_is_detected(monkeypatch):
    """Mutation: a rejected sibling's mass stays in the residual (the residual is never updated)."""
    monkeypatch.setattr(tree_module, "_normalise", lambda weights, fallback: fallback)
    cases, results = _run()
    with pytest.raises(AssertionError):
        _assert_follows_targets(cases, results)


def test_a_requests_tree_verdict_does_not_depend_on_the_batch():
    name_a, name_b = "wide-one-hot", "chain-and-branch-sampled"
    raw_a, _, _ = _kind_case(name_a, 1)
    raw_b, draft_b, _ = _kind_case(name_b, 3)
    tree_a, tree_b = _tree(KINDS[name_a][0]), _tree(KINDS[name_b][0])
    ids_a = torch.tensor(KINDS[name_a][1])
    for seed in range(20):
        ids_b = torch.multinomial(draft_b, 1, generator=torch.Generator().manual_seed(seed))[:, 0]
        alone = verify_trees([tree_a], [ids_a], [None], [raw_a], [Sampling()], [torch.Generator().manual_seed(seed)])
        beside = verify_trees([tree_b, tree_a], [ids_b, ids_a], [draft_b, None], [raw_b, raw_a],
                              [Sampling(top_k=3), Sampling()],
                              [torch.Generator().manual_seed(seed + 1), torch.Generator().manual_seed(seed)])
        assert beside[1] == alone[0]
