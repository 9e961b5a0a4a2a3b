"""The `onnx` section's cases (benchmarks_onnx.py): each drafter's export, parity run and timed calls per batch.

The draft model goes through trtspec.spec.onnx_draft (the engine's `draft_runtime: onnx`: its export, checks and
runner); the EAGLE-3 drafter and the Medusa heads through this module's own exports (EagleStep: the drafter's step
over an explicit KV cache, HF layout, the presents returned whole; the heads as they are), and the section's shared
types (the variants, OnnxSpec, Timing, Measured). No torch at import.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchlib.benchmarks import MIXED

TORCH, ORT_RUN, ORT_BIND, ORT_SLOTS = "torch runner", "ORT run", "ORT IO binding", "ORT on the slot cache"
VARIANTS = (TORCH, ORT_RUN, ORT_BIND, ORT_SLOTS)
Calls = dict[str, tuple[Callable[[], Any], Callable[[], Any] | None]]  # variant -> (timed call, untimed reset)
Case = tuple[str, int, Calls]  # (drafter, batch, its calls)


@dataclass(frozen=True)
class OnnxSpec:
    model: str = "tiny"
    draft: str = "tiny-draft"
    eagle: str = "tiny-eagle"
    medusa: str = "tiny-medusa"
    batches: tuple[int, ...] = (1, 4, 16)
    past: int = 128  # cached tokens before the timed step
    decode: int = 32  # teacher-forced decode steps of the parity run (after a `past`-token prefill)
    calls: int = 200  # timed calls per variant per round (interleaved one by one)
    rounds: int = 5  # rounds (median per round, then median and spread over rounds)
    opset: int = 17
    tolerance: float = 1e-3  # largest |logit difference| accepted by the parity check


@dataclass
class Timing:
    """Per round: median wall and thread-CPU seconds per call, and the paired ratio to the torch runner's."""

    wall: list[float]
    cpu: list[float]


@dataclass
class Measured:
    """Per drafter: parity lines, export notes, and timings per (batch, variant)."""

    parity: dict[str, str]
    exports: dict[str, str]
    timings: dict[tuple[str, int, str], Timing]
    ort: str | None  # onnxruntime's version; None when absent
    load: tuple[float, float] = (0.0, 0.0)  # 1-minute load average at the start and the end


# ---------------------------------------------------------------------------------------------------------------
# export wrappers: the runners' weights as pure functions of an explicit KV cache


