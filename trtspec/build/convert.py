"""trtspec's HF -> TensorRT-LLM checkpoint converter for Llama-family models (single rank, unquantized).

Used where TensorRT-LLM's `convert_checkpoint.py` cannot run (no `tensorrt_llm` on this machine). It writes the
checkpoint the targets read (trtspec/targets data files, `checkpoint` section; trtllm-specdec.md 1.1 and 1.3):
`config.json` with only keys PretrainedConfig / LLaMAConfig / MedusaConfig read (`attn_bias` and `mlp_bias`, never
`bias`), and `rank0.safetensors` with the LLaMA weight mapping and every tensor the model class loads: q/k/v +
dense biases when `attn_bias`, fc/gate/proj biases when `mlp_bias` (zeros where the HF checkpoint has none, which is
numerically the same layer), and Medusa heads with `linear.bias` (zeros when the heads have no bias).
Provenance (`producer: trtspec <version>`) goes into the safetensors metadata, not into config.json.

Why a converter of its own rather than ModelOpt's `export_tensorrt_llm_checkpoint` (nvidia-modelopt 0.47): that
exporter drops `rotary_base` (a Llama-3 rope_theta of 500000 would silently become TensorRT-LLM's default 10000),
writes float16 weights whatever dtype is asked and sets `logits_dtype: float16`, none of which is the checkpoint the
pinned TensorRT-LLM releases read.

    python -m trtspec.build.convert --model_dir HF_DIR --output_dir OUT --dtype float16 \
        [--medusa_dir HEADS --num_medusa_heads 4 --max_draft_len 63]

Imports torch (lazily, inside functions): never import this module from the planner.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import re
from pathlib import Path
from typing import Any

from trtspec import __version__
from trtspec.atomic import atomic_path, write_json
from trtspec.build.checkpoint import medusa_heads
from trtspec.errors import BuildError

# HF LLaMA name (inside model.layers.{i}.) -> TensorRT-LLM name (inside transformer.layers.{i}.); q/k/v are fused.
LAYER_MAP = {
    "self_attn.o_proj.weight": "attention.dense.weight",
    "mlp.up_proj.weight": "mlp.gate.weight",
    "mlp.gate_proj.weight": "mlp.fc.weight",
    "mlp.down_proj.weight": "mlp.proj.weight",
    "input_layernorm.weight": "input_layernorm.weight",
    "post_attention_layernorm.weight": "post_layernorm.weight",
}
# Linear layers whose bias TensorRT-LLM loads when the config says so: HF module -> TensorRT-LLM module.
ATTN_BIAS_MAP = {"self_attn.o_proj": "attention.dense"}  # q/k/v -> attention.qkv (fused)
MLP_BIAS_MAP = {"mlp.gate_proj": "mlp.fc", "mlp.up_proj": "mlp.gate", "mlp.down_proj": "mlp.proj"}
TORCH_DTYPES = ("float16", "bfloat16", "float32")


def trtllm_config(hf: dict[str, Any], dtype: str, *, attn_bias: bool | None = None,
                  mlp_bias: bool | None = None) -> dict[str, Any]:
    """The TensorRT-LLM checkpoint config.json for an HF Llama-family config (keys the targets read, nothing else).

    `attn_bias` / `mlp_bias` default to the HF config (`attention_bias` or `bias`, as LLaMAConfig.from_hugging_face
    reads it; `mlp_bias`); convert_llama also turns them on when the weights carry those biases."""
    heads = hf["num_attention_heads"]
    head_size = hf.get("head_dim") or hf["hidden_size"] // heads
    return {
        "architecture": "LlamaForCausalLM",
        "dtype": dtype,
        "logits_dtype": "float32",
        "vocab_size": hf["vocab_size"],
        "max_position_embeddings": hf.get("max_position_embeddings", 2048),
        "hidden_size": hf["hidden_size"],
        "num_hidden_layers": hf["num_hidden_layers"],
        "num_attention_heads": heads,
        "num_key_value_heads": hf.get("num_key_value_heads") or heads,
        "head_size": head_size,
        "hidden_act": hf.get("hidden_act", "silu"),
        "intermediate_size": hf["intermediate_size"],
        "norm_epsilon": hf.get("rms_norm_eps", 1e-6),
        "position_embedding_type": "rope_gpt_neox",
        "rotary_base": float(_rope(hf).get("rope_theta", hf.get("rope_theta", 10000.0))),
        "rotary_scaling": _rotary_scaling(hf),
        "mapping": {"world_size": 1, "tp_size": 1, "pp_size": 1},
        "quantization": {"quant_algo": None, "kv_cache_quant_algo": None},
        "use_parallel_embedding": False,
        "embedding_sharding_dim": 0,
        "attn_bias": bool(hf.get("attention_bias") or hf.get("bias")) if attn_bias is None else attn_bias,
        "mlp_bias": bool(hf.get("mlp_bias")) if mlp_bias is None else mlp_bias,
    }


def convert_llama(model_dir: Path, dtype: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(config, tensors) of the TensorRT-LLM checkpoint for an HF Llama checkpoint directory."""
    import torch

    hf = json.loads((model_dir / "config.json").read_text())
    archs = hf.get("architectures") or ["?"]
    if archs[0] not in ("LlamaForCausalLM", "MistralForCausalLM"):
        raise BuildError(f"{model_dir}: trtspec's converter handles Llama-family checkpoints, not {archs[0]}",
                         hint="convert it with TensorRT-LLM's convert_checkpoint.py inside the TensorRT-LLM container")
    state = _load_hf_state(model_dir)
    config = trtllm_config(hf, dtype)
    # biases present in the weights switch the flags on too (TensorRT-LLM would otherwise drop them)
    config["attn_bias"] |= any(k.endswith(("self_attn.q_proj.bias", "self_attn.o_proj.bias")) for k in state)
    config["mlp_bias"] |= any(k.endswith(("mlp.gate_proj.bias", "mlp.down_proj.bias")) for k in state)
    target_dtype = getattr(torch, dtype)
    out: dict[str, Any] = {"transformer.vocab_embedding.weight": state["model.embed_tokens.weight"],
                           "transformer.ln_f.weight": state["model.norm.weight"],
                           # tied embeddings (no lm_head in HF): TensorRT-LLM still wants its own lm_head tensor
                           "lm_head.weight": state.get("lm_head.weight", state["model.embed_tokens.weight"]).clone()}
    for i in range(hf["num_hidden_layers"]):
        src, dst = f"model.layers.{i}.", f"transformer.layers.{i}."
        # [(heads + 2 * kv_heads) * head_size, hidden]: q, k, v stacked on the output dimension
        qkv = [state[src + f"self_attn.{p}_proj.weight"] for p in ("q", "k", "v")]
        out[dst + "attention.qkv.weight"] = torch.cat(qkv, dim=0)
        for hf_name, trt_name in LAYER_MAP.items():
            out[dst + trt_name] = state[src + hf_name]
        if config["attn_bias"]:
            out[dst + "attention.qkv.bias"] = torch.cat(
                [_bias(state, src + f"self_attn.{p}_proj", w.shape[0]) for p, w in zip("qkv", qkv, strict=True)])
            out.update(_biases(state, src, dst, ATTN_BIAS_MAP))
        if config["mlp_bias"]:
            out.update(_biases(state, src, dst, MLP_BIAS_MAP))
    tensors = {k: v.to(target_dtype).contiguous() for k, v in out.items()}
    return config, tensors


