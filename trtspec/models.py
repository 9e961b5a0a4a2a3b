"""Resolve model names and directories. Pure Python: no torch, no network.

`tiny` and `tiny-draft` (and `tiny-medusa`, the Medusa heads) are the embedded default models shipped inside the
package (`trtspec/assets/models/`). Any other argument must be a local Hugging Face directory: trtspec never
downloads a model at run time.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from trtspec.errors import IncompatibleModelsError, ModelNotFoundError
from trtspec.methods.eagle import EAGLE3
from trtspec.methods.medusa import MEDUSA

ASSETS = Path(__file__).resolve().parent / "assets"
EMBEDDED_MODELS = ASSETS / "models"
PROMPTS = ASSETS / "prompts"
EMBEDDED = {
    "tiny": "target (Llama, 12M parameters) trained on the Python standard library",
    "tiny-draft": "draft (Llama, 1.7M parameters) distilled from tiny",
    "tiny-medusa": "Medusa heads for tiny (HF Medusa layout, fp16), trained by `trtspec train medusa`",
    "tiny-eagle": "EAGLE-3 drafter for tiny (HF LlamaForCausalLMEagle3 layout, fp16), trained by `trtspec train eagle`",
}
# EAGLE-3 drafter architectures, as ModelOpt exports them and vLLM / SGLang register them
EAGLE3_ARCHITECTURES = ("LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM")
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
    for weights in sorted(path.glob("*.safetensors")):
        check_safetensors(weights, field=field)
    tokenizer_vocab(path, field=field)  # a corrupt tokenizer.json is refused here, not deep inside a load
    return path


MAX_SAFETENSORS_HEADER = 100 * 1024 * 1024  # the safetensors library's own limit on the JSON header


def check_safetensors(path: Path, *, field: str = "model") -> None:
    """Refuse a safetensors file that is empty, truncated or has an impossible header, before anything loads it.

    The format: 8 bytes little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets}}, then
    the tensor data; the largest end offset must be exactly the data's size (the library's "fully covered" rule).
    """
    size = path.stat().st_size
    bad = f"{field}: {path} is not a complete safetensors file"
    fix = "the copy or download was cut short: copy the file again, or re-save with save_pretrained"
    if size < 8:
        raise ModelNotFoundError(f"{bad} ({size} bytes)", hint=fix)
    with path.open("rb") as f:
        header_len = int.from_bytes(f.read(8), "little")
        if header_len > min(MAX_SAFETENSORS_HEADER, size - 8):
            raise ModelNotFoundError(f"{bad} (header of {header_len} bytes in a {size}-byte file)", hint=fix)
        try:
            header = json.loads(f.read(header_len).decode("utf-8"))
            ends = [int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"]
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError, IndexError,
                AttributeError):
            raise ModelNotFoundError(f"{bad} (its header is not valid)", hint=fix) from None
    if max(ends, default=0) != size - 8 - header_len:
        raise ModelNotFoundError(f"{bad} (its tensors need {max(ends, default=0)} bytes of data, the file has "
                                 f"{size - 8 - header_len})", hint=fix)


def is_medusa_heads(path: Path) -> bool:
    """True for a Medusa heads directory: HF Medusa layout or TensorRT-LLM MedusaForCausalLM checkpoint."""
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, json.JSONDecodeError):
        return False
    return "medusa_num_heads" in config or config.get("architecture") == "MedusaForCausalLM"


def is_eagle_drafter(path: Path) -> bool:
    """True for an EAGLE-3 drafter directory (HF layout: config.json naming an EAGLE-3 Llama architecture)."""
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, json.JSONDecodeError):
        return False
    return isinstance(config, dict) and any(a in EAGLE3_ARCHITECTURES for a in config.get("architectures") or [])


def resolve_eagle(name_or_path: str | Path, *, field: str = EAGLE3.checkpoint) -> Path:
    """An EAGLE-3 drafter directory for an embedded name (`tiny-eagle`) or a local path, with complete weights.

    Raises ModelNotFoundError naming the path when it does not exist, holds no EAGLE-3 config, or no weights.
    """
    text, path = _named_dir(name_or_path, field=field, what="drafter",
                            hint="use tiny-eagle, or train one with `trtspec train eagle --out DIR`")
    if not is_eagle_drafter(path):
        raise ModelNotFoundError(
            f"{field}={text!r}: {path / 'config.json'} does not name an EAGLE-3 architecture "
            f"({' or '.join(EAGLE3_ARCHITECTURES)})", hint="train a drafter with `trtspec train eagle --out DIR`")
    weights = path / "model.safetensors"
    if not weights.is_file():
        raise ModelNotFoundError(f"{field}={text!r}: {weights} is missing",
                                 hint="an EAGLE-3 drafter directory holds config.json and model.safetensors")
    check_safetensors(weights, field=field)
    return path


def resolve_medusa(name_or_path: str | Path, *, field: str = MEDUSA.checkpoint) -> Path:
    """A Medusa heads directory for an embedded name (`tiny-medusa`) or a local path.

    Raises ModelNotFoundError naming the path when it does not exist or holds no Medusa config.
    """
    text, path = _named_dir(name_or_path, field=field, what="head set",
                            hint="use tiny-medusa, or train heads with `trtspec train medusa --out DIR`")
    if not is_medusa_heads(path):
        raise ModelNotFoundError(
            f"{field}={text!r}: {path / 'config.json'} is neither an HF Medusa config (medusa_num_heads) nor a "
            f"TensorRT-LLM Medusa checkpoint (architecture MedusaForCausalLM)",
            hint="train heads with `trtspec train medusa --model ... --out DIR`")
    return path


def _named_dir(name_or_path: str | Path, *, field: str, what: str, hint: str) -> tuple[str, Path]:
    """The directory of an embedded `what` (by name) or of a local path, and the text given; ModelNotFoundError naming
    both when there is no such directory."""
    text = str(name_or_path)
    path = embedded_path(text) if text in EMBEDDED else Path(text).expanduser()
    if not path.is_dir():
        raise ModelNotFoundError(f"{field}={text!r}: no embedded {what} of that name and no directory at {path}",
                                 hint=hint)
    return text, path


def read_config(path: Path, *, field: str = "model") -> dict[str, Any]:
    cfg = path / "config.json"
    if not cfg.is_file():
        raise ModelNotFoundError(f"{field}={str(path)!r}: {cfg} is missing",
                                 hint="a Hugging Face checkpoint directory has a config.json")
    try:
        config = json.loads(cfg.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelNotFoundError(f"{field}={str(path)!r}: {cfg} is not valid UTF-8 JSON ({exc})",
                                 hint="re-export the checkpoint") from None
    if not isinstance(config, dict):
        raise ModelNotFoundError(f"{field}={str(path)!r}: {cfg} is not a JSON object", hint="re-export the checkpoint")
    return config


def check_pair(target: Path, draft: Path, *, allow_vocab_padding: bool = False) -> None:
    """Refuse a draft/target pair whose vocabularies differ (names both sizes) or whose tokenizers map an id to
    different tokens (names the first such id).

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
    if t_tok is not None and t_tok == d_tok and (diff := tokenizer_difference(target, draft)):
        raise IncompatibleModelsError(f"draft tokenizer ({draft}) differs from the target's ({target}): {diff}",
                                      hint="draft and target must share one tokenizer; pick a draft from the "
                                           "target's model family")
    if t_vocab != d_vocab:
        if allow_vocab_padding and t_tok is not None and t_tok == d_tok and min(t_vocab, d_vocab) >= t_tok:
            return
        raise IncompatibleModelsError(
            f"vocab_size differs: target {target} has {t_vocab}, draft {draft} has {d_vocab}",
            hint="use a draft with the target's tokenizer and vocab size"
            + ("" if allow_vocab_padding else " (or allow padding-only differences explicitly)"),
        )


