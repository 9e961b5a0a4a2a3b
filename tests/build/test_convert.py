"""trtspec's HF -> TensorRT-LLM converter against every target's checkpoint facts (trtspec/targets data files):
config keys (`attn_bias`/`mlp_bias`, never `bias`), tensor names, shapes and dtypes; a Llama with attention and MLP
biases keeps every bias; q/k/v and gate/up land where TensorRT-LLM's layers read them (checked numerically)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.build.helpers import make_medusa_heads
from trtspec.build.checkpoint import safetensors_header
from trtspec.build.convert import main as convert_main
from trtspec.models import resolve_medusa, resolve_model
from trtspec.targets import SUPPORTED_TARGETS, checkpoint_tensor_names, diff_checkpoint

BIASES = ("attention.qkv", "attention.dense", "mlp.fc", "mlp.gate", "mlp.proj")


@pytest.fixture(scope="module")
def biased_llama(tmp_path_factory) -> Path:
    """A random Llama with q/k/v/o and gate/up/down biases (GQA: 4 heads, 2 KV heads)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         attention_bias=True, mlp_bias=True, bos_token_id=0, eos_token_id=1, pad_token_id=1)
    gen = torch.Generator().manual_seed(3)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.2)
    path = tmp_path_factory.mktemp("biased") / "llama"
    model.save_pretrained(path, safe_serialization=True)
    return path


def convert(model_dir: Path, out: Path, dtype: str = "float32", *extra: str) -> tuple[dict, dict]:
    assert convert_main(["--model_dir", str(model_dir), "--output_dir", str(out), "--dtype", dtype, *extra]) == 0
    return json.loads((out / "config.json").read_text()), safetensors_header(out / "rank0.safetensors")


def expected_shapes(config: dict) -> dict[str, tuple[int, ...]]:
    """Single-rank shapes of TensorRT-LLM's Llama layers (Linear weights are [out, in]) for a checkpoint config."""
    hidden, inter, head = config["hidden_size"], config["intermediate_size"], config["head_size"]
    qkv = (config["num_attention_heads"] + 2 * config["num_key_value_heads"]) * head
    per_layer = {"input_layernorm.weight": (hidden,), "post_layernorm.weight": (hidden,),
                 "attention.qkv.weight": (qkv, hidden), "attention.qkv.bias": (qkv,),
                 "attention.dense.weight": (hidden, config["num_attention_heads"] * head),
                 "attention.dense.bias": (hidden,), "mlp.fc.weight": (inter, hidden), "mlp.gate.weight": (inter, hidden),
                 "mlp.proj.weight": (hidden, inter), "mlp.fc.bias": (inter,), "mlp.gate.bias": (inter,),
                 "mlp.proj.bias": (hidden,)}
    shapes = {"transformer.vocab_embedding.weight": (config["vocab_size"], hidden),
              "transformer.ln_f.weight": (hidden,), "lm_head.weight": (config["vocab_size"], hidden)}
    for i in range(config["num_hidden_layers"]):
        shapes |= {f"transformer.layers.{i}.{name}": shape for name, shape in per_layer.items()}
    for h in range(config.get("num_medusa_heads", 0)):
        shapes[f"medusa_heads.{h}.lm_head.weight"] = (config["vocab_size"], hidden)
        for layer in range(config["num_medusa_layers"]):
            shapes[f"medusa_heads.{h}.medusa_layers.{layer}.linear.weight"] = (hidden, hidden)
            shapes[f"medusa_heads.{h}.medusa_layers.{layer}.linear.bias"] = (hidden,)
    return shapes


def assert_matches_every_target(config: dict, header: dict) -> None:
    for version in SUPPORTED_TARGETS:
        assert diff_checkpoint(config, header, version) == [], version
    shapes = expected_shapes(config)
    assert {name: tuple(info["shape"]) for name, info in header.items()} == {name: shapes[name] for name in header}


def test_biased_llama_keeps_every_bias_under_the_keys_tensorrt_llm_reads(biased_llama, tmp_path):
    config, header = convert(biased_llama, tmp_path / "ckpt")
    assert config["attn_bias"] is True and config["mlp_bias"] is True and "bias" not in config
    assert "producer" not in config and "share_embedding_table" not in config
    for i in range(2):
        assert {f"transformer.layers.{i}.{name}.bias" for name in BIASES} <= set(header)
    assert_matches_every_target(config, header)
    assert {info["dtype"] for info in header.values()} == {"F32"}


