"""Suffix decoding: drafts from the request's own suffix tree and from a bounded cross-request cache (arctic-inference's
SuffixDecodingCache), greedy output equal to transformers' on every shipped suite (alone and mixed in continuous
batches, tree drafts included), sampling that follows the target with a mutation that must fail, clear errors for
out-of-range options, and bounded memory over thousands of distinct requests."""

from __future__ import annotations

import dataclasses
import json
import random
from collections import Counter

import pytest
import torch
from scipy.stats import chisquare

from tests.spec.conftest import hf_greedy, two_token_joint
from trtspec.contracts.engine import EngineConfig
from trtspec.contracts.suffix import SuffixConfig
from trtspec.errors import ConfigError, ToolNotFoundError
from trtspec.methods import resolve
from trtspec.models import PROMPTS as PROMPT_SUITES
from trtspec.spec.engine import SpecEngine
from trtspec.spec.params import SamplingParams, SpecParams
from trtspec.spec.proposers import PROPOSERS, ProposeInput
from trtspec.spec.proposers.suffix import SuffixProposer
from trtspec.spec.scheduler import SchedulerConfig
from trtspec.sweep.prompts import shipped_suites

GREEDY = SamplingParams()  # one instance: the soak test proposes 96k times, validating it each time cost ~1 s


def item(request_id: int, token_ids: list[int], k: int) -> ProposeInput:
    return ProposeInput(request_id=request_id, token_ids=token_ids, k=k, sampling=GREEDY, generator=None)


def finish(proposer: SuffixProposer, request_id: int, prompt: list[int], output: list[int]) -> None:
    """One whole request through the proposer's lifecycle, as the engine drives it."""
    proposer.add_request(request_id)
    proposer.observe_prompt(request_id, prompt)
    proposer.commit(request_id, prompt + output[:1])
    proposer.observe_finish(request_id, prompt + output)
    proposer.free(request_id)


class SpySuffix(SuffixProposer):
    """Counts the drafts that branch (tree drafts)."""

    trees = 0

    def propose(self, batch):
        drafts = super().propose(batch)
        self.trees += sum(d.parents is not None for d in drafts)
        return drafts


# ---------------------------------------------------------------------------------------------------------------
# the proposer


def test_registered_as_a_tree_method_whose_tensorrt_llm_form_is_sa():
    info = resolve("suffix")
    assert PROPOSERS[info.proposer] is SuffixProposer and info.tree and not info.needs_draft_model
    # no trtllm-build mode; the LLM API's SA (1.3) where a release has it (tests/build/test_suffix_build.py)
    assert info.trtllm_build_mode is None and info.llmapi_decoding_type == "SA" and info.trtllm_unsupported is None
    assert "draft_tokens_external" in info.engine_flow_unsupported and "trtspec k8s" in info.llmapi_hint


def test_draft_from_the_request_and_sized_by_the_match():
    proposer = SuffixProposer()
    proposer.observe_prompt(0, [5, 6, 7, 8, 5, 6])
    # [5, 6] matched once before (m = 2), continued [7, 8, 5, 6]: max_spec_factor 1 -> at most 2 tokens
    assert proposer.propose([item(0, [5, 6, 7, 8, 5, 6], 4)])[0].token_ids.tolist() == [7, 8]
    assert proposer.propose([item(0, [5, 6, 7, 8, 5, 6], 1)])[0].token_ids.tolist() == [7]  # k caps it
    proposer.observe_prompt(1, [11, 12, 13])
    assert proposer.propose([item(1, [11, 12, 13], 4)])[0].num_tokens == 0  # nothing matches: k = 0 this step
    wide = SuffixProposer(SuffixConfig(max_spec_factor=3.0))
    wide.observe_prompt(0, [5, 6, 7, 8, 9, 5, 6])
    assert wide.propose([item(0, [5, 6, 7, 8, 9, 5, 6], 8)])[0].token_ids.tolist() == [7, 8, 9, 5, 6]


def test_outputs_of_earlier_requests_draft_for_later_ones():
    proposer = SuffixProposer()
    finish(proposer, 0, [1, 2, 3], [9, 5, 6, 7, 8, 9, 4])
    proposer.observe_prompt(1, [0, 9, 5, 6])
    assert proposer.propose([item(1, [0, 9, 5, 6], 4)])[0].token_ids.tolist() == [7, 8, 9]  # m = 3 in the global tree
    off = SuffixProposer(SuffixConfig(max_cached_requests=0))  # no cross-request cache
    finish(off, 0, [1, 2, 3], [9, 5, 6, 7, 8, 9, 4])
    off.observe_prompt(1, [0, 9, 5, 6])
    assert off.propose([item(1, [0, 9, 5, 6], 4)])[0].num_tokens == 0


