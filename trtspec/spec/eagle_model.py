"""The EAGLE-3 drafter runner: loads the HF EAGLE-3 layout and runs it over its own slot KV cache.

The layout is the one NVIDIA ModelOpt exports and vLLM / SGLang load (`LlamaForCausalLMEagle3`): `fc` fuses the
target's three tapped hidden states (low, middle, high) into one feature; one decoder layer attends over
cat(input_layernorm(embedding of token t+1), hidden_norm(feature at t)) with the feature as the residual; `norm` then
`lm_head` give the logits (over `draft_vocab_size` tokens, mapped to target ids by `d2t` when smaller); the pre-norm
output is the feature the next draft step reads. Weight names: `layers.0.*` (or `midlayer.*`), `fc`, `norm`,
`lm_head`, optional `d2t` and `embed_tokens` (absent: the target's embeddings are shared, as vLLM does).

Layer taps follow vLLM: `eagle_aux_hidden_state_layer_ids` at the top level of config.json names the layers whose
input is read; ids only inside `eagle_config` (ModelOpt's and SGLang's convention) name layer outputs, so 1 is added.
A drafter is refused before anything runs when its hidden size, vocabulary or taps do not fit the target.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from trtspec.errors import ConfigError, IncompatibleModelsError
from trtspec.methods.eagle import EAGLE3
from trtspec.spec.model import DTYPES, Block, KVCache, LlamaConfig, RMSNorm, _rename, _rope_inv_freq, prepare_step

NUM_TAPS = 3  # vLLM sizes fc as 3 x target hidden


@dataclass(frozen=True)
class EagleConfig:
    """The fields of an EAGLE-3 config.json the runner needs."""

    layer: LlamaConfig  # the decoder layer's shape (num_layers = 1)
    target_hidden_size: int  # fc reads NUM_TAPS x this
    draft_vocab_size: int
    taps: tuple[int, ...] | None  # target layers whose input is read (vLLM convention); None = vLLM's default

    @classmethod
    def from_hf(cls, cfg: dict[str, Any], *, field: str = EAGLE3.checkpoint) -> EagleConfig:
        if cfg.get("num_hidden_layers", 1) != 1:
            raise ConfigError(f"{field}.num_hidden_layers", cfg["num_hidden_layers"],
                              "the reference runner implements one-layer EAGLE-3 drafters",
                              hint="train a drafter with `trtspec train eagle` (one layer)")
        eagle = cfg.get("eagle_config") or {}
        if eagle.get("use_aux_hidden_state", True) is False:
            raise ConfigError(f"{field}.eagle_config.use_aux_hidden_state", False,
                              "is an EAGLE-1/2 drafter; this runner reads EAGLE-3 drafters (fc over three taps)",
                              hint="use an EAGLE-3 drafter (`trtspec train eagle`)")
        taps = cfg.get("eagle_aux_hidden_state_layer_ids")
        if not taps and eagle.get("eagle_aux_hidden_state_layer_ids"):
            taps = [int(t) + 1 for t in eagle["eagle_aux_hidden_state_layer_ids"]]  # output of i = input of i + 1
        layer = LlamaConfig.from_hf(cfg, field=field)
        return cls(layer=layer, target_hidden_size=cfg.get("target_hidden_size") or layer.hidden_size,
                   draft_vocab_size=cfg.get("draft_vocab_size") or layer.vocab_size,
                   taps=tuple(int(t) for t in taps) if taps else None)

    def resolve_taps(self, target: LlamaConfig, *, field: str = EAGLE3.checkpoint) -> tuple[int, ...]:
        """The taps checked against the target (three layers in [0, num_layers)); vLLM's default when unset."""
        taps = self.taps or (2, target.num_layers // 2, target.num_layers - 3)
        if len(taps) != NUM_TAPS or not all(0 <= t < target.num_layers for t in taps):
            raise IncompatibleModelsError(
                f"{field}.eagle_aux_hidden_state_layer_ids={list(taps)}: the drafter reads layers the target does not "
                f"have (target num_hidden_layers={target.num_layers}; need {NUM_TAPS} layers in [0, "
                f"{target.num_layers}))", hint="train a drafter for this target with `trtspec train eagle --model ...`")
        return taps


class EagleBlock(Block):
    """EAGLE-3's decoder layer: Block with a 2 x hidden attention input and a norm for the feature half."""

    def __init__(self, c: LlamaConfig) -> None:
        super().__init__(c)
        self.qkv_proj = nn.Linear(2 * c.hidden_size, (c.num_heads + 2 * c.num_kv_heads) * c.head_dim,
                                  bias=c.attention_bias)
        self.hidden_norm = RMSNorm(c.hidden_size, c.rms_norm_eps)

    def forward(self, embeds: Tensor, hidden: Tensor, cos: Tensor, sin: Tensor, cache_k: Tensor, cache_v: Tensor,
                write: Any, attn_mask: Tensor | None) -> Tensor:  # type: ignore[override]
        """embeds, hidden: [batch, T, hidden] -> the pre-norm output [batch, T, hidden] (vLLM's hidden_prenorm)."""
        h = torch.cat([self.input_layernorm(embeds), self.hidden_norm(hidden)], dim=-1)  # [batch, T, 2 * hidden]
        x = hidden + self.attend(h, cos, sin, cache_k, cache_v, write, attn_mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class EagleDrafter(nn.Module):
    """An EAGLE-3 drafter over a slot KV cache. Build with `load_drafter(path, target)`."""

    def __init__(self, config: EagleConfig, embed_tokens: nn.Embedding) -> None:
        super().__init__()
        c = config.layer
        self.config = config
        self.embed_tokens = embed_tokens  # the target's unless the checkpoint has its own
        self.fc = nn.Linear(NUM_TAPS * config.target_hidden_size, c.hidden_size, bias=False)
        self.layers = nn.ModuleList([EagleBlock(c)])
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.lm_head = nn.Linear(c.hidden_size, config.draft_vocab_size, bias=False)
        # draft id i is target id i + d2t[i] (EAGLE-3's reduced draft vocabulary); all zeros = the same vocabulary
        self.register_buffer("d2t", torch.zeros(config.draft_vocab_size, dtype=torch.long))
        self.register_buffer("inv_freq", _rope_inv_freq(c), persistent=False)  # [head_dim / 2]

    def new_cache(self, *, num_slots: int = 4, max_slots: int = 256, max_seq_len: int | None = None) -> KVCache:
        w = self.lm_head.weight
        return KVCache(self.config.layer, num_slots=num_slots, max_slots=max_slots, max_seq_len=max_seq_len,
                       dtype=w.dtype, device=w.device)

    def combine(self, aux: Tensor) -> Tensor:
        """Target taps [..., 3 x target hidden] (ModelOutput.aux) -> the drafter's input feature [..., hidden]."""
        return self.fc(aux.to(self.fc.weight.dtype))

    @torch.inference_mode()
    def forward(self, input_ids: Tensor, hidden: Tensor, cache: KVCache, slots: Tensor, *,
                num_tokens: Tensor | None = None, positions: Tensor | None = None,
                attn_mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """One draft step over new tokens of `batch` rows, appended to their cache slots.

        Args:
            input_ids: [batch, T] the token after each feature's position (right-padded).
            hidden: [batch, T, hidden] features: `combine(target taps)` or a previous step's pre-norm output.
            num_tokens, positions: as in LlamaModel.forward.
            attn_mask: [batch, 1, T, ctx] which cached and new entries each new token sees (tree drafting); default:
                the whole cached prefix and the new tokens causally.
        Returns:
            logits [batch, T, draft vocab] float32 (draft id i is target id `draft_ids[i]`), pre-norm
            [batch, T, hidden].
        """
        embeds = self.embed_tokens(input_ids).to(hidden.dtype)  # [batch, T, hidden]
        step = prepare_step(cache, slots, input_ids.shape, self.inv_freq, hidden.dtype, num_tokens=num_tokens,
                            positions=positions, attn_mask=attn_mask)
        x = self.layers[0](embeds, hidden, step.cos, step.sin, cache.key[0], cache.value[0], step.write,
                           step.attn_mask)  # [batch, T, hidden]
        step.commit(cache, slots)
        return self.lm_head(self.norm(x)).float(), x  # [batch, T, draft vocab], [batch, T, hidden]

    @property
    def draft_ids(self) -> Tensor:
        """Target id of each draft id: i + d2t[i] (the identity for a full-vocabulary drafter).  # [draft vocab]"""
        return torch.arange(self.config.draft_vocab_size, device=self.d2t.device) + self.d2t


def load_drafter(path: str | Path, target: LlamaConfig, target_embed: nn.Embedding, *,
                 dtype: str | torch.dtype = "float32", device: str | torch.device = "cpu",
                 field: str = EAGLE3.checkpoint) -> tuple[EagleDrafter, tuple[int, ...]]:
    """Load and check an EAGLE-3 drafter for `target`; returns it with the target layers it reads.

    Raises IncompatibleModelsError naming both values when the hidden size, the vocabulary or the taps do not fit.
    """
    from trtspec.models import read_config, resolve_eagle

    path = resolve_eagle(path, field=field)
    config = EagleConfig.from_hf(read_config(path, field=field), field=field)
    c = config.layer
    fix = "train a drafter for this target with `trtspec train eagle --model TARGET --out DIR`"
    if config.target_hidden_size != target.hidden_size:
        raise IncompatibleModelsError(
            f"{field}: the drafter reads target features of hidden size {config.target_hidden_size}, the target's "
            f"hidden_size is {target.hidden_size}", hint=fix)
    if c.vocab_size != target.vocab_size:
        raise IncompatibleModelsError(
            f"{field}: vocab_size {c.vocab_size} differs from the target's vocab_size {target.vocab_size}", hint=fix)
    taps = config.resolve_taps(target, field=field)
    state = _load_state(path / "model.safetensors")
    embed = target_embed
    if "embed_tokens.weight" in state:
        embed = nn.Embedding(c.vocab_size, c.hidden_size)
        embed.weight = nn.Parameter(state.pop("embed_tokens.weight"), requires_grad=False)
    elif c.hidden_size != target.hidden_size:
        raise IncompatibleModelsError(
            f"{field}: hidden_size {c.hidden_size} differs from the target's hidden_size {target.hidden_size} and the "
            "drafter has no embed_tokens of its own to use instead of the target's", hint=fix)
    with torch.device("meta"):
        drafter = EagleDrafter(config, embed)
    state.setdefault("d2t", torch.zeros(config.draft_vocab_size, dtype=torch.long))
    state.pop("t2d", None)
    expected = {n for n, _ in drafter.named_parameters() if not n.startswith("embed_tokens.")} | {"d2t"}
    if set(state) != expected:
        raise IncompatibleModelsError(
            f"{field}: {path / 'model.safetensors'} tensors {sorted(set(state) ^ expected)[:6]} do not match the "
            "EAGLE-3 layout (layers.0.*, fc, norm, lm_head, optional d2t / embed_tokens)", hint=fix)
    draft_ids = torch.arange(config.draft_vocab_size) + state["d2t"]  # [draft vocab] target ids
    if config.draft_vocab_size > c.vocab_size or (draft_ids.numel() and (
            int(draft_ids.min()) < 0 or int(draft_ids.max()) >= c.vocab_size
            or draft_ids.unique().numel() != draft_ids.numel())):
        raise IncompatibleModelsError(
            f"{field}: d2t maps draft_vocab_size {config.draft_vocab_size} draft ids onto target ids that are not "
            f"distinct ids in [0, {c.vocab_size})", hint=fix)
    drafter.load_state_dict(state, assign=True, strict=False)
    torch_dtype = DTYPES[dtype] if isinstance(dtype, str) else dtype
    drafter.embed_tokens = embed
    drafter.inv_freq = _rope_inv_freq(c)
    drafter.to(device=device)
    for name, module in drafter.named_children():
        if name != "embed_tokens":
            module.to(dtype=torch_dtype)
    drafter.inv_freq = _rope_inv_freq(c).to(device)  # RoPE angles stay fp32
    return drafter.eval(), taps


def _load_state(weights: Path) -> dict[str, Tensor]:
    """HF EAGLE-3 names -> this module's (midlayer -> layers.0; q/k/v and gate/up fused as in spec.model)."""
    from safetensors.torch import load_file

    return _rename({name.replace("midlayer.", "layers.0."): t for name, t in load_file(weights).items()})