def test_q_k_v_and_gate_up_layout_equal_the_hf_layers_numerically(biased_llama, tmp_path):
    """Feed the same input through HF's layers and through TensorRT-LLM's formulas on the converted tensors:
    qkv = x W^T + b split [q | k | v]; dense; GatedMLP = proj(act(fc(x)) * gate(x)) (TensorRT-LLM layers/mlp.py)."""
    from transformers import LlamaForCausalLM

    convert(biased_llama, tmp_path / "ckpt")
    trt = load_file(str(tmp_path / "ckpt" / "rank0.safetensors"))
    model = LlamaForCausalLM.from_pretrained(biased_llama, torch_dtype=torch.float32).eval()
    cfg = model.config
    head = cfg.hidden_size // cfg.num_attention_heads
    sizes = [cfg.num_attention_heads * head, cfg.num_key_value_heads * head, cfg.num_key_value_heads * head]
    x = torch.randn(5, cfg.hidden_size, generator=torch.Generator().manual_seed(0))
    linear = torch.nn.functional.linear
    with torch.no_grad():
        for i, layer in enumerate(model.model.layers):
            p = f"transformer.layers.{i}."
            q, k, v = linear(x, trt[p + "attention.qkv.weight"], trt[p + "attention.qkv.bias"]).split(sizes, dim=-1)
            attn = layer.self_attn
            for got, module in ((q, attn.q_proj), (k, attn.k_proj), (v, attn.v_proj)):
                torch.testing.assert_close(got, module(x), rtol=0, atol=1e-6)
            y = torch.randn(5, cfg.num_attention_heads * head)
            dense = linear(y, trt[p + "attention.dense.weight"], trt[p + "attention.dense.bias"])
            torch.testing.assert_close(dense, attn.o_proj(y), rtol=0, atol=1e-6)
            fc = linear(x, trt[p + "mlp.fc.weight"], trt[p + "mlp.fc.bias"])
            gate = linear(x, trt[p + "mlp.gate.weight"], trt[p + "mlp.gate.bias"])
            mlp = linear(torch.nn.functional.silu(fc) * gate, trt[p + "mlp.proj.weight"], trt[p + "mlp.proj.bias"])
            torch.testing.assert_close(mlp, layer.mlp(x), rtol=0, atol=1e-5)
            # and the stored tensors are the HF ones, bit for bit
            assert torch.equal(trt[p + "mlp.fc.weight"], layer.mlp.gate_proj.weight)
            assert torch.equal(trt[p + "mlp.gate.bias"], layer.mlp.up_proj.bias)
            assert torch.equal(trt[p + "attention.qkv.bias"][sizes[0]:sizes[0] + sizes[1]], attn.k_proj.bias)


def test_biases_in_the_weights_turn_the_keys_on(random_pair, tmp_path):
    """A checkpoint whose config says nothing but whose q/k/v carry biases (Qwen-style) still keeps them: attn_bias
    on, o_proj's missing bias written as zeros (the same layer)."""
    import shutil

    from safetensors.torch import save_file

    src = shutil.copytree(random_pair[0], tmp_path / "hf")
    state = load_file(str(src / "model.safetensors"))
    for i in range(2):
        for p in "qkv":
            rows = state[f"model.layers.{i}.self_attn.{p}_proj.weight"].shape[0]
            state[f"model.layers.{i}.self_attn.{p}_proj.bias"] = torch.ones(rows)
    save_file(state, str(src / "model.safetensors"))
    config, header = convert(src, tmp_path / "ckpt")
    assert config["attn_bias"] is True and config["mlp_bias"] is False
    assert_matches_every_target(config, header)
    trt = load_file(str(tmp_path / "ckpt" / "rank0.safetensors"))
    assert torch.equal(trt["transformer.layers.1.attention.dense.bias"], torch.zeros(config["hidden_size"]))
    assert torch.equal(trt["transformer.layers.1.attention.qkv.bias"], torch.ones(header[
        "transformer.layers.1.attention.qkv.bias"]["shape"][0]))


@pytest.mark.parametrize("name", ["tiny", "tiny-draft"])
def test_embedded_pair_matches_every_target(name, tmp_path):
    config, header = convert(resolve_model(name), tmp_path / "ckpt", "float16")
    assert config["attn_bias"] is False and config["mlp_bias"] is False
    assert set(header) == checkpoint_tensor_names(config, "0.19.0")
    assert_matches_every_target(config, header)
    assert {info["dtype"] for info in header.values()} == {"F16"}


@pytest.mark.parametrize("bias", [True, False])
def test_medusa_heads_always_get_linear_bias(random_pair, tmp_path, bias):
    heads = make_medusa_heads(tmp_path / "heads", num_heads=2, bias=bias)
    config, header = convert(random_pair[0], tmp_path / "ckpt", "float32", "--medusa_dir", str(heads),
                             "--max_draft_len", "6")
    assert (config["architecture"], config["num_medusa_heads"], config["max_draft_len"]) == ("MedusaForCausalLM", 2, 6)
    assert_matches_every_target(config, header)
    trt, src = load_file(str(tmp_path / "ckpt" / "rank0.safetensors")), load_file(str(heads / "medusa_lm_head.safetensors"))
    got = trt["medusa_heads.1.medusa_layers.0.linear.bias"]
    assert torch.equal(got, src["1.0.linear.bias"] if bias else torch.zeros_like(got))
    assert torch.equal(trt["medusa_heads.1.lm_head.weight"], src["1.1.weight"])


def test_embedded_medusa_heads_match_every_target(tmp_path):
    config, header = convert(resolve_model("tiny"), tmp_path / "ckpt", "float16", "--medusa_dir",
                             str(resolve_medusa("tiny-medusa")), "--max_draft_len", "63")
    assert config["num_medusa_heads"] == 4 and config["model_type"] == "llama"
    assert_matches_every_target(config, header)
