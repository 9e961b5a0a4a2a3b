"""A lean Llama-family runner that loads Hugging Face safetensors directly, plus its slot-based KV cache.

One batched forward runs ragged sequences (rows right-padded to T tokens), each reading and appending to its own
cache slot, under an explicit boolean mask over the new tokens (causal by default; a [batch, T, T] tree mask for tree
drafts). It returns logits and the final-norm hidden states (Medusa heads read them). The cache can be rolled back to
an accepted prefix, or compacted to an accepted tree path. This module knows nothing about speculation.

Numerics follow transformers' LlamaForCausalLM (RMSNorm in fp32, default RoPE, SDPA); tests check logits parity.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from trtspec.errors import ConfigError, ModelNotFoundError, OverloadedError

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class LlamaConfig:
    """The fields of a HF Llama config.json that the runner needs (transformers 4.x and 5.x layouts)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    attention_bias: bool = False
    mlp_bias: bool = False
    eos_token_ids: tuple[int, ...] = ()

    @classmethod
    def from_hf(cls, cfg: dict[str, Any], *, field: str = "model") -> LlamaConfig:
        # transformers 5.x nests RoPE settings in `rope_parameters`; 4.x has top-level rope_theta / rope_scaling.
        rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type != "default":
            raise ConfigError(f"{field}.rope_type", rope_type, "only default RoPE is implemented by the reference runner",
                              hint="use a Llama checkpoint without rope scaling")
        if cfg.get("hidden_act", "silu") != "silu":
            raise ConfigError(f"{field}.hidden_act", cfg["hidden_act"], "the Llama runner implements silu only")
        heads = cfg["num_attention_heads"]
        eos = cfg.get("eos_token_id")
        return cls(
            vocab_size=cfg["vocab_size"],
            hidden_size=cfg["hidden_size"],
            intermediate_size=cfg["intermediate_size"],
            num_layers=cfg["num_hidden_layers"],
            num_heads=heads,
            num_kv_heads=cfg.get("num_key_value_heads") or heads,
            head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads,
            rms_norm_eps=cfg.get("rms_norm_eps", 1e-6),
            rope_theta=rope.get("rope_theta", cfg.get("rope_theta", 10000.0)),
            max_position_embeddings=cfg.get("max_position_embeddings", 2048),
            tie_word_embeddings=cfg.get("tie_word_embeddings", False),
            attention_bias=cfg.get("attention_bias", False),
            mlp_bias=cfg.get("mlp_bias", False),
            eos_token_ids=tuple(eos) if isinstance(eos, list) else (() if eos is None else (eos,)),
        )


# ---------------------------------------------------------------------------------------------------------------
# KV cache


