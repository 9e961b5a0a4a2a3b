"""Verifiers: exact greedy cases, and chi-square tests that rejection sampling reproduces the target distribution.

The statistical tests call the vectorised verifier on 20k identical rows at once (fixed seed), so they are fast and
deterministic. A deliberately broken sampler (residual replaced by the target) must fail the same test.
"""

from __future__ import annotations

import pytest
import torch
from scipy.stats import chisquare

from trtspec.spec import verify
from trtspec.spec.sampling import logits_to_probs, sample
from trtspec.spec.verify import greedy_verify, rejection_verify, verify_chain

NUM_SAMPLES = 20_000
VOCAB = 8
K = 3


def test_greedy_verify_longest_matching_prefix_then_target_token():
    target = torch.nn.functional.one_hot(torch.tensor([[4, 5, 6, 7]]), 8).float()  # argmax 4, 5, 6, 7
    cases = {(4, 5, 6): ([4, 5, 6, 7], 3), (4, 0, 6): ([4, 5], 1), (1, 5, 6): ([4], 0)}
    for draft, (expected, accepted) in cases.items():
        out, num = greedy_verify(target, torch.tensor([draft]))
        assert int(num[0]) == accepted
        assert out[0, : accepted + 1].tolist() == expected and (out[0, accepted + 1 :] == -1).all()
    verdict = verify_chain(target[0, :1], torch.zeros(0, dtype=torch.long), None, greedy=True, generator=None)
    assert verdict.token_ids == [4] and verdict.num_accepted == 0 and verdict.num_draft_tokens == 0


def test_logits_to_probs_filters():
    logits = torch.tensor([3.0, 2.0, 1.0, 0.0, -1.0])
    assert logits_to_probs(logits, 0.0).tolist() == [1, 0, 0, 0, 0]
    top2 = logits_to_probs(logits, 1.0, top_k=2)
    assert (top2[2:] == 0).all() and torch.allclose(top2[:2], torch.softmax(logits[:2], -1))
    full = torch.softmax(logits, -1)  # [0.64, 0.23, 0.09, 0.03, 0.01]
    nucleus = logits_to_probs(logits, 1.0, top_p=0.8)  # 0.64 < 0.8 -> keep the second token, then stop
    assert (nucleus[2:] == 0).all() and torch.allclose(nucleus[:2], full[:2] / full[:2].sum())
    assert (logits_to_probs(logits, 1.0, top_p=0.5) > 0).sum() == 1  # the top token always stays
    assert torch.allclose(logits_to_probs(logits, 2.0), torch.softmax(logits / 2, -1))


def _case(seed: int, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0):
    """Fixed target [K+1, V] and draft [K, V] distributions: related, but different enough for frequent rejections."""
    gen = torch.Generator().manual_seed(seed)
    target_logits = torch.randn(K + 1, VOCAB, generator=gen) * 1.5  # [K + 1, V]
    draft_logits = target_logits[:K] + torch.randn(K, VOCAB, generator=gen) * 1.5  # [K, V]
    target = logits_to_probs(target_logits, temperature, top_k, top_p)
    draft = logits_to_probs(draft_logits, temperature, top_k, top_p)
    return target, draft


def _run(target, draft, *, one_hot: bool = False, seed: int = 0):
    """Draft tokens sampled from `draft` (or uniformly, for one-hot drafts), then verified, on NUM_SAMPLES rows."""
    gen = torch.Generator().manual_seed(seed)
    proposal = torch.full_like(draft, 1 / VOCAB) if one_hot else draft  # [K, V]
    draft_ids = sample(proposal.repeat(NUM_SAMPLES, 1), gen).view(NUM_SAMPLES, K)  # [N, K]
    draft_probs = torch.nn.functional.one_hot(draft_ids, VOCAB).float() if one_hot else draft.expand(NUM_SAMPLES, K, VOCAB)
    return rejection_verify(target.expand(NUM_SAMPLES, K + 1, VOCAB), draft_probs, draft_ids, gen)


def _p_value(tokens: torch.Tensor, probs: torch.Tensor) -> float:
    """Chi-square goodness of fit of `tokens` to `probs` over the support (tokens off the support fail hard)."""
    counts = torch.bincount(tokens, minlength=VOCAB).double()
    support = probs > 0
    if counts[~support].sum() > 0:
        return 0.0
    expected = probs[support].double() * counts.sum()
    return float(chisquare(counts[support].numpy(), expected.numpy() * counts[support].sum().item() / expected.sum().item()).pvalue)


def _assert_matches_target(out, num_accepted, target) -> None:
    # position 0 is always emitted; position 1 is emitted (and must follow the target) when token 0 was accepted
    assert _p_value(out[:, 0], target[0]) > 1e-3
    second = out[num_accepted >= 1, 1]
    assert second.numel() > 2000 and _p_value(second, target[1]) > 1e-3


@pytest.mark.parametrize("filters", [dict(), dict(temperature=0.7, top_k=5), dict(temperature=1.3, top_p=0.8),
                                     dict(top_k=6, top_p=0.9)], ids=["plain", "top_k", "top_p", "both"])
def test_rejection_sampling_output_follows_target(filters):
    target, draft = _case(1, **filters)
    out, num_accepted = _run(target, draft)
    assert 0.1 < (num_accepted > 0).float().mean() < 0.9  # the test exercises both accept and reject paths
    _assert_matches_target(out, num_accepted, target)
    # bonus token after full acceptance follows target[K]
    full = out[num_accepted == K, K]
    assert full.numel() > 200 and _p_value(full, target[K]) > 1e-3


def test_one_hot_drafts_follow_target():
    target, draft = _case(2)
    out, num_accepted = _run(target, draft, one_hot=True)
    _assert_matches_target(out, num_accepted, target)


def test_broken_sampler_is_detected(monkeypatch):
    """Replacing the residual norm(max(0, target - draft)) by the target itself biases the output; the test sees it."""
    target, draft = _case(1)
    monkeypatch.setattr(verify, "residual_probs", lambda target_probs, draft_probs: target_probs)
    out, _ = _run(target, draft)
    assert _p_value(out[:, 0], target[0]) < 1e-6


def test_seeded_verifier_is_deterministic_and_seed_dependent():
    target, draft = _case(3)
    a, _ = _run(target, draft, seed=11)
    b, _ = _run(target, draft, seed=11)
    c, _ = _run(target, draft, seed=12)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_residual_falls_back_to_target_when_empty():
    probs = torch.tensor([[0.5, 0.5, 0.0]])
    assert torch.equal(verify.residual_probs(probs, probs), probs)
    assert torch.allclose(verify.residual_probs(probs, torch.tensor([[1.0, 0.0, 0.0]])), torch.tensor([[0.0, 1.0, 0.0]]))
