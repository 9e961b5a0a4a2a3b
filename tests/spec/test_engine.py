"""SpecEngine: greedy speculation == the target's own greedy decoding (transformers) for every method and k,
batching does not change results, sampling is seeded and exact end to end, and bad input fails before any output."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import torch
from scipy.stats import chisquare

from tests.conftest import make_random_llama
from tests.spec.conftest import hf_greedy
from trtspec.errors import ConfigError, IncompatibleModelsError, UnknownMethodError, UsageError
from trtspec.methods import resolve
from trtspec.models import PROMPTS
from trtspec.spec.engine import SpecEngine
from trtspec.spec.params import SamplingParams, SpecParams
from trtspec.spec.proposers import runnable_methods
from trtspec.spec.sampling import logits_to_probs
from trtspec.sweep.prompts import shipped_suites

PROMPTS_RANDOM = [[5, 9, 3, 7, 5, 9, 3, 2, 11], [4], [17, 30, 2, 8, 41, 8, 41, 8, 63, 12, 30, 2, 8]]
# methods this module's engines can run (target + draft); Medusa heads and EAGLE drafters: tests/medusa, tests/eagle
SPEC_METHODS = [m for m in runnable_methods()
                if m != "none" and not resolve(m).needs_medusa_heads and not resolve(m).needs_eagle_drafter]


@pytest.fixture(scope="module")
def engine(random_pair, near_draft):
    return SpecEngine.from_pretrained(random_pair[0], near_draft, max_k=8)


@pytest.fixture(scope="module")
def reference(hf_target):
    return [hf_greedy(hf_target, p, 32) for p in PROMPTS_RANDOM]


@pytest.mark.parametrize("method", SPEC_METHODS)
def test_greedy_equals_transformers_for_every_k(engine, reference, method):
    cases = [(k, i) for k in range(1, 9) for i in range(len(PROMPTS_RANDOM))]  # every k in one continuous batch
    outs = engine.generate([PROMPTS_RANDOM[i] for _, i in cases], SamplingParams(max_new_tokens=32),
                           [SpecParams(method, k) for k, _ in cases])
    for (k, i), out in zip(cases, outs, strict=True):
        assert out.token_ids == reference[i], (method, k, out.prompt_token_ids)
    assert sum(o.stats.num_accepted_tokens for o in outs) > 0  # the accept path was exercised, not only rejections


def test_plain_decoding_and_far_draft_equal_transformers(random_pair, reference):
    engine = SpecEngine.from_pretrained(*random_pair)  # random draft: almost everything is rejected
    for spec in [SpecParams("none", 0), SpecParams("draft_target", 1), SpecParams("draft_target", 7)]:
        outs = engine.generate(PROMPTS_RANDOM, SamplingParams(max_new_tokens=32), spec)
        assert [o.token_ids for o in outs] == reference
        assert all(o.stats.num_target_forwards == len(o.token_ids) for o in outs if spec.k == 0)


def test_target_as_its_own_draft_accepts_everything(random_pair):
    engine = SpecEngine.from_pretrained(random_pair[0], random_pair[0])
    out = engine.generate([PROMPTS_RANDOM[0]], SamplingParams(max_new_tokens=21, ignore_eos=True),
                          SpecParams("draft_target", 4))[0]
    stats = out.stats
    assert stats.num_accepted_tokens == stats.num_draft_tokens and stats.acceptance_rate == 1.0
    assert stats.num_target_forwards == 5 and stats.num_emitted_tokens == 21  # 4 x (4 + bonus) + 1
    assert stats.accepted_length_histogram[4] == 4 and stats.num_accepted_tokens_per_pos == [4, 4, 4, 4]


@pytest.mark.slow
def test_embedded_pair_greedy_equals_transformers_on_held_out_prompts(embedded_pair):
    from transformers import LlamaForCausalLM

    hf = LlamaForCausalLM.from_pretrained(embedded_pair[0], dtype=torch.float32).eval()
    engine = SpecEngine.from_pretrained(*embedded_pair, max_k=8)
    prompts = []
    for suite in shipped_suites():  # code, prose, grounded, repetitive
        with open(PROMPTS / f"{suite}.jsonl") as f:
            prompts.append(engine.encode(json.loads(f.readline())["prompt"])[-64:])
    reference = [hf_greedy(hf, p, 24) for p in prompts]
    for method in SPEC_METHODS:  # k 1-8 in one continuous batch, each suite's prompt at two k; each equals transformers
        cases = [(k, k % len(prompts)) for k in range(1, 9)]
        outs = engine.generate([prompts[i] for _, i in cases], SamplingParams(max_new_tokens=24),
                               [SpecParams(method, k) for k, _ in cases])
        for (k, i), out in zip(cases, outs, strict=True):
            assert out.token_ids == reference[i], (method, k, i)


def test_mixed_batch_equals_each_request_alone(engine, reference):
    specs = [SpecParams("none", 0), SpecParams("ngram", 3), SpecParams("draft_target", 5)]
    lengths = [32, 12, 20]
    samplings = [SamplingParams(max_new_tokens=n) for n in lengths]
    together = engine.generate(PROMPTS_RANDOM, samplings, specs)
    for prompt, sampling, spec, out in zip(PROMPTS_RANDOM, samplings, specs, together, strict=True):
        alone = engine.generate([prompt], sampling, spec)[0]
        assert out.token_ids == alone.token_ids
    assert [o.token_ids for o in together] == [ref[:n] for ref, n in zip(reference, lengths, strict=True)]


def test_seeds(engine):
    def run(seed, spec=SpecParams("draft_target", 3), **others):
        sampling = SamplingParams(temperature=1.0, top_p=0.95, seed=seed, max_new_tokens=24, ignore_eos=True)
        return engine.generate([PROMPTS_RANDOM[0], *others.get("extra", [])], sampling, spec)[0].token_ids

    assert run(1) == run(1)
    assert run(1) != run(2)
    assert run(5, SpecParams("ngram", 4)) == run(5, SpecParams("ngram", 4))
    assert run(1) == run(1, extra=[[3, 4, 5], [9] * 7])  # batch neighbours do not change a seeded request


@pytest.mark.slow
def test_sampling_end_to_end_follows_target(engine, random_pair):
    """1000 requests in one batch: the (first, second) token pairs follow the target's filtered joint distribution."""
    from transformers import LlamaForCausalLM

    hf = LlamaForCausalLM.from_pretrained(random_pair[0]).eval()
    prompt, temperature, top_k = PROMPTS_RANDOM[2], 1.0, 3
    with torch.no_grad():
        first = logits_to_probs(hf(torch.tensor([prompt])).logits[0, -1], temperature, top_k)  # [vocab]
        joint = {}
        for t1 in first.nonzero().flatten().tolist():
            second = logits_to_probs(hf(torch.tensor([prompt + [t1]])).logits[0, -1], temperature, top_k)
            joint.update({(t1, t2): float(first[t1] * second[t2]) for t2 in second.nonzero().flatten().tolist()})
    for spec in (SpecParams("draft_target", 2), SpecParams("ngram", 2)):
        samplings = [SamplingParams(temperature=temperature, top_k=top_k, seed=i, max_new_tokens=2, ignore_eos=True)
                     for i in range(1000)]
        outs = engine.generate([prompt] * 1000, samplings, spec)
        counts = Counter(tuple(o.token_ids) for o in outs)
        assert set(counts) <= set(joint)
        cells = sorted(joint)
        observed = [counts.get(c, 0) for c in cells]
        expected = [joint[c] * 1000 for c in cells]
        assert chisquare(observed, [e * sum(observed) / sum(expected) for e in expected]).pvalue > 1e-3, spec


