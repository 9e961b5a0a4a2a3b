"""The logits-processor pipeline (spec/logits_process.py): TensorRT-LLM's definitions on hand-made cases, property
tests (banned tokens get probability 0, distributions sum to 1, penalties never favour seen tokens, one batched call
over a chain or a tree equals one call per row with that row's own context), log-probs, and the TensorRT-LLM
defaults for unset controls (params.trtllm_sampling_params)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from trtspec.errors import ConfigError
from trtspec.spec.logits_process import (
    LogitsControls,
    chain_paths,
    emitted_log_probs,
    ends_with,
    process_logits,
    tree_paths,
)
from trtspec.spec.params import SamplingParams, SpecParams, trtllm_sampling_params
from trtspec.spec.sampling import scores_to_probs

VOCAB = 12


def test_trtllm_penalty_definitions_by_hand():
    """Temperature first, then repetition (sign-aware), presence (once), frequency (per occurrence, prompt counts)."""
    logits = torch.tensor([[2.0, -2.0, 2.0, 1.0]])
    controls = LogitsControls(temperature=2.0, repetition_penalty=2.0, presence_penalty=0.5, frequency_penalty=0.25)
    # context: token 0 twice (prompt), token 1 once (output); tokens 2, 3 unseen
    scores = process_logits(logits, controls, [0, 0, 1])
    # token 0: 2 / 2 = 1 -> / 2 = 0.5 -> - 0.5 - 2 * 0.25 = -0.5; token 1: -1 -> * 2 = -2 -> - 0.5 - 0.25 = -2.75
    assert torch.allclose(scores, torch.tensor([[-0.5, -2.75, 1.0, 0.5]]))


def test_min_tokens_and_bad_words_by_hand():
    logits = torch.zeros(1, VOCAB)
    controls = LogitsControls(min_tokens=3, end_ids=(1, 7), bad_words=((4,), (2, 3, 5), (9, 6)), num_prompt_tokens=2)
    banned = process_logits(logits, controls, [8, 2, 3]).isinf()[0]  # output so far: [3] (1 token < 3)
    assert banned.nonzero().flatten().tolist() == [1, 4, 5, 7]  # end ids, the 1-token word, 5 after [2, 3]
    banned = process_logits(logits, controls, [8, 2, 3, 0, 9]).isinf()[0]  # 3 output tokens: end ids allowed again
    assert banned.nonzero().flatten().tolist() == [4, 6]


def test_rows_of_a_chain_and_a_tree_see_their_own_draft_prefix():
    controls = LogitsControls(min_tokens=2, end_ids=(1,), bad_words=((2, 3),), num_prompt_tokens=1)
    logits = torch.zeros(4, VOCAB)
    chain = process_logits(logits, controls, [0], torch.tensor([2, 5, 6]), chain_paths(3)).isinf()  # [4, V]
    assert chain[:, 1].tolist() == [True, True, False, False]  # row r has r output tokens
    assert chain[:, 3].tolist() == [False, True, False, False]  # only the row right after draft token 2
    # tree: node 0 = 2 under the root, node 1 = 7 under the root, node 2 = 9 under node 0
    tree = process_logits(logits, controls, [0], torch.tensor([2, 7, 9]), tree_paths((-1, -1, 0))).isinf()
    assert tree[:, 3].tolist() == [False, True, False, False]
    assert tree[:, 1].tolist() == [True, True, True, False]  # node 2 is at depth 2


def test_inactive_controls_are_the_fast_path():
    logits = torch.randn(3, VOCAB)
    assert torch.equal(process_logits(logits, LogitsControls(temperature=0.5), [1, 2]), logits / 0.5)
    out = process_logits(logits, LogitsControls(), [1, 2])
    assert torch.equal(out, logits) and not LogitsControls(min_tokens=4).active  # no end ids: nothing to ban
    # the caller's logits are never written (float32 logits at temperature 0 are not copied by .float())
    before = logits.clone()
    process_logits(logits, LogitsControls(bad_words=((3,),), min_tokens=5, end_ids=(1,)), [1, 2])
    assert torch.equal(logits, before)


@st.composite
def _case(draw):
    seq = st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=3)
    controls = LogitsControls(
        temperature=draw(st.sampled_from([0.0, 0.5, 1.0, 1.7])),
        repetition_penalty=draw(st.sampled_from([1.0, 0.8, 1.3, 2.5])),
        presence_penalty=draw(st.sampled_from([0.0, -0.5, 0.7])),
        frequency_penalty=draw(st.sampled_from([0.0, -0.2, 0.4])),
        min_tokens=draw(st.integers(0, 4)),
        end_ids=tuple(sorted(set(draw(st.lists(st.integers(0, VOCAB - 1), max_size=2))))),
        bad_words=tuple(tuple(w) for w in draw(st.lists(seq, max_size=3))),
        num_prompt_tokens=draw(st.integers(0, 2)),
    )
    context = draw(st.lists(st.integers(0, VOCAB - 1), min_size=2, max_size=8))
    num_draft = draw(st.integers(0, 4))
    draft = draw(st.lists(st.integers(0, VOCAB - 1), min_size=num_draft, max_size=num_draft))
    parents = [draw(st.integers(-1, i - 1)) for i in range(num_draft)]
    seed = draw(st.integers(0, 2**16))
    return controls, context, draft, parents, seed


def _row_contexts(context, draft, paths):
    return [context + [t for t, on in zip(draft, row, strict=True) if on] for row in paths.tolist()]


@settings(max_examples=150, deadline=None)
@given(_case(), st.booleans())
def test_one_batched_call_equals_one_call_per_row(case, tree):
    """Chain and tree rows see exactly their own context: the batched call equals per-row calls without a draft."""
    controls, context, draft, parents, seed = case
    paths = tree_paths(parents) if tree else chain_paths(len(draft))
    logits = torch.randn(len(draft) + 1, VOCAB, generator=torch.Generator().manual_seed(seed)) * 3
    batched = process_logits(logits, controls, context, torch.tensor(draft, dtype=torch.long), paths)
    for row, row_context in enumerate(_row_contexts(context, draft, paths)):
        alone = process_logits(logits[row : row + 1], controls, row_context)
        assert torch.allclose(batched[row : row + 1], alone, equal_nan=True), row


@settings(max_examples=150, deadline=None)
@given(_case(), st.integers(0, 5), st.sampled_from([1.0, 0.9, 0.5]))
def test_banned_tokens_have_probability_zero_and_distributions_sum_to_one(case, top_k, top_p):
    controls, context, draft, parents, seed = case
    paths = tree_paths(parents)
    logits = torch.randn(len(draft) + 1, VOCAB, generator=torch.Generator().manual_seed(seed)) * 3
    scores = process_logits(logits, controls, context, torch.tensor(draft, dtype=torch.long), paths)
    greedy = controls.temperature == 0
    for row, row_context in enumerate(_row_contexts(context, draft, paths)):
        banned = {w[-1] for w in controls.bad_words if ends_with(row_context, w[:-1])}
        if len(row_context) - controls.num_prompt_tokens < controls.min_tokens:
            banned |= set(controls.end_ids)
        if len(banned) == VOCAB:
            continue  # nothing left to sample: not a distribution
        probs = scores_to_probs(scores[row], greedy=greedy, top_k=top_k, top_p=top_p)
        assert (probs >= 0).all() and math.isclose(float(probs.sum()), 1.0, rel_tol=1e-5)
        assert all(float(probs[t]) == 0.0 for t in banned), (banned, probs)


@settings(max_examples=100, deadline=None)
@given(_case())
def test_penalties_never_favour_seen_tokens(case):
    """With repetition >= 1 and non-negative presence/frequency, a seen token's score only drops; others keep
    logits / temperature (bans aside)."""
    controls, context, _, _, seed = case
    controls = LogitsControls(temperature=controls.temperature, repetition_penalty=max(1.0, controls.repetition_penalty),
                              presence_penalty=abs(controls.presence_penalty),
                              frequency_penalty=abs(controls.frequency_penalty))
    logits = torch.randn(1, VOCAB, generator=torch.Generator().manual_seed(seed)) * 3
    plain = logits / controls.temperature if controls.temperature > 0 else logits
    scores = process_logits(logits, controls, context)
    seen = torch.zeros(VOCAB, dtype=torch.bool)
    seen[context] = True
    assert (scores[0, seen] <= plain[0, seen] + 1e-6).all()
    assert torch.equal(scores[0, ~seen], plain[0, ~seen])


def test_emitted_log_probs_raw_and_normalised():
    scores = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    log_p = torch.log_softmax(scores, -1)[0]
    reported, raw = emitted_log_probs(scores, [1], SamplingParams(temperature=1.0, return_log_probs=True))
    assert reported == raw and math.isclose(raw[0], float(log_p[1]), rel_tol=1e-6)
    # TensorRT-LLM's normalize_log_probs: renormalised over the top-k set; greedy is k = 1, top-p alone never
    normalised, raw2 = emitted_log_probs(scores, [1], SamplingParams(temperature=1.0, top_k=2, normalize_log_probs=True))
    assert raw2 == raw and math.isclose(normalised[0], float(log_p[1] - torch.logsumexp(log_p[:2], 0)), rel_tol=1e-6)
    assert emitted_log_probs(scores, [0], SamplingParams(top_k=1, temperature=1.0, normalize_log_probs=True))[0] == [0.0]
    top_p = SamplingParams(temperature=1.0, top_p=0.5, normalize_log_probs=True)
    assert emitted_log_probs(scores, [1], top_p)[0] == raw


@pytest.mark.parametrize(("given_", "expected"), [
    (dict(), dict(temperature=1.0, top_k=1, top_p=1.0, seed=0)),  # everything unset: greedy, seed 0
    (dict(top_k=5), dict(top_k=5, top_p=1.0)),  # k > 0, p unset -> p = 1
    (dict(top_p=0.9), dict(top_k=0, top_p=0.9)),  # p alone: top-p sampling
    (dict(top_p=0.0, top_k=0), dict(top_k=1, top_p=1.0)),  # p <= 0 counts as unset
    (dict(top_k=4, top_p=0.8, temperature=0.7, seed=3), dict(top_k=4, top_p=0.8, temperature=0.7, seed=3)),
    (dict(end_id=2), dict(stop_token_ids=(2,), ignore_eos=True)),  # end_id is the only stop token
    (dict(), dict(stop_token_ids=(), ignore_eos=True, min_tokens=0, repetition_penalty=1.0, normalize_log_probs=True)),
])
def test_trtllm_defaults_for_unset_controls(given_, expected):
    params = trtllm_sampling_params(max_new_tokens=8, **given_).validate()
    assert {name: getattr(params, name) for name in expected} == expected
    assert params.greedy == (params.top_k == 1)


@pytest.mark.parametrize(("params", "match"), [
    (SamplingParams(repetition_penalty=0.0), "repetition_penalty=0.0"),
    (SamplingParams(presence_penalty=float("nan")), "presence_penalty=nan"),
    (SamplingParams(frequency_penalty=float("inf")), "frequency_penalty=inf"),
    (SamplingParams(min_tokens=-1), "min_tokens=-1"),
    (SamplingParams(bad_words=[[3], []]), r"bad_words=\(\)"),
    (SamplingParams(stop_words=[[-2, 3]]), r"stop_words=\(-2, 3\)"),
])
def test_bad_controls_name_the_field(params, match):
    with pytest.raises(ConfigError, match=match):
        params.validate()


def test_bad_external_draft_names_the_field():
    with pytest.raises(ConfigError, match="draft_token_ids='9 tokens'.*max_k=8"):
        SpecParams("none", 0, draft_token_ids=range(9)).validate(max_k=8)
    assert SpecParams("none", 0, draft_token_ids=[4, 5]).draft_token_ids == (4, 5)