def _torch_modules() -> dict[str, Any]:
    import torch
    from torch import nn

    from trtspec.spec.model import rotate_half

    def rope(position_ids, inv_freq, dtype):  # position_ids [B, T] -> cos, sin [B, T, head_dim]
        freqs = position_ids[..., None].float() * inv_freq  # [B, T, head_dim / 2]
        emb = torch.cat((freqs, freqs), dim=-1)  # [B, T, head_dim]
        return emb.cos().to(dtype), emb.sin().to(dtype)

    def mask_of(attention_mask, T):  # attention_mask [B, L] (1 = real) -> [B, 1, T, L] causal over the new tokens
        L = attention_mask.shape[1]
        key_pos = torch.arange(L)  # [L]
        query_pos = torch.arange(T) + (L - T)  # [T]
        causal = key_pos[None, :] <= query_pos[:, None]  # [T, L]
        return causal[None, None] & (attention_mask[:, None, None, :] > 0)  # [B, 1, T, L]

    def attend(block, h, cos, sin, past_k, past_v, mask):
        """Block.attend with the past passed in: h [B, T, in]; past_k/v [B, kv_heads, P, head_dim];
        returns o_proj's output [B, T, hidden] and the presents [B, kv_heads, P + T, head_dim]."""
        c, (B, T, _) = block.c, h.shape
        qkv = block.qkv_proj(h).view(B, T, c.num_heads + 2 * c.num_kv_heads, c.head_dim)
        q, k, v = qkv.split([c.num_heads, c.num_kv_heads, c.num_kv_heads], dim=2)  # [B, T, heads, head_dim]
        cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)  # [B, T, 1, head_dim]
        q = (q * cos + rotate_half(q) * sin).transpose(1, 2)  # [B, heads, T, head_dim]
        k = (k * cos + rotate_half(k) * sin).transpose(1, 2)  # [B, kv_heads, T, head_dim]
        keys = torch.cat([past_k, k], dim=2)  # [B, kv_heads, P + T, head_dim]
        values = torch.cat([past_v, v.transpose(1, 2)], dim=2)  # [B, kv_heads, P + T, head_dim]
        rep = c.num_heads // c.num_kv_heads
        kk = keys.repeat_interleave(rep, dim=1) if rep > 1 else keys  # [B, heads, P + T, head_dim]
        vv = values.repeat_interleave(rep, dim=1) if rep > 1 else values
        scores = (q @ kk.transpose(-1, -2)) * c.head_dim**-0.5  # [B, heads, T, P + T]
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        out = scores.softmax(-1) @ vv  # [B, heads, T, head_dim]
        return block.o_proj(out.transpose(1, 2).reshape(B, T, c.num_heads * c.head_dim)), keys, values

    class EagleStep(nn.Module):
        """EagleDrafter: (input_ids [B, T], hidden [B, T, hidden], position_ids, attention_mask, past_key_0,
        past_value_0) -> logits [B, T, draft vocab], pre-norm [B, T, hidden], present_key_0, present_value_0."""

        def __init__(self, drafter) -> None:
            super().__init__()
            self.drafter = drafter

        def forward(self, input_ids, hidden, position_ids, attention_mask, past_k, past_v):
            d = self.drafter
            layer = d.layers[0]
            embeds = d.embed_tokens(input_ids).to(hidden.dtype)  # [B, T, hidden]
            cos, sin = rope(position_ids, d.inv_freq, hidden.dtype)
            h = torch.cat([layer.input_layernorm(embeds), layer.hidden_norm(hidden)], dim=-1)  # [B, T, 2 x hidden]
            out, k, v = attend(layer, h, cos, sin, past_k, past_v, mask_of(attention_mask, input_ids.shape[1]))
            x = hidden + out
            x = x + layer.mlp(layer.post_attention_layernorm(x))  # [B, T, hidden]
            return d.lm_head(d.norm(x)).float(), x, k, v

    return {"EagleStep": EagleStep}


def _export(module: Any, args: tuple, path: Path, inputs: list[str], outputs: list[str],
            dynamic: dict[str, dict[int, str]], opset: int) -> str:
    """torch.onnx.export (the TorchScript path); returns a note: exporter, opset, size, seconds."""
    import torch

    start = time.perf_counter()
    torch.onnx.export(module, args, str(path), input_names=inputs, output_names=outputs, dynamic_axes=dynamic,
                      opset_version=opset, dynamo=False, do_constant_folding=True)
    return (f"torch.onnx.export (TorchScript path, dynamo=False), opset {opset}, "
            f"{path.stat().st_size / 1e6:.1f} MB, {time.perf_counter() - start:.1f} s")


def _session(path: Path) -> Any:
    """The engine's session settings (one intra-op and one inter-op thread, sequential, ORT_ENABLE_ALL)."""
    from trtspec.spec.onnx_draft import open_session

    return open_session(path)



def contexts(spec: OnnxSpec, rows: int) -> Any:
    """[rows, past + decode] token ids: held-out prompts (cycled), cut to their last past + decode tokens."""
    import torch
    from transformers import AutoTokenizer

    from trtspec.models import resolve_model
    from trtspec.sweep.prompts import load_suite

    tokenizer = AutoTokenizer.from_pretrained(resolve_model(spec.model))
    n = spec.past + spec.decode
    ids = [tokenizer.encode(t) for t in load_suite(MIXED).prompts]
    ids = [row[-n:] for row in ids if len(row) >= n] or [(row * n)[:n] for row in ids]
    return torch.tensor([ids[i % len(ids)] for i in range(rows)])  # [rows, past + decode]


