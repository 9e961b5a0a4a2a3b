"""KV-cache sizing for the PyTorch workflow (build/memory.py `LLM_API`): TensorRT-LLM's PyTorch backend applies one
`free_gpu_memory_fraction` to what both models leave free and spreads it over the target's plus the draft's KV bytes per
token (pytorch-workflow.json source `kv_cache_sizing`); a fraction sized for the target's bytes alone gives the
draft-target pair fewer tokens than it asked for."""

from __future__ import annotations

import pytest

from trtspec.build.memory import GIB, LLM_API, estimate_kv
from trtspec.build.preflight import ModelRef
from trtspec.config import parse_build_spec

LLAMA_8B = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
            "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256}
LLAMA_1B = {"architectures": ["LlamaForCausalLM"], "hidden_size": 2048, "intermediate_size": 8192,
            "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
            "head_dim": 64}


def test_one_fraction_covers_target_and_draft_kv_after_both_weights():
    spec = parse_build_spec({"target": "/m/t", "draft": "/m/d", "method": "draft_target", "max_draft_len": 4,
                             "engine": {"max_batch_size": 64, "max_seq_len": 4096}, "gpu": {"memory_gib": 80}})
    models = {"target": ModelRef("target", "/m/t", "/m/t", False, LLAMA_8B),
              "draft": ModelRef("draft", "/m/d", "/m/d", False, LLAMA_1B)}
    kv = estimate_kv(spec, models, 4, None, [])
    shared, target, draft = kv[LLM_API], kv["target"], kv["draft"]
    assert shared.kv_bytes_per_token == target.kv_bytes_per_token + draft.kv_bytes_per_token
    free_after_both = 80 * GIB - (target.weights_gib + draft.weights_gib) * GIB - 2 * 2.0 * GIB
    # TensorRT-LLM's own arithmetic (_util.py): tokens = fraction x free / (target + draft bytes per token)
    tokens = shared.kv_cache_free_gpu_mem_fraction * free_after_both / shared.kv_bytes_per_token
    assert tokens == pytest.approx(shared.max_tokens_in_paged_kv_cache, rel=0.01)
    # the target-only fraction, read the same way, leaves the pair short by the draft's share of the bytes
    short = target.kv_cache_free_gpu_mem_fraction * (80 * GIB - target.weights_gib * GIB - 2.0 * GIB) \
        / shared.kv_bytes_per_token
    assert short < 0.9 * shared.max_tokens_in_paged_kv_cache
