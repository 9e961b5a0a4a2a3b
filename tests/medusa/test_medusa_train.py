"""Medusa training (ModelOpt) and export: HF Medusa layout and TensorRT-LLM checkpoint names/shapes (1.3)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from tests.medusa.conftest import HEADS, LAYERS
from trtspec.errors import IncompatibleModelsError, ModelNotFoundError
from trtspec.spec.medusa_heads import load_medusa_heads
from trtspec.targets import SUPPORTED_TARGETS, diff_checkpoint


def _tensors(path: Path) -> dict[str, tuple[list[int], str]]:
    with safe_open(path, "pt") as f:
        return {k: (list(f.get_slice(k).get_shape()), f.get_slice(k).get_dtype()) for k in f.keys()}  # noqa: SIM118


def test_report_has_per_head_accuracy(trained_heads):
    _, report = trained_heads
    assert len(report["accuracy"]) == HEADS
    assert all(0.0 <= a["top1"] <= a["top5"] <= 1.0 for a in report["accuracy"])
    assert report["data"]["train_tokens"] > 0


def test_hf_medusa_layout(trained_heads, random_pair):
    out, _ = trained_heads
    target_cfg = json.loads((random_pair[0] / "config.json").read_text())
    hidden, vocab = target_cfg["hidden_size"], target_cfg["vocab_size"]
    config = json.loads((out / "config.json").read_text())
    assert (config["medusa_num_heads"], config["medusa_num_layers"]) == (HEADS, LAYERS)
    assert (config["hidden_size"], config["vocab_size"]) == (hidden, vocab)
    assert config["base_model_name_or_path"] == str(random_pair[0])
    expected = {}
    for h in range(HEADS):
        for layer in range(LAYERS):
            expected[f"{h}.{layer}.linear.weight"] = ([hidden, hidden], "F16")
            expected[f"{h}.{layer}.linear.bias"] = ([hidden], "F16")
        expected[f"{h}.{LAYERS}.weight"] = ([vocab, hidden], "F16")
    assert _tensors(out / "medusa_lm_head.safetensors") == expected
    assert (out / "README.md").read_text().startswith("# Medusa heads")


def test_trtllm_checkpoint_matches_medusa_format(trained_heads, random_pair):
    """Config keys and tensor names/shapes of shared/reference/trtllm-specdec.md sections 1.1 and 1.3."""
    ckpt = trained_heads[0] / "trtllm-ckpt"
    target_cfg = json.loads((random_pair[0] / "config.json").read_text())
    hidden, vocab = target_cfg["hidden_size"], target_cfg["vocab_size"]
    layers, inter = target_cfg["num_hidden_layers"], target_cfg["intermediate_size"]
    heads, kv_heads = target_cfg["num_attention_heads"], target_cfg["num_key_value_heads"]
    config = json.loads((ckpt / "config.json").read_text())
    assert config["architecture"] == "MedusaForCausalLM"
    assert (config["num_medusa_heads"], config["num_medusa_layers"], config["max_draft_len"]) == (HEADS, LAYERS, 31)
    assert config["dtype"] == "float16" and config["mapping"]["world_size"] == 1
    for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                "intermediate_size"):
        assert config[key] == target_cfg[key], key
    assert config["position_embedding_type"] == "rope_gpt_neox" and config["hidden_act"] == "silu"
    assert "norm_epsilon" in config and "max_position_embeddings" in config and config["rotary_base"] > 0

    tensors = _tensors(ckpt / "rank0.safetensors")
    head_dim = hidden // heads
    expected = {"transformer.vocab_embedding.weight": [vocab, hidden], "transformer.ln_f.weight": [hidden],
                "lm_head.weight": [vocab, hidden]}
    for i in range(layers):
        p = f"transformer.layers.{i}."
        expected |= {p + "attention.qkv.weight": [(heads + 2 * kv_heads) * head_dim, hidden],
                     p + "attention.dense.weight": [hidden, hidden], p + "mlp.gate.weight": [inter, hidden],
                     p + "mlp.fc.weight": [inter, hidden], p + "mlp.proj.weight": [hidden, inter],
                     p + "input_layernorm.weight": [hidden], p + "post_layernorm.weight": [hidden]}
    for h in range(HEADS):
        for layer in range(LAYERS):
            p = f"medusa_heads.{h}.medusa_layers.{layer}.linear."
            expected |= {p + "weight": [hidden, hidden], p + "bias": [hidden]}
        expected[f"medusa_heads.{h}.lm_head.weight"] = [vocab, hidden]
    assert {k: shape for k, (shape, _) in tensors.items()} == expected
    assert {dtype for _, dtype in tensors.values()} == {"F16"}
    # only keys the targets read: ModelOpt's `bias` is renamed attn_bias, its bookkeeping keys are dropped
    assert config["attn_bias"] is False and config["mlp_bias"] is False and "bias" not in config
    header = {k: {"dtype": dtype} for k, (_, dtype) in tensors.items()}
    for version in SUPPORTED_TARGETS:
        assert diff_checkpoint(config, header, version) == [], version


def test_both_layouts_load_to_the_same_heads(trained_heads):
    out, _ = trained_heads
    hf, trt = load_medusa_heads(out), load_medusa_heads(out / "trtllm-ckpt")
    hidden = torch.randn(3, hf.shape.hidden_size, generator=torch.Generator().manual_seed(0))
    assert hf.shape == trt.shape and hf.num_heads == HEADS
    assert torch.equal(hf(hidden), trt(hidden))  # both fp16 copies of the same weights


def test_mismatched_heads_are_refused_with_both_numbers(trained_heads, random_pair):
    out, _ = trained_heads
    target_cfg = json.loads((random_pair[0] / "config.json").read_text())
    hidden, vocab = target_cfg["hidden_size"], target_cfg["vocab_size"]
    with pytest.raises(IncompatibleModelsError) as info:
        load_medusa_heads(out, target_hidden_size=hidden * 2, target_vocab_size=vocab)
    assert f"hidden_size={hidden}" in str(info.value) and f"hidden_size={hidden * 2}" in str(info.value)
    with pytest.raises(IncompatibleModelsError) as info:
        load_medusa_heads(out / "trtllm-ckpt", target_hidden_size=hidden, target_vocab_size=vocab + 1)
    assert f"vocab_size={vocab}" in str(info.value) and f"vocab_size={vocab + 1}" in str(info.value)


def test_not_a_heads_directory(tmp_path, random_pair):
    with pytest.raises(ModelNotFoundError, match="config.json is missing"):
        load_medusa_heads(tmp_path)
    with pytest.raises(ModelNotFoundError, match="neither an HF Medusa config"):
        load_medusa_heads(random_pair[0])


def test_cli_defaults_match_the_recipe():
    from trtspec.cli.train import medusa
    from trtspec.training.medusa import MedusaRecipe

    defaults = {p.name: p.default for p in medusa.params}
    recipe = MedusaRecipe()
    assert (defaults["num_heads"], defaults["num_layers"], defaults["steps"], defaults["batch_size"]) == (
        recipe.num_heads, recipe.num_layers, recipe.steps, recipe.batch_size)
    assert (defaults["lr"], defaults["num_prompts"], defaults["gen_len"], defaults["corpus_windows"]) == (
        recipe.lr, recipe.num_prompts, recipe.gen_len, recipe.num_corpus_windows)
    assert defaults["max_draft_len"] == recipe.max_draft_len