def cases(spec: OnnxSpec, tmp: Path, measured: Measured) -> list[Case]:
    """(drafter, batch, {variant: one timed call}) per drafter and batch; parity and export notes into measured."""
    import torch

    from trtspec.models import resolve_model
    from trtspec.spec.eagle_model import load_drafter
    from trtspec.spec.medusa_heads import resolve_heads
    from trtspec.spec.model import LlamaModel

    rows = max(spec.batches)
    tokens = contexts(spec, rows)  # [rows, past + decode]
    draft = LlamaModel.from_pretrained(resolve_model(spec.draft))
    target = LlamaModel.from_pretrained(resolve_model(spec.model))
    drafter, taps = load_drafter(spec.eagle, target.config, target.embed_tokens)
    heads = resolve_heads(spec.medusa, target_hidden_size=target.config.hidden_size,
                          target_vocab_size=target.config.vocab_size)
    # the target's features for EAGLE (its taps, fused by fc) and Medusa (its last hidden state)
    cache = target.new_cache(num_slots=rows, max_slots=rows)
    out = target(tokens, cache, torch.arange(rows), taps=taps)
    with torch.no_grad():
        features = drafter.combine(out.aux)  # [rows, past + decode, eagle hidden]
    last_hidden = out.hidden[:, spec.past - 1]  # [rows, target hidden]
    cases: list[Case] = []
    cases += _draft_cases(f"draft model ({spec.draft})", spec, tmp, measured, draft, tokens)
    cases += _kv_cases(f"EAGLE-3 drafter ({spec.eagle})", spec, tmp, measured, _EagleRunner(drafter, tokens, features))
    cases += _medusa_cases(f"Medusa heads ({spec.medusa})", spec, tmp, measured, heads, last_hidden)
    return cases


class _EagleRunner:
    """The EAGLE-3 drafter: cache position p holds the target's feature at p with token p + 1."""

    def __init__(self, drafter: Any, tokens: Any, features: Any) -> None:
        self.model, self.tokens, self.features = drafter, tokens, features
        c = drafter.config.layer
        self.layers, self.kv_shape = 1, (c.num_kv_heads, c.head_dim)
        self.extra = ["hidden"]

    def inputs(self, rows: int, lo: int, hi: int) -> tuple[Any, Any]:
        """(ids [rows, hi - lo], features [rows, hi - lo, hidden]) for cache positions [lo, hi)."""
        return self.tokens[:rows, lo + 1 : hi + 1], self.features[:rows, lo:hi]

    def torch_forward(self, ids: Any, feat: Any, cache: Any, slots: Any) -> Any:
        return self.model(ids, feat, cache, slots)[0]  # [B, T, draft vocab]

    def new_cache(self, rows: int) -> Any:
        return self.model.new_cache(num_slots=rows, max_slots=rows)

    def wrapper(self) -> Any:
        return _torch_modules()["EagleStep"](self.model)


