"""Request controls under speculation, against transformers as the oracle.

Greedy outputs with repetition / presence / frequency penalties, bad words, min_tokens and stop words equal
transformers' `generate` with its own processors (RepetitionPenaltyLogitsProcessor via repetition_penalty,
NoBadWordsLogitsProcessor via bad_words_ids, MinNewTokensLengthLogitsProcessor via min_new_tokens, a StoppingCriteria
for stop words) for every method and several k, alone and in one mixed continuous batch. transformers has no
presence/frequency penalty: `TrtllmPresenceFrequency` below writes TensorRT-LLM's definition (penaltyKernels.cu:
subtract once per seen token / per occurrence, prompt included, after temperature) as a transformers LogitsProcessor,
appended after transformers' own processors (transformers appends custom processors, so the order is TensorRT-LLM's).
transformers' repetition penalty runs before temperature and TensorRT-LLM's after it; a positive temperature keeps
the sign, so the two commute. Log-probs equal log_softmax of transformers' scores. A caller's draft
(draft_token_ids) leaves greedy output unchanged whether it is right, wrong or half right. At temperature > 0 the
joint distribution of the first tokens matches the processed target's for chains, trees and external drafts, and
a verifier that ignores the processors (or the draft prefix of a row's context) fails the same chi-square test.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter
from pathlib import Path

import pytest
import torch
from scipy.stats import chisquare

from trtspec.spec import step_phases
from trtspec.spec.engine import SpecEngine
from trtspec.spec.logits_process import LogitsControls, chain_paths, process_logits, tree_paths
from trtspec.spec.params import SamplingParams, SpecParams
from trtspec.spec.sampling import sample, scores_to_probs
from trtspec.spec.tree import TokenTree, rejection_walk
from trtspec.spec.verify import rejection_verify

PROMPTS = [[5, 9, 3, 7, 5, 9, 3, 2, 11], [4], [17, 30, 2, 8, 41, 8, 41, 8, 63, 12, 30, 2, 8]]
EOS = 1
# every control at once; the outputs of the random target repeat a lot ([..., 2, 56, 9, 17, 16, 2, 56, ...],
# [30, 30, ...]) so each of them changes the output. 17 is a second stop token, banned for the first 6 tokens.
CONTROLS = dict(repetition_penalty=1.3, presence_penalty=0.4, frequency_penalty=0.2, bad_words=((30,), (56, 9)),
                min_tokens=6, stop_token_ids=(17,), return_log_probs=True)
METHOD_KS = [(m, k) for m in ("draft_target", "ngram", "lookahead", "medusa") for k in (1, 3, 8)]


# ---------------------------------------------------------------------------------------------------------------
# oracle


class TrtllmPresenceFrequency:
    """TensorRT-LLM's presence and frequency penalties as a transformers LogitsProcessor: every token of input_ids
    (prompt + generated) counts; presence once per seen token, frequency once per occurrence."""

    def __init__(self, presence: float, frequency: float) -> None:
        self.presence, self.frequency = presence, frequency

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        counts = torch.zeros_like(scores).scatter_add_(1, input_ids, torch.ones_like(input_ids, dtype=scores.dtype))
        return scores - self.presence * (counts > 0).to(scores.dtype) - self.frequency * counts


class StopOnWords:
    """Stop when prompt + output ends with a stop word (TensorRT-LLM keeps it in the output, as transformers does)."""

    def __init__(self, words) -> None:
        self.words = [list(w) for w in words]

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs) -> torch.Tensor:
        ids = input_ids[0].tolist()
        return torch.tensor([any(ids[len(ids) - len(w):] == w for w in self.words)])


def hf_processors(sampling: SamplingParams, prompt_length: int):
    """transformers' processors for `sampling`'s controls (the oracle's definition of each row's distribution)."""
    from transformers import (
        LogitsProcessorList,
        MinNewTokensLengthLogitsProcessor,
        NoBadWordsLogitsProcessor,
        RepetitionPenaltyLogitsProcessor,
    )

    processors = [RepetitionPenaltyLogitsProcessor(sampling.repetition_penalty)]
    if sampling.bad_words:
        processors.append(NoBadWordsLogitsProcessor([list(w) for w in sampling.bad_words]))
    if sampling.min_tokens:
        processors.append(MinNewTokensLengthLogitsProcessor(prompt_length, sampling.min_tokens,
                                                            sorted({EOS, *sampling.stop_token_ids})))
    processors.append(TrtllmPresenceFrequency(sampling.presence_penalty, sampling.frequency_penalty))
    return LogitsProcessorList(processors)


def hf_generate(model, prompt: list[int], sampling: SamplingParams) -> tuple[list[int], list[float]]:
    """transformers' greedy generate with the same controls; returns tokens and log_softmax(scores)[token]."""
    from transformers import LogitsProcessorList, StoppingCriteriaList

    eos = sorted({EOS, *sampling.stop_token_ids})
    custom = [TrtllmPresenceFrequency(sampling.presence_penalty, sampling.frequency_penalty)]
    out = model.generate(
        torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
        max_new_tokens=sampling.max_new_tokens, do_sample=False, eos_token_id=eos, pad_token_id=EOS,
        repetition_penalty=sampling.repetition_penalty, bad_words_ids=[list(w) for w in sampling.bad_words] or None,
        min_new_tokens=sampling.min_tokens or None, logits_processor=LogitsProcessorList(custom),
        stopping_criteria=StoppingCriteriaList([StopOnWords(sampling.stop_words)] if sampling.stop_words else []),
        output_scores=True, return_dict_in_generate=True,
    )  # fmt: skip
    tokens = out.sequences[0, len(prompt):].tolist()
    log_probs = [float(torch.log_softmax(s[0].float(), -1)[t]) for s, t in zip(out.scores, tokens, strict=True)]
    return tokens, log_probs