def test_stream_matches_generate_and_stops(engine):
    sampling = SamplingParams(max_new_tokens=16)
    spec = SpecParams("draft_target", 4)
    full = engine.generate([PROMPTS_RANDOM[0]], sampling, spec)[0]
    deltas = list(engine.stream(PROMPTS_RANDOM[0], sampling, spec))
    assert [t for d in deltas for t in d.token_ids] == full.token_ids
    assert deltas[-1].finished and deltas[-1].stats is not None and all(d.stats is None for d in deltas[:-1])
    stop = full.token_ids[5]
    out = engine.generate([PROMPTS_RANDOM[0]], SamplingParams(max_new_tokens=16, stop_token_ids=(stop,)), spec)[0]
    assert out.finish_reason == "stop" and out.token_ids == full.token_ids[: full.token_ids.index(stop) + 1]
    assert full.finish_reason == "length" and len(full.token_ids) == 16


def test_abort_frees_slots_and_step_api(engine):
    free_before = engine.cache.num_free_slots
    rid = engine.add_request(PROMPTS_RANDOM[0], SamplingParams(max_new_tokens=50), SpecParams("draft_target", 2))
    deltas = engine.step()
    assert [d.request_id for d in deltas] == [rid] and engine.has_unfinished()
    engine.abort(rid)
    assert not engine.has_unfinished() and engine.cache.num_free_slots == free_before
    assert not engine.proposers["draft_model"].states