def _kv_cases(name: str, spec: OnnxSpec, tmp: Path, measured: Measured,
              runner: _EagleRunner) -> list[Case]:
    """Export + parity of the EAGLE-3 drafter (the bench's own export: HF layout [B, kv_heads, P, head_dim], the
    presents returned whole), and its timed calls per batch."""
    import numpy as np
    import torch

    kv_heads, head_dim = runner.kv_shape
    past_names = [f"past_{kind}_{i}" for i in range(runner.layers) for kind in ("key", "value")]
    present_names = [n.replace("past", "present") for n in past_names]
    inputs = ["input_ids", *runner.extra, "position_ids", "attention_mask", *past_names]
    outputs = ["logits", *(["prenorm"] if runner.extra else []), *present_names]
    dynamic = {"input_ids": {0: "batch", 1: "new"}, "position_ids": {0: "batch", 1: "new"},
               "attention_mask": {0: "batch", 1: "total"}, "logits": {0: "batch", 1: "new"},
               **{n: {0: "batch", 2: "past"} for n in past_names}, **{n: {0: "batch", 2: "total"} for n in present_names}}
    if runner.extra:
        dynamic |= {"hidden": {0: "batch", 1: "new"}, "prenorm": {0: "batch", 1: "new"}}

    def feeds(ids: Any, feat: Any, past: Sequence[Any], start: int) -> dict[str, Any]:
        rows, T = ids.shape
        positions = np.arange(start, start + T, dtype=np.int64)[None].repeat(rows, 0)  # [rows, T]
        out = {"input_ids": np.ascontiguousarray(ids.numpy()), "position_ids": positions,
               "attention_mask": np.ones((rows, start + T), dtype=np.int64), **dict(zip(past_names, past, strict=True))}
        if feat is not None:
            out["hidden"] = np.ascontiguousarray(feat.numpy())
        return out

    def empty(rows: int) -> list[Any]:
        return [np.zeros((rows, kv_heads, 0, head_dim), dtype=np.float32) for _ in past_names]

    path = tmp / f"{name.split()[0]}-{len(measured.exports)}.onnx"
    example_ids, example_feat = runner.inputs(2, 0, 3)
    example = feeds(example_ids, example_feat, [np.zeros((2, kv_heads, 2, head_dim), np.float32)] * len(past_names), 2)
    example["input_ids"] = example_ids[:, :1].numpy().copy()
    example["position_ids"] = example["position_ids"][:, :1].copy()
    example["attention_mask"] = example["attention_mask"][:, :3].copy()
    if example_feat is not None:
        example["hidden"] = example_feat[:, :1].numpy().copy()
    args = tuple(torch.from_numpy(example[n]) for n in inputs)
    with torch.no_grad():
        measured.exports[name] = _export(runner.wrapper(), args, path, inputs, outputs, dynamic, spec.opset)
    rows, past, steps = max(spec.batches), spec.past, spec.decode - 1
    session = _session(path) if measured.ort else None

    # parity: prefill `past` positions, then `steps` one-token steps fed the same tokens (teacher-forced)
    cache, slots = runner.new_cache(rows), torch.arange(rows)
    logits_t = [runner.torch_forward(*runner.inputs(rows, 0, past), cache, slots)]
    logits_t += [runner.torch_forward(*runner.inputs(rows, p, p + 1), cache, slots) for p in range(past, past + steps)]
    expected = torch.cat(logits_t, dim=1)  # [rows, past + steps, vocab]
    prefill_past: list[Any] = []
    if session is not None:
        out = session.run(None, feeds(*runner.inputs(rows, 0, past), empty(rows), 0))
        logits_o, state = [out[0]], out[-len(past_names):]
        prefill_past = list(state)
        for p in range(past, past + steps):
            out = session.run(None, feeds(*runner.inputs(rows, p, p + 1), state, p))
            logits_o.append(out[0])
            state = out[-len(past_names):]
        got = torch.from_numpy(np.concatenate(logits_o, axis=1))  # [rows, past + steps, vocab]
        diff = float((got - expected).abs().max())
        agree = (got.argmax(-1) == expected.argmax(-1))  # [rows, past + steps]
        measured.parity[name] = (f"{name}: max |logit difference| {diff:.1e} (tolerance {spec.tolerance:g}); argmax "
                                 f"agreement {int(agree.sum())}/{agree.numel()} positions ({rows} rows x {past} "
                                 f"prefill + {steps} decode positions){'' if diff <= spec.tolerance else ' FAILED'}")

    cases = []
    for batch in spec.batches:
        calls: Calls = {}
        cache, slots = runner.new_cache(batch), torch.arange(batch)
        runner.torch_forward(*runner.inputs(batch, 0, past), cache, slots)
        ids, feat = runner.inputs(batch, past, past + 1)

        def torch_call(ids=ids, feat=feat, cache=cache, slots=slots) -> None:
            runner.torch_forward(ids, feat, cache, slots)

        def torch_reset(cache=cache, batch=batch) -> None:
            for slot in range(batch):
                cache.rollback(slot, past)

        calls[TORCH] = (torch_call, torch_reset)
        if session is not None:
            step = feeds(ids, feat, [np.ascontiguousarray(a[:batch]) for a in prefill_past], past)
            calls[ORT_RUN] = (lambda step=step: session.run(None, step), None)
            binding = session.io_binding()
            for key, value in step.items():
                binding.bind_cpu_input(key, value)
            for key in outputs:
                binding.bind_output(key, "cpu")

            def bound(binding=binding) -> None:
                session.run_with_iobinding(binding)
                binding.get_outputs()[0].numpy()

            calls[ORT_BIND] = (bound, None)
            slot_cache = []  # per past name: [batch slots, kv_heads, past + 1, head_dim]
            for a in prefill_past:
                c = np.zeros((batch, kv_heads, past + 1, head_dim), dtype=np.float32)
                c[:, :, :past] = a[:batch]
                slot_cache.append(c)
            row_slots = np.arange(batch)

            def slotted(step=step, slot_cache=slot_cache, row_slots=row_slots) -> None:
                run = dict(step) | {n: c[row_slots, :, :past] for n, c in zip(past_names, slot_cache, strict=True)}
                out = session.run(None, run)
                for c, present in zip(slot_cache, out[-len(past_names):], strict=True):
                    c[row_slots, :, past] = present[:, :, past]

            calls[ORT_SLOTS] = (slotted, None)
        cases.append((name, batch, calls))
    return cases