# ---------------------------------------------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="module")
def medusa_heads(random_pair, tmp_path_factory) -> Path:
    """Untrained Medusa heads whose LM heads are the target's (plausible candidates, a real tree every step)."""
    from transformers import LlamaForCausalLM

    from trtspec.spec.medusa_heads import MedusaHeads, MedusaShape, save_medusa_hf

    target = LlamaForCausalLM.from_pretrained(random_pair[0])
    heads = MedusaHeads(MedusaShape(num_heads=2, num_layers=1, hidden_size=48, vocab_size=64))
    with torch.no_grad():
        for head in heads.heads:
            head[-1].weight.copy_(target.lm_head.weight)
    out = tmp_path_factory.mktemp("medusa") / "heads"
    save_medusa_hf(heads, out, base_model=str(random_pair[0]), dtype=torch.float32)
    return out


@pytest.fixture(scope="module")
def engine(random_pair, near_draft, medusa_heads):
    return SpecEngine.from_pretrained(random_pair[0], near_draft, medusa=medusa_heads, max_k=8)


@pytest.fixture(scope="module")
def reference(hf_target):
    sampling = SamplingParams(max_new_tokens=32, **CONTROLS)
    return [hf_generate(hf_target, p, sampling) for p in PROMPTS]


# ---------------------------------------------------------------------------------------------------------------
# greedy parity


def test_controls_change_the_output(engine, reference):
    plain = engine.generate(PROMPTS, SamplingParams(max_new_tokens=32), SpecParams("none", 0))
    for out, (tokens, _) in zip(plain, reference, strict=True):
        assert out.token_ids != tokens
    assert any(17 in tokens[6:] for tokens, _ in reference)  # a stop token after min_tokens ended a request
    assert all(30 not in tokens for tokens, _ in reference)


@pytest.mark.parametrize(("method", "k"), [("none", 0), *METHOD_KS])
def test_greedy_with_controls_equals_transformers(engine, reference, method, k):
    outs = engine.generate(PROMPTS, SamplingParams(max_new_tokens=32, **CONTROLS), SpecParams(method, k))
    for out, (tokens, log_probs) in zip(outs, reference, strict=True):
        assert out.token_ids == tokens, (method, k, out.prompt_token_ids)
        assert out.log_probs == pytest.approx(log_probs, abs=1e-4)
        assert out.cum_log_prob == pytest.approx(sum(log_probs), abs=1e-3)
    if k > 0:  # speculation ran: drafts were verified (and, for the model-based drafts, accepted)
        assert sum(o.stats.num_draft_tokens for o in outs) > 0
        assert method not in ("draft_target", "lookahead") or sum(o.stats.num_accepted_tokens for o in outs) > 0