# tokenizer_config.json classes that are transformers' generic fast tokenizer (TokenizersBackend is transformers 5's
# name for PreTrainedTokenizerFast): AutoTokenizer would resolve them to that class after importing the model's config
# machinery (seconds per process), so load_tokenizer builds them directly.
GENERIC_FAST_TOKENIZERS = frozenset({"TokenizersBackend", "PreTrainedTokenizerFast"})


def load_tokenizer(path: Path) -> Any:
    """The Hugging Face tokenizer saved in the directory `path`, as `AutoTokenizer.from_pretrained(path)` returns it:
    a tokenizer.json whose tokenizer_config.json names the generic fast tokenizer is loaded as that class directly
    (the same object, without AutoTokenizer's config lookup); every other directory goes through AutoTokenizer."""
    path = Path(path)
    config = path / "tokenizer_config.json"
    try:
        tokenizer_class = json.loads(config.read_text(encoding="utf-8")).get("tokenizer_class")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        tokenizer_class = None
    if tokenizer_class in GENERIC_FAST_TOKENIZERS and (path / "tokenizer.json").is_file():
        from transformers import PreTrainedTokenizerFast

        return PreTrainedTokenizerFast.from_pretrained(path)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def tokenizer_vocab(path: Path, *, field: str = "model") -> int | None:
    """Number of entries in a `tokenizer.json` (vocab + added tokens), or None when there is none.

    A tokenizer.json that is not valid (not UTF-8 JSON, no model vocab) raises ModelNotFoundError naming it. The count
    is remembered per file version (path, size, modification time): preflight asks for it several times per build."""
    tok = path / "tokenizer.json"
    try:
        stat = tok.stat()
    except OSError:
        return None
    if not tok.is_file():
        return None
    count = _tokenizer_entries(str(tok.resolve()), stat.st_size, stat.st_mtime_ns)
    if count is None:
        raise ModelNotFoundError(f"{field}: {tok} is not a valid tokenizer.json",
                                 hint="re-save the tokenizer with save_pretrained")
    return count


