"""The draft model in ONNX Runtime (engine configuration `draft_runtime: onnx`): export, checks and the runner.

The exported graph is the draft LlamaModel's forward as a pure function of its KV cache, head-major as attention
reads it (the runner keeps its slot cache in that layout, so neither side transposes):
  inputs   input_ids [batch, T] int64, position_ids [batch, T] int64, attention_mask [batch, P + T] int64 (1 = a key
           the row may see: its cached prefix and its new tokens; 0 = padding), past_key_i / past_value_i
           [batch, kv_heads, P, head_dim] per layer i (the rows' cached entries, right-padded to P);
  outputs  logits [batch, T, vocab] float32, new_key_i / new_value_i [batch, kv_heads, T, head_dim] (only the
           new entries: the runner writes them into its slot cache).
Batch, T and P are dynamic; opset OPSET; the file's metadata names the checkpoint it came from (its digest), the
vocabulary and the format. `OnnxDraftModel` runs it over a head-major slot KV cache (spec.model's KVCache, its
sequence and head axes swapped: `HeadMajorCache`): per forward it gathers
each layer's past for the rows' slots, runs the session at one thread, and writes the new entries back, so the
draft-model proposer drives it exactly as it drives LlamaModel.

A file that does not match its checkpoint (format, opset, digest, vocabulary, shapes, or a parity run against the
torch runner) is refused with a ConfigError naming the file and the fix; a missing onnx / onnxruntime (the optional
extra `trtspec[onnx]`) likewise.
Speculation stays lossless whatever the drafter computes: verification is the torch target's.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from trtspec.errors import ConfigError
from trtspec.spec.model import KVCache, LlamaConfig, LlamaModel, ModelOutput, rotate_half

OPSET = 17
FORMAT = "trtspec-draft-onnx/1"  # metadata key trtspec.format: this module's inputs/outputs contract
FILE_NAME = "draft.onnx"  # beside a draft checkpoint (a build bundle's draft/), else in the user's cache
PARITY_TOLERANCE = 1e-3  # largest |logit difference| against the torch runner in the load-time parity run


def import_onnxruntime(field: str = "draft_runtime") -> Any:
    """onnxruntime, or a ConfigError saying how to install it (no fallback to another runtime)."""
    try:
        import onnxruntime
    except ImportError as exc:
        raise ConfigError(field, "onnx", f"needs the onnxruntime package, which is not installed ({exc})",
                          hint="pip install 'trtspec[onnx]' (onnx, onnxruntime), or set draft_runtime torch") from None
    return onnxruntime


# ---------------------------------------------------------------------------------------------------------------
# export


class _DraftStep(nn.Module):
    """LlamaModel's forward over an explicit KV cache (the module docstring's inputs -> outputs)."""

    def __init__(self, model: LlamaModel) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: Tensor, position_ids: Tensor, attention_mask: Tensor, *past: Tensor) -> tuple:
        m, c = self.model, self.model.config
        batch, T = input_ids.shape
        x = m.embed_tokens(input_ids)  # [batch, T, hidden]
        freqs = position_ids[..., None].float() * m.inv_freq  # [batch, T, head_dim / 2]
        emb = torch.cat((freqs, freqs), dim=-1)  # [batch, T, head_dim]
        cos, sin = emb.cos().to(x.dtype)[:, None], emb.sin().to(x.dtype)[:, None]  # [batch, 1, T, head_dim]
        total = attention_mask.shape[1]
        key_pos = torch.arange(total)  # [P + T]
        query_pos = torch.arange(T) + (total - T)  # [T]
        mask = (key_pos[None, :] <= query_pos[:, None])[None, None] & (attention_mask[:, None, None, :] > 0)
        rep = c.num_heads // c.num_kv_heads
        new = []
        for i, layer in enumerate(m.layers):
            h = layer.input_layernorm(x)
            qkv = layer.qkv_proj(h).view(batch, T, c.num_heads + 2 * c.num_kv_heads, c.head_dim).transpose(1, 2)
            q, k, v = qkv.split([c.num_heads, c.num_kv_heads, c.num_kv_heads], dim=1)  # [batch, heads, T, head_dim]
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            keys = torch.cat([past[2 * i], k], dim=2)  # [batch, kv_heads, P + T, head_dim]
            values = torch.cat([past[2 * i + 1], v], dim=2)  # [batch, kv_heads, P + T, head_dim]
            if rep > 1:
                keys, values = keys.repeat_interleave(rep, dim=1), values.repeat_interleave(rep, dim=1)
            scores = (q @ keys.transpose(-1, -2)) * c.head_dim**-0.5  # [batch, heads, T, P + T]
            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
            out = (scores.softmax(-1) @ values).transpose(1, 2)  # [batch, T, heads, head_dim]
            x = x + layer.o_proj(out.reshape(batch, T, c.num_heads * c.head_dim))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
            new += [k, v]  # [batch, kv_heads, T, head_dim] each
        return (m.lm_head(m.norm(x)).float(), *new)


def names(num_layers: int) -> tuple[list[str], list[str]]:
    """(input names, output names) of the exported graph."""
    past = [f"past_{kind}_{i}" for i in range(num_layers) for kind in ("key", "value")]
    return (["input_ids", "position_ids", "attention_mask", *past],
            ["logits", *(p.replace("past_", "new_") for p in past)])


def checkpoint_digest(checkpoint: str | Path) -> str:
    """sha256 over a HF checkpoint's config.json and safetensors files (names and bytes)."""
    root, digest = Path(checkpoint), hashlib.sha256()
    for path in sorted([root / "config.json", *root.glob("*.safetensors")]):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def export_draft(model: LlamaModel, path: str | Path, *, digest: str) -> Path:
    """Write `model` as ONNX (module docstring), with its metadata, to `path` (atomically); returns the path."""
    import onnx

    c, path = model.config, Path(path)
    inputs, outputs = names(c.num_layers)
    example = {"input_ids": torch.zeros(2, 1, dtype=torch.long), "position_ids": torch.full((2, 1), 2),
               "attention_mask": torch.ones(2, 3, dtype=torch.long)}
    shape = (2, c.num_kv_heads, 2, c.head_dim)
    args = (*example.values(), *(torch.zeros(shape, dtype=model.lm_head.weight.dtype) for _ in inputs[3:]))
    dynamic = {"input_ids": {0: "batch", 1: "new"}, "position_ids": {0: "batch", 1: "new"},
               "attention_mask": {0: "batch", 1: "total"}, "logits": {0: "batch", 1: "new"},
               **{n: {0: "batch", 2: "past"} for n in inputs[3:]}, **{n: {0: "batch", 2: "new"} for n in outputs[1:]}}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    # the TorchScript path: the dynamo exporter needs onnxscript, which trtspec does not install; its deprecation
    # warnings say so on every export
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(_DraftStep(model), args, str(tmp), input_names=inputs, output_names=outputs,
                          dynamic_axes=dynamic, opset_version=OPSET, dynamo=False, do_constant_folding=True)
    proto = onnx.load(str(tmp))
    for key, value in {"trtspec.format": FORMAT, "trtspec.checkpoint_sha256": digest,
                       "trtspec.vocab_size": str(c.vocab_size), "trtspec.num_layers": str(c.num_layers)}.items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.save(proto, str(tmp))
    tmp.replace(path)
    return path