def test_mixed_batch_with_different_controls_equals_transformers(engine, hf_target):
    """One continuous batch: every request has its own controls and method; each equals transformers alone."""
    samplings = [
        SamplingParams(max_new_tokens=24, **CONTROLS),
        SamplingParams(max_new_tokens=20, repetition_penalty=1.8),
        SamplingParams(max_new_tokens=28, bad_words=((2, 56), (60,)), return_log_probs=True),
        SamplingParams(max_new_tokens=16),
        SamplingParams(max_new_tokens=24, presence_penalty=1.0, stop_words=((17, 16),)),
        SamplingParams(max_new_tokens=24, frequency_penalty=0.7, min_tokens=3, stop_token_ids=(30,)),
    ]
    prompts = [PROMPTS[i % 3] for i in range(len(samplings))]
    specs = [SpecParams("draft_target", 5), SpecParams("ngram", 3), SpecParams("lookahead", 6),
             SpecParams("medusa", 8), SpecParams("none", 0), SpecParams("draft_target", 2)]
    outs = engine.generate(prompts, samplings, specs)
    for prompt, sampling, out in zip(prompts, samplings, outs, strict=True):
        assert out.token_ids == hf_generate(hf_target, prompt, sampling)[0], sampling
        assert (out.log_probs is not None) == sampling.return_log_probs


# ---------------------------------------------------------------------------------------------------------------
# stop words


@pytest.fixture(scope="module")
def self_draft(random_pair):
    """The target as its own draft: every draft token is accepted, so each step emits k + 1 tokens."""
    return SpecEngine.from_pretrained(random_pair[0], random_pair[0], max_k=8)


@pytest.mark.parametrize("k", [2, 4, 7])
def test_stop_word_inside_an_accepted_draft_cuts_there(self_draft, hf_target, k):
    plain = self_draft.generate([PROMPTS[0]], SamplingParams(max_new_tokens=32), SpecParams("none", 0))[0].token_ids
    for end in (3, 9, 12):  # stop words completing at different offsets of a (k + 1)-token step
        words = ((plain[end - 1], plain[end]), (99 % 64, 98 % 64, 97 % 64))
        sampling = SamplingParams(max_new_tokens=32, stop_words=words)
        expected = hf_generate(hf_target, PROMPTS[0], sampling)[0]
        out = self_draft.generate([PROMPTS[0]], sampling, SpecParams("draft_target", k))[0]
        assert out.token_ids == expected and out.finish_reason == "stop", (k, end)
        assert expected[-2:] == list(words[0])  # the stop word stays in the output, as in TensorRT-LLM
    assert len(expected) % (k + 1) != 0  # the last case was cut inside a step's accepted tokens


def test_stop_word_may_start_in_the_prompt(self_draft):
    plain = self_draft.generate([PROMPTS[1]], SamplingParams(max_new_tokens=8), SpecParams("none", 0))[0].token_ids
    word = (PROMPTS[1][-1], plain[0])  # last prompt token + first output token
    out = self_draft.generate([PROMPTS[1]], SamplingParams(max_new_tokens=8, stop_words=(word,)),
                              SpecParams("draft_target", 4))[0]
    assert out.token_ids == plain[:1] and out.finish_reason == "stop"


@pytest.mark.parametrize("method", ["draft_target", "ngram", "lookahead", "medusa"])
def test_stop_words_for_every_method_equal_transformers(engine, hf_target, method):
    sampling = SamplingParams(max_new_tokens=32, stop_words=((2, 56, 9), (41, 8, 63)), repetition_penalty=1.1)
    expected = [hf_generate(hf_target, prompt, sampling)[0] for prompt in PROMPTS]
    for k in (1, 5):
        outs = engine.generate(PROMPTS, sampling, SpecParams(method, k))
        assert [o.token_ids for o in outs] == expected, k