@pytest.mark.parametrize(("sampling", "spec", "prompt", "match"), [
    (SamplingParams(temperature=-0.5), None, [1, 2], "temperature=-0.5"),
    (SamplingParams(top_p=0.0), None, [1, 2], "top_p=0.0"),
    (SamplingParams(top_p=1.5), None, [1, 2], "top_p=1.5"),
    (SamplingParams(top_k=-1), None, [1, 2], "top_k=-1"),
    (None, SpecParams("ngram", -1), [1, 2], "k=-1"),
    (None, SpecParams("ngram", 9), [1, 2], r"k=9: must be in \[0, 8\]"),
    (None, SpecParams("medusa", 2), [1, 2], "method='medusa'"),
    (None, None, [], "prompt=.*empty"),
    (None, None, [1] * 300, "prompt='300 tokens'.*context of 256"),
    (None, None, [1, 99], "token id 99"),
])
def test_bad_input_fails_before_any_output(engine, sampling, spec, prompt, match):
    with pytest.raises(ConfigError, match=match):
        engine.generate([[3, 4], prompt], sampling, spec)
    assert not engine.has_unfinished()  # the valid first prompt was not started either


def test_bad_engine_setup(random_pair, tmp_path):
    plain = SpecEngine.from_pretrained(random_pair[0])
    with pytest.raises(ConfigError, match="needs a draft model"):
        plain.generate([[1, 2]], spec=SpecParams("draft_target", 2))
    with pytest.raises(UnknownMethodError):
        plain.generate([[1, 2]], spec=SpecParams("beam", 2))
    with pytest.raises(UsageError, match="no tokenizer"):
        plain.generate(["text"], spec=SpecParams("none", 0))
    other = make_random_llama(tmp_path / "vocab80", vocab=80)
    with pytest.raises(IncompatibleModelsError, match="64.*80"):
        SpecEngine.from_pretrained(random_pair[0], other)


def test_tree_layout_masks_and_positions():
    from trtspec.spec.proposers import Draft
    from trtspec.spec.tree import tree_layout

    ids = torch.tensor([7, 8, 9])
    chain, tree = Draft(ids), Draft(ids, parents=(-1, 0, 0))  # tree: node 0, then two children of node 0
    positions, mask = tree_layout([chain, tree], num_pending=[2, 1], bases=[10, 4], width=5)
    assert torch.equal(mask[0], torch.ones(5, 5, dtype=torch.bool).tril())
    assert positions[0].tolist() == [10, 11, 12, 13, 14]
    # row 1: pending token p at 4, node 0 at depth 1, nodes 1 and 2 at depth 2 (siblings do not see each other)
    assert positions[1, :4].tolist() == [4, 5, 6, 6]
    assert mask[1, :4, :4].int().tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 0, 1]]


