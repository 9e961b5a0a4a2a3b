"""Hybrid drafting (methods suffix_draft and suffix_eagle3): the suffix tree's draft where its score reaches the
threshold, the model drafter's elsewhere, per request and per step; greedy output equal to transformers' on every
shipped suite (alone and mixed with other methods in continuous batches), sampling that follows the target with a
mutation that must fail, the choice counted in the request and step stats, and refusals by name."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter

import pytest
import torch
from scipy.stats import chisquare

from tests.spec.conftest import hf_greedy, two_token_joint
from trtspec.contracts.engine import EngineConfig, Hybrid, ProposerOptions
from trtspec.contracts.suffix import SuffixConfig
from trtspec.errors import ConfigError, UsageError
from trtspec.methods import resolve
from trtspec.methods.draft_target import DRAFT_TARGET
from trtspec.methods.hybrid import SUFFIX_DRAFT
from trtspec.models import PROMPTS as PROMPT_SUITES
from trtspec.spec.engine import SpecEngine
from trtspec.spec.params import SamplingParams, SpecParams
from trtspec.spec.proposers import PROPOSERS, Draft, ProposeInput, Proposer, ProposerContext
from trtspec.spec.proposers.hybrid import HybridProposer, SuffixDraftProposer, SuffixEagleProposer
from trtspec.spec.proposers.suffix import SuffixProposer
from trtspec.spec.scheduler import SchedulerConfig
from trtspec.sweep.prompts import shipped_suites

GREEDY = SamplingParams()


class FixedDrafter(Proposer):
    """A model drafter stand-in: drafts [90, 91, ...] of the length asked, and records what it was asked."""

    name = "fixed"

    def __init__(self) -> None:
        self.asked: list[tuple[int, int]] = []  # (request id, k)
        self.committed: dict[int, list[int]] = {}

    def propose(self, batch):
        self.asked += [(item.request_id, item.k) for item in batch]
        return [Draft(token_ids=torch.arange(90, 90 + item.k)) for item in batch]

    def commit(self, request_id, token_ids):
        self.committed[request_id] = list(token_ids)


def item(request_id: int, token_ids: list[int], k: int) -> ProposeInput:
    return ProposeInput(request_id=request_id, token_ids=token_ids, k=k, sampling=GREEDY, generator=None)


def hybrid(options: Hybrid = Hybrid(), suffix: SuffixConfig = SuffixConfig()) -> tuple[HybridProposer, FixedDrafter]:
    drafter = FixedDrafter()
    return HybridProposer(SuffixProposer(suffix), drafter, options), drafter


# ---------------------------------------------------------------------------------------------------------------
# the methods and the rule


def test_registered_as_two_methods_one_per_drafter():
    draft, eagle = resolve("suffix_draft"), resolve("suffix_eagle3")
    assert PROPOSERS[draft.proposer] is SuffixDraftProposer and PROPOSERS[eagle.proposer] is SuffixEagleProposer
    assert draft.needs_draft_model and not draft.needs_eagle_drafter and draft.checkpoint == "draft"
    assert eagle.needs_eagle_drafter and not eagle.needs_draft_model and eagle.checkpoint == "eagle"
    assert draft.cross_request_cache and eagle.cross_request_cache and draft.tree
    assert set(eagle.reads_parts) == {"suffix", "eagle_tree"} and draft.engine_part == eagle.engine_part == "hybrid"


def test_a_strong_suffix_match_drafts_a_weak_one_goes_to_the_model_drafter():
    # request 0's prompt: the suffix [5, 6] occurred twice, once continued by [7, 8] (the other is the context's
    # end), so the tree drafts [7, 8] at an estimated 0.5 each: score 1.0, match length 2
    context = [5, 6, 7, 8, 5, 6]
    proposer, drafter = hybrid(Hybrid(drafter_k=1))
    proposer.observe_prompt(0, context)
    proposer.observe_prompt(1, [11, 12, 13])  # nothing matches: the model drafter drafts
    drafts = proposer.propose([item(0, context, 4), item(1, [11, 12, 13], 4)])
    assert drafts[0].token_ids.tolist() == [7, 8] and drafts[0].drafter == "suffix"  # score 1.0 >= drafter k 1
    assert drafts[1].token_ids.tolist() == [90] and drafts[1].drafter == "fixed"
    assert drafter.asked == [(1, 1)]  # only the weak request, at drafter_k
    # unset drafter_k: the model drafter drafts 4 tokens (at most k), and a suffix draft must score that much
    proposer, drafter = hybrid()
    proposer.observe_prompt(0, context)
    draft = proposer.propose([item(0, context, 8)])[0]
    assert draft.drafter == "fixed" and draft.num_tokens == 4 and drafter.asked == [(0, 4)]
    assert [d.num_tokens for d in proposer.propose([item(0, context, 2)])] == [2] and drafter.asked[-1] == (0, 2)


def test_the_threshold_and_the_match_length_are_options():
    context = [5, 6, 7, 8, 5, 6]  # suffix draft [7, 8]: score 1.0, match length 2
    for options, expected in ((Hybrid(min_score=1.0), "suffix"), (Hybrid(min_score=1.5), "fixed"),
                              (Hybrid(min_score=0.0, min_match_len=2), "suffix"),
                              (Hybrid(min_score=0.0, min_match_len=3), "fixed")):
        proposer, _ = hybrid(options)
        proposer.observe_prompt(0, context)
        assert proposer.propose([item(0, context, 4)])[0].drafter == expected, options


def test_both_parts_see_the_whole_lifecycle_and_reset_forgets_the_traffic():
    proposer, drafter = hybrid(Hybrid(min_score=0.0))
    proposer.add_request(0)
    proposer.observe_prompt(0, [1])
    proposer.commit(0, [1, 40, 41, 42, 43])
    assert drafter.committed[0] == [1, 40, 41, 42, 43]
    proposer.observe_prompt(1, [2, 40, 41])  # request 0's output is in the global tree
    assert proposer.propose([item(1, [2, 40, 41], 4)])[0].token_ids.tolist() == [42, 43]
    proposer.reset()
    proposer.observe_prompt(2, [2, 40, 41])
    assert proposer.propose([item(2, [2, 40, 41], 4)])[0].drafter == "fixed"


# ---------------------------------------------------------------------------------------------------------------
# bad input


def test_a_hybrid_without_its_drafter_is_refused_by_name(random_pair):
    ctx = ProposerContext(vocab_size=64, max_k=8)
    with pytest.raises(ConfigError, match=r"^draft=None: method suffix_draft drafts with a model") as exc:
        SuffixDraftProposer.create(ctx)
    assert "--draft tiny-draft" in exc.value.hint and exc.value.exit_code == 2
    with pytest.raises(ConfigError, match=r"^eagle=None: method suffix_eagle3") as exc:
        SuffixEagleProposer.create(ctx)
    assert "--eagle tiny-eagle" in exc.value.hint
    engine = SpecEngine.from_pretrained(random_pair[0])  # no draft model: the method is not offered
    assert "suffix_draft" not in engine.available_methods and "suffix" in engine.available_methods
    with pytest.raises(ConfigError, match="suffix_draft.*needs a draft model") as exc:
        engine.generate([[3, 4]], SamplingParams(max_new_tokens=4), SpecParams("suffix_draft", 4))
    assert exc.value.exit_code == 2 and not engine.has_unfinished()
    from trtspec.spec.host import check

    with pytest.raises(UsageError, match="draft is required by method suffix_draft") as usage:
        check(EngineConfig(target=str(random_pair[0]), method="suffix_draft"))
    assert "tiny-draft" in usage.value.hint and usage.value.exit_code == 2


def test_the_hybrid_and_the_engine_share_one_drafter_whoever_makes_it_first(random_pair, near_draft):
    from trtspec.spec.model import LlamaModel

    draft = LlamaModel.from_pretrained(near_draft)
    hybrid_first = ProposerContext(vocab_size=draft.config.vocab_size, max_k=8, draft_model=draft)
    made = SuffixDraftProposer.create(hybrid_first)  # before the engine's draft_target proposer
    key = PROPOSERS[DRAFT_TARGET.proposer_key()].name
    assert hybrid_first.created[key] is made.drafter
    engine = SpecEngine.from_pretrained(random_pair[0], near_draft)  # draft_target first, then the hybrid
    assert engine.proposers[SUFFIX_DRAFT.proposer_key()].drafter is engine.proposers[key]


@pytest.mark.parametrize(("parameters", "match"), [
    ({"hybrid_min_score": "-1"}, r"hybrid_min_score=-1.0: must be a finite number >= 0"),
    ({"hybrid_min_score": "nan"}, r"hybrid_min_score=nan"),
    ({"hybrid_min_match_len": "0"}, r"hybrid_min_match_len=0: must be an integer >= 1"),
    ({"hybrid_drafter_k": "0"}, r"hybrid_drafter_k=0: must be an integer >= 1"),
    ({"hybrid_drafter_k": "four"}, r"parameter hybrid_drafter_k='four'|parameter hybrid_drafter_k=four"),
])
def test_out_of_range_hybrid_options_are_refused_by_parameter(parameters, match):
    with pytest.raises(ConfigError, match=match):
        EngineConfig.from_parameters({"target": "t", "method": "suffix_draft", **parameters})


def test_hybrid_options_shape_only_the_hybrid_methods_and_round_trip():
    config = EngineConfig(target="t", method="suffix_eagle3", hybrid=Hybrid(min_score=3.0, drafter_k=4),
                          suffix=SuffixConfig(max_spec_factor=2.0))
    assert EngineConfig.from_parameters(config.to_parameters()) == config
    assert EngineConfig.from_dict(config.to_dict()) == config
    assert config.proposer_options().hybrid == Hybrid(min_score=3.0, drafter_k=4)
    with pytest.raises(ConfigError, match="hybrid_min_score=3.0: shapes method suffix_draft / suffix_eagle3"):
        EngineConfig(target="t", method="draft_target", hybrid=Hybrid(min_score=3.0))


# ---------------------------------------------------------------------------------------------------------------
# greedy parity on the embedded models, and the stats


@pytest.fixture(scope="module")
def embedded(embedded_pair):
    from transformers import LlamaForCausalLM

    from trtspec.models import EMBEDDED_MODELS

    hf = LlamaForCausalLM.from_pretrained(embedded_pair[0], dtype=torch.float32).eval()
    # drafter_k 3 below k: both drafters draft (the suffix tree where its score reaches 3)
    engine = SpecEngine.from_pretrained(*embedded_pair, eagle=EMBEDDED_MODELS / "tiny-eagle", max_k=16,
                                        scheduler=SchedulerConfig(max_num_seqs=3),
                                        options=ProposerOptions(hybrid=Hybrid(drafter_k=3)))
    prompts = {}
    for suite in shipped_suites():
        with open(PROMPT_SUITES / f"{suite}.jsonl") as f:
            rows = [json.loads(line)["prompt"] for line in f][:2]
        prompts[suite] = [engine.encode(text)[-96:] for text in rows]
    reference = {suite: [hf_greedy(hf, p, 24) for p in ps] for suite, ps in prompts.items()}
    return engine, prompts, reference


@pytest.mark.slow
@pytest.mark.parametrize("method", ["suffix_draft", "suffix_eagle3"])
def test_greedy_equals_transformers_on_every_suite(embedded, method):
    engine, prompts, reference = embedded
    engine.proposers[resolve(method).proposer].reset()
    counts = Counter()
    for suite, suite_prompts in prompts.items():
        for k, prompt, expected in zip((4, 16), suite_prompts, reference[suite], strict=True):
            out = engine.generate([prompt], SamplingParams(max_new_tokens=24), SpecParams(method, k))[0]
            assert out.token_ids == expected, (method, suite, k)
            stats = out.stats
            assert stats.num_hybrid_suffix_drafts + stats.num_hybrid_model_drafts == stats.num_drafts
            counts.update(suffix=stats.num_hybrid_suffix_drafts, model=stats.num_hybrid_model_drafts,
                          accepted=stats.num_accepted_tokens)
    assert counts["suffix"] > 0 and counts["model"] > 0 and counts["accepted"] > 0, counts  # both drafters drafted


@pytest.mark.slow
def test_greedy_equals_transformers_mixed_in_continuous_batches(embedded):
    """Every suite's prompts at once through 3 KV slots, both hybrids next to their parts and plain decoding; the
    step stats count each drafter's requests."""
    engine, prompts, reference = embedded
    flat = [(suite, i) for suite in prompts for i in range(len(prompts[suite]))]
    specs = [SpecParams("suffix_draft", 16), SpecParams("suffix_eagle3", 8), SpecParams("draft_target", 3),
             SpecParams("suffix", 16), SpecParams("suffix_draft", 4, adaptive=True), SpecParams("none", 0)]
    batch_specs = [specs[j % len(specs)] for j in range(len(flat))]
    steps = Counter()
    step = engine.step

    def counted():
        deltas = step()
        if engine.last_iteration is not None:
            steps.update(suffix=engine.last_iteration.num_hybrid_suffix_drafts,
                         model=engine.last_iteration.num_hybrid_model_drafts)
        return deltas

    engine.step = counted
    try:
        outs = engine.generate([prompts[s][i] for s, i in flat], SamplingParams(max_new_tokens=24), batch_specs)
    finally:
        del engine.step
    for (suite, i), spec, out in zip(flat, batch_specs, outs, strict=True):
        assert out.token_ids == reference[suite][i], (suite, i, spec)
    hybrid_outs = [o for o, s in zip(outs, batch_specs, strict=True) if s.method.startswith("suffix_")]
    assert steps["suffix"] == sum(o.stats.num_hybrid_suffix_drafts for o in hybrid_outs) > 0
    assert steps["model"] == sum(o.stats.num_hybrid_model_drafts for o in hybrid_outs) > 0
    others = [o for o, s in zip(outs, batch_specs, strict=True) if not s.method.startswith("suffix_")]
    assert all(o.stats.num_hybrid_suffix_drafts == o.stats.num_hybrid_model_drafts == 0 for o in others)