# ---------------------------------------------------------------------------------------------------------------
# external drafts (TensorRT-LLM draft_input_ids)


@pytest.mark.parametrize("sampling", [SamplingParams(max_new_tokens=12),
                                      SamplingParams(max_new_tokens=12, **CONTROLS)], ids=["plain", "controls"])
def test_external_draft_right_wrong_or_half_right_gives_plain_greedy(engine, sampling):
    prompt = PROMPTS[0]
    plain = engine.generate([prompt], sampling, SpecParams("none", 0))[0]
    wrong = [(t + 1) % 64 for t in plain.token_ids]
    drafts = {"right": plain.token_ids[:5], "wrong": wrong[:5], "half": plain.token_ids[:2] + wrong[2:5]}
    accepted = {"right": 5, "wrong": 0, "half": 2}
    for name, draft in drafts.items():
        for spec in (SpecParams("none", 0, draft_token_ids=draft), SpecParams("draft_target", 3, draft_token_ids=draft)):
            # like NVIDIA's speculative client: request_output_len = len(draft) + 1, and a longer one that continues
            for n in (len(draft) + 1, 12):
                s = dataclasses.replace(sampling, max_new_tokens=n)
                out = engine.generate([prompt], s, spec)[0]
                assert out.token_ids == plain.token_ids[:n], (name, spec.method, n)
                assert out.stats.accepted_length_histogram[accepted[name]] >= 1, name  # the first step's verdict
                if spec.method == "none":
                    assert out.stats.num_drafts == 1 and out.stats.num_accepted_tokens == accepted[name]
                if sampling.return_log_probs:
                    assert out.log_probs == pytest.approx(plain.log_probs[:n], abs=1e-5)


def test_external_draft_token_ids_are_validated(engine):
    from trtspec.errors import ConfigError

    with pytest.raises(ConfigError, match="draft_token_ids='token id 64'"):
        engine.generate([[3, 4]], SamplingParams(), SpecParams("none", 0, draft_token_ids=[5, 64]))
    with pytest.raises(ConfigError, match="bad_words='token id 70'"):
        engine.generate([[3, 4]], SamplingParams(bad_words=[[70]]), SpecParams("none", 0))


# ---------------------------------------------------------------------------------------------------------------
# log-probs: streaming and sampling


def test_streamed_log_probs_match_generate(engine):
    sampling = SamplingParams(max_new_tokens=20, temperature=0.8, seed=3, normalize_log_probs=False, **CONTROLS)
    spec = SpecParams("draft_target", 4)
    full = engine.generate([PROMPTS[2]], sampling, spec)[0]
    deltas = list(engine.stream(PROMPTS[2], sampling, spec))
    assert [t for d in deltas for t in d.token_ids] == full.token_ids
    assert [x for d in deltas for x in d.log_probs] == pytest.approx(full.log_probs)
    cums = [x for d in deltas for x in d.cum_log_probs]
    assert cums == pytest.approx(list(itertools.accumulate(full.log_probs)), abs=1e-4)
    assert deltas[-1].cum_log_prob == pytest.approx(full.cum_log_prob)


def test_sampled_log_probs_equal_transformers_scores(engine, hf_target):
    """At temperature > 0 under speculation, each token's log-prob is log_softmax of transformers' processed,
    temperature-scaled scores for the same prefix (teacher forcing)."""
    sampling = SamplingParams(max_new_tokens=16, temperature=0.7, seed=5, **CONTROLS)
    out = engine.generate([PROMPTS[0]], sampling, SpecParams("draft_target", 4))[0]
    ids = torch.tensor([PROMPTS[0] + out.token_ids])
    with torch.no_grad():
        logits = hf_target(ids).logits[0]  # [T, vocab]
    processors = hf_processors(sampling, len(PROMPTS[0]))
    expected = []
    for i, token in enumerate(out.token_ids):
        prefix = ids[:, : len(PROMPTS[0]) + i]
        scores = processors(prefix, logits[prefix.shape[1] - 1][None] / sampling.temperature)
        expected.append(float(torch.log_softmax(scores[0], -1)[token]))
    assert out.log_probs == pytest.approx(expected, abs=1e-4)


