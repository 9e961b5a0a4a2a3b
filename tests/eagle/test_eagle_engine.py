"""EAGLE-3 in the reference engine: greedy output equals plain greedy decoding for chains, static and dynamic trees
at every k, alone, in mixed batches, with arrivals and preemption; sampling is exact (chi-square) and a wrong draft
distribution is detected; the drafter's chain equals ModelOpt's own drafting."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import torch

from tests.eagle.conftest import PROMPTS
from tests.spec.test_controls import _p_value
from tests.spec.test_scheduler import run_with_arrivals
from trtspec.contracts.engine import EagleTree, ProposerOptions
from trtspec.models import PROMPTS as PROMPT_SUITES
from trtspec.spec.engine import SpecEngine
from trtspec.spec.params import SamplingParams, SpecParams
from trtspec.spec.proposers.base import Draft, ProposeInput
from trtspec.spec.proposers.eagle import EagleProposer
from trtspec.spec.sampling import logits_to_probs
from trtspec.spec.scheduler import SchedulerConfig

TREES = {"chain": EagleTree(topk=1), "dynamic": EagleTree(topk=3, depth=4),
         "static": EagleTree.parse("[[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 0], [2], [0, 0, 0, 0]]")}


def make_engine(target, drafter, tree: EagleTree | None = None, draft=None, **scheduler) -> SpecEngine:
    return SpecEngine.from_pretrained(target, draft, eagle=drafter, max_k=8,
                                      options=ProposerOptions(eagle_tree=tree or EagleTree()),
                                      scheduler=SchedulerConfig(**scheduler) if scheduler else None)


@pytest.fixture(scope="module")
def plain(eagle_target, trained_eagle):
    engine = make_engine(eagle_target, trained_eagle[0])
    return [o.token_ids for o in engine.generate(PROMPTS, SamplingParams(max_new_tokens=32), SpecParams("none", 0))]


@pytest.mark.parametrize("tree", list(TREES))
def test_greedy_equals_plain_decoding_for_every_k(eagle_target, trained_eagle, plain, tree):
    engine = make_engine(eagle_target, trained_eagle[0], TREES[tree])
    cases = [(k, i) for k in range(1, 9) for i in range(len(PROMPTS))]  # every k in one continuous batch
    outs = engine.generate([PROMPTS[i] for _, i in cases], SamplingParams(max_new_tokens=32),
                           [SpecParams("eagle3", k) for k, _ in cases])
    for (k, i), out in zip(cases, outs, strict=True):
        assert out.token_ids == plain[i], (tree, k, i)
    assert sum(o.stats.num_accepted_tokens for o in outs) > 0  # the accept path (and the drafter's tree attention)
    assert not engine.proposers["eagle"].states and engine.proposers["eagle"].cache.num_free_slots == 256


def test_mixed_batch_with_arrivals_and_preemption(eagle_target, trained_eagle, plain, tmp_path):
    from tests.conftest import make_random_llama

    draft = make_random_llama(tmp_path / "draft", hidden=16, layers=1, heads=2, seed=5)
    specs = [SpecParams("eagle3", 4), SpecParams("draft_target", 3), SpecParams("eagle3", 7), SpecParams("none", 0)]
    lengths = [32, 20, 28, 24]
    plan = {0: [(PROMPTS[0], SamplingParams(max_new_tokens=32), specs[0], 0),
                (PROMPTS[1], SamplingParams(max_new_tokens=20), specs[1], 1)],
            2: [(PROMPTS[2], SamplingParams(max_new_tokens=28), specs[2], 2)],
            5: [(PROMPTS[3], SamplingParams(max_new_tokens=24), specs[3], 3)]}
    expected = [ref[:n] for ref, n in zip(plain, lengths, strict=True)]
    together, _ = run_with_arrivals(make_engine(eagle_target, trained_eagle[0], TREES["dynamic"], draft), plan)
    assert [together[i] for i in range(4)] == expected
    engine = make_engine(eagle_target, trained_eagle[0], TREES["dynamic"], draft, max_num_seqs=4, kv_block_size=4,
                         num_kv_blocks=16)
    preempting, _ = run_with_arrivals(engine, plan)
    assert engine.scheduler.num_preemptions > 0  # recompute re-delivers the taps; the drafter restarts its slot
    assert [preempting[i] for i in range(4)] == expected
    assert not engine.proposers["eagle"].states


@pytest.mark.slow
def test_shipped_drafter_on_held_out_and_shipped_prompts(embedded_eagle):
    """tiny + tiny-eagle: greedy output equals plain decoding on the shipped prompt suites (held-out code, prose,
    grounded), alone and in one batch, with the default dynamic tree and a static tree; drafts are accepted."""
    target, drafter = embedded_eagle
    prompts = []
    engine = make_engine(target, drafter)
    for suite in ("code", "prose", "grounded"):
        with open(PROMPT_SUITES / f"{suite}.jsonl") as f:
            prompts += [engine.encode(json.loads(line)["prompt"])[-64:] for line in list(f)[:2]]
    sampling = SamplingParams(max_new_tokens=32)
    reference = [o.token_ids for o in engine.generate(prompts, sampling, SpecParams("none", 0))]
    for options in (None, TREES["static"]):
        engine = make_engine(target, drafter, options)
        outs = engine.generate(prompts, sampling, SpecParams("eagle3", 8))
        assert [o.token_ids for o in outs] == reference, options
        assert engine.generate([prompts[0]], sampling, SpecParams("eagle3", 4))[0].token_ids == reference[0]
        assert sum(o.stats.num_accepted_tokens for o in outs) > sum(o.stats.num_drafts for o in outs)


def _joint(target, prompt, temperature, top_k, depth):
    from transformers import LlamaForCausalLM

    hf = LlamaForCausalLM.from_pretrained(target).eval()
    joint = {(): 1.0}
    for _ in range(depth):
        nxt = {}
        for prefix, mass in joint.items():
            with torch.no_grad():
                probs = logits_to_probs(hf(torch.tensor([prompt + list(prefix)])).logits[0, -1], temperature, top_k)
            nxt.update({(*prefix, t): mass * float(probs[t]) for t in probs.nonzero().flatten().tolist()})
        joint = nxt
    return joint


@pytest.fixture(scope="module")
def sampled_joint(eagle_target):
    """The target's exact distribution of the first 3 tokens after PROMPTS[2] (T=1, top-k 3), shared by the exact
    and the mutation case."""
    return _joint(eagle_target, PROMPTS[2], 1.0, 3, 3)


@pytest.mark.parametrize("mutate", [False, True], ids=["exact", "mutation-claims-uniform-draft-probs"])
@pytest.mark.slow
def test_sampling_with_eagle_trees_follows_the_target(eagle_target, trained_eagle, sampled_joint, monkeypatch, mutate):
    """500 seeded requests at T=1, top-k 3: the first 3 tokens follow the target's joint distribution (6 tokens are
    generated so that the second step verifies a dynamic EAGLE tree of 4 nodes). Mutation: the proposer claims its top-k nodes were sampled from a uniform
    draft distribution, so the verifier accepts them with p / q instead of p: the test must see it."""
    if mutate:
        select = EagleProposer._select

        def uniform(self, tree, k):
            draft = select(self, tree, k)
            vocab = self.drafter.config.layer.vocab_size
            return Draft(draft.token_ids, torch.full((draft.num_tokens, vocab), 1 / vocab), draft.parents)

        monkeypatch.setattr(EagleProposer, "_select", uniform)
    # 500 requests (was 1000; measured): exact p = 0.38 (0.006 at 1000), the mutation p = 7e-112 (3e-228 at 1000)
    prompt, n, joint = PROMPTS[2], 500, sampled_joint
    engine = make_engine(eagle_target, trained_eagle[0], EagleTree(topk=2, depth=2))
    samplings = [SamplingParams(temperature=1.0, top_k=3, seed=i, max_new_tokens=6, ignore_eos=True)
                 for i in range(n)]
    outs = engine.generate([prompt] * n, samplings, SpecParams("eagle3", 4))
    p = _p_value(Counter(tuple(o.token_ids[:3]) for o in outs), joint)
    if mutate:
        assert p < 1e-6
    else:
        assert p > 1e-3
        assert 0 < sum(o.stats.num_accepted_tokens for o in outs) < sum(o.stats.num_draft_tokens for o in outs)


def test_drafter_chain_equals_modelopt_drafting(eagle_target, trained_eagle):
    """The reference runner computes what ModelOpt trained: load the exported weights back into a ModelOpt EAGLE-3
    model; its `pseudo_speculative_generate` drafts the same chain as the proposer (topk 1) from the same taps."""
    from safetensors.torch import load_file
    from transformers import LlamaForCausalLM

    from trtspec.spec.model import LlamaModel
    from trtspec.training.eagle import EagleRecipe, convert_with_modelopt

    drafter_dir, report = trained_eagle
    taps = tuple(report["recipe"]["taps"])
    hf = LlamaForCausalLM.from_pretrained(eagle_target, dtype=torch.float32).eval()
    mo = convert_with_modelopt(hf, taps, EagleRecipe())
    weights = {k: v.float() for k, v in load_file(drafter_dir / "model.safetensors").items() if k != "lm_head.weight"}
    missing, unexpected = mo.eagle_module.load_state_dict(weights, strict=False)
    assert not unexpected and all("rotary" in m for m in missing)
    mo.eval()
    target = LlamaModel.from_pretrained(eagle_target)
    engine = make_engine(eagle_target, drafter_dir, EagleTree(topk=1))
    proposer = engine.proposers["eagle"]
    for rid, prompt in enumerate(PROMPTS[::2] + [[9, 8, 7, 6, 5, 4, 3, 2]]):
        with torch.no_grad():
            base, expected = mo.pseudo_speculative_generate(torch.tensor([prompt]), steps=4)
        cache = target.new_cache(num_slots=1)
        out = target(torch.tensor([prompt]), cache, torch.tensor([cache.alloc()]), taps=taps)
        assert int(out.logits[0, -1].argmax()) == int(base[0, 0])
        proposer.add_request(rid)
        proposer.observe_target(rid, 0, out.aux[0])
        item = ProposeInput(rid, prompt + [int(base[0, 0])], 4, SamplingParams(), None)
        draft = proposer.propose([item])[0]
        assert draft.token_ids.tolist() == expected[0].tolist(), prompt
        assert draft.parents == (-1, 0, 1, 2)
        proposer.free(rid)


def test_pruned_dynamic_tree_drafts_the_same_nodes_with_fewer_forwards(eagle_target, trained_eagle, monkeypatch):
    """A frontier node scoring below the k-th best node so far is not expanded (its children could not be drafted):
    the drafts equal the unpruned tree's, with fewer drafter forwards. Mutation: pruning off must cost forwards."""
    from trtspec.spec.eagle_model import EagleDrafter
    from trtspec.spec.proposers.eagle import _Tree

    forwards = Counter()
    original = EagleDrafter.forward

    def counted(self, *args, **kwargs):
        forwards[mode] += 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(EagleDrafter, "forward", counted)
    drafts = {}
    for mode in ("pruned", "full"):
        if mode == "full":
            monkeypatch.setattr(_Tree, "kth_score", lambda self, k: float("-inf"))
        engine = make_engine(eagle_target, trained_eagle[0], EagleTree(topk=4, depth=6))
        proposer = engine.proposers["eagle"]
        seen: list = []

        def recording(batch, propose=proposer.propose, seen=seen):
            out = propose(batch)
            seen.extend((d.token_ids.tolist(), d.parents) for d in out)
            return out

        proposer.propose = recording
        engine.generate(PROMPTS, SamplingParams(max_new_tokens=24), SpecParams("eagle3", 4))
        drafts[mode] = seen
    assert drafts["pruned"] == drafts["full"] and any(t for t, _ in drafts["full"])
    assert forwards["pruned"] < forwards["full"]