def test_a_draft_catching_up_does_not_pad_the_one_token_rows(random_pair):
    """A request whose draft cache lacks its prompt (just admitted, or back from steps without drafts) next to rows
    that feed one token: the draft runs the long row and the short rows as separate forwards (one padded pass would
    run every row at the prompt's width: 16x the draft compute at 16 rows), and drafts what each request gets alone."""
    from trtspec.spec.model import LlamaModel
    from trtspec.spec.proposers.base import ProposeInput
    from trtspec.spec.proposers.draft_model import DraftModelProposer

    def proposer() -> tuple[DraftModelProposer, list[tuple[int, int]]]:
        model = LlamaModel.from_pretrained(random_pair[1])
        shapes: list[tuple[int, int]] = []  # (rows, width) of every draft forward
        model.register_forward_pre_hook(lambda _m, args: shapes.append(tuple(args[0].shape)))
        return DraftModelProposer(model, model.config.vocab_size), shapes

    greedy = SamplingParams(temperature=0.0, max_new_tokens=8)
    contexts = {0: list(range(3, 23)), 1: [5, 6], 2: [7, 8], 3: [9, 10]}  # request 0: a 20-token prompt
    together, shapes = proposer()
    for rid in contexts:
        together.add_request(rid)
    for rid in (1, 2, 3):  # the short rows' caches hold all but their last token
        together.propose([ProposeInput(rid, contexts[rid][:1], 1, greedy, None)])
        together.commit(rid, contexts[rid][:1])
    shapes.clear()
    drafts = together.propose([ProposeInput(rid, ctx, 2, greedy, None) for rid, ctx in contexts.items()])
    assert set(shapes[:2]) == {(1, 20), (3, 1)}, shapes  # split, not one (4, 20) pass
    alone, _ = proposer()
    for rid, ctx in contexts.items():
        alone.add_request(rid)
        assert alone.propose([ProposeInput(rid, ctx, 2, greedy, None)])[0].token_ids.tolist() == \
            drafts[rid].token_ids.tolist()


def _near_the_context_end(engine: SpecEngine, spec: SpecParams | list[SpecParams], left: range,
                          prompt: list[int]) -> None:
    """A prompt that leaves `n` tokens of context for each n in `left`: speculation emits plain greedy decoding's
    tokens exactly, finish reason included, and the context ends at max_context, never past it (accepting a whole
    draft adds the bonus token: k + 1 new tokens)."""
    sampling = SamplingParams(max_new_tokens=50)
    for n in left:
        long = (prompt * engine.max_context)[: engine.max_context - n]
        plain = engine.generate([long], sampling, SpecParams("none", 0))[0]
        assert len(plain.token_ids) == n and plain.finish_reason == "length"
        specs = spec if isinstance(spec, list) else [spec]
        for one in specs:
            if one.method == "draft_target" and one.draft_token_ids == ():  # the caller's draft: plain's own output
                one = SpecParams("draft_target", one.k, draft_token_ids=tuple(plain.token_ids[: one.k]))
            outs = engine.generate([long, long], sampling, one)
            for out in outs:
                assert (out.token_ids, out.finish_reason) == (plain.token_ids, "length"), (n, one)
                assert len(long) + len(out.token_ids) == engine.max_context


def test_chain_speculation_stops_at_the_context_end(engine):
    """draft_target with a caller's draft that is all accepted (plain's own output: the step that reaches the end
    drafts everything left) and with the near draft model."""
    _near_the_context_end(engine, [SpecParams("draft_target", 8, draft_token_ids=()), SpecParams("draft_target", 8)],
                          range(1, 10), PROMPTS_RANDOM[0])


def test_tree_speculation_stops_at_the_context_end(embedded_pair):
    """eagle3 trees (the embedded drafter) near the context end."""
    from trtspec.models import EMBEDDED_MODELS

    if not (EMBEDDED_MODELS / "tiny-eagle" / "config.json").is_file():
        pytest.skip("embedded EAGLE drafter not present")
    engine = SpecEngine.from_pretrained(embedded_pair[0], eagle=EMBEDDED_MODELS / "tiny-eagle", max_k=8)
    _near_the_context_end(engine, SpecParams("eagle3", 8), range(2, 10), [5, 6, 7, 8])
