"""Medusa heads as a plain torch module, and their two on-disk layouts (load either, save the HF one).

A head is `num_layers` residual blocks x + SiLU(W x + b) followed by its own LM head (hidden -> vocab). Head h reads
the target's last hidden state (after the final norm) at the last committed token and predicts the token h + 2
positions ahead (the target's own LM head predicts h = -1, the next token).

Layouts:
- HF Medusa (FasterDecoding): `config.json` with `medusa_num_heads`, `medusa_num_layers`, `hidden_size`,
  `vocab_size`, `base_model_name_or_path`; `medusa_lm_head.safetensors` (or `.pt`) with `{h}.{l}.linear.weight|bias`
  and `{h}.{num_layers}.weight`. The module's own state_dict has exactly these names.
- TensorRT-LLM Medusa checkpoint: `config.json` with `architecture: MedusaForCausalLM`, `num_medusa_heads`,
  `num_medusa_layers`; `rank0.safetensors` with `medusa_heads.{h}.medusa_layers.{l}.linear.weight|bias` and
  `medusa_heads.{h}.lm_head.weight` (shared/reference/trtllm-specdec.md section 1.3). Single-rank only.

This module knows nothing about training (trtspec.training.medusa) or proposing (trtspec.spec.proposers.medusa).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from trtspec.atomic import atomic_path, write_json
from trtspec.errors import IncompatibleModelsError, ModelNotFoundError
from trtspec.methods.medusa import MEDUSA

HF_WEIGHTS = ("medusa_lm_head.safetensors", "medusa_lm_head.pt")
TRTLLM_WEIGHTS = "rank0.safetensors"


class ResBlock(nn.Module):
    """x + SiLU(linear(x)); the linear starts at zero so a fresh block is the identity."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.linear = nn.Linear(hidden_size, hidden_size)
        nn.init.zeros_(self.linear.weight)
        self.act = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [..., hidden]
        return x + self.act(self.linear(x))


@dataclass(frozen=True)
class MedusaShape:
    num_heads: int
    num_layers: int
    hidden_size: int
    vocab_size: int


class MedusaHeads(nn.Module):
    """`num_heads` Medusa heads; `forward(hidden)` -> logits of every head."""

    def __init__(self, shape: MedusaShape) -> None:
        super().__init__()
        self.shape = shape
        self.heads = nn.ModuleList(
            nn.Sequential(*(ResBlock(shape.hidden_size) for _ in range(shape.num_layers)),
                          nn.Linear(shape.hidden_size, shape.vocab_size, bias=False))
            for _ in range(shape.num_heads)
        )

    @property
    def num_heads(self) -> int:
        return self.shape.num_heads

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """Args: hidden [..., hidden_size] target last hidden states. Returns [num_heads, ..., vocab] logits."""
        return torch.stack([head(hidden) for head in self.heads])

    def hf_state_dict(self) -> dict[str, torch.Tensor]:
        """FasterDecoding names: `{h}.{l}.linear.weight|bias`, `{h}.{num_layers}.weight`."""
        return {name.removeprefix("heads."): t for name, t in self.state_dict().items()}


# ---------------------------------------------------------------------------------------------------------------
# loading


def load_medusa_heads(path: str | Path, *, target_hidden_size: int | None = None,
                      target_vocab_size: int | None = None, dtype: torch.dtype = torch.float32,
                      field: str = MEDUSA.checkpoint) -> MedusaHeads:
    """Medusa heads from a directory in either layout; refuses a hidden-size or vocab mismatch with the target.

    Raises ModelNotFoundError for a missing/unrecognised directory, IncompatibleModelsError naming both numbers.
    """
    root = Path(path).expanduser()
    config_path = root / "config.json"
    if not config_path.is_file():
        raise ModelNotFoundError(f"{field}={str(path)!r}: {config_path} is missing",
                                 hint="pass a directory written by `trtspec train medusa` (or a FasterDecoding/"
                                      "TensorRT-LLM Medusa checkpoint)")
    config = json.loads(config_path.read_text())
    if "medusa_num_heads" in config:
        shape, state = _read_hf(root, config, field)
    elif config.get("architecture") == "MedusaForCausalLM":
        shape, state = _read_trtllm(root, config, field)
    else:
        raise ModelNotFoundError(
            f"{field}={str(path)!r}: {config_path} is neither an HF Medusa config (medusa_num_heads) nor a "
            f"TensorRT-LLM Medusa checkpoint (architecture MedusaForCausalLM)",
            hint="train heads with `trtspec train medusa --model ... --out DIR`")
    for name, ours, theirs in (("hidden_size", shape.hidden_size, target_hidden_size),
                               ("vocab_size", shape.vocab_size, target_vocab_size)):
        if theirs is not None and ours != theirs:
            raise IncompatibleModelsError(
                f"{field}={str(path)!r}: Medusa heads have {name}={ours} but the target has {name}={theirs}",
                hint="Medusa heads only fit the target they were trained on; train heads for this target with "
                     "`trtspec train medusa --model TARGET --out DIR`")
    heads = MedusaHeads(shape)
    missing, unexpected = heads.load_state_dict({f"heads.{k}": v for k, v in state.items()}, strict=False)
    if missing or unexpected:
        raise ModelNotFoundError(f"{field}={str(path)!r}: weights do not match the config "
                                 f"(missing {missing[:3]}, unexpected {unexpected[:3]})",
                                 hint="re-export the heads")
    return heads.to(dtype).eval()