def default_path(checkpoint: str | Path, digest: str) -> Path:
    """Where the engine keeps a draft checkpoint's ONNX file: `draft.onnx` beside the checkpoint when present (a
    build bundle's), else `$TRTSPEC_CACHE_DIR` (default ~/.cache/trtspec)/onnx/<digest[:16]>/draft.onnx."""
    beside = Path(checkpoint) / FILE_NAME
    if beside.is_file():
        return beside
    cache = Path(os.environ.get("TRTSPEC_CACHE_DIR") or Path.home() / ".cache" / "trtspec")
    return cache / "onnx" / digest[:16] / FILE_NAME


# ---------------------------------------------------------------------------------------------------------------
# checks


@dataclass(frozen=True)
class OnnxCheck:
    """What the checks established about a file (for reports and build manifests), and the checked runner."""

    path: Path
    opset: int
    vocab_size: int
    max_logit_difference: float  # the parity run's, against the torch runner
    argmax_agreement: float  # share of the parity run's positions whose argmax equals the torch runner's
    runner: OnnxDraftModel


def check_draft_onnx(path: str | Path, model: LlamaModel, *, digest: str) -> OnnxCheck:
    """Refuse (ConfigError naming the file and the fix) an ONNX file that is not `model`'s export: format, opset,
    checkpoint digest, vocabulary, input/output shapes, and a parity run (logits within PARITY_TOLERANCE)."""
    import onnx

    path, c = Path(path), model.config
    field = "draft_runtime onnx file"
    fix = f"delete {path} (the engine re-exports it from the draft checkpoint), or rebuild the bundle"
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the same bad input
        raise ConfigError(field, str(path), f"is not a readable ONNX model ({type(exc).__name__})", hint=fix) from None
    meta = {p.key: p.value for p in proto.metadata_props}
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    inputs, outputs = names(c.num_layers)
    graph_in = {i.name: [d.dim_value or d.dim_param for d in i.type.tensor_type.shape.dim] for i in proto.graph.input}
    graph_out = {o.name: [d.dim_value or d.dim_param for d in o.type.tensor_type.shape.dim] for o in proto.graph.output}
    kv = (c.num_kv_heads, c.head_dim)
    problems = [
        (meta.get("trtspec.format") != FORMAT, f"has format {meta.get('trtspec.format')!r}, not {FORMAT!r}"),
        (opset != OPSET, f"has opset {opset}, not {OPSET}"),
        (meta.get("trtspec.checkpoint_sha256") != digest,
         f"was exported from another checkpoint (sha256 {meta.get('trtspec.checkpoint_sha256', '?')[:12]}, the "
         f"draft's is {digest[:12]})"),
        (list(graph_in) != inputs or list(graph_out) != outputs,
         f"has inputs {list(graph_in)[:4]}... / outputs {list(graph_out)[:2]}..., not a {c.num_layers}-layer draft's"),
        (graph_out.get("logits", [None])[-1] != c.vocab_size,
         f"has logits over {graph_out.get('logits', [None])[-1]} tokens, the draft's vocab_size is {c.vocab_size}"),
        (any(tuple(graph_in.get(n, [0, 0, 0, 0])[1::2]) != kv for n in inputs[3:]),
         f"has KV inputs that are not [batch, {c.num_kv_heads}, length, {c.head_dim}]"),
    ]
    for bad, problem in problems:
        if bad:
            raise ConfigError(field, str(path), problem, hint=fix)
    try:
        session = open_session(path)
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - ONNX Runtime refuses the graph
        raise ConfigError(field, str(path), f"does not load in ONNX Runtime ({type(exc).__name__})", hint=fix) from None
    runner = OnnxDraftModel(model, session)
    ids = (torch.arange(24) * 7919 % c.vocab_size).view(2, 12)  # [2, 12] fixed tokens over the vocabulary
    got, expected = runner.parity_logits(ids), _torch_logits(model, ids)  # [2, 12, vocab] each
    difference = float((got - expected).abs().max())
    if not difference <= PARITY_TOLERANCE:
        raise ConfigError(field, str(path), f"gives logits {difference:.2g} away from the torch runner's (tolerance "
                          f"{PARITY_TOLERANCE:g})", hint=fix)
    agreement = float((got.argmax(-1) == expected.argmax(-1)).float().mean())
    return OnnxCheck(path=path, opset=OPSET, vocab_size=c.vocab_size, max_logit_difference=difference,
                     argmax_agreement=agreement, runner=runner)