def _bias(state: dict[str, Any], module: str, rows: int) -> Any:
    """`module`'s bias, or zeros of its output size when the HF layer has none (the same linear map)."""
    import torch

    bias = state.get(module + ".bias")
    return bias if bias is not None else torch.zeros(rows, dtype=state[module + ".weight"].dtype)


def _biases(state: dict[str, Any], src: str, dst: str, mapping: dict[str, str]) -> dict[str, Any]:
    return {f"{dst}{trt}.bias": _bias(state, src + hf, state[f"{src}{hf}.weight"].shape[0]) for hf, trt in mapping.items()}


def add_medusa(config: dict[str, Any], tensors: dict[str, Any], heads_dir: Path, num_heads: int | None,
               max_draft_len: int, dtype: str) -> None:
    """Turn a Llama checkpoint into MedusaForCausalLM: config keys + `medusa_heads.{h}.*` tensors (in place)."""
    import torch

    heads = medusa_heads(heads_dir)
    num_heads = num_heads or heads.num_heads
    if heads.hidden_size != config["hidden_size"] or heads.vocab_size != config["vocab_size"]:
        raise BuildError(f"{heads_dir}: heads have hidden {heads.hidden_size} / vocab {heads.vocab_size}, the target "
                         f"{config['hidden_size']} / {config['vocab_size']}", hint="use heads trained on this target")
    state = _load_file(heads.weights_file)
    target_dtype = getattr(torch, dtype)
    for h in range(num_heads):
        for layer in range(heads.num_layers):
            src = (f"{h}.{layer}.linear" if heads.layout == "fastdecoding"
                   else f"medusa_heads.{h}.medusa_layers.{layer}.linear")
            dst = f"medusa_heads.{h}.medusa_layers.{layer}.linear"
            tensors[dst + ".weight"] = state[src + ".weight"].to(target_dtype).contiguous()
            # TensorRT-LLM's Medusa layers always have a bias: heads trained without one get zeros (same map)
            tensors[dst + ".bias"] = _bias(state, src, state[src + ".weight"].shape[0]).to(target_dtype).contiguous()
        lm = f"{h}.{heads.num_layers}.weight" if heads.layout == "fastdecoding" else f"medusa_heads.{h}.lm_head.weight"
        tensors[f"medusa_heads.{h}.lm_head.weight"] = state[lm].to(target_dtype).contiguous()
    config.update({"architecture": "MedusaForCausalLM", "num_medusa_heads": num_heads,
                   "num_medusa_layers": heads.num_layers, "max_draft_len": max_draft_len, "model_type": "llama"})