# ---------------------------------------------------------------------------------------------------------------
# sampling: suffix drafts (one-hot) and draft-model drafts (with their distributions) mixed, following the target

PROMPT = [17, 30, 2, 8, 41, 8, 41, 8, 63, 12, 30, 2, 8]  # its own tree drafts [41, 8, ...] at the first step
TEMPERATURE, TOP_K, N = 1.0, 3, 400
SAMPLING_SUFFIX = SuffixConfig(min_token_prob=0.0, max_spec_factor=4.0)
SAMPLING_HYBRID = Hybrid(min_score=1.0, drafter_k=3)  # a suffix draft of expected length >= 1 wins


@pytest.fixture(scope="module")
def joint(hf_target) -> dict[tuple[int, int], float]:
    """The target's exact distribution of the first two tokens (top-k 3 at temperature 1)."""
    return two_token_joint(hf_target, PROMPT, TEMPERATURE, TOP_K)


class SuffixFrequenciesAsProbabilities(SuffixDraftProposer):
    """Mutation: the suffix tree's drafts carry made-up draft probabilities (0.5 on the drafted token), so the
    verifier accepts with min(1, p / q) as if they had been sampled, not chosen."""

    def propose(self, batch):
        out = []
        for d in super().propose(batch):
            if d.drafter == "suffix":
                q = torch.full((d.num_tokens, 64), 0.5 / 63)
                q[torch.arange(d.num_tokens), d.token_ids] = 0.5
                d = dataclasses.replace(d, draft_probs=q)
            out.append(d)
        return out