def tokenizer_difference(target: Path, draft: Path) -> str | None:
    """The first token id the two `tokenizer.json` files map to different tokens (vocab + added tokens), said in
    words; None when they agree (or either has no tokenizer.json)."""
    maps = []
    for path in (target, draft):
        tok = Path(path) / "tokenizer.json"
        try:
            stat = tok.stat()
        except OSError:
            return None
        maps.append(_tokenizer_tokens(str(tok.resolve()), stat.st_size, stat.st_mtime_ns))
    t_map, d_map = maps
    if t_map is None or d_map is None or t_map == d_map:
        return None
    first = min(i for i in t_map.keys() | d_map.keys() if t_map.get(i) != d_map.get(i))
    return f"token id {first} is {d_map.get(first)!r} in the draft, {t_map.get(first)!r} in the target"


@functools.lru_cache(maxsize=8)
def _tokenizer_tokens(path: str, size: int, mtime_ns: int) -> dict[int, str] | None:
    """Id -> token of the tokenizer.json at `path` (one version of it), vocab and added tokens; None when not valid."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        vocab = data.get("model", {}).get("vocab", {})
        tokens = ({i: t for t, i in vocab.items()} if isinstance(vocab, dict)
                  else {i: (t[0] if isinstance(t, list) else t) for i, t in enumerate(vocab)})
        tokens.update({t["id"]: t["content"] for t in data.get("added_tokens", [])})
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError, KeyError, TypeError):
        return None
    return tokens


@functools.lru_cache(maxsize=64)
def _tokenizer_entries(path: str, size: int, mtime_ns: int) -> int | None:
    """Entries of the tokenizer.json at `path` (one version of it: `size`, `mtime_ns`); None when it is not valid."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        vocab = data.get("model", {}).get("vocab", {})
        added = {t["id"] for t in data.get("added_tokens", [])}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError, KeyError, TypeError):
        return None
    ids = set(vocab.values()) if isinstance(vocab, dict) else set(range(len(vocab)))
    return len(ids | added)
