"""The batched chain verifier: exact greedy cases, greedy equality with per-request verification on random ragged
batches (hypothesis), and chi-square tests that rejection sampling reproduces the target distribution.

The statistical tests verify one ragged batch of ~20k requests at once (fixed seeds), so they are fast and
deterministic: `rejection_verify` on equal chains with uniforms from one generator, and `verify_chains` on a batch
that mixes sampling parameters, draft lengths, one-hot and probability drafts and greedy requests, each request with
its own generator. Deliberately broken samplers (the residual replaced by the target; acceptance with probability
p(x) instead of min(1, p(x) / q(x))) must fail the same tests.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

from trtspec.spec import verify
from trtspec.spec.logits_process import LogitsControls, chain_paths, process_batch, process_logits
from trtspec.spec.sampling import logits_to_probs, rows_to_probs, sample, sample_inverse_cdf, scores_to_probs
from trtspec.spec.verify import rejection_verify, verify_chains

NUM_SAMPLES = 20_000
VOCAB = 8
K = 3


def _one_hot_rows(argmax: list[int], vocab: int = 8) -> torch.Tensor:
    return torch.nn.functional.one_hot(torch.tensor(argmax), vocab).float()  # [rows, vocab]


def test_greedy_longest_matching_prefix_then_target_token_in_a_ragged_batch():
    # request 0: k = 3, argmax 4 5 6 | 7; request 1: k = 0, argmax 2; request 2: k = 2, argmax 1 3 | 0
    target = _one_hot_rows([4, 5, 6, 7, 2, 1, 3, 0])  # [3 + 1 + 0 + 1 + 2 + 1, vocab]
    cases = {((4, 5, 6), (1, 0)): ([[4, 5, 6, 7], [2], [1, 3]], [3, 0, 1]),
             ((4, 0, 6), (0, 3)): ([[4, 5], [2], [1]], [1, 0, 0]),
             ((1, 5, 6), (1, 3)): ([[4], [2], [1, 3, 0]], [0, 0, 2])}
    for (first, third), (tokens, accepted) in cases.items():
        drafts = [torch.tensor(first), torch.zeros(0, dtype=torch.long), torch.tensor(third)]
        verdicts = verify_chains(target, drafts, [None, None, None], greedy=[True] * 3, top_k=[0] * 3, top_p=[1.0] * 3,
                                 generators=[None] * 3)
        assert [v.token_ids for v in verdicts] == tokens
        assert [v.num_accepted for v in verdicts] == accepted
        assert [v.num_draft_tokens for v in verdicts] == [3, 0, 2]


def _greedy_definition(target_logits: torch.Tensor, draft: list[int]) -> list[int]:
    """Greedy verification of one request by its definition, in plain Python: the longest draft prefix equal to the
    target's argmax (first index on ties), then the target's argmax."""
    argmax = target_logits.argmax(-1).tolist()
    out = []
    for j, token in enumerate(draft):
        if token != argmax[j]:
            break
        out.append(token)
    return out + [argmax[len(out)]]


@st.composite
def _ragged_greedy_batches(draw):
    """A ragged batch: per request k in 0..5, target logits with few distinct values (ties), and a draft that
    follows the argmax for a random prefix; mixed logits controls per request."""
    batch = draw(st.integers(1, 6))
    requests = []
    for _ in range(batch):
        k = draw(st.integers(0, 5))
        logits = torch.tensor(draw(st.lists(st.lists(st.integers(-3, 3), min_size=VOCAB, max_size=VOCAB),
                                            min_size=k + 1, max_size=k + 1)), dtype=torch.float32)  # [k + 1, V]
        follow = draw(st.integers(0, k))
        argmax = logits.argmax(-1).tolist()
        draft = argmax[:follow] + draw(st.lists(st.integers(0, VOCAB - 1), min_size=k - follow, max_size=k - follow))
        controls = LogitsControls(temperature=draw(st.sampled_from([0.0, 0.5])),
                                  repetition_penalty=draw(st.sampled_from([1.0, 1.5])),
                                  bad_words=draw(st.sampled_from([(), ((3,),), ((1, 2),)])))
        context = draw(st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=6))
        requests.append((logits, torch.tensor(draft, dtype=torch.long), controls, context))
    return requests


@settings(max_examples=150, deadline=None)
@given(_ragged_greedy_batches())
def test_batched_greedy_verification_equals_per_request_verification(requests):
    """Processing + verification of a whole ragged batch at once = each request alone = the greedy definition."""
    logits = torch.cat([r[0] for r in requests])  # [total_draft + batch, V]
    num_rows = [r[0].shape[0] for r in requests]
    drafts = [(r[1], chain_paths(r[1].numel())) for r in requests]
    scores = process_batch(logits, [r[2] for r in requests], [r[3] for r in requests], num_rows, drafts)
    alone = [process_logits(r[0], r[2], r[3], r[1], chain_paths(r[1].numel())) for r in requests]
    assert torch.equal(scores, torch.cat(alone))
    n = len(requests)
    batched = verify_chains(scores, [r[1] for r in requests], [None] * n, greedy=[True] * n, top_k=[0] * n,
                            top_p=[1.0] * n, generators=[None] * n)
    for request, request_scores, verdict in zip(requests, alone, batched, strict=True):
        single = verify_chains(request_scores, [request[1]], [None], greedy=[True], top_k=[0], top_p=[1.0],
                               generators=[None])[0]
        assert verdict == single
        assert verdict.token_ids == _greedy_definition(request_scores, request[1].tolist())


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


def _filtered(row: torch.Tensor, greedy: bool, top_k: int, top_p: float) -> torch.Tensor:
    """The definition, one row with plain sorting: one-hot argmax; else keep the top_k largest scores (ties with the
    k-th stay), then the smallest most likely set whose mass reaches top_p (tied scores in ascending token id), and
    softmax. [vocab] -> [vocab]."""
    if greedy:
        return torch.nn.functional.one_hot(row.argmax(), row.numel()).float()
    keep = torch.ones_like(row, dtype=torch.bool)
    if 0 < top_k < row.numel():
        keep &= row >= row.sort(descending=True).values[top_k - 1]
    masked = row.masked_fill(~keep, float("-inf"))
    probs = masked.softmax(-1)
    before = 0.0
    for token in masked.sort(descending=True, stable=True).indices.tolist():  # ties: the lower token id first
        if before >= top_p:
            keep[token] = False
        before += float(probs[token])
    return row.masked_fill(~keep, float("-inf")).softmax(-1)


def test_rows_to_probs_applies_each_rows_own_parameters():
    gen = torch.Generator().manual_seed(0)
    scores = torch.randn(40, 50, generator=gen) * 3  # [rows, vocab]
    scores[:, ::9] = scores[:, :1]  # ties
    greedy = torch.rand(40, generator=gen) < 0.2
    top_k = torch.randint(0, 12, (40,), generator=gen)
    top_p = torch.where(torch.rand(40, generator=gen) < 0.5, 1.0, torch.rand(40, generator=gen) * 0.7 + 0.2)
    probs = rows_to_probs(scores, greedy=greedy, top_k=top_k, top_p=top_p)  # [rows, vocab]
    for row in range(40):
        expected = _filtered(scores[row], bool(greedy[row]), int(top_k[row]), float(top_p[row]))
        assert torch.allclose(probs[row], expected, atol=1e-6), row
        single = scores_to_probs(scores[row], greedy=bool(greedy[row]), top_k=int(top_k[row]), top_p=float(top_p[row]))
        assert torch.allclose(single, expected, atol=1e-6), row


def _tie_row() -> torch.Tensor:
    """[50] one token at 3.0 (id 1), five tied at 2.0 (ids 3, 7, 11, 20, 30), the rest at -5."""
    row = torch.full((50,), -5.0)
    row[[3, 7, 11, 20, 30]] = 2.0
    row[1] = 3.0
    return row


def test_top_p_keeps_tied_tokens_by_id_whatever_the_neighbours():
    """top_k=6, top_p=0.5 keeps the top token and two of the five tied ones, the lowest ids: alone, beside a
    top-p-only row (the full-sort path) and beside a larger top-k (the top-k slice path)."""
    row = _tie_row()[None]  # [1, 50]

    def kept(rows, top_k, top_p):
        n = len(top_k)
        probs = rows_to_probs(rows.expand(n, -1), greedy=torch.zeros(n, dtype=torch.bool),
                              top_k=torch.tensor(top_k), top_p=torch.tensor(top_p))  # [n, 50]
        return (probs[0] > 0).nonzero()[:, 0].tolist()

    assert kept(row, [6], [0.5]) == [1, 3, 7]
    assert kept(row, [6, 0], [0.5, 0.5]) == [1, 3, 7]
    assert kept(row, [6, 40], [0.5, 1.0]) == [1, 3, 7]
    assert (scores_to_probs(row[0], greedy=False, top_k=6, top_p=0.5) > 0).nonzero()[:, 0].tolist() == [1, 3, 7]


@st.composite
def _tied_rows(draw):
    """A row and its filters, and 1-4 neighbours with theirs: integer scores in a small range (many ties)."""
    def one():
        scores = draw(st.lists(st.integers(-3, 3), min_size=24, max_size=24))
        return (scores, draw(st.sampled_from([0, 0, 1, 3, 6, 12, 30])),
                draw(st.sampled_from([1.0, 0.3, 0.5, 0.75, 0.9])), draw(st.sampled_from([False, False, False, True])))
    return one(), [one() for _ in range(draw(st.integers(1, 4)))], draw(st.integers(0, 4))


@settings(max_examples=200, deadline=None)
@given(_tied_rows())
def test_a_rows_filtered_distribution_does_not_depend_on_its_neighbours(case):
    """The same row with the same filters gets bit-identical probabilities (and so the same kept set) alone and at
    any position beside any other rows, and they are the definition's."""
    (scores, top_k, top_p, greedy), neighbours, at = case
    at = min(at, len(neighbours))
    rows = neighbours[:at] + [(scores, top_k, top_p, greedy)] + neighbours[at:]

    def probs(batch):
        return rows_to_probs(torch.tensor([r[0] for r in batch], dtype=torch.float32),
                             greedy=torch.tensor([r[3] for r in batch]), top_k=torch.tensor([r[1] for r in batch]),
                             top_p=torch.tensor([r[2] for r in batch]))  # [rows, 24]

    alone = probs(rows[at:at + 1])[0]
    assert torch.equal(probs(rows)[at], alone)
    assert torch.equal(alone > 0, _filtered(torch.tensor(scores, dtype=torch.float32), greedy, top_k, top_p) > 0)