def _sampled_p_value(random_pair, near_draft, joint, hybrid: Hybrid, mutate: bool = False) -> tuple[float, Counter]:
    engine = SpecEngine.from_pretrained(random_pair[0], near_draft, max_k=8,
                                        scheduler=SchedulerConfig(max_num_seqs=64),
                                        options=ProposerOptions(hybrid=hybrid, suffix=SAMPLING_SUFFIX))
    if mutate:
        original = engine.proposers["suffix_draft"]
        engine.proposers["suffix_draft"] = SuffixFrequenciesAsProbabilities(original.suffix, original.drafter,
                                                                            original.options)
    samplings = [SamplingParams(temperature=TEMPERATURE, top_k=TOP_K, seed=i, max_new_tokens=5, ignore_eos=True)
                 for i in range(N)]
    outs = engine.generate([PROMPT] * N, samplings, SpecParams("suffix_draft", 6))
    used = Counter(suffix=sum(o.stats.num_hybrid_suffix_drafts for o in outs),
                   model=sum(o.stats.num_hybrid_model_drafts for o in outs))
    counts = Counter(tuple(o.token_ids[:2]) for o in outs)
    if set(counts) - set(joint):
        return 0.0, used
    cells = sorted(joint)
    observed = [counts.get(c, 0) for c in cells]
    expected = [joint[c] * N for c in cells]
    return float(chisquare(observed, [e * sum(observed) / sum(expected) for e in expected]).pvalue), used