def test_in_flight_outputs_are_shared_and_reset_forgets_the_traffic():
    proposer = SuffixProposer()
    proposer.observe_prompt(0, [1])
    proposer.commit(0, [1, 40, 41, 42, 43])  # request 0 is still running
    proposer.observe_prompt(1, [2, 40, 41])
    assert proposer.propose([item(1, [2, 40, 41], 4)])[0].token_ids.tolist() == [42, 43]
    proposer.reset()
    proposer.observe_prompt(2, [2, 40, 41])
    assert proposer.propose([item(2, [2, 40, 41], 4)])[0].num_tokens == 0
    assert proposer.propose([item(0, [1, 40, 41, 42, 43, 40, 41], 4)])[0].token_ids.tolist() == [42, 43]  # own tree


def test_tree_drafts_are_parents_first_and_most_frequent_first():
    proposer = SuffixProposer(SuffixConfig(max_spec_factor=4.0, min_token_prob=0.0))
    for i, output in enumerate([[7, 1, 2], [7, 1, 3], [7, 4, 5]]):
        finish(proposer, i, [0], output)
    proposer.observe_prompt(9, [8, 7])
    draft = proposer.propose([item(9, [8, 7], 8)])[0]
    # after 7: 1 (2 of 3 occurrences) then 4 (1 of 3); under 1: 2 and 3
    assert draft.token_ids.tolist() == [1, 4, 2, 3] and draft.parents == (-1, -1, 0, 0)
    assert all(p < i for i, p in enumerate(draft.parents))
    pruned = SuffixProposer(SuffixConfig(max_spec_factor=4.0, min_token_prob=0.5))
    for i, output in enumerate([[7, 1, 2], [7, 1, 3], [7, 4, 5]]):
        finish(pruned, i, [0], output)
    pruned.observe_prompt(9, [8, 7])
    assert pruned.propose([item(9, [8, 7], 8)])[0].token_ids.tolist() == [1]  # 2, 3 and 4 score 1/3 < 0.5
    chain = SuffixProposer(SuffixConfig(max_spec_factor=4.0, min_token_prob=0.0, tree=False))
    for i, output in enumerate([[7, 1, 2], [7, 1, 3], [7, 4, 5]]):
        finish(chain, i, [0], output)
    chain.observe_prompt(9, [8, 7])
    single = chain.propose([item(9, [8, 7], 8)])[0]
    assert single.parents is None and single.token_ids.tolist()[:1] == [1]


def test_the_global_cache_evicts_the_oldest_past_its_bound():
    proposer = SuffixProposer(SuffixConfig(max_cached_requests=3))
    for i in range(10):
        finish(proposer, i, [0], [100 + i, 200 + i, 300 + i])
    assert sorted(proposer.cache.cached_requests) == [7, 8, 9]
    proposer.observe_prompt(50, [5, 109])  # a new request takes a slot too: 7 goes
    assert sorted(proposer.cache.cached_requests) == [8, 9, 50]
    assert proposer.propose([item(50, [5, 109], 4)])[0].token_ids.tolist() == [209]
    proposer.observe_prompt(51, [5, 100])
    assert proposer.propose([item(51, [5, 100], 4)])[0].num_tokens == 0  # request 0's output was evicted


# ---------------------------------------------------------------------------------------------------------------
# bad input


@pytest.mark.parametrize(("options", "match"), [
    ({"max_tree_depth": 0}, r"suffix.max_tree_depth=0: must be an integer in \[1, 1024\]"),
    ({"max_tree_depth": 5000}, "suffix.max_tree_depth=5000"),
    ({"max_tree_depth": 2.5}, "suffix.max_tree_depth=2.5"),
    ({"max_cached_requests": -1}, r"suffix.max_cached_requests=-1: .*always bounded"),
    ({"max_cached_requests": 2**31}, "suffix.max_cached_requests=2147483648"),
    ({"max_cached_requests": "many"}, "suffix.max_cached_requests='many'"),
    ({"max_spec_factor": 0}, r"suffix.max_spec_factor=0: must be a finite number > 0"),
    ({"max_spec_factor": -1.0}, "suffix.max_spec_factor=-1.0"),
    ({"max_spec_factor": float("inf")}, "suffix.max_spec_factor=inf"),
    ({"max_spec_factor": float("nan")}, "suffix.max_spec_factor=nan"),
    ({"max_spec_offset": float("nan")}, "suffix.max_spec_offset=nan"),
    ({"min_token_prob": 1.5}, r"suffix.min_token_prob=1.5: must be a probability in \[0, 1\]"),
    ({"min_token_prob": -0.1}, "suffix.min_token_prob=-0.1"),
    ({"tree": "yes"}, "suffix.tree='yes'"),
    ({"max_cached": 10}, "suffix.max_cached=10: is not a suffix decoding option"),
])
def test_out_of_range_options_are_refused_by_name(random_pair, options, match):
    with pytest.raises(ConfigError, match=match):
        SuffixConfig.from_options(options)
    with pytest.raises(ConfigError, match=f"parameter suffix_{next(iter(options))}"):  # served: by parameter
        EngineConfig.from_parameters({"target": "t", "method": "suffix",
                                      **{f"suffix_{k}": str(v) for k, v in options.items()}})