# ---------------------------------------------------------------------------------------------------------------
# exactness at temperature > 0: chi-square tests with mutations that must fail

# 6 tokens are generated so that a tree draft (Medusa, second step) gets 4 nodes; the first 3 are tested
SAMPLED = SamplingParams(temperature=1.0, top_k=3, max_new_tokens=6, ignore_eos=True, repetition_penalty=1.6,
                         presence_penalty=0.8, frequency_penalty=0.5, bad_words=((21, 6), (2,)))


def _joint(hf, prompt: list[int], sampling: SamplingParams, depth: int) -> dict[tuple[int, ...], float]:
    """Exact distribution of the first `depth` tokens: transformers' model + the oracle processors, then top-k."""
    processors = hf_processors(sampling, len(prompt))
    joint = {(): 1.0}
    for _ in range(depth):
        nxt = {}
        for prefix, mass in joint.items():
            ids = torch.tensor([prompt + list(prefix)])
            with torch.no_grad():
                scores = processors(ids, hf(ids).logits[:, -1].float() / sampling.temperature)
            probs = scores_to_probs(scores[0], greedy=False, top_k=sampling.top_k)
            for t in probs.nonzero().flatten().tolist():
                nxt[(*prefix, t)] = mass * float(probs[t])
        joint = nxt
    return joint


def _chisquare(observed, expected) -> float:
    """Goodness-of-fit p-value; expected counts rescaled to the observed total (float rounding)."""
    observed, expected = [float(x) for x in observed], [float(x) for x in expected]
    scale = sum(observed) / sum(expected)
    return float(chisquare(observed, [e * scale for e in expected]).pvalue)


def _p_value(counts: Counter, joint: dict) -> float:
    if set(counts) - set(joint):
        return 0.0
    cells = sorted(joint)
    return _chisquare([counts.get(c, 0) for c in cells], [joint[c] for c in cells])


# requests per chi-square test. 500 (was 1000; seeds 0..499, measured): the exact cases pass with p = 0.72 (plain),
# 0.14 (chain), 0.27 (tree), 0.94 (external), and the unprocessed-target mutation still yields tokens the processed
# target bans (p = 0, as at 1000)
N_SAMPLED = 500


@pytest.fixture(scope="module")
def sampled_joint(hf_target):
    return _joint(hf_target, PROMPTS[2], SAMPLED, 3)


@pytest.mark.parametrize("spec", [SpecParams("none", 0), SpecParams("draft_target", 2), SpecParams("medusa", 8), None],
                         ids=["plain", "chain", "tree", "external"])
@pytest.mark.slow
def test_sampling_with_controls_follows_the_processed_target(engine, sampled_joint, spec):
    if spec is None:  # a caller's draft: the most likely 3 tokens, so that some of it is accepted
        spec = SpecParams("none", 0, draft_token_ids=max(sampled_joint, key=sampled_joint.__getitem__))
    n = N_SAMPLED
    # plain decoding draws one token per step from the request's generator, so its first 3 tokens are the same
    # whether 3 or 6 are generated: 3 (half the steps, the same samples). A draft's length depends on the tokens
    # left, so the other cases keep 6.
    sampled = dataclasses.replace(SAMPLED, max_new_tokens=3) if spec.k == 0 and not spec.draft_token_ids else SAMPLED
    samplings = [dataclasses.replace(sampled, seed=i) for i in range(n)]
    outs = engine.generate([PROMPTS[2]] * n, samplings, spec)
    counts = Counter(tuple(o.token_ids[:3]) for o in outs)
    assert _p_value(counts, sampled_joint) > 1e-3, spec
    if spec.k or spec.draft_token_ids:  # accepted and rejected drafts both happened
        assert 0 < sum(o.stats.num_accepted_tokens for o in outs) < sum(o.stats.num_draft_tokens for o in outs)


