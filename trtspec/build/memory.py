"""GPU memory estimate: weights + KV cache of every engine on one GPU -> per-engine KV-cache limits. Pure.

Two engines on one GPU (draft_target, engine workflow) must split memory: TensorRT-LLM's
`kv_cache_free_gpu_mem_fraction` is a fraction of what is free *after* each model loads, so it depends on load order.
trtspec therefore sets an absolute `max_tokens_in_paged_kv_cache` per engine (the documented mitigation,
trtllm-specdec.md section 6) and also reports the fractions for the load order target -> draft.

The PyTorch workflow sizes once for both models (`tensorrt_llm/_torch/pyexecutor/_util.py`, pytorch-workflow.json
source `kv_cache_sizing`; controls.json notes): one `free_gpu_memory_fraction` of the memory free after both models'
weights, divided by the target's plus the draft's KV bytes per token, and that many tokens for each model's cache.
Its `kv_cache_config` is the `LLM_API` entry: the same token count for both, the fraction of (GPU - both weights -
reserve) those tokens take at the summed bytes per token.

Estimate per GPU (tp x pp ranks split weights and KV heads):
    weights   = params x bytes(dtype or quantization) / (tp x pp)
    KV/token  = 2 (K and V) x layers x ceil(kv_heads / tp) x head_dim x bytes(kv dtype) / pp
    wanted    = max_batch_size x (max_seq_len + max_draft_len) tokens per engine
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtspec.build.checkpoint import estimate_params, param_count
from trtspec.config import BuildSpec
from trtspec.errors import ConfigError

if TYPE_CHECKING:
    from trtspec.build.checkpoint import MedusaHeads
    from trtspec.build.preflight import Check, ModelRef

GIB = 1 << 30
LLM_API = "llm_api"  # estimate_kv's entry for the PyTorch workflow's one kv_cache_config (module docstring)
DTYPE_SIZE = {"float32": 4, "float16": 2, "bfloat16": 2}
QUANT_SIZE = {"fp8": 1.0, "int8_wo": 1.0, "int4_wo": 0.5}
# Fraction bounds. TensorRT-LLM (LLM-API KvCacheConfig and the Triton backend alike) sizes the KV cache by the smaller
# of max_tokens and free_gpu_memory_fraction (targets data: llm_api.kv_cache_config.sizing), and trtspec sets both
# where it estimates memory, so the floor never grows a cache past its max_tokens: it only keeps a tiny model's
# fraction (0.001) from reading as a misconfiguration.
MIN_FRACTION, MAX_FRACTION = 0.05, 0.95


@dataclass(frozen=True)
class EngineMemory:
    """KV-cache settings for one engine (what the Triton config / LLM-API kv_cache_config should use)."""

    role: str
    weights_gib: float | None
    kv_bytes_per_token: int | None
    wanted_tokens: int
    max_tokens_in_paged_kv_cache: int | None
    kv_cache_free_gpu_mem_fraction: float | None
    source: str  # "estimate" | "config" | "unset"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def estimate_kv(spec: BuildSpec, models: dict[str, ModelRef], max_draft_len: int, heads: MedusaHeads | None,
                checks: list[Check]) -> dict[str, EngineMemory]:
    """Per-engine KV settings from the GPU memory estimate (or the config's explicit values)."""
    from trtspec.build.preflight import Check

    engine, kv = spec.engine, spec.kv_cache
    roles = [r for r in ("target", "draft") if r in models]
    wanted = engine.max_batch_size * (engine.max_seq_len + max_draft_len)
    configs = {r: models[r].config for r in roles}
    if spec.gpu.memory_gib is None or any(c is None for c in configs.values()):
        why = "gpu.memory_gib unset" if spec.gpu.memory_gib is None else "model configs not available here"
        checks.append(Check("gpu memory", "skipped" if spec.gpu.memory_gib is None else "unchecked", why))
        source = "config" if (kv.max_tokens or kv.free_gpu_memory_fraction) else "unset"
        return {r: EngineMemory(r, None, None, wanted, kv.max_tokens, kv.free_gpu_memory_fraction, source)
                for r in roles}

    tp = {"target": engine.tp_size, "draft": engine.draft_tp_size or engine.tp_size}
    weights = {r: _weight_bytes(models[r], configs[r], spec) / (tp[r] * engine.pp_size) for r in roles}
    if heads is not None:
        weights["target"] += heads.num_heads * (heads.num_layers * heads.hidden_size ** 2
                                                + heads.vocab_size * heads.hidden_size) * _param_size(spec)
    per_token = {r: _kv_bytes_per_token(configs[r], spec, tp[r]) for r in roles}
    total = spec.gpu.memory_gib * GIB
    reserve = spec.gpu.reserve_gib * GIB * len(roles)
    free = total - sum(weights.values()) - reserve
    if free <= 0:
        raise ConfigError("gpu.memory_gib", spec.gpu.memory_gib,
                          f"cannot hold the weights: {_gib(sum(weights.values()))} GiB of weights + "
                          f"{_gib(reserve)} GiB reserve", hint="quantize (engine.quantization: fp8), raise "
                          "engine.tp_size, or use a larger GPU")
    tokens = {r: kv.max_tokens or wanted for r in roles}
    needed = sum(tokens[r] * per_token[r] for r in roles)
    if needed > free:
        if kv.max_tokens:
            raise ConfigError("kv_cache.max_tokens", kv.max_tokens,
                              f"needs {_gib(needed)} GiB of KV cache but only {_gib(free)} GiB are free",
                              hint="lower kv_cache.max_tokens or drop it to let trtspec size it")
        scale = free / needed
        tokens = {r: int(tokens[r] * scale) for r in roles}
    one_sequence = engine.max_seq_len + max_draft_len
    for role in roles:
        if tokens[role] < one_sequence:
            raise ConfigError("engine.max_seq_len", engine.max_seq_len,
                              f"the {role} KV cache fits only {tokens[role]} tokens on a {spec.gpu.memory_gib} GiB "
                              f"GPU, less than one sequence ({one_sequence})",
                              hint="lower max_seq_len / max_batch_size, quantize the KV cache (kv_cache.dtype: fp8), "
                                   "or raise tp_size")
    # Fractions for load order target -> draft: each is of the memory free right after that model loads.
    fractions: dict[str, float] = {}
    free_now = total
    for role in roles:
        free_now -= weights[role] + spec.gpu.reserve_gib * GIB
        kv_bytes = tokens[role] * per_token[role]
        estimate = round(kv_bytes / free_now + 0.0005, 3)
        fractions[role] = kv.free_gpu_memory_fraction or min(MAX_FRACTION, max(MIN_FRACTION, estimate))
        free_now -= kv_bytes
    checks.append(Check("gpu memory", "ok", ", ".join(
        f"{r}: weights {_gib(weights[r])} GiB, KV {tokens[r]} tokens x {per_token[r]} B" for r in roles)
        + f" on {spec.gpu.memory_gib} GiB"))
    out = {r: EngineMemory(r, round(weights[r] / GIB, 3), per_token[r], wanted, tokens[r], fractions[r], "estimate")
           for r in roles}
    # the PyTorch workflow: one fraction of what both models leave free, over both caches' bytes per token
    shared_tokens, shared_per_token = min(tokens.values()), sum(per_token.values())
    estimate = round(shared_tokens * shared_per_token / free + 0.0005, 3)
    out[LLM_API] = EngineMemory(LLM_API, round(sum(weights.values()) / GIB, 3), shared_per_token, wanted, shared_tokens,
                                kv.free_gpu_memory_fraction or min(MAX_FRACTION, max(MIN_FRACTION, estimate)),
                                "estimate")
    return out


def _param_size(spec: BuildSpec) -> float:
    return QUANT_SIZE.get(spec.engine.quantization, DTYPE_SIZE[spec.engine.dtype])


def _weight_bytes(ref: ModelRef, config: dict[str, Any], spec: BuildSpec) -> float:
    params = param_count(Path(ref.path)) if ref.exists else None
    return (params if params is not None else estimate_params(config)) * _param_size(spec)


def _kv_bytes_per_token(config: dict[str, Any], spec: BuildSpec, tp: int) -> int:
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    kv_size = 1 if spec.kv_cache.dtype in ("fp8", "int8") else DTYPE_SIZE[spec.engine.dtype]
    layers = -(-config["num_hidden_layers"] // spec.engine.pp_size)
    return int(2 * layers * -(-kv_heads // tp) * head_dim * kv_size)


def _gib(value: float) -> str:
    return f"{value / GIB:.3g}"