def test_a_sampled_token_with_tied_scores_does_not_depend_on_its_neighbours():
    """k = 0 (a plain step) through verify_chains with a fixed seed: the tie row draws the same token alone and
    beside a top-p-only request, for every seed; the draws are the kept tokens, not always the same one."""
    row = _tie_row()
    empty = torch.zeros(0, dtype=torch.long)
    tokens = set()
    for seed in range(200):
        alone = verify_chains(row[None], [empty], [None], greedy=[False], top_k=[6], top_p=[0.5],
                              generators=[torch.Generator().manual_seed(seed)])[0]
        beside = verify_chains(torch.stack([row, row]), [empty, empty], [None, None], greedy=[False, False],
                               top_k=[6, 0], top_p=[0.5, 0.9],
                               generators=[torch.Generator().manual_seed(seed), torch.Generator().manual_seed(99)])[0]
        assert beside == alone, seed
        tokens.update(alone.token_ids)
    assert tokens == {1, 3, 7}


def test_inverse_cdf_sampling_follows_the_distribution_and_never_picks_zero_mass():
    probs = torch.tensor([0.0, 0.5, 0.0, 0.3, 0.2, 0.0])
    gen = torch.Generator().manual_seed(4)
    tokens = sample_inverse_cdf(probs.expand(NUM_SAMPLES, -1), torch.rand(NUM_SAMPLES, generator=gen))
    assert _p_value(tokens, probs, vocab=6) > 1e-3
    edges = sample_inverse_cdf(probs.expand(2, -1), torch.tensor([0.0, 1.0 - 2**-24]))
    assert edges.tolist() == [1, 4]