def resolve_heads(name_or_path: str | Path, *, target_hidden_size: int | None = None,
                  target_vocab_size: int | None = None, dtype: torch.dtype = torch.float32,
                  field: str = MEDUSA.checkpoint) -> MedusaHeads:
    """`load_medusa_heads` for an embedded name (e.g. `tiny-medusa`) or a directory."""
    from trtspec.models import resolve_medusa

    return load_medusa_heads(resolve_medusa(name_or_path, field=field), target_hidden_size=target_hidden_size, target_vocab_size=target_vocab_size,
                             dtype=dtype, field=field)


def _read_hf(root: Path, config: dict, field: str) -> tuple[MedusaShape, dict[str, torch.Tensor]]:
    weights = next((root / w for w in HF_WEIGHTS if (root / w).is_file()), None)
    if weights is None:
        raise ModelNotFoundError(f"{field}={str(root)!r}: no {' or '.join(HF_WEIGHTS)}",
                                 hint="the HF Medusa layout keeps the heads in medusa_lm_head.safetensors")
    if weights.suffix == ".pt":
        state = torch.load(weights, map_location="cpu", weights_only=True)
    else:
        from safetensors.torch import load_file

        state = load_file(weights)
    num_layers = int(config.get("medusa_num_layers", 1))
    # Some published configs under-report medusa_num_heads (trtllm-specdec.md 1.3): count the LM heads instead.
    num_heads = len({k.split(".")[0] for k in state if k.endswith(f".{num_layers}.weight")})
    lm_head = state["0." + str(num_layers) + ".weight"]  # [vocab, hidden]
    vocab, hidden = lm_head.shape
    return MedusaShape(num_heads, num_layers, hidden, vocab), state


def _read_trtllm(root: Path, config: dict, field: str) -> tuple[MedusaShape, dict[str, torch.Tensor]]:
    weights = root / TRTLLM_WEIGHTS
    if not weights.is_file():
        raise ModelNotFoundError(f"{field}={str(root)!r}: {weights.name} is missing",
                                 hint="only single-rank (tp_size=1) TensorRT-LLM checkpoints can be read")
    from safetensors import safe_open

    num_layers = int(config["num_medusa_layers"])
    state: dict[str, torch.Tensor] = {}
    pattern = re.compile(r"medusa_heads\.(\d+)\.(?:medusa_layers\.(\d+)\.linear\.(weight|bias)|lm_head\.weight)$")
    with safe_open(weights, "pt") as f:
        for key in f.keys():  # noqa: SIM118 (safe_open is not a dict)
            m = pattern.match(key)
            if m is None:
                continue
            head, layer, kind = m.groups()
            name = f"{head}.{layer}.linear.{kind}" if layer is not None else f"{head}.{num_layers}.weight"
            state[name] = f.get_tensor(key)
    num_heads = int(config["num_medusa_heads"])
    vocab, hidden = state[f"0.{num_layers}.weight"].shape
    return MedusaShape(num_heads, num_layers, hidden, vocab), state


# ---------------------------------------------------------------------------------------------------------------
# saving


def save_medusa_hf(heads: MedusaHeads, out_dir: Path, *, base_model: str, dtype: torch.dtype = torch.float16,
                   extra_config: dict | None = None) -> None:
    """Write the HF Medusa layout (config.json + medusa_lm_head.safetensors) atomically into `out_dir`."""
    from safetensors.torch import save_file

    out_dir.mkdir(parents=True, exist_ok=True)
    shape = heads.shape
    config = {
        "medusa_num_heads": shape.num_heads,
        "medusa_num_layers": shape.num_layers,
        "hidden_size": shape.hidden_size,
        "vocab_size": shape.vocab_size,
        "base_model_name_or_path": base_model,
        "torch_dtype": str(dtype).removeprefix("torch."),
        **(extra_config or {}),
    }
    state = {k: v.detach().to(dtype).contiguous() for k, v in heads.hf_state_dict().items()}
    with atomic_path(out_dir / HF_WEIGHTS[0]) as tmp:
        save_file(state, str(tmp))
    write_json(out_dir / "config.json", config)