def test_options_must_be_a_mapping():
    with pytest.raises(ConfigError, match="suffix=.*must be a mapping"):
        SuffixConfig.from_options([("max_cached_requests", 3)])
    assert SuffixConfig.from_options({"max_cached_requests": 0}).max_cached_requests == 0
    assert SuffixConfig.from_options(None) == SuffixConfig()


def test_missing_arctic_inference_refuses_suffix_requests_only(random_pair, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "arctic_inference", None)  # `import arctic_inference` raises ImportError
    engine = SpecEngine.from_pretrained(random_pair[0])
    assert "suffix" not in engine.available_methods and "ngram" in engine.available_methods
    with pytest.raises(ToolNotFoundError, match="arctic-inference") as exc:
        engine.generate([[3, 4], [5, 6]], SamplingParams(max_new_tokens=4), SpecParams("suffix", 4))
    assert "pip install" in exc.value.hint and exc.value.exit_code == 3
    assert not engine.has_unfinished()  # nothing started
    assert engine.generate([[3, 4]], SamplingParams(max_new_tokens=4), SpecParams("ngram", 2))[0].token_ids


# ---------------------------------------------------------------------------------------------------------------
# greedy parity: every shipped suite, alone and in continuous batches


@pytest.fixture(scope="module")
def embedded(embedded_pair):
    from transformers import LlamaForCausalLM

    hf = LlamaForCausalLM.from_pretrained(embedded_pair[0], dtype=torch.float32).eval()
    engine = SpecEngine.from_pretrained(*embedded_pair, max_k=16, scheduler=SchedulerConfig(max_num_seqs=3))
    spy = SpySuffix(SuffixConfig(min_token_prob=0.0, max_spec_factor=2.0))  # every branch drafts: many trees
    engine.proposers["suffix"] = spy
    prompts = {}
    for suite in shipped_suites():
        with open(PROMPT_SUITES / f"{suite}.jsonl") as f:
            rows = [json.loads(line)["prompt"] for line in f][:3]
        prompts[suite] = [engine.encode(text)[-96:] for text in rows]
    reference = {suite: [hf_greedy(hf, p, 24) for p in ps] for suite, ps in prompts.items()}
    return engine, spy, prompts, reference


@pytest.mark.slow
def test_greedy_equals_transformers_on_every_suite_alone(embedded):
    engine, spy, prompts, reference = embedded
    assert "repetitive" in prompts
    accepted = 0
    for suite, suite_prompts in prompts.items():  # each suite at k 1, 3 and 16, one prompt each
        for k, prompt, expected in zip((1, 3, 16), suite_prompts, reference[suite], strict=True):
            out = engine.generate([prompt], SamplingParams(max_new_tokens=24), SpecParams("suffix", k))[0]
            assert out.token_ids == expected, (suite, k)
            accepted += out.stats.num_accepted_tokens
    assert accepted > 0 and spy.trees > 0  # drafts were accepted, and some of them were trees


@pytest.mark.slow
def test_greedy_equals_transformers_mixed_in_continuous_batches(embedded):
    """Every suite's prompts at once through 3 KV slots (admission as others finish), suffix at several k next to
    other methods and plain decoding; the cache starts cold and learns from the batch itself."""
    engine, spy, prompts, reference = embedded
    engine.proposers["suffix"].reset()
    trees_before = spy.trees
    flat = [(suite, i) for suite in prompts for i in range(len(prompts[suite]))]
    specs = [SpecParams("suffix", 16), SpecParams("ngram", 4), SpecParams("suffix", 2), SpecParams("draft_target", 3),
             SpecParams("suffix", 8, adaptive=True), SpecParams("none", 0)]
    batch_specs = [specs[j % len(specs)] for j in range(len(flat))]
    outs = engine.generate([prompts[s][i] for s, i in flat], SamplingParams(max_new_tokens=24), batch_specs)
    for (suite, i), spec, out in zip(flat, batch_specs, outs, strict=True):
        assert out.token_ids == reference[suite][i], (suite, i, spec)
    suffix_outs = [o for o, s in zip(outs, batch_specs, strict=True) if s.method == "suffix"]
    assert sum(o.stats.num_accepted_tokens for o in suffix_outs) > 0 and spy.trees > trees_before