def _case(seed: int, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, k: int = K):
    """Fixed target [k+1, V] and draft [k, V] distributions: related, but different enough for frequent rejections."""
    gen = torch.Generator().manual_seed(seed)
    target_logits = torch.randn(k + 1, VOCAB, generator=gen) * 1.5  # [k + 1, V]
    draft_logits = target_logits[:k] + torch.randn(k, VOCAB, generator=gen) * 1.5  # [k, V]
    target = logits_to_probs(target_logits, temperature, top_k, top_p)
    draft = logits_to_probs(draft_logits, temperature, top_k, top_p)
    return target, draft


def _run(target, draft, *, one_hot: bool = False, seed: int = 0):
    """Draft tokens sampled from `draft` (or uniformly, for one-hot drafts), then NUM_SAMPLES chains verified in one
    ragged batch (uniforms from one generator)."""
    gen = torch.Generator().manual_seed(seed)
    proposal = torch.full_like(draft, 1 / VOCAB) if one_hot else draft  # [K, V]
    draft_ids = sample(proposal.repeat(NUM_SAMPLES, 1), gen)  # [N * K]
    draft_probs = None if one_hot else draft.repeat(NUM_SAMPLES, 1)  # [N * K, V]
    uniforms = torch.rand(NUM_SAMPLES * (K + 1), generator=gen)  # [N * (K + 1)]
    verdicts = rejection_verify(target.repeat(NUM_SAMPLES, 1), draft_probs, draft_ids, [K] * NUM_SAMPLES, uniforms)
    return padded(verdicts, K)