@pytest.mark.slow
def test_sampling_with_both_drafters_follows_the_target(random_pair, near_draft, joint):
    p_value, used = _sampled_p_value(random_pair, near_draft, joint, SAMPLING_HYBRID)
    assert p_value > 1e-3 and used["suffix"] > 100 and used["model"] > 100, (p_value, used)


@pytest.mark.slow
def test_suffix_drafts_verified_as_sampled_are_detected(random_pair, near_draft, joint):
    """Any suffix draft wins (min_score 0): the branching drafts from the other requests' outputs are verified at
    the second token, where made-up draft probabilities bias the output."""
    assert _sampled_p_value(random_pair, near_draft, joint, Hybrid(min_score=0.0), mutate=True)[0] < 1e-6


# ---------------------------------------------------------------------------------------------------------------
# sweeps


def test_the_sweep_grid_runs_each_hybrid_with_its_drafter_at_each_cache_state():
    from trtspec.sweep.grid import SweepSpec

    spec = SweepSpec.build(methods=["suffix_draft", "suffix_eagle3"], k=[0, 4], suites=["code"], eagle=["tiny-eagle"])
    cases = {(c.method, c.draft, c.eagle, c.suffix_cache) for c in spec.cases() if c.method != "none"}
    assert cases == {("suffix_draft", "tiny-draft", None, "cold"), ("suffix_draft", "tiny-draft", None, "warm"),
                     ("suffix_eagle3", None, "tiny-eagle", "cold"), ("suffix_eagle3", None, "tiny-eagle", "warm")}