def test_greedy_tree_drafts_off_the_first_branch_equal_transformers(random_pair, hf_target, monkeypatch):
    """Many distinct prompts through a shared cache on the random target, whose outputs repeat tokens with different
    continuations: trees every few steps, accepted paths that leave the first branch (their KV is compacted)."""
    rng = random.Random(3)
    prompts = [[rng.randrange(2, 64) for _ in range(rng.randint(3, 12))] for _ in range(40)]
    engine = SpecEngine.from_pretrained(random_pair[0], max_k=8, scheduler=SchedulerConfig(max_num_seqs=6))
    spy = SpySuffix(SuffixConfig(min_token_prob=0.0, max_spec_factor=2.0))
    engine.proposers["suffix"] = spy
    verify_batch = engine._verify_batch
    off_first = []

    def watch(batch, drafts, logits, num_pending):
        verdicts, scores = verify_batch(batch, drafts, logits, num_pending)
        for draft, verdict in zip(drafts, verdicts, strict=True):
            if draft.parents is not None and verdict.accepted_offsets != list(range(len(verdict.accepted_offsets))):
                off_first.append(verdict.accepted_offsets)
        return verdicts, scores

    monkeypatch.setattr(engine, "_verify_batch", watch)
    outs = engine.generate(prompts, SamplingParams(max_new_tokens=24), [SpecParams("suffix", k) for k in (8, 3) * 20])
    for prompt, out in zip(prompts, outs, strict=True):
        assert out.token_ids == hf_greedy(hf_target, prompt, 24), prompt
    assert spy.trees > 50 and len(off_first) > 5, (spy.trees, len(off_first))


@pytest.mark.slow
def test_a_warm_cache_drafts_more_of_repeated_traffic(embedded):
    engine, _, prompts, _ = embedded
    engine.proposers["suffix"].reset()
    batch = prompts["code"] + prompts["repetitive"]
    spec, sampling = SpecParams("suffix", 16), SamplingParams(max_new_tokens=24, ignore_eos=True)
    cold = engine.generate(batch, sampling, spec)
    warm = engine.generate(batch, sampling, spec)  # the same traffic again: a retry
    assert [o.token_ids for o in warm] == [o.token_ids for o in cold]
    forwards = [sum(o.stats.num_target_forwards for o in run) for run in (cold, warm)]
    assert forwards[1] < forwards[0]
    assert engine.proposers["suffix"].num_cached_requests <= SuffixConfig().max_cached_requests


# ---------------------------------------------------------------------------------------------------------------
# sampling: the output follows the target, and using the suffix frequencies as draft probabilities is detected

# the prompt's own tree drafts the chain [41, 8, ...] at the first step; at the second, a first token the prompt does
# not contain (most of them) matches only the other requests' outputs in the shared cache, whose continuations branch
PROMPT = [17, 30, 2, 8, 41, 8, 41, 8, 63, 12, 30, 2, 8]
# N = 500 requests per chi-square test (was 1000; measured): the exact case passes with p = 0.72 (0.78 at 1000) over
# 452 tree drafts, the frequencies-as-probabilities mutation fails with p = 5e-53 (3e-122 at 1000)
TEMPERATURE, TOP_K, N = 1.0, 3, 500


@pytest.fixture(scope="module")
def joint(hf_target) -> dict[tuple[int, int], float]:
    """The target's exact distribution of the first two tokens (top-k 3 at temperature 1)."""
    return two_token_joint(hf_target, PROMPT, TEMPERATURE, TOP_K)


class FrequencyAsProbability(SpySuffix):
    """Mutation: the proposer reports each node's suffix frequency as the probability it was drafted with (here 0.5),
    so the verifier accepts with min(1, p / q) as if the tokens had been sampled, not chosen."""

    def propose(self, batch):
        drafts = super().propose(batch)
        out = []
        for d in drafts:
            q = torch.full((d.num_tokens, 64), 0.5 / 63)
            q[torch.arange(d.num_tokens), d.token_ids] = 0.5
            out.append(dataclasses.replace(d, draft_probs=q))
        return out


