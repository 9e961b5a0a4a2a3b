"""Medusa in the reference engine: temperature-0 parity with plain greedy over several trees, KV compaction of the
accepted tree path, sampling determinism, lossy typical acceptance labelled, and bad heads/choices refused."""

from __future__ import annotations

import pytest
import torch

from trtspec import choices as tree_choices
from trtspec.choices import MC_SIM_7B_63
from trtspec.contracts.engine import MedusaTree, ProposerOptions
from trtspec.errors import ConfigError, IncompatibleModelsError
from trtspec.spec.engine import SpecEngine
from trtspec.spec.medusa_heads import MedusaHeads, MedusaShape, save_medusa_hf
from trtspec.spec.params import SamplingParams, SpecParams

PROMPTS = [[3, 5, 7, 9, 11], [20, 21, 22], [40, 2, 2, 2, 2, 2, 8, 13], [60]]
TREES = {
    "mc_sim_7b_63": "mc_sim_7b_63",
    "chain": "[[0], [0, 0], [0, 0, 0], [0, 0, 0, 0]]",
    "wide": "[[0], [1], [2], [3], [4], [5]]",
    "branchy": "{0}, {1}, {2}, {0, 0}, {1, 0}, {2, 0}, {2, 1}, {1, 0, 0}, {2, 0, 0}, {1, 0, 0, 0}",
}


def _engine(target, heads, choices: str | None = None) -> SpecEngine:
    tree = MedusaTree() if choices is None else MedusaTree(choices=tuple(map(tuple, tree_choices.parse(choices))))
    return SpecEngine.from_pretrained(target, medusa=heads, max_k=64, options=ProposerOptions(medusa_tree=tree))


@pytest.mark.parametrize("tree", sorted(TREES))
def test_greedy_medusa_equals_plain_greedy(random_pair, trained_heads, tree, monkeypatch):
    engine = _engine(random_pair[0], trained_heads[0], TREES[tree])
    compactions = []
    compact = engine.cache.compact
    monkeypatch.setattr(engine.cache, "compact", lambda *a: (compactions.append(a), compact(*a)))
    sampling = SamplingParams(temperature=0.0, max_new_tokens=48, ignore_eos=True)
    plain = engine.generate(PROMPTS, sampling, SpecParams(method="none", k=0))
    medusa = engine.generate(PROMPTS, sampling, SpecParams(method="medusa", k=64))
    for p, m in zip(plain, medusa, strict=True):
        assert m.token_ids == p.token_ids
        assert m.stats.num_drafts > 0
    assert sum(m.stats.num_accepted_tokens for m in medusa) > 0  # the heads do get tokens accepted
    if tree in ("mc_sim_7b_63", "branchy"):
        assert compactions  # accepted paths off the first branch were compacted in the KV cache


def test_mixed_batch_and_truncated_trees_stay_exact(random_pair, trained_heads):
    engine = _engine(random_pair[0], trained_heads[0], "mc_sim_7b_63")
    sampling = SamplingParams(temperature=0.0, max_new_tokens=40, ignore_eos=True)
    plain = engine.generate(PROMPTS, sampling, SpecParams(method="none", k=0))
    specs = [SpecParams(method="medusa", k=k) for k in (64, 5, 1, 17)]  # k < 63 keeps the first k nodes
    mixed = engine.generate(PROMPTS, sampling, specs)
    assert [m.token_ids for m in mixed] == [p.token_ids for p in plain]


def test_sampling_is_seeded_and_typical_is_lossy_by_name(random_pair, trained_heads):
    engine = _engine(random_pair[0], trained_heads[0], "mc_sim_7b_63")
    sampling = SamplingParams(temperature=0.8, max_new_tokens=16, seed=11, ignore_eos=True)
    exact = SpecParams(method="medusa", k=64)
    first, second = (engine.generate(PROMPTS[:2], sampling, exact) for _ in range(2))
    assert [o.token_ids for o in first] == [o.token_ids for o in second]
    typical = engine.generate(PROMPTS[:2], sampling, SpecParams(method="medusa", k=64, acceptance="typical_lossy"))
    assert all(len(o.token_ids) == 16 for o in typical)
    with pytest.raises(ConfigError, match="acceptance"):
        engine.generate(PROMPTS[:1], sampling, SpecParams(method="ngram", k=3, acceptance="typical_lossy"))


def test_heads_of_another_hidden_size_or_vocab_are_refused(random_pair, tmp_path):
    target = random_pair[0]
    for name, shape in (("hidden", MedusaShape(2, 1, 16, 64)), ("vocab", MedusaShape(2, 1, 48, 80))):
        save_medusa_hf(MedusaHeads(shape), tmp_path / name, base_model="other")
        with pytest.raises(IncompatibleModelsError) as info:
            _engine(target, tmp_path / name)
        message = str(info.value)
        if name == "hidden":
            assert "hidden_size=16" in message and "hidden_size=48" in message
        else:
            assert "vocab_size=80" in message and "vocab_size=64" in message


@pytest.mark.parametrize(("choices", "fragment"), [("[[0], [0, 0], [0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0, 0]]",
                                                     "[0, 0, 0, 0, 0]"), ("[[1], [0, 3]]", "[0, 3]")])
def test_bad_choices_for_the_heads_are_refused(random_pair, trained_heads, choices, fragment):
    with pytest.raises(ConfigError) as info:
        _engine(random_pair[0], trained_heads[0], choices)
    assert fragment in str(info.value)


def test_default_tree_is_mc_sim_cut_to_the_heads(random_pair, trained_heads):
    proposer = _engine(random_pair[0], trained_heads[0]).proposers["medusa"]
    assert proposer.choices == sorted(MC_SIM_7B_63, key=lambda p: (len(p), p))
    hidden = torch.randn(2, 48)
    from trtspec.spec.proposers import ProposeInput

    drafts = proposer.propose([ProposeInput(0, [1, 2], 63, SamplingParams(), None, hidden[0]),
                               ProposeInput(1, [1, 2], 7, SamplingParams(), None, None)])
    assert drafts[0].num_tokens == 63 and drafts[0].parents[:3] == (-1, -1, -1)
    assert drafts[1].num_tokens == 0  # no hidden state yet: nothing to draft
