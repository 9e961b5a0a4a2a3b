"""Helpers for the build tests: write configs and Medusa heads next to the random pair."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from safetensors.numpy import save_file

from trtspec.build.plan import plan_build
from trtspec.build.preflight import run_preflight
from trtspec.config import parse_build_spec

# The build tests were written for the engine workflow at 0.19.0, the default target before 1.2.1: a test that names no
# target (nor a workflow) plans that, so it keeps its meaning. The default target and the PyTorch workflow have their
# own tests (test_config.py, test_pytorch_workflow.py).
ENGINE_TARGET = "0.19.0"


def pinned(fields: dict[str, Any]) -> dict[str, Any]:
    """`fields` with `trtllm: {version: ENGINE_TARGET}` unless they name a target or a workflow (or are a torch
    bundle)."""
    if fields.get("backend") == "torch" or {"trtllm", "trtllm_version", "workflow"} & set(fields):
        return fields
    return {**fields, "trtllm": {"version": ENGINE_TARGET}}


def spec_of(**fields: Any):
    return parse_build_spec(pinned(fields))


def plan_of(dry_run: bool = False, **fields: Any):
    resolved = run_preflight(spec_of(**fields), dry_run=dry_run)
    return resolved, plan_build(resolved)


def write_config(path: Path, **fields: Any) -> Path:
    path.write_text(yaml.safe_dump(pinned(fields)))
    return path


def copy_model(src: Path, dst: Path, **config_updates: Any) -> Path:
    shutil.copytree(src, dst)
    if config_updates:
        cfg = json.loads((dst / "config.json").read_text())
        cfg.update(config_updates)
        (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def make_medusa_heads(path: Path, *, layout: str = "fastdecoding", num_heads: int = 3, num_layers: int = 1,
                      hidden: int = 48, vocab: int = 64, config_heads: int | None = None, bias: bool = True) -> Path:
    """Random Medusa heads in the FasterDecoding or the ModelOpt/TensorRT-LLM layout (`bias=False`: no linear.bias)."""
    rng = np.random.default_rng(0)
    path.mkdir(parents=True)
    tensors: dict[str, np.ndarray] = {}
    for h in range(num_heads):
        for layer in range(num_layers):
            weight = rng.standard_normal((hidden, hidden), dtype=np.float32) * 0.02
            prefix = f"{h}.{layer}.linear" if layout == "fastdecoding" else f"medusa_heads.{h}.medusa_layers.{layer}.linear"
            tensors[f"{prefix}.weight"] = weight
            if bias:
                tensors[f"{prefix}.bias"] = rng.standard_normal(hidden, dtype=np.float32) * 0.02
        lm = rng.standard_normal((vocab, hidden), dtype=np.float32) * 0.02
        tensors[f"{h}.{num_layers}.weight" if layout == "fastdecoding" else f"medusa_heads.{h}.lm_head.weight"] = lm
    if layout == "fastdecoding":
        config = {"medusa_num_heads": config_heads or num_heads, "medusa_num_layers": num_layers,
                  "hidden_size": hidden, "vocab_size": vocab}
        save_file(tensors, str(path / "medusa_lm_head.safetensors"))
    else:
        config = {"architecture": "MedusaForCausalLM", "num_medusa_heads": config_heads or num_heads,
                  "num_medusa_layers": num_layers, "hidden_size": hidden, "vocab_size": vocab}
        save_file(tensors, str(path / "rank0.safetensors"))
    (path / "config.json").write_text(json.dumps(config))
    return path