def _torch_logits(model: LlamaModel, ids: Tensor) -> Tensor:
    """The torch runner's logits [batch, T, vocab] for `ids` [batch, T]: a prefill of half, then one token a step."""
    cache, slots, half = model.new_cache(num_slots=ids.shape[0]), torch.arange(ids.shape[0]), ids.shape[1] // 2
    out = [model(ids[:, :half], cache, slots).logits]
    out += [model(ids[:, t : t + 1], cache, slots).logits for t in range(half, ids.shape[1])]
    return torch.cat(out, dim=1)


def open_session(path: str | Path) -> Any:
    """An ONNX Runtime CPU session at one intra-op and one inter-op thread, all graph optimisations."""
    ort = import_onnxruntime()
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


# ---------------------------------------------------------------------------------------------------------------
# the runner


_NO_HIDDEN = torch.empty(0)  # ModelOutput.hidden: the draft-model proposer reads the logits only


class HeadMajorCache(KVCache):
    """KVCache with key/value [num_layers, num_slots, kv_heads, max_seq_len, head_dim]: the exported graph's layout.
    Slots, lengths, rollback and growth as KVCache's (growth concatenates along the slot axis either way)."""

    def __init__(self, config: LlamaConfig, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)  # slots and lengths; the storage is replaced by the head-major one
        shape = (config.num_layers, self.num_slots, config.num_kv_heads, self.max_seq_len, config.head_dim)
        self.key = torch.zeros(shape, dtype=self.key.dtype)  # [layers, slots, kv_heads, max_seq_len, head_dim]
        self.value = torch.zeros(shape, dtype=self.value.dtype)  # [layers, slots, kv_heads, max_seq_len, head_dim]

    def compact(self, slot: int, start: int, keep: list[int]) -> None:
        src = torch.tensor(keep, dtype=torch.long) + start  # [num_keep]
        dst = torch.arange(start, start + len(keep))  # [num_keep]
        self.key[:, slot, :, dst] = self.key[:, slot, :, src]
        self.value[:, slot, :, dst] = self.value[:, slot, :, src]
        self.set_lengths(torch.tensor([slot]), torch.tensor([start + len(keep)]))


