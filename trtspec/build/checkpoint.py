"""Read what a checkpoint directory holds without loading it: safetensors headers, special-token ids, Medusa heads.

Pure Python (json + struct; no torch) except `medusa_heads` on `.pt` files, which imports torch lazily. Used by the
preflight checks and the memory estimate; never writes anything.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtspec.errors import ConfigError, IncompatibleModelsError

SPECIAL_TOKENS = ("bos_token_id", "eos_token_id", "pad_token_id")


def safetensors_header(path: Path) -> dict[str, dict[str, Any]]:
    """Tensor name -> {dtype, shape, data_offsets} from a .safetensors file's JSON header (reads only the header)."""
    with open(path, "rb") as fh:
        (size,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(size))
    header.pop("__metadata__", None)
    return header


def tensor_shapes(model_dir: Path) -> dict[str, tuple[int, ...]]:
    """Every tensor's shape across a directory's *.safetensors files."""
    shapes: dict[str, tuple[int, ...]] = {}
    for file in sorted(model_dir.glob("*.safetensors")):
        shapes.update({k: tuple(v["shape"]) for k, v in safetensors_header(file).items()})
    return shapes


def param_count(model_dir: Path) -> int | None:
    """Number of weights in a directory's *.safetensors files (from headers), or None when there are none."""
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for file in files:
        for info in safetensors_header(file).values():
            count = 1
            for dim in info["shape"]:
                count *= dim
            total += count
    return total


def estimate_params(config: dict[str, Any]) -> int:
    """Parameter count of a Llama-family decoder from its config.json (used when weights are not readable)."""
    hidden, vocab = config["hidden_size"], config["vocab_size"]
    layers, heads = config["num_hidden_layers"], config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or hidden // heads
    inter = config.get("intermediate_size", 4 * hidden)
    attn = hidden * head_dim * (heads + 2 * kv_heads) + heads * head_dim * hidden
    mlp = 3 * hidden * inter
    embed = vocab * hidden * (1 if config.get("tie_word_embeddings") else 2)
    return layers * (attn + mlp + 2 * hidden) + embed + hidden


def special_token_ids(model_dir: Path) -> dict[str, dict[str, Any]]:
    """bos/eos/pad ids as declared by config.json, generation_config.json and tokenizer_config.json.

    Returns {source file: {name: id or list of ids}}; tokenizer_config.json names tokens by string, which are
    mapped to ids through tokenizer.json (vocab + added tokens) when it exists.
    """
    found: dict[str, dict[str, Any]] = {}
    for name in ("config.json", "generation_config.json"):
        data = _json(model_dir / name)
        ids = {k: data[k] for k in SPECIAL_TOKENS if data.get(k) is not None}
        if ids:
            found[name] = ids
    tok_cfg = _json(model_dir / "tokenizer_config.json")
    vocab = _token_to_id(model_dir / "tokenizer.json")
    ids = {}
    for key in SPECIAL_TOKENS:
        token = tok_cfg.get(key.removesuffix("_id"))
        if isinstance(token, dict):
            token = token.get("content")
        if isinstance(token, str) and token in vocab:
            ids[key] = vocab[token]
    if ids:
        found["tokenizer_config.json"] = ids
    return found


