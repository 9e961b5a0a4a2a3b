"""Resolve model names and directories. Pure Python: no torch, no network.

`tiny` and `tiny-draft` (and `tiny-medusa`, the Medusa heads) are the embedded default models shipped inside the
package (`trtspec/assets/models/`). Any other argument must be a local Hugging Face directory: trtspec never
downloads a model at run time.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trtspec.errors import IncompatibleModelsError, ModelNotFoundError

ASSETS = Path(__file__).resolve().parent / "assets"
EMBEDDED_MODELS = ASSETS / "models"
PROMPTS = ASSETS / "prompts"
EMBEDDED = {
    "tiny": "target (Llama, 12M parameters) trained on the Python standard library",
    "tiny-draft": "draft (Llama, 1.7M parameters) distilled from tiny",
}
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")


def embedded_path(name: str) -> Path:
    return EMBEDDED_MODELS / name


def resolve_model(name_or_path: str | Path, *, field: str = "model") -> Path:
    """A causal-LM checkpoint directory for an embedded name or a local path.

    Raises ModelNotFoundError naming the path and what is missing (config.json, weights, a causal-LM architecture).
    """
    text = str(name_or_path)
    path = embedded_path(text) if text in EMBEDDED else Path(text).expanduser()
    if not path.exists():
        raise ModelNotFoundError(
            f"{field}={text!r}: no embedded model of that name and no directory at {path}",
            hint=f"use an embedded model ({', '.join(EMBEDDED)}) or a local Hugging Face checkpoint directory",
        )
    if not path.is_dir():
        raise ModelNotFoundError(f"{field}={text!r}: {path} is a file, not a checkpoint directory",
                                 hint="pass the directory that holds config.json and the weights")
    config = read_config(path, field=field)
    archs = config.get("architectures") or []
    if not any(str(a).endswith("ForCausalLM") for a in archs):
        raise ModelNotFoundError(
            f"{field}={text!r}: {path / 'config.json'} has architectures={archs}, not a causal LM",
            hint="pass a *ForCausalLM checkpoint (e.g. LlamaForCausalLM)",
        )
    if not any((path / w).exists() for w in WEIGHT_FILES):
        raise ModelNotFoundError(
            f"{field}={text!r}: {path} has no weights ({' or '.join(WEIGHT_FILES)})",
            hint="save the model with save_pretrained(..., safe_serialization=True)",
        )
    return path


def read_config(path: Path, *, field: str = "model") -> dict[str, Any]:
    cfg = path / "config.json"
    if not cfg.is_file():
        raise ModelNotFoundError(f"{field}={str(path)!r}: {cfg} is missing",
                                 hint="a Hugging Face checkpoint directory has a config.json")
    try:
        return json.loads(cfg.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ModelNotFoundError(f"{field}={str(path)!r}: {cfg} is not valid JSON ({exc})",
                                 hint="re-export the checkpoint") from None


def check_pair(target: Path, draft: Path, *, allow_vocab_padding: bool = False) -> None:
    """Refuse a draft/target pair whose vocabularies differ (names both sizes).

    Padding-only differences (same tokenizer, logits width rounded up) are allowed with `allow_vocab_padding`.
    """
    t_cfg, d_cfg = read_config(target, field="target"), read_config(draft, field="draft")
    t_vocab, d_vocab = t_cfg.get("vocab_size"), d_cfg.get("vocab_size")
    t_tok, d_tok = tokenizer_vocab(target), tokenizer_vocab(draft)
    if t_tok is not None and d_tok is not None and t_tok != d_tok:
        raise IncompatibleModelsError(
            f"draft tokenizer ({draft}) differs from the target's ({target}): {d_tok} vs {t_tok} entries",
            hint="draft and target must share one tokenizer; pick a draft from the target's model family",
        )
    if t_vocab != d_vocab:
        if allow_vocab_padding and t_tok is not None and t_tok == d_tok and min(t_vocab, d_vocab) >= t_tok:
            return
        raise IncompatibleModelsError(
            f"vocab_size differs: target {target} has {t_vocab}, draft {draft} has {d_vocab}",
            hint="use a draft with the target's tokenizer and vocab size"
            + ("" if allow_vocab_padding else " (or allow padding-only differences explicitly)"),
        )


def tokenizer_vocab(path: Path) -> int | None:
    """Number of entries in a `tokenizer.json` (vocab + added tokens), or None when there is none."""
    tok = path / "tokenizer.json"
    if not tok.is_file():
        return None
    data = json.loads(tok.read_text(encoding="utf-8"))
    vocab = data.get("model", {}).get("vocab", {})
    added = {t["id"] for t in data.get("added_tokens", [])}
    ids = set(vocab.values()) if isinstance(vocab, dict) else set(range(len(vocab)))
    return len(ids | added)
