"""The Llama runner matches transformers' LlamaForCausalLM (fp32 max abs diff <= 1e-4) through its KV cache."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import make_random_llama
from trtspec.errors import ConfigError
from trtspec.spec.model import LlamaConfig, LlamaModel

TOL = 1e-4


def _ids(n: int, seed: int, vocab: int = 64) -> torch.Tensor:
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def models(random_pair):
    model = LlamaModel.from_pretrained(random_pair[0])
    return model, pytest.importorskip("transformers").LlamaForCausalLM.from_pretrained(random_pair[0]).eval()


def test_prefill_and_incremental_decode_match_transformers(models):
    model, hf = models
    ids = _ids(20, 0)  # [20]
    with torch.no_grad():
        ref = hf(ids[None]).logits[0]  # [20, vocab]
    cache = model.new_cache(num_slots=1)
    slot = torch.tensor([cache.alloc()])
    prefill = model(ids[None, :12], cache, slot)
    assert (prefill.logits[0] - ref[:12]).abs().max() <= TOL
    assert prefill.hidden.shape == (1, 12, model.config.hidden_size)
    for t in range(12, 20):  # one token at a time through the cache
        step = model(ids[None, t : t + 1], cache, slot)
        assert (step.logits[0, 0] - ref[t]).abs().max() <= TOL
    assert cache.length(int(slot)) == 20


def test_ragged_batch_matches_each_sequence_alone(models):
    model, hf = models
    prompts = [_ids(n, seed) for n, seed in [(9, 1), (4, 2), (13, 3)]]
    cache = model.new_cache(num_slots=2)  # grows to 4 slots
    slots = torch.tensor([cache.alloc() for _ in prompts])
    width = max(len(p) for p in prompts)
    input_ids = torch.zeros(3, width, dtype=torch.long)
    for i, p in enumerate(prompts):
        input_ids[i, : len(p)] = p
    num_tokens = torch.tensor([len(p) for p in prompts])
    out = model(input_ids, cache, slots, num_tokens=num_tokens)
    # then a second, ragged step over different cache lengths
    more = [_ids(n, 10 + i) for i, n in enumerate([3, 1, 2])]
    input_ids = torch.zeros(3, 3, dtype=torch.long)
    for i, p in enumerate(more):
        input_ids[i, : len(p)] = p
    out2 = model(input_ids, cache, slots, num_tokens=torch.tensor([3, 1, 2]))
    for i, (p, m) in enumerate(zip(prompts, more, strict=True)):
        with torch.no_grad():
            ref = hf(torch.cat([p, m])[None]).logits[0]  # [len(p) + len(m), vocab]
        assert (out.logits[i, : len(p)] - ref[: len(p)]).abs().max() <= TOL
        assert (out2.logits[i, : len(m)] - ref[len(p) :]).abs().max() <= TOL
        assert cache.length(int(slots[i])) == len(p) + len(m)


def test_rollback_then_new_tokens_equals_fresh_run(models):
    model, hf = models
    ids = _ids(10, 4)
    cache = model.new_cache(num_slots=1)
    slot = torch.tensor([cache.alloc()])
    model(ids[None, :8], cache, slot)
    model(torch.tensor([[5, 6, 7]]), cache, slot)  # rejected draft tokens
    cache.rollback(int(slot), 8)
    out = model(ids[None, 8:], cache, slot)
    with torch.no_grad():
        ref = hf(ids[None]).logits[0]
    assert (out.logits[0] - ref[8:]).abs().max() <= TOL
    with pytest.raises(ValueError):
        cache.rollback(int(slot), 11)


def test_tree_mask_and_positions_match_separate_branches(models):
    """Two branches [a, b] and [c] after a prefix, in one forward with a tree mask, equal each branch run alone."""
    model, hf = models
    prefix = _ids(6, 5)
    a, b, c = 3, 9, 17
    cache = model.new_cache(num_slots=1)
    slot = torch.tensor([cache.alloc()])
    model(prefix[None], cache, slot)
    tree_mask = torch.tensor([[[1, 0, 0], [1, 1, 0], [0, 0, 1]]], dtype=torch.bool)  # nodes a, b (child of a), c
    positions = torch.tensor([[6, 7, 6]])
    out = model(torch.tensor([[a, b, c]]), cache, slot, positions=positions, tree_mask=tree_mask)
    with torch.no_grad():
        ref_ab = hf(torch.cat([prefix, torch.tensor([a, b])])[None]).logits[0]
        ref_c = hf(torch.cat([prefix, torch.tensor([c])])[None]).logits[0]
    assert (out.logits[0, :2] - ref_ab[6:]).abs().max() <= TOL
    assert (out.logits[0, 2] - ref_c[6]).abs().max() <= TOL
    # keep branch c: compact the cache to prefix + [c], then continue
    cache.compact(int(slot), 6, [2])
    nxt = model(torch.tensor([[a]]), cache, slot)
    with torch.no_grad():
        ref = hf(torch.cat([prefix, torch.tensor([c, a])])[None]).logits[0]
    assert (nxt.logits[0, 0] - ref[-1]).abs().max() <= TOL


def test_tied_embeddings_fp16_and_config_fields(tmp_path):
    path = make_random_llama(tmp_path / "tied", tie=True, kv_heads=1, seed=3)
    hf = pytest.importorskip("transformers").LlamaForCausalLM.from_pretrained(path).eval()
    ids = _ids(7, 6)
    model = LlamaModel.from_pretrained(path)
    cache = model.new_cache(num_slots=1)
    out = model(ids[None], cache, torch.tensor([cache.alloc()]))
    with torch.no_grad():
        assert (out.logits[0] - hf(ids[None]).logits[0]).abs().max() <= TOL
    half = LlamaModel.from_pretrained(path, dtype="float16")
    assert half.lm_head.weight.dtype == torch.float16 and half.inv_freq.dtype == torch.float32
    hf_4x = {"vocab_size": 8, "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1,
             "num_attention_heads": 2, "rope_theta": 500000.0, "eos_token_id": [1, 2]}  # transformers 4.x layout
    cfg = LlamaConfig.from_hf(hf_4x)
    assert cfg.rope_theta == 500000.0 and cfg.num_kv_heads == 2 and cfg.head_dim == 4 and cfg.eos_token_ids == (1, 2)
    with pytest.raises(ConfigError, match="rope_type"):
        LlamaConfig.from_hf({**hf_4x, "rope_parameters": {"rope_type": "yarn", "rope_theta": 1.0}})


def test_context_overflow_is_a_clear_error(models):
    model, _ = models
    cache = model.new_cache(num_slots=1, max_seq_len=8)
    with pytest.raises(ConfigError, match="context of 8"):
        model(_ids(9, 0)[None], cache, torch.tensor([cache.alloc()]))