def _sampled_p_value(random_pair, joint, proposer: SpySuffix) -> float:
    engine = SpecEngine.from_pretrained(random_pair[0], max_k=8, scheduler=SchedulerConfig(max_num_seqs=64))
    engine.proposers["suffix"] = proposer
    samplings = [SamplingParams(temperature=TEMPERATURE, top_k=TOP_K, seed=i, max_new_tokens=5, ignore_eos=True)
                 for i in range(N)]
    outs = engine.generate([PROMPT] * N, samplings, SpecParams("suffix", 6))
    drafted = sum(o.stats.num_draft_tokens for o in outs)
    assert 0 < sum(o.stats.num_accepted_tokens for o in outs) < drafted
    counts = Counter(tuple(o.token_ids[:2]) for o in outs)
    if set(counts) - set(joint):
        return 0.0
    cells = sorted(joint)
    observed = [counts.get(c, 0) for c in cells]
    expected = [joint[c] * N for c in cells]
    return float(chisquare(observed, [e * sum(observed) / sum(expected) for e in expected]).pvalue)


# every continuation counts (min_token_prob 0) and a one-token match may draft 4: the 1000 requests' outputs make
# branching trees in the shared cache
SAMPLING_CONFIG = SuffixConfig(min_token_prob=0.0, max_spec_factor=4.0)


@pytest.mark.slow
def test_sampling_with_suffix_trees_follows_the_target(random_pair, joint):
    spy = SpySuffix(SAMPLING_CONFIG)
    assert _sampled_p_value(random_pair, joint, spy) > 1e-3
    assert spy.trees > 100  # recursive rejection over trees was exercised, not only chains


@pytest.mark.slow
def test_suffix_frequencies_used_as_draft_probabilities_are_detected(random_pair, joint):
    assert _sampled_p_value(random_pair, joint, FrequencyAsProbability(SAMPLING_CONFIG)) < 1e-6


# ---------------------------------------------------------------------------------------------------------------
# memory: thousands of distinct requests stay within the bound


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/statm"), reason="needs /proc (Linux)")
@pytest.mark.slow
def test_soak_thousands_of_distinct_requests_keep_rss_bounded():
    """2000 requests of fresh random tokens (nothing repeats, so every one adds new tree nodes) through a cache
    bounded at 200 outputs: after the cache fills, RSS stays flat; the global tree stays at its bound's size."""
    gen = torch.Generator().manual_seed(0)
    proposer = SuffixProposer(SuffixConfig(max_cached_requests=200))

    def run(first: int, count: int) -> None:
        for rid in range(first, first + count):
            tokens = torch.randint(32_000, (64 + 24 * 8,), generator=gen).tolist()  # prompt + output, drawn at once
            prompt, context = tokens[:64], tokens[:64]
            proposer.observe_prompt(rid, prompt)
            for step in range(24):  # 24 steps of 8 tokens: 192 output tokens
                proposer.propose([item(rid, context, 8)])
                context = tokens[: 64 + 8 * (step + 1)]
                proposer.commit(rid, context)
            proposer.observe_finish(rid, context)
            proposer.free(rid)

    run(0, 600)  # fills the cache (200 outputs) and the allocator's pools
    tree_full = proposer.cache._global_tree.estimate_memory()
    rss_full = _rss_mb()
    run(600, 1400)
    growth = _rss_mb() - rss_full
    assert proposer.num_cached_requests == 200 and not proposer.cache.active_requests
    assert proposer.cache._global_tree.estimate_memory() < 1.5 * tree_full
    # 1400 more outputs unbounded would add about 7x the full tree; bounded, RSS moves by allocator noise only
    assert growth < max(8.0, 0.5 * tree_full / 2**20), (growth, tree_full / 2**20)


@pytest.mark.slow
def test_generate_cli_runs_suffix(embedded_pair):
    """`trtspec generate --method suffix` equals plain greedy; the default k is the tree-node cap (64 nodes)."""
    from click.testing import CliRunner

    from trtspec.cli.main import cli

    def run(*args: str) -> dict:
        result = CliRunner().invoke(cli, ["generate", "--max-new-tokens", "32", "--json", *args, "import os\n"],
                                    catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return json.loads(result.output)

    data, plain = run("--method", "suffix"), run("--method", "none")
    assert data["token_ids"] == plain["token_ids"] and data["method"] == "suffix" and data["k"] == 64
    assert data["num_drafts"] > 0
