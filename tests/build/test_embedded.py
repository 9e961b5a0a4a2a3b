"""Acceptance on the embedded models: build_configs/tiny-*.yaml really convert here (skipped until they exist)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.build.test_execute import run_build
from trtspec.build.bundle import load_bundle
from trtspec.models import embedded_path

ROOT = Path(__file__).resolve().parents[2]
needs_tiny = pytest.mark.skipif(not (embedded_path("tiny") / "config.json").is_file(),
                                reason="embedded models not in this checkout yet")


@needs_tiny
def test_tiny_draft_target_converts_and_reports_engines(tmp_path, capsys):
    out = tmp_path / "out"
    assert run_build(ROOT / "build_configs/tiny-draft-target.yaml", "--only", "convert", "--out", out) == 0
    for role, name in (("target", "tiny"), ("draft", "tiny-draft")):
        hf = embedded_path(name)
        if (hf / "model.safetensors").is_file():
            check_llama_checkpoint_dtype_free(out / "checkpoints" / role, hf)
    manifest = json.loads((out / "trtspec-manifest.json").read_text())
    assert [p["id"] for p in manifest["pending"]] == ["engine-target", "engine-draft"]
    assert run_build(ROOT / "build_configs/tiny-draft-target.yaml", "--out", out) == 3
    assert "needs TensorRT-LLM" in capsys.readouterr().err


def check_llama_checkpoint_dtype_free(ckpt: Path, hf: Path) -> None:
    config = json.loads((ckpt / "config.json").read_text())
    assert config["dtype"] == "float16" and config["architecture"] == "LlamaForCausalLM"
    assert config["vocab_size"] == json.loads((hf / "config.json").read_text())["vocab_size"]


@needs_tiny
def test_tiny_torch_bundle(tmp_path):
    out = tmp_path / "bundle"
    assert run_build(ROOT / "build_configs/tiny-torch.yaml", "--out", out) == 0
    config = load_bundle(out).engine
    assert config.method == "draft_target" and config.default_k == 4
    assert (Path(config.target) / "tokenizer.json").is_file() and (Path(config.draft) / "model.safetensors").is_file()
    # the reference engine consumes the bundle: speculative greedy output == plain greedy output
    from trtspec.spec.engine import SpecEngine
    from trtspec.spec.params import SamplingParams, SpecParams

    engine = SpecEngine.from_config(config)
    sampling = SamplingParams(max_new_tokens=12, ignore_eos=True)
    spec = engine.generate(["def add(a, b):"], sampling=sampling, spec=SpecParams(config.method, config.default_k))
    plain = engine.generate(["def add(a, b):"], sampling=sampling, spec=SpecParams(config.method, 0))
    assert spec[0].token_ids == plain[0].token_ids and len(spec[0].token_ids) == 12
    assert spec[0].stats.num_drafts > 0


@pytest.mark.skipif(not (embedded_path("tiny-medusa") / "config.json").is_file(), reason="tiny-medusa not here yet")
def test_tiny_medusa_converts(tmp_path):
    out = tmp_path / "out"
    assert run_build(ROOT / "build_configs/tiny-medusa.yaml", "--only", "convert", "--out", out) == 0
    config = json.loads((out / "checkpoints/target/config.json").read_text())
    assert config["architecture"] == "MedusaForCausalLM" and config["num_medusa_heads"] >= 1