def padded(verdicts, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Verdicts of chains of at most k drafts -> (emitted tokens [n, k + 1] padded with -1, num_accepted [n])."""
    out = torch.tensor([v.token_ids + [-1] * (k + 1 - len(v.token_ids)) for v in verdicts])  # [n, k + 1]
    return out, torch.tensor([v.num_accepted for v in verdicts])  # [n]


def _p_value(tokens: torch.Tensor, probs: torch.Tensor, vocab: int = VOCAB) -> float:
    """Chi-square goodness of fit of `tokens` to `probs` over the support (tokens off the support fail hard)."""
    counts = torch.bincount(tokens, minlength=vocab).double()
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


# A mixed batch: request r is of kind r % 4, each kind with its own sampling parameters and draft length.
MIXED_KINDS = {
    "t1-k3-probs": dict(seed=1, k=3, one_hot=False, filters=dict()),
    "t0.7-top_k5-k1-one_hot": dict(seed=2, k=1, one_hot=True, filters=dict(temperature=0.7, top_k=5)),
    "t1.3-top_p0.8-k0": dict(seed=3, k=0, one_hot=False, filters=dict(temperature=1.3, top_p=0.8)),
    "greedy-k2": dict(seed=5, k=2, one_hot=False, filters=dict(temperature=0.0)),
}
MIXED_PER_KIND = 5_000


def _run_mixed(seed: int = 0):
    """One verify_chains call over 4 x MIXED_PER_KIND requests interleaved by kind, each with its own generator.
    Returns per kind (target [k + 1, V], draft tokens [n, k], verdict tokens padded [n, k + 1], num_accepted [n])."""
    cases = {name: _case(kind["seed"], k=kind["k"], **kind["filters"]) for name, kind in MIXED_KINDS.items()}
    gen = torch.Generator().manual_seed(seed)
    targets, drafts, probs, greedy, generators, names = [], [], [], [], [], []
    for r in range(len(MIXED_KINDS) * MIXED_PER_KIND):
        name = list(MIXED_KINDS)[r % len(MIXED_KINDS)]
        kind, (target, draft) = MIXED_KINDS[name], cases[name]
        proposal = torch.full_like(draft, 1 / VOCAB) if kind["one_hot"] else draft  # [k, V]
        drafts.append(sample(proposal, gen) if kind["k"] else torch.zeros(0, dtype=torch.long))
        probs.append(None if kind["one_hot"] else draft)
        targets.append(target)
        greedy.append(kind["filters"].get("temperature", 1.0) == 0.0)
        generators.append(torch.Generator().manual_seed(seed * 1_000_003 + r))
        names.append(name)
    n = len(drafts)
    verdicts = verify_chains(torch.cat(targets).log(), drafts, probs, greedy=greedy, top_k=[0] * n, top_p=[1.0] * n,
                             generators=generators)  # the filters are in the targets already
    result = {}
    for name, kind in MIXED_KINDS.items():
        picked = [i for i, n in enumerate(names) if n == name]
        out, num_accepted = padded([verdicts[i] for i in picked], kind["k"])  # [n, k + 1], [n]
        result[name] = (cases[name][0], torch.stack([drafts[i] for i in picked]), out, num_accepted)
    return result


def _assert_mixed_batch_follows_targets(result) -> None:
    for name, (target, draft_ids, out, num_accepted) in result.items():
        if name.startswith("greedy"):  # deterministic: the longest prefix equal to the argmax, then the argmax
            for draft, row, n in zip(draft_ids.tolist(), out.tolist(), num_accepted.tolist(), strict=True):
                assert row[: n + 1] == _greedy_definition(target, draft)
            continue
        assert _p_value(out[:, 0], target[0]) > 1e-3, name
        if target.shape[0] > 1:
            second = out[num_accepted >= 1, 1]
            assert second.numel() > 500 and _p_value(second, target[1]) > 1e-3, name


def test_mixed_batch_with_per_request_generators_follows_each_target():
    _assert_mixed_batch_follows_targets(_run_mixed())


@pytest.mark.parametrize("mutation", ["residual-is-target", "accept-with-target-prob"])
def test_broken_sampler_is_detected(monkeypatch, mutation):
    """Lossy rules the chi-square must catch: the residual norm(max(0, target - draft)) replaced by the target, or
    acceptance with probability target(x) instead of min(1, target(x) / draft(x)). Both on the plain equal-chain
    batch and on the mixed batch."""
    if mutation == "residual-is-target":
        monkeypatch.setattr(verify, "residual_probs", lambda target_probs, draft_probs: target_probs)
    else:
        monkeypatch.setattr(verify, "accepts", lambda uniform, target_at_draft, _draft_at_draft: uniform < target_at_draft)
    target, draft = _case(1)
    out, _ = _run(target, draft)
    assert _p_value(out[:, 0], target[0]) < 1e-6
    with pytest.raises(AssertionError):
        _assert_mixed_batch_follows_targets(_run_mixed())


def test_seeded_verifier_is_deterministic_and_seed_dependent():
    target, draft = _case(3)
    a, _ = _run(target, draft, seed=11)
    b, _ = _run(target, draft, seed=11)
    c, _ = _run(target, draft, seed=12)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_a_requests_draws_do_not_depend_on_the_rest_of_the_batch():
    """Randomness is per request: a request verified alone and beside others (before and after it in the batch)
    emits the same tokens, given the same generator state."""
    target, draft = _case(6)
    other_target, other_draft = _case(7, k=1)
    for seed in range(20):
        draft_ids = sample(draft, torch.Generator().manual_seed(seed))  # [K]
        alone = verify_chains(target.log(), [draft_ids], [draft], greedy=[False], top_k=[0], top_p=[1.0],
                              generators=[torch.Generator().manual_seed(seed)])[0]
        other_ids = sample(other_draft, torch.Generator().manual_seed(seed + 100))  # [1]
        beside = verify_chains(torch.cat([other_target, target, other_target]).log(), [other_ids, draft_ids, other_ids],
                               [other_draft, draft, None], greedy=[False, False, True], top_k=[3, 0, 0],
                               top_p=[0.9, 1.0, 1.0],
                               generators=[torch.Generator().manual_seed(seed + 1),
                                           torch.Generator().manual_seed(seed), None])[1]
        assert beside == alone


def test_residual_falls_back_to_target_when_empty():
    probs = torch.tensor([[0.5, 0.5, 0.0]])
    assert torch.equal(verify.residual_probs(probs, probs), probs)
    assert torch.allclose(verify.residual_probs(probs, torch.tensor([[1.0, 0.0, 0.0]])), torch.tensor([[0.0, 1.0, 0.0]]))


def test_requests_without_draft_tokens_sample_their_target_row():
    """k = 0 for every request (plain decoding steps), with and without an empty draft distribution."""
    target = torch.tensor([[0.0, 0.25, 0.75, 0.0], [1.0, 0.0, 0.0, 0.0]])  # [2 requests x 1 row, vocab]
    empty = torch.zeros(0, dtype=torch.long)
    verdicts = verify_chains(target.log(), [empty, empty], [torch.zeros(0, 4), None], greedy=[False, True],
                             top_k=[0, 0], top_p=[1.0, 1.0],
                             generators=[torch.Generator().manual_seed(0), None])
    assert verdicts[0].token_ids[0] in (1, 2) and verdicts[1].token_ids == [0]
    assert [v.num_accepted for v in verdicts] == [0, 0] and [v.num_draft_tokens for v in verdicts] == [0, 0]