class KVCache:
    """Preallocated per-slot KV cache: one slot per sequence, with its own length.

    Layout: key/value [num_layers, num_slots, max_seq_len, num_kv_heads, head_dim]; lengths [num_slots].
    Slots are allocated and freed explicitly; the slot count doubles when full, up to `max_slots`.
    `length(slot)` reads a host copy of the lengths (no tensor read, no device sync per call); every change to
    `lengths` goes through this class and `StepInputs.commit`, which keep the two equal.
    """

    def __init__(self, config: LlamaConfig, *, num_slots: int = 4, max_slots: int = 256, max_seq_len: int | None = None,
                 dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu") -> None:
        self.max_seq_len = max_seq_len or config.max_position_embeddings
        self.max_slots = max_slots
        shape = (config.num_layers, num_slots, self.max_seq_len, config.num_kv_heads, config.head_dim)
        self.key = torch.zeros(shape, dtype=dtype, device=device)  # [layers, slots, max_seq_len, kv_heads, head_dim]
        self.value = torch.zeros(shape, dtype=dtype, device=device)  # [layers, slots, max_seq_len, kv_heads, head_dim]
        self.lengths = torch.zeros(num_slots, dtype=torch.long, device=device)  # [slots]
        self._host_lengths = [0] * num_slots  # lengths.tolist(), kept in step
        self._free = list(range(num_slots))

    @property
    def num_slots(self) -> int:
        return self.key.shape[1]

    @property
    def num_free_slots(self) -> int:
        return len(self._free) + (self.max_slots - self.num_slots)

    def alloc(self) -> int:
        """A free slot with length 0."""
        if not self._free:
            self._grow()
        slot = self._free.pop(0)
        self.set_length(slot, 0)
        return slot

    def free(self, slot: int) -> None:
        self.set_length(slot, 0)
        self._free.append(slot)

    def length(self, slot: int) -> int:
        return self._host_lengths[slot]

    def set_length(self, slot: int, new_len: int) -> None:
        """lengths[slot] = new_len (a forward's appended tokens, or a rollback)."""
        self.lengths[slot] = new_len
        self._host_lengths[slot] = new_len

    def set_lengths(self, slots: Tensor, new_lengths: Tensor) -> None:
        """lengths[slots] = new_lengths (slots, new_lengths: [batch]; a forward's appended tokens)."""
        self.lengths[slots] = new_lengths
        for slot, new_len in zip(slots.tolist(), new_lengths.tolist(), strict=True):
            self._host_lengths[slot] = new_len

    def rollback(self, slot: int, new_len: int) -> None:
        """Keep the first `new_len` cached tokens of `slot` (an accepted prefix); the rest is overwritten later."""
        if not 0 <= new_len <= self.length(slot):
            raise ValueError(f"rollback(slot={slot}, new_len={new_len}) outside [0, {self.length(slot)}]")
        self.set_length(slot, new_len)

    def compact(self, slot: int, start: int, keep: list[int]) -> None:
        """Move cached entries start+keep[i] to start+i and truncate there (an accepted tree path).

        Args:
            keep: offsets (relative to `start`) of the entries to keep, ascending.
        """
        src = torch.tensor(keep, dtype=torch.long, device=self.key.device) + start  # [num_keep]
        dst = torch.arange(start, start + len(keep), device=self.key.device)  # [num_keep]
        self.key[:, slot, dst] = self.key[:, slot, src]
        self.value[:, slot, dst] = self.value[:, slot, src]
        self.set_length(slot, start + len(keep))

    def _grow(self) -> None:
        old = self.num_slots
        new = min(2 * old, self.max_slots)
        if new == old:
            raise OverloadedError(f"KV cache is full: all {old} slots are in use",
                                  hint="finish or abort requests first, or raise max_slots")
        extra = list(self.key.shape)
        extra[1] = new - old
        self.key = torch.cat([self.key, self.key.new_zeros(extra)], dim=1)
        self.value = torch.cat([self.value, self.value.new_zeros(extra)], dim=1)
        self.lengths = torch.cat([self.lengths, self.lengths.new_zeros(new - old)])
        self._host_lengths.extend([0] * (new - old))
        self._free.extend(range(old, new))


# ---------------------------------------------------------------------------------------------------------------
# model


@dataclass
class ModelOutput:
    logits: Tensor  # [batch, T, vocab]
    hidden: Tensor  # [batch, T, hidden] after the final norm
    # [batch, T, len(taps) * hidden] the residual stream entering each tapped layer (EAGLE-3 features); None w/o taps
    aux: Tensor | None = None


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:  # x: [..., dim]
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


def rotate_half(x: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Block(nn.Module):
    """One decoder layer: pre-norm attention (GQA) + pre-norm SwiGLU MLP.

    q/k/v and gate/up projections are fused into one matmul each (fewer small GEMMs per token on CPU); `_rename`
    concatenates the HF weights at load time.
    """

    def __init__(self, c: LlamaConfig) -> None:
        super().__init__()
        self.c = c
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.qkv_proj = nn.Linear(c.hidden_size, (c.num_heads + 2 * c.num_kv_heads) * c.head_dim, bias=c.attention_bias)
        self.o_proj = nn.Linear(c.num_heads * c.head_dim, c.hidden_size, bias=c.attention_bias)
        self.gate_up_proj = nn.Linear(c.hidden_size, 2 * c.intermediate_size, bias=c.mlp_bias)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=c.mlp_bias)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, cache_k: Tensor, cache_v: Tensor, write: _CacheWrite,
                attn_mask: Tensor | None) -> Tensor:
        """
        Args:
            x: [batch, T, hidden]; cos, sin: [batch, T, head_dim]
            cache_k, cache_v: this layer's cache [slots, max_seq_len, kv_heads, head_dim] (written in place)
            attn_mask: [batch, 1, T, ctx] bool, True = may attend (None: one query that sees the whole context)
        """
        x = x + self.attend(self.input_layernorm(x), cos, sin, cache_k, cache_v, write, attn_mask)
        return x + self.mlp(self.post_attention_layernorm(x))

    def attend(self, h: Tensor, cos: Tensor, sin: Tensor, cache_k: Tensor, cache_v: Tensor, write: _CacheWrite,
               attn_mask: Tensor | None) -> Tensor:
        """Self-attention of the normalised input h [batch, T, qkv_proj.in_features] over the slot caches (the new
        keys/values are appended first); returns o_proj's output [batch, T, hidden]."""
        c, (batch, T, _) = self.c, h.shape
        qkv = self.qkv_proj(h).view(batch, T, c.num_heads + 2 * c.num_kv_heads, c.head_dim)
        qk, v = qkv.split([c.num_heads + c.num_kv_heads, c.num_kv_heads], dim=2)  # [batch, T, heads + kv_heads, head_dim]
        cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)  # [batch, T, 1, head_dim]
        qk = qk * cos + rotate_half(qk) * sin  # RoPE on queries and keys at once (elementwise: the same numbers)
        q, k = qk.split([c.num_heads, c.num_kv_heads], dim=2)  # [batch, T, (kv_)heads, head_dim]
        # append the valid new tokens to each row's slot, then attend over the slot's first ctx entries
        if write.single is not None:  # one sequence: plain slices (views), no gather
            slot, start, n = write.single
            cache_k[slot, start : start + n] = k[0, :n]
            cache_v[slot, start : start + n] = v[0, :n]
            keys = cache_k[slot : slot + 1, : write.ctx].transpose(1, 2)  # [1, kv_heads, ctx, head_dim]
            values = cache_v[slot : slot + 1, : write.ctx].transpose(1, 2)  # [1, kv_heads, ctx, head_dim]
        else:
            cache_k[write.slots, write.cols] = k[write.valid].to(cache_k.dtype)
            cache_v[write.slots, write.cols] = v[write.valid].to(cache_v.dtype)
            keys = cache_k[write.row_slots, : write.ctx].transpose(1, 2)  # [batch, kv_heads, ctx, head_dim]
            values = cache_v[write.row_slots, : write.ctx].transpose(1, 2)  # [batch, kv_heads, ctx, head_dim]
        out = F.scaled_dot_product_attention(q.transpose(1, 2), keys.to(q.dtype), values.to(q.dtype),
                                             attn_mask=attn_mask, enable_gqa=True)  # [batch, heads, T, head_dim]
        return self.o_proj(out.transpose(1, 2).reshape(batch, T, c.num_heads * c.head_dim))

    def mlp(self, h: Tensor) -> Tensor:
        """SwiGLU of the normalised input h [batch, T, hidden]."""
        gate, up = self.gate_up_proj(h).chunk(2, dim=-1)  # [batch, T, intermediate] each
        return self.down_proj(F.silu(gate) * up)