def write_checkpoint(out_dir: Path, config: dict[str, Any], tensors: dict[str, Any]) -> None:
    """config.json + rank0.safetensors, each written atomically (a failed write leaves no partial file behind and
    raises a BuildError naming the file: disk full, quota, file size limit, permissions)."""
    from safetensors import SafetensorError
    from safetensors.torch import save_file

    weights = out_dir / "rank0.safetensors"
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        with atomic_path(weights) as tmp:
            try:
                # one metadata key: safetensors writes its metadata map in hash order, and two keys would make the
                # same conversion produce different bytes (and hashes) from run to run
                save_file(tensors, str(tmp), metadata={"producer": f"trtspec {__version__}"})
            except SafetensorError as exc:  # the Rust writer's I/O errors arrive as text: "... (os error 28)"
                raise OSError(_errno_of(str(exc)), _reason(str(exc)), str(weights)) from None
        write_json(out_dir / "config.json", config)
    except OSError as exc:  # the temp file is gone (atomic_path removes it)
        target = exc.filename or out_dir
        raise BuildError(f"cannot write {target}: {exc.strerror or exc}",
                         hint=f"free space on the file system of {out_dir} (or write elsewhere), then rerun"
                         if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
                         else f"check that {out_dir} is writable, then rerun") from None


def _errno_of(text: str) -> int:
    match = re.search(r"os error (\d+)", text)
    return int(match.group(1)) if match else errno.EIO


def _reason(text: str) -> str:
    match = re.search(r"os error (\d+)", text)
    return os.strerror(int(match.group(1))) if match else " ".join(text.split())[:200]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trtspec.build.convert", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model_dir", required=True, type=Path)
    parser.add_argument("--output_dir", required=True, type=Path)
    parser.add_argument("--dtype", default="float16", choices=TORCH_DTYPES)
    parser.add_argument("--medusa_dir", type=Path)
    parser.add_argument("--num_medusa_heads", type=int)
    parser.add_argument("--max_draft_len", type=int, default=63)
    args = parser.parse_args(argv)
    config, tensors = convert_llama(args.model_dir, args.dtype)
    if args.medusa_dir:
        add_medusa(config, tensors, args.medusa_dir, args.num_medusa_heads, args.max_draft_len, args.dtype)
    write_checkpoint(args.output_dir, config, tensors)
    return 0


def _rope(hf: dict[str, Any]) -> dict[str, Any]:
    """transformers 5 keeps rope settings in `rope_parameters`; 4.x at the top level / `rope_scaling`."""
    params = hf.get("rope_parameters")
    return params if isinstance(params, dict) else {}


def _rotary_scaling(hf: dict[str, Any]) -> dict[str, Any] | None:
    scaling = hf.get("rope_scaling") or {k: v for k, v in _rope(hf).items() if k != "rope_theta"}
    kind = (scaling or {}).get("rope_type") or (scaling or {}).get("type")
    if not scaling or kind in (None, "default"):
        return None
    return {"type": kind, **{k: v for k, v in scaling.items() if k not in ("type", "rope_type", "rope_theta")}}


def _load_file(path: Path) -> dict[str, Any]:
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            return load_file(str(path))
        import torch

        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - safetensors / torch raise many kinds for a damaged file
        raise BuildError(f"{path} cannot be loaded ({type(exc).__name__}: {' '.join(str(exc).split())[:160]})",
                         hint="re-download or re-save the checkpoint (a copy may have been cut short)") from None


def _load_hf_state(model_dir: Path) -> dict[str, Any]:
    files = sorted(model_dir.glob("*.safetensors")) or sorted(model_dir.glob("pytorch_model*.bin"))
    if not files:
        raise BuildError(f"{model_dir}: no *.safetensors or pytorch_model*.bin weights", hint="check the model dir")
    state: dict[str, Any] = {}
    for file in files:
        state.update(_load_file(file))
    return state


def _cli(argv: list[str] | None = None) -> int:
    """`python -m trtspec.build.convert`: errors are one line (`Error: ...`, `Hint: ...`) with trtspec's exit codes."""
    import sys

    from trtspec.errors import TrtspecError

    try:
        return main(argv)
    except TrtspecError as exc:
        print(f"Error: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"Hint: {exc.hint}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    raise SystemExit(_cli())