def test_the_report_shows_each_hybrid_cases_drafts_by_drafter():
    from types import SimpleNamespace

    from trtspec.sweep.report import _hybrid_section

    def row(method: str, drafts: tuple[int, int]) -> SimpleNamespace:
        return SimpleNamespace(suite="code", params={"temperature": 0.0, "concurrency": 1}, variant=method, k=8,
                               hybrid_drafts=drafts)

    lines = _hybrid_section([row("draft_target:tiny-draft", (0, 0)), row("suffix_draft:tiny-draft", (3, 9))])
    assert lines[0] == "## Hybrid drafting: drafts by drafter"
    assert [line for line in lines if "suffix_draft" in line] == ["| code | 0 | 1 | suffix_draft:tiny-draft | 8 | 3 | 9 | 25% |"]
    assert not any("draft_target" in line for line in lines) and _hybrid_section([row("ngram", (0, 0))]) == []


@pytest.mark.slow
def test_generate_cli_takes_hybrid_options_and_reports_the_counts(embedded_pair):
    """`trtspec generate --method suffix_draft --hybrid NAME=VALUE`: plain greedy's tokens, the drafts by drafter in
    --json; a bad option or one for another method: exit 2 naming the flag."""
    from click.testing import CliRunner

    from trtspec.cli.main import cli

    def run(*args: str):
        return CliRunner().invoke(cli, ["generate", "--max-new-tokens", "32", "--json", *args, "import os\n"])

    plain = json.loads(run("--method", "none").output)
    result = run("--method", "suffix_draft", "--k", "16", "--hybrid", "drafter_k=3", "--hybrid", "min_score=1")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["token_ids"] == plain["token_ids"] and data["num_drafts"] > 0
    assert data["num_hybrid_suffix_drafts"] + data["num_hybrid_model_drafts"] == data["num_drafts"]
    from tests.cli_checks import run_cli

    for args, words in ((("--method", "suffix_draft", "--hybrid", "drafter_k=0"), "--hybrid drafter_k=0: must be"),
                        (("--method", "draft_target", "--hybrid", "drafter_k=3"), "shapes method suffix_draft")):
        code, _, err = run_cli(["generate", *args, "import os\n"])
        assert code == 2 and words in err and len(err.strip().splitlines()) <= 2, err  # Error + Hint lines