@dataclass
class _CacheWrite:
    """Where one forward's valid new tokens go in the cache (shared by all layers)."""

    valid: Tensor | None  # [batch, T] bool, token is not padding (None: `single`)
    slots: Tensor | None  # [num_valid] slot of each valid token (None: `single`)
    cols: Tensor | None  # [num_valid] cache position of each valid token (None: `single`)
    row_slots: Tensor | None  # [batch] (None: `single`)
    ctx: int  # number of cache entries any row attends over
    single: tuple[int, int, int] | None = None  # (slot, start, num_tokens) when the batch is one sequence


class LlamaModel(nn.Module):
    """LlamaForCausalLM forward over a slot KV cache. Build with `from_pretrained(path)`."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.config = config
        # uninitialized (from_pretrained assigns the checkpoint's): on the meta device, Embedding's own initializer
        # would import torch._dynamo (~2 s a process)
        self.embed_tokens = nn.Embedding.from_pretrained(torch.empty(config.vocab_size, config.hidden_size), freeze=False)
        self.layers = nn.ModuleList(Block(config) for _ in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.register_buffer("inv_freq", _rope_inv_freq(config), persistent=False)  # [head_dim / 2]

    @classmethod
    def from_pretrained(cls, path: str | Path, *, dtype: str | torch.dtype = "float32",
                        device: str | torch.device = "cpu", field: str = "model") -> LlamaModel:
        """Load config.json + safetensors weights (single file or sharded index) from a HF checkpoint directory."""
        path = Path(path)
        config = LlamaConfig.from_hf(json.loads((path / "config.json").read_text()), field=field)
        torch_dtype = DTYPES[dtype] if isinstance(dtype, str) else dtype
        with torch.device("meta"):
            model = cls(config)
        state = _load_safetensors(path, field=field)
        if "lm_head.weight" not in state:
            state["lm_head.weight"] = state["model.embed_tokens.weight"]  # tied embeddings
        model.load_state_dict(_rename(state), assign=True, strict=True)
        model.inv_freq = _rope_inv_freq(config)
        model.to(device=device, dtype=torch_dtype)
        model.inv_freq = _rope_inv_freq(config).to(device)  # RoPE angles stay fp32, as in transformers
        return model.eval()

    def new_cache(self, *, num_slots: int = 4, max_slots: int = 256, max_seq_len: int | None = None) -> KVCache:
        w = self.lm_head.weight
        return KVCache(self.config, num_slots=num_slots, max_slots=max_slots, max_seq_len=max_seq_len,
                       dtype=w.dtype, device=w.device)

    @torch.inference_mode()
    def forward(self, input_ids: Tensor, cache: KVCache, slots: Tensor, *, num_tokens: Tensor | None = None,
                positions: Tensor | None = None, tree_mask: Tensor | None = None,
                taps: tuple[int, ...] = ()) -> ModelOutput:
        """Run new tokens of `batch` sequences against their cache slots and append them to the cache.

        Args:
            input_ids: [batch, T] int64, each row's new tokens, right-padded to T.
            cache: the KV cache; each row's slot grows by num_tokens[b].
            slots: [batch] int64 cache slot of each row.
            num_tokens: [batch] valid (non-padding) tokens per row; default T for all rows.
            positions: [batch, T] RoPE positions; default cache length + offset (tree drafts pass depths).
            tree_mask: [batch, T, T] bool, tree_mask[b, i, j] = new token i may attend to new token j; default causal.
                Every new token always sees the whole cached prefix.
            taps: layer indices whose input (the residual stream after the layers before it; 0 = the embeddings)
                is returned in `aux`, concatenated in this order: vLLM's `eagle_aux_hidden_state_layer_ids`.
        Returns:
            ModelOutput(logits [batch, T, vocab], hidden [batch, T, hidden], aux [batch, T, len(taps) * hidden]);
            padded positions hold garbage.
        """
        x = self.embed_tokens(input_ids)  # [batch, T, hidden]
        step = prepare_step(cache, slots, input_ids.shape, self.inv_freq, x.dtype, num_tokens=num_tokens,
                            positions=positions, tree_mask=tree_mask)
        tapped: dict[int, Tensor] = {}  # layer index -> [batch, T, hidden] its input
        for i, layer in enumerate(self.layers):
            if i in taps:
                tapped[i] = x
            x = layer(x, step.cos, step.sin, cache.key[i], cache.value[i], step.write, step.attn_mask)
        hidden = self.norm(x)  # [batch, T, hidden]
        step.commit(cache, slots)
        aux = torch.cat([tapped[t] for t in taps], dim=-1) if taps else None
        return ModelOutput(logits=self.lm_head(hidden).float(), hidden=hidden, aux=aux)


@dataclass
class StepInputs:
    """What every layer of one forward shares: where the new keys go, the attention mask and the RoPE angles."""

    write: _CacheWrite
    attn_mask: Tensor | None  # [batch, 1, T, ctx] bool; None = one query that sees its whole context
    cos: Tensor  # [batch, T, head_dim]
    sin: Tensor  # [batch, T, head_dim]
    new_lengths: Tensor | None  # [batch] cache lengths after the forward (None: write.single has them)

    def commit(self, cache: KVCache, slots: Tensor) -> None:
        """Grow the slots by the tokens this forward appended."""
        if self.write.single is not None:  # one sequence: its host-side length, no tensor round trip
            slot, start, n = self.write.single
            cache.set_length(slot, start + n)
        else:
            cache.set_lengths(slots, self.new_lengths)


def prepare_step(cache: KVCache, slots: Tensor, shape: torch.Size | tuple[int, int], inv_freq: Tensor,
                 dtype: torch.dtype, *, num_tokens: Tensor | None = None, positions: Tensor | None = None,
                 tree_mask: Tensor | None = None, attn_mask: Tensor | None = None) -> StepInputs:
    """The shared setup of a forward over `shape` = (batch, T) new tokens (args as in `LlamaModel.forward`).

    `attn_mask` [batch, 1, T, ctx] replaces the default mask (the cached prefix + tree_mask/causal among the new
    tokens) when a caller needs a new token to skip cached entries (EAGLE's tree drafting keeps sibling branches in
    the draft cache).
    """
    batch, T = shape
    device = slots.device
    if batch == 1 and positions is None and tree_mask is None and attn_mask is None:
        single = _prepare_single(cache, int(slots[0]), T, T if num_tokens is None else int(num_tokens[0]), inv_freq,
                                 dtype, device)
        if single is not None:
            return single
    if num_tokens is None:
        num_tokens = torch.full((batch,), T, dtype=torch.long, device=device)  # [batch]
    prefix = cache.lengths[slots]  # [batch] tokens already cached per row
    if int((prefix + num_tokens).max()) > cache.max_seq_len:
        raise ConfigError("context", int((prefix + num_tokens).max()),
                          f"exceeds the model's context of {cache.max_seq_len} tokens",
                          hint="use a shorter prompt or fewer max_new_tokens")
    offsets = torch.arange(T, device=device)  # [T]
    cache_pos = prefix[:, None] + offsets[None, :]  # [batch, T]
    if positions is None:
        positions = cache_pos
    valid = offsets[None, :] < num_tokens[:, None]  # [batch, T]
    ctx = int((prefix + num_tokens).max())
    write = _CacheWrite(valid=valid, slots=slots[:, None].expand(batch, T)[valid], cols=cache_pos[valid],
                        row_slots=slots, ctx=ctx,
                        single=(int(slots[0]), int(prefix[0]), int(num_tokens[0])) if batch == 1 else None)
    if attn_mask is None and not (batch == 1 and T == 1):  # one query sees the whole cached prefix and itself
        attn_mask = _attention_mask(prefix, num_tokens, valid, ctx, tree_mask)  # [batch, 1, T, ctx]
    freqs = positions[..., None].float() * inv_freq  # [batch, T, head_dim / 2]
    emb = torch.cat((freqs, freqs), dim=-1)  # [batch, T, head_dim]
    return StepInputs(write=write, attn_mask=attn_mask, cos=emb.cos().to(dtype), sin=emb.sin().to(dtype),
                      new_lengths=prefix + num_tokens)


def _prepare_single(cache: KVCache, slot: int, T: int, n: int, inv_freq: Tensor, dtype: torch.dtype,
                    device: torch.device) -> StepInputs | None:
    """`prepare_step` for one sequence of T unpadded new tokens at sequential positions (a drafter's step, plain
    decoding at batch 1) from the slot's host-side length: no index tensors, and a causal mask only for T > 1. The
    same mask and RoPE angles as the general path, so the same numerics; None when the row is padded (T > n)."""
    if n != T:
        return None
    start = cache.length(slot)
    if start + T > cache.max_seq_len:
        raise ConfigError("context", start + T, f"exceeds the model's context of {cache.max_seq_len} tokens",
                          hint="use a shorter prompt or fewer max_new_tokens")
    positions = torch.arange(start, start + T, device=device)  # [T]
    # query t sees the cached prefix and the new tokens up to itself: key <= start + t
    attn_mask = None if T == 1 else torch.ones(T, start + T, dtype=torch.bool, device=device).tril(start)[None, None]
    freqs = positions[None, :, None].float() * inv_freq  # [1, T, head_dim / 2]
    emb = torch.cat((freqs, freqs), dim=-1)  # [1, T, head_dim]
    write = _CacheWrite(valid=None, slots=None, cols=None, row_slots=None, ctx=start + T, single=(slot, start, T))
    return StepInputs(write=write, attn_mask=attn_mask, cos=emb.cos().to(dtype), sin=emb.sin().to(dtype),
                      new_lengths=None)


def forward_grouped(model: LlamaModel, input_ids: Tensor, cache: KVCache, slots: Tensor, *, num_tokens: Tensor,
                    positions: Tensor | None = None, tree_mask: Tensor | None = None,
                    taps: tuple[int, ...] = ()) -> ModelOutput:
    """`model(...)` over right-padded rows, split into a long-row and a short-row forward when one pass would mostly
    compute padding (a prompt being prefilled next to many one-token decode rows pads every row to the prompt).

    Rows are independent, so the result equals one pass (up to float summation order). Args as in
    `LlamaModel.forward`; num_tokens is required. Returns logits [batch, T, vocab], hidden [batch, T, hidden] and
    aux [batch, T, len(taps) * hidden] (None without taps).
    """
    batch, width = input_ids.shape
    lengths = num_tokens.tolist()
    short = [i for i, n in enumerate(lengths) if n * 4 <= width]  # rows using at most a quarter of the width
    if not short or len(short) == batch:
        return model(input_ids, cache, slots, num_tokens=num_tokens, positions=positions, tree_mask=tree_mask,
                     taps=taps)
    long = [i for i in range(batch) if i not in set(short)]
    outputs = []
    for rows in (long, short):
        w = max(lengths[i] for i in rows)
        idx = torch.tensor(rows, device=input_ids.device)
        outputs.append((idx, w, model(input_ids[idx, :w], cache, slots[idx], num_tokens=num_tokens[idx],
                                      positions=None if positions is None else positions[idx, :w],
                                      tree_mask=None if tree_mask is None else tree_mask[idx, :w, :w], taps=taps)))
    first = outputs[0][2]
    logits = first.logits.new_zeros(batch, width, first.logits.shape[-1])  # [batch, T, vocab]
    hidden = first.hidden.new_zeros(batch, width, first.hidden.shape[-1])  # [batch, T, hidden]
    aux = None if first.aux is None else first.aux.new_zeros(batch, width, first.aux.shape[-1])  # [batch, T, A]
    for idx, w, out in outputs:
        logits[idx, :w] = out.logits
        hidden[idx, :w] = out.hidden
        if aux is not None:
            aux[idx, :w] = out.aux
    return ModelOutput(logits=logits, hidden=hidden, aux=aux)


def _rope_inv_freq(config: LlamaConfig) -> Tensor:
    """[head_dim / 2] fp32 inverse frequencies of default RoPE, on the CPU (also inside `torch.device("meta")`, where
    arange would import torch._dynamo, ~2 s a process)."""
    exponents = torch.arange(0, config.head_dim, 2, dtype=torch.float32, device="cpu") / config.head_dim
    return 1.0 / (config.rope_theta**exponents)


def _attention_mask(prefix: Tensor, num_tokens: Tensor, valid: Tensor, ctx: int, tree_mask: Tensor | None) -> Tensor:
    """[batch, 1, T, ctx] bool: query t of row b sees cached keys < prefix[b] and the new keys tree_mask allows.

    Args:
        prefix, num_tokens: [batch]; valid: [batch, T]; tree_mask: [batch, T, T] or None (causal).
    """
    batch, T = valid.shape
    device = valid.device
    if tree_mask is None:
        tree_mask = torch.ones(T, T, dtype=torch.bool, device=device).tril().expand(batch, T, T)  # [batch, T, T]
    key_pos = torch.arange(ctx, device=device)  # [ctx]
    is_cached = key_pos[None, :] < prefix[:, None]  # [batch, ctx]
    new_idx = key_pos[None, :] - prefix[:, None]  # [batch, ctx] index of the key among the new tokens
    is_new = (new_idx >= 0) & (new_idx < num_tokens[:, None])  # [batch, ctx]
    sees_new = tree_mask.gather(2, new_idx.clamp(0, T - 1)[:, None, :].expand(batch, T, ctx))  # [batch, T, ctx]
    mask = is_cached[:, None, :] | (sees_new & is_new[:, None, :])  # [batch, T, ctx]
    # padding queries see key 0 so that no softmax row is empty (their outputs are ignored)
    mask[:, :, 0] |= ~valid
    return mask[:, None]


def _load_safetensors(path: Path, *, field: str) -> dict[str, Tensor]:
    from safetensors.torch import load_file

    single, index = path / "model.safetensors", path / "model.safetensors.index.json"
    if single.is_file():
        return load_file(single)
    if index.is_file():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return {k: v for f in files for k, v in load_file(path / f).items()}
    raise ModelNotFoundError(f"{field}={str(path)!r}: no model.safetensors (the reference runner reads safetensors only)",
                             hint="re-save with save_pretrained(..., safe_serialization=True)")


def _rename(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """HF LlamaForCausalLM parameters -> this module's: one flat Block per layer, fused qkv and gate_up."""
    out = {}
    for name, tensor in state.items():
        if name.endswith("rotary_emb.inv_freq"):
            continue
        out[name.removeprefix("model.").replace(".self_attn.", ".").replace(".mlp.", ".")] = tensor
    fused = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}
    for prefix in sorted({n.rsplit(".", 2)[0] for n in out if n.endswith("q_proj.weight")}):
        for target, parts in fused.items():
            for kind in ("weight", "bias"):
                names = [f"{prefix}.{p}.{kind}" for p in parts]
                if names[0] in out:
                    out[f"{prefix}.{target}.{kind}"] = torch.cat([out.pop(n) for n in names])
    return out