def merged_special_ids(found: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One value per special token: generation_config wins over config.json wins over tokenizer_config."""
    merged: dict[str, Any] = {}
    for source in ("tokenizer_config.json", "config.json", "generation_config.json"):
        merged.update(found.get(source, {}))
    return merged


@dataclass(frozen=True)
class MedusaHeads:
    """What a Medusa heads directory holds."""

    path: Path
    layout: str  # "fastdecoding" (medusa_lm_head.*) | "modelopt" (TensorRT-LLM checkpoint, medusa_heads.*)
    weights_file: Path
    num_heads: int
    num_layers: int
    hidden_size: int
    vocab_size: int
    includes_base: bool  # the ModelOpt checkpoint also carries the base model's transformer.* weights


def medusa_heads(path: Path, *, field: str = "medusa.heads") -> MedusaHeads:
    """Inspect a Medusa heads directory in the FasterDecoding or the ModelOpt/TensorRT-LLM layout.

    FasterDecoding: config.json (medusa_num_heads, medusa_num_layers) + medusa_lm_head.safetensors|.pt with
    `{h}.{l}.linear.weight` and `{h}.{num_layers}.weight`. ModelOpt/TensorRT-LLM: config.json (architecture
    MedusaForCausalLM, num_medusa_heads, num_medusa_layers) + rank0.safetensors with
    `medusa_heads.{h}.medusa_layers.{l}.linear.weight` and `medusa_heads.{h}.lm_head.weight`.
    """
    config = _json(path / "config.json")
    if not config:
        raise ConfigError(field, str(path), "has no config.json",
                          hint="a Medusa heads directory holds config.json plus medusa_lm_head.safetensors "
                               "(FasterDecoding) or rank0.safetensors (ModelOpt/TensorRT-LLM)")
    if config.get("architecture") == "MedusaForCausalLM" or "num_medusa_heads" in config:
        weights = path / "rank0.safetensors"
        if not weights.is_file():
            raise ConfigError(field, str(path), "is a ModelOpt/TensorRT-LLM Medusa checkpoint without rank0.safetensors",
                              hint="re-export the heads with ModelOpt's TensorRT-LLM exporter")
        shapes = {k: tuple(v["shape"]) for k, v in safetensors_header(weights).items()}
        prefix, layout = "medusa_heads.", "modelopt"
        head_key, lm_key = "medusa_heads.{h}.medusa_layers.{l}.linear.weight", "medusa_heads.{h}.lm_head.weight"
        num_heads, num_layers = config.get("num_medusa_heads"), config.get("num_medusa_layers")
    else:
        weights = next((path / n for n in ("medusa_lm_head.safetensors", "medusa_lm_head.pt")
                        if (path / n).is_file()), None)
        if weights is None:
            raise ConfigError(field, str(path), "has neither medusa_lm_head.safetensors nor medusa_lm_head.pt",
                              hint="point medusa.heads at the FasterDecoding heads directory")
        shapes = _pt_shapes(weights) if weights.suffix == ".pt" else {
            k: tuple(v["shape"]) for k, v in safetensors_header(weights).items()}
        prefix, layout = "", "fastdecoding"
        head_key, lm_key = "{h}.{l}.linear.weight", "{h}.{n}.weight"
        num_heads, num_layers = config.get("medusa_num_heads"), config.get("medusa_num_layers")
    # The config may under-report heads (medusa-vicuna-7b-v1.3 says 2, holds 4): count heads from the tensors.
    present = {int(k[len(prefix):].split(".")[0]) for k in shapes if k[len(prefix):].split(".")[0].isdigit()}
    num_heads = len(present) if present else num_heads
    num_layers = num_layers or 1
    if not num_heads:
        raise ConfigError(field, str(path), "holds no Medusa head tensors",
                          hint=f"expected names like {head_key.format(h=0, l=0)}")
    first_lm = lm_key.format(h=0, n=num_layers)
    first_layer = head_key.format(h=0, l=0)
    if first_lm not in shapes or first_layer not in shapes:
        raise ConfigError(field, str(path), f"lacks {first_lm if first_lm not in shapes else first_layer} "
                          f"(num_layers={num_layers})", hint="check medusa_num_layers / num_medusa_layers in config.json")
    vocab, hidden = shapes[first_lm]
    return MedusaHeads(path=path, layout=layout, weights_file=weights, num_heads=num_heads, num_layers=num_layers,
                       hidden_size=hidden, vocab_size=vocab,
                       includes_base=any(k.startswith("transformer.") for k in shapes))


def check_heads_match(heads: MedusaHeads, target_config: dict[str, Any], target: str) -> None:
    """Refuse heads whose hidden size or vocab differs from the target (names both numbers)."""
    for what, head_value, key in (("hidden size", heads.hidden_size, "hidden_size"),
                                  ("vocab size", heads.vocab_size, "vocab_size")):
        if head_value != target_config.get(key):
            raise IncompatibleModelsError(
                f"medusa.heads={str(heads.path)!r}: heads have {what} {head_value}, target {target!r} has "
                f"{target_config.get(key)}",
                hint="use heads trained on this target (`trtspec train medusa --target ...`)")


def _pt_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a core dependency
        raise ConfigError("medusa.heads", str(path), "is a .pt file and torch is not installed",
                          hint="pip install torch, or convert the heads to safetensors") from None
    state = torch.load(path, map_location="cpu", weights_only=True)
    return {k: tuple(v.shape) for k, v in state.items()}


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _token_to_id(path: Path) -> dict[str, int]:
    data = _json(path)
    vocab = data.get("model", {}).get("vocab", {})
    mapping = dict(vocab) if isinstance(vocab, dict) else {}
    mapping.update({t["content"]: t["id"] for t in data.get("added_tokens", []) if "content" in t})
    return mapping