def _draft_cases(name: str, spec: OnnxSpec, tmp: Path, measured: Measured, draft: Any,
                 tokens: Any) -> list[Case]:
    """The draft model through trtspec.spec.onnx_draft (the engine's `draft_runtime: onnx`): its export and load-time
    checks, a parity run of the ORT runner against the torch runner on the same slot-cache calls, and timed calls."""
    import numpy as np
    import torch

    from trtspec.models import resolve_model
    from trtspec.spec import onnx_draft

    digest = onnx_draft.checkpoint_digest(resolve_model(spec.draft))
    path, start = tmp / "draft.onnx", time.perf_counter()
    onnx_draft.export_draft(draft, path, digest=digest)
    measured.exports[name] = (f"trtspec.spec.onnx_draft.export_draft: torch.onnx.export (TorchScript path, "
                              f"dynamo=False), opset {onnx_draft.OPSET}, KV [batch, kv_heads, length, head_dim] in, "
                              f"the new entries out, {path.stat().st_size / 1e6:.1f} MB, "
                              f"{time.perf_counter() - start:.1f} s")
    runner = onnx_draft.check_draft_onnx(path, draft, digest=digest).runner if measured.ort else None
    rows, past, steps = max(spec.batches), spec.past, spec.decode - 1
    if runner is not None:  # parity: the same prefill + teacher-forced steps through both runners
        results = []
        for model in (draft, runner):
            cache, slots = model.new_cache(num_slots=rows, max_slots=rows), torch.arange(rows)
            out = [model(tokens[:, :past], cache, slots).logits]
            out += [model(tokens[:, p : p + 1], cache, slots).logits for p in range(past, past + steps)]
            results.append(torch.cat(out, dim=1))  # [rows, past + steps, vocab]
        expected, got = results
        diff = float((got - expected).abs().max())
        agree = got.argmax(-1) == expected.argmax(-1)  # [rows, past + steps]
        measured.parity[name] = (f"{name}: max |logit difference| {diff:.1e} (tolerance {spec.tolerance:g}); argmax "
                                 f"agreement {int(agree.sum())}/{agree.numel()} positions ({rows} rows x {past} "
                                 f"prefill + {steps} decode positions){'' if diff <= spec.tolerance else ' FAILED'}")
    cases = []
    inputs, outputs = onnx_draft.names(draft.config.num_layers)
    for batch in spec.batches:
        calls: Calls = {}
        ids = tokens[:batch, past : past + 1].contiguous()  # [batch, 1]
        for variant, model in ((TORCH, draft), (ORT_SLOTS, runner)):
            if model is None:
                continue
            cache, slots = model.new_cache(num_slots=batch, max_slots=batch), torch.arange(batch)
            model(tokens[:batch, :past], cache, slots)

            def call(model=model, cache=cache, slots=slots, ids=ids) -> None:
                model(ids, cache, slots)

            def reset(cache=cache, batch=batch) -> None:
                for slot in range(batch):
                    cache.rollback(slot, past)

            calls[variant] = (call, reset)
        if runner is not None:
            step = {"input_ids": ids.numpy(), "position_ids": np.full((batch, 1), past, dtype=np.int64),
                    "attention_mask": np.ones((batch, past + 1), dtype=np.int64)}
            for i in range(draft.config.num_layers):  # the batch's past, contiguous: [batch, kv_heads, past, head_dim]
                step[f"past_key_{i}"] = cache.key[i][:batch, :, :past].numpy().copy()
                step[f"past_value_{i}"] = cache.value[i][:batch, :, :past].numpy().copy()
            session = runner.session
            calls[ORT_RUN] = (lambda step=step, session=session: session.run(None, step), None)
            binding = session.io_binding()
            for key in inputs:
                binding.bind_cpu_input(key, step[key])
            for key in outputs:
                binding.bind_output(key, "cpu")

            def bound(binding=binding, session=session) -> None:
                session.run_with_iobinding(binding)
                binding.get_outputs()[0].numpy()

            calls[ORT_BIND] = (bound, None)
        cases.append((name, batch, {v: calls[v] for v in VARIANTS if v in calls}))
    return cases