@pytest.mark.slow
def test_verifying_against_unprocessed_targets_is_detected(engine, sampled_joint, monkeypatch):
    """Mutation: the engine verifies against logits / temperature, ignoring the processors."""
    def unprocessed(logits, controls, contexts, num_rows, drafts):  # [rows, vocab] logits / each row's temperature
        temperature = torch.tensor([c.temperature for c in controls]).repeat_interleave(torch.tensor(num_rows))
        return logits.float() / temperature[:, None]

    monkeypatch.setattr(step_phases, "process_batch", unprocessed)
    n = N_SAMPLED
    samplings = [dataclasses.replace(SAMPLED, seed=i) for i in range(n)]
    counts = Counter(tuple(o.token_ids[:3]) for o in engine.generate([PROMPTS[2]] * n, samplings,
                                                                      SpecParams("draft_target", 2)))
    assert _p_value(counts, sampled_joint) < 1e-6


# verifier level: 20k trials, a context-dependent target, chain and tree, and a mutation that drops the draft prefix

VOCAB, TRIALS = 8, 20_000
STRONG = LogitsControls(temperature=1.0, repetition_penalty=2.0, presence_penalty=1.0, frequency_penalty=0.5,
                        bad_words=((3, 5), (6, 6)), min_tokens=2, end_ids=(0,), num_prompt_tokens=2)
CONTEXT = [4, 6, 1]  # prompt [4, 6] + one output token: end id 0 is banned at the root only


def _target(raw_row: torch.Tensor, path: list[int]) -> torch.Tensor:
    """The processed target distribution after CONTEXT + path, computed alone (the definition)."""
    return torch.softmax(process_logits(raw_row[None], STRONG, CONTEXT + path)[0], -1)


def _conditional_p_value(first: torch.Tensor, second: torch.Tensor, expected_given: dict[int, torch.Tensor]) -> float:
    """Chi-square over (first, second) cells: second | first = x must follow expected_given[x]."""
    observed, expected = [], []
    for x, probs in expected_given.items():
        pick = second[first == x]
        if pick.numel() == 0:
            continue
        counts = torch.bincount(pick, minlength=VOCAB).double()
        if counts[probs == 0].sum() > 0:
            return 0.0
        observed += counts[probs > 0].tolist()
        expected += (probs[probs > 0].double() * pick.numel()).tolist()
    return _chisquare(observed, expected)


@pytest.mark.parametrize("mutate", [False, True], ids=["exact", "mutation-no-draft-prefix"])
def test_chain_rejection_sampling_with_context_dependent_target(mutate):
    gen = torch.Generator().manual_seed(0)
    raw = torch.randn(3, VOCAB, generator=gen) * 1.5  # logits at draft positions 0, 1, 2 (k = 2)
    draft_probs = torch.softmax(torch.randn(2, VOCAB, generator=gen) * 1.5, -1)  # [2, V]; independent of path
    draft_ids = sample(draft_probs.repeat(TRIALS, 1), gen).view(TRIALS, 2)  # [TRIALS, 2]
    paths = chain_paths(2)
    if mutate:
        paths = torch.zeros_like(paths)
    # the target rows of each distinct draft, processed with the draft's prefix on each row's path
    distinct, which = draft_ids.unique(dim=0, return_inverse=True)  # [D, 2], [TRIALS]
    targets = torch.stack([torch.softmax(process_logits(raw, STRONG, CONTEXT, d, paths), -1) for d in distinct])
    target_probs = targets[which]  # [TRIALS, 3, V]
    verdicts = rejection_verify(target_probs.reshape(-1, VOCAB), draft_probs.repeat(TRIALS, 1), draft_ids.reshape(-1),
                                [2] * TRIALS, torch.rand(TRIALS * 3, generator=gen))  # TRIALS chains of k = 2, ragged
    out = torch.tensor([v.token_ids + [-1] * (3 - len(v.token_ids)) for v in verdicts])  # [TRIALS, 3]
    num_accepted = torch.tensor([v.num_accepted for v in verdicts])  # [TRIALS]
    root = _target(raw[0], [])
    counts = torch.bincount(out[:, 0], minlength=VOCAB).double()
    p_first = _chisquare(counts[root > 0].tolist(), root[root > 0].tolist())
    accepted = num_accepted >= 1
    p_second = _conditional_p_value(out[accepted, 0], out[accepted, 1],
                                    {x: _target(raw[1], [x]) for x in range(VOCAB)})
    assert p_first > 1e-3
    assert (p_second < 1e-6) if mutate else (p_second > 1e-3)