class OnnxDraftModel:
    """LlamaModel's draft-side interface (config, new_cache, forward over slots) on an ONNX Runtime session.

    `torch_model` stays for its config and device (and the checks); the forward runs in ONNX Runtime only.
    """

    def __init__(self, torch_model: LlamaModel, session: Any) -> None:
        self.torch_model = torch_model
        self.config = torch_model.config
        self.lm_head = torch_model.lm_head  # the proposer reads the device from it
        self.session = session
        self.input_names, self.output_names = names(self.config.num_layers)
        self._buffers: dict[str, np.ndarray] = {}  # past input name -> flat float buffer, reused across forwards

    def _buffer(self, name: str, size: int) -> np.ndarray:
        """The first `size` elements of `name`'s reused buffer (grown, doubling, when too small)."""
        buffer = self._buffers.get(name)
        if buffer is None or buffer.size < size:
            buffer = self._buffers[name] = np.empty(max(size, 2 * (0 if buffer is None else buffer.size)),
                                                    dtype=np.float32)
        return buffer[:size]

    def new_cache(self, *, num_slots: int = 4, max_slots: int = 256, max_seq_len: int | None = None) -> HeadMajorCache:
        return HeadMajorCache(self.config, num_slots=num_slots, max_slots=max_slots, max_seq_len=max_seq_len)

    def __call__(self, input_ids: Tensor, cache: KVCache, slots: Tensor, *, num_tokens: Tensor | None = None,
                 positions: Tensor | None = None, tree_mask: Tensor | None = None,
                 taps: tuple[int, ...] = ()) -> ModelOutput:
        """LlamaModel.forward's contract for chains (positions, tree_mask and taps unsupported: draft_target needs
        none). input_ids [batch, T]; returns logits [batch, T, vocab] (hidden not computed: an empty tensor)."""
        if positions is not None or tree_mask is not None or taps:
            raise ConfigError("draft_runtime", "onnx", "runs chain drafts only (no tree masks, positions or taps)",
                              hint="set draft_runtime torch for this method")
        batch, T = input_ids.shape
        slot_list = slots.tolist()
        prefix = np.array([cache.length(s) for s in slot_list], dtype=np.int64)  # [batch] cached tokens per row
        n = np.full(batch, T, dtype=np.int64) if num_tokens is None else num_tokens.numpy()  # [batch] new tokens
        if int((prefix + n).max()) > cache.max_seq_len:
            raise ConfigError("context", int((prefix + n).max()),
                              f"exceeds the model's context of {cache.max_seq_len} tokens",
                              hint="use a shorter prompt or fewer max_new_tokens")
        P = int(prefix.max())
        offsets = np.arange(T)  # [T]
        valid = offsets[None, :] < n[:, None]  # [batch, T]
        positions = prefix[:, None] + offsets[None, :]  # [batch, T] cache position (and RoPE position) per token
        if (prefix == P).all() and (n == T).all():  # no padding (every decode step of a steady batch)
            mask = np.ones((batch, P + T), dtype=np.int64)  # [batch, P + T]
        else:
            mask = np.concatenate([np.arange(P)[None, :] < prefix[:, None], valid], axis=1).astype(np.int64)
        feeds = {"input_ids": input_ids.contiguous().numpy(), "position_ids": positions, "attention_mask": mask}
        # numpy views of the slot cache [layers, slots, kv_heads, max_seq_len, head_dim] (bookkeeping in numpy: a few
        # microseconds per operation, where torch's dispatch would cost more than the drafter's layers)
        keys, values = cache.key.numpy(), cache.value.numpy()
        rows = np.array(slot_list)  # [batch]
        single = slot_list[0] if batch == 1 else None
        kv_heads, head_dim = self.config.num_kv_heads, self.config.head_dim
        for i in range(self.config.num_layers):  # each layer's past, right-padded to P: [batch, kv_heads, P, head_dim]
            for name, store in ((f"past_key_{i}", keys), (f"past_value_{i}", values)):
                # row by row into a reused buffer: several times faster than numpy's fancy indexing into a new array
                past = self._buffer(name, batch * kv_heads * P * head_dim).reshape(batch, kv_heads, P, head_dim)
                for j, slot in enumerate(slot_list):
                    past[j] = store[i, slot, :, :P]
                feeds[name] = past
        logits, *new = self.session.run(None, feeds)  # [batch, T, vocab], new entries [batch, kv_heads, T, head_dim]
        for i in range(self.config.num_layers):
            for store, entries in ((keys, new[2 * i]), (values, new[2 * i + 1])):
                if single is not None:
                    store[i, single, :, P : P + int(n[0])] = entries[0, :, : int(n[0])]
                elif valid.all():  # advanced indices first: the target is [batch, T, kv_heads, head_dim]
                    store[i][rows[:, None], :, positions] = entries.transpose(0, 2, 1, 3)
                else:
                    store[i][rows[:, None].repeat(T, 1)[valid], :, positions[valid]] = entries.transpose(0, 2, 1, 3)[valid]
        cache.set_lengths(slots, torch.from_numpy(prefix + n))
        logits = torch.from_numpy(logits)  # [batch, T, vocab]
        return ModelOutput(logits=logits, hidden=_NO_HIDDEN)

    def parity_logits(self, ids: Tensor) -> Tensor:
        """Logits [batch, T, vocab] for `ids` [batch, T] as _torch_logits runs them (prefill half, then steps)."""
        cache, slots, half = self.new_cache(num_slots=ids.shape[0]), torch.arange(ids.shape[0]), ids.shape[1] // 2
        out = [self(ids[:, :half], cache, slots).logits]
        out += [self(ids[:, t : t + 1], cache, slots).logits for t in range(half, ids.shape[1])]
        return torch.cat(out, dim=1)


def load_onnx_draft(checkpoint: str | Path, model: LlamaModel, *, path: str | Path | None = None) -> OnnxDraftModel:
    """The ONNX runner for the draft `model` loaded from `checkpoint`: its file (`path`, else `default_path`) exported
    when missing, then checked (check_draft_onnx). Only float32 CPU drafts export (the reference engine's default)."""
    import_onnxruntime()
    try:
        import onnx  # noqa: F401
    except ImportError as exc:
        raise ConfigError("draft_runtime", "onnx", f"needs the onnx package, which is not installed ({exc})",
                          hint="pip install 'trtspec[onnx]' (onnx, onnxruntime), or set draft_runtime torch") from None
    weight = model.lm_head.weight
    if weight.dtype != torch.float32 or weight.device.type != "cpu":
        raise ConfigError("draft_runtime", "onnx", f"runs float32 CPU drafts; this one is {weight.dtype} on "
                          f"{weight.device}", hint="set dtype float32 and device cpu, or draft_runtime torch")
    digest = checkpoint_digest(checkpoint)
    path = Path(path) if path is not None else default_path(checkpoint, digest)
    if not path.is_file():
        export_draft(model, path, digest=digest)
    return check_draft_onnx(path, model, digest=digest).runner