def _medusa_cases(name: str, spec: OnnxSpec, tmp: Path, measured: Measured, heads: Any,
                  hidden: Any) -> list[Case]:
    """Medusa heads: hidden [B, target hidden] -> logits [heads, B, vocab]; no KV cache."""
    import torch

    path = tmp / "medusa.onnx"
    with torch.no_grad():
        measured.exports[name] = _export(heads, (hidden[:2],), path, ["hidden"], ["logits"],
                                         {"hidden": {0: "batch"}, "logits": {1: "batch"}}, spec.opset)
        expected = heads(hidden)  # [heads, rows, vocab]
    session = _session(path) if measured.ort else None
    if session is not None:
        got = torch.from_numpy(session.run(None, {"hidden": hidden.numpy()})[0])
        diff = float((got - expected).abs().max())
        agree = got.argmax(-1) == expected.argmax(-1)  # [heads, rows]
        measured.parity[name] = (f"{name}: max |logit difference| {diff:.1e}; argmax agreement {int(agree.sum())}/"
                                 f"{agree.numel()} (heads x rows){'' if diff <= spec.tolerance else ' FAILED'}")
    cases = []
    for batch in spec.batches:
        x = hidden[:batch].contiguous()  # [batch, target hidden]
        calls: Calls = {TORCH: (torch.inference_mode()(lambda x=x: heads(x)), None)}
        if session is not None:
            feed = {"hidden": x.numpy()}
            calls[ORT_RUN] = (lambda feed=feed: session.run(None, feed), None)
            binding = session.io_binding()
            binding.bind_cpu_input("hidden", feed["hidden"])
            binding.bind_output("logits", "cpu")

            def bound(binding=binding) -> None:
                session.run_with_iobinding(binding)
                binding.get_outputs()[0].numpy()

            calls[ORT_BIND] = (bound, None)
        cases.append((name, batch, calls))
    return cases