@pytest.mark.parametrize("mutate", [False, True], ids=["exact", "mutation-no-draft-prefix"])
def test_tree_rejection_sampling_with_context_dependent_target(mutate):
    # root -> nodes 1 (token 3), 2 (token 6), 3 (token 2); node 1 -> node 4 (token 5); node 2 -> node 5 (token 6)
    parents, tokens = (-1, -1, -1, 0, 1), torch.tensor([3, 6, 2, 5, 6])
    tree = TokenTree.from_parents((-1, *(p + 1 for p in parents)))
    gen = torch.Generator().manual_seed(1)
    raw = torch.randn(len(tokens) + 1, VOCAB, generator=gen) * 1.5  # logits at [root + nodes]
    paths = torch.zeros(len(tokens) + 1, len(tokens), dtype=torch.bool) if mutate else tree_paths(parents)
    target_probs = torch.softmax(process_logits(raw, STRONG, CONTEXT, tokens, paths), -1)  # [N + 1, V]
    walk = rejection_walk(tree, tokens.expand(TRIALS, -1), None, target_probs.expand(TRIALS, -1, -1), gen)
    first = torch.where(walk.num_accepted > 0, tokens[(walk.accepted_nodes[:, 0] - 1).clamp(min=0)], walk.next_token_ids)
    root = _target(raw[0], [])
    counts = torch.bincount(first, minlength=VOCAB).double()
    assert _chisquare(counts[root > 0].tolist(), root[root > 0].tolist()) > 1e-3
    # second token given the accepted child: the child's row with the child on its path
    moved = walk.num_accepted >= 1
    child = walk.accepted_nodes[moved, 0]
    second = torch.where(walk.num_accepted[moved] >= 2, tokens[(walk.accepted_nodes[moved, 1] - 1).clamp(min=0)],
                         walk.next_token_ids[moved])
    expected = {int(tokens[n - 1]): _target(raw[n], [int(tokens[n - 1])]) for n in (1, 2, 3)}
    p = _conditional_p_value(tokens[child - 1], second, expected)
    assert (p < 1e-6) if mutate else (p > 1e-3)


def test_draft_model_shapes_its_drafts_with_the_same_processors(engine, monkeypatch):
    """Acceptance, not exactness: a draft model that applies the request's bad words and penalties to its own
    distributions is accepted more often than one that does not; the outputs are the same."""
    sampling = SamplingParams(max_new_tokens=32, **CONTROLS)
    informed = engine.generate(PROMPTS, sampling, SpecParams("draft_target", 4))
    proposer = engine.proposers["draft_model"]
    propose = type(proposer).propose
    monkeypatch.setattr(proposer, "propose",
                        lambda batch: propose(proposer, [dataclasses.replace(b, controls=None) for b in batch]))
    blind = engine.generate(PROMPTS, sampling, SpecParams("draft_target", 4))
    assert [o.token_ids for o in blind] == [o.token_ids for o in informed]
    assert sum(o.stats.num_accepted_tokens for o in informed) > sum(o.stats.num_accepted_tokens for o in blind)


@pytest.mark.parametrize("field", ["temperature", "top_p", "repetition_penalty", "presence_penalty",
                                   "frequency_penalty"])
@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_non_finite_sampling_values_are_refused_naming_the_field(field, value):
    from trtspec.errors import ConfigError
    from trtspec.spec.params import SamplingParams

    with pytest.raises(ConfigError) as info:
        SamplingParams(**{field: value}).validate()
    assert str(info.value).startswith(f"{field}=")
