"""Read what a checkpoint directory holds without loading it: safetensors headers, special-token ids, Medusa heads.

Pure Python (json + struct; no torch) except `medusa_heads` on `.pt` files, which imports torch lazily. Used by the
preflight checks and the memory estimate; never writes anything.
"""

from __future__ import annotations

import functools
import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from trtspec.errors import ConfigError, IncompatibleModelsError, shown_text

SPECIAL_TOKENS = ("bos_token_id", "eos_token_id", "pad_token_id")


# Bytes per element of the safetensors dtypes (a tensor's byte range must hold exactly its elements).
SAFETENSORS_DTYPE_SIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8,
                          "U32": 4, "U16": 2, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}
MAX_HEADER_BYTES = 100 << 20  # the safetensors format's own limit on the JSON header


def safetensors_header(path: Path, *, field: str = "checkpoint") -> dict[str, dict[str, Any]]:
    """Tensor name -> {dtype, shape, data_offsets} from a .safetensors file's JSON header (reads only the header).

    Raises ConfigError naming `field` and the file when the header is missing, truncated or not JSON."""
    size = _size(path, field)
    with open(path, "rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            raise _bad(field, path, f"is truncated: {size} bytes, shorter than a safetensors header")
        (length,) = struct.unpack("<Q", head)
        if length > min(size - 8, MAX_HEADER_BYTES):
            raise _bad(field, path, f"is truncated or not safetensors: its header claims {length} bytes, the file "
                                    f"holds {size}")
        try:
            header = json.loads(fh.read(length))
        except (ValueError, RecursionError):
            raise _bad(field, path, "has a header that is not valid JSON (not safetensors, or damaged)") from None
    if not isinstance(header, dict):
        raise _bad(field, path, "has a header that is not a JSON object (not safetensors)")
    header.pop("__metadata__", None)
    return header


def check_safetensors(path: Path, *, field: str = "checkpoint") -> None:
    """Refuse a .safetensors file whose header does not describe exactly its bytes (truncated or padded downloads,
    partial copies): every tensor's byte range holds its elements, and the ranges end where the file ends."""
    header = safetensors_header(path, field=field)
    length = struct.unpack("<Q", path.open("rb").read(8))[0]
    end = 0
    for name, info in header.items():
        try:
            dtype, shape, (start, stop) = info["dtype"], info["shape"], info["data_offsets"]
            if not (isinstance(start, int) and isinstance(stop, int) and 0 <= start <= stop
                    and all(isinstance(d, int) and d >= 0 for d in shape)):
                raise ValueError
        except (KeyError, TypeError, ValueError):
            raise _bad(field, path, f"has a malformed header entry for tensor {name[:80]!r}") from None
        count = 1
        for dim in shape:
            count *= dim
        if dtype in SAFETENSORS_DTYPE_SIZE and count * SAFETENSORS_DTYPE_SIZE[dtype] != stop - start:
            raise _bad(field, path, f"tensor {name[:80]!r} ({dtype} {list(shape)}) has {stop - start} bytes, needs "
                                    f"{count * SAFETENSORS_DTYPE_SIZE[dtype]}")
        end = max(end, stop)
    size = _size(path, field)
    if 8 + length + end != size:
        problem = "is truncated" if size < 8 + length + end else "has bytes past its last tensor"
        raise _bad(field, path, f"{problem}: {size} bytes on disk, its header describes {8 + length + end}")


def check_weights(model_dir: Path, *, field: str = "model") -> list[Path]:
    """Check every weight file of a checkpoint directory without loading it: safetensors headers against file sizes
    (check_safetensors), shards listed by model.safetensors.index.json exist, pytorch_model*.bin zip archives are
    complete. Returns the files checked; raises ConfigError naming `field`, the file and what is wrong."""
    checked = []
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        data = _json(index)
        weight_map = data.get("weight_map") if isinstance(data.get("weight_map"), dict) else None
        if weight_map is None:
            raise _bad(field, index, "has no weight_map (not a safetensors index)")
        for shard in sorted({str(v) for v in weight_map.values()}):
            if "/" in shard or not (model_dir / shard).is_file():
                raise _bad(field, index, f"lists shard {shard[:80]!r}, which is not in {model_dir}")
    for file in sorted(model_dir.glob("*.safetensors")):
        check_safetensors(file, field=field)
        checked.append(file)
    for file in sorted(model_dir.glob("pytorch_model*.bin")):
        with open(file, "rb") as fh:
            zipped = fh.read(2) == b"PK"
        if zipped:  # torch.save's zip format; the central directory sits at the end, so truncation breaks it
            import zipfile

            try:
                with zipfile.ZipFile(file) as archive:
                    archive.infolist()
            except (zipfile.BadZipFile, OSError, ValueError):
                raise _bad(field, file, "is truncated or damaged (its zip directory cannot be read)") from None
        checked.append(file)
    return checked


def _size(path: Path, field: str) -> int:
    try:
        return path.stat().st_size
    except OSError as exc:
        raise _bad(field, path, f"cannot be read ({exc.strerror or exc})") from None


def _bad(field: str, path: Path, problem: str) -> ConfigError:
    return ConfigError(field, str(path), problem, hint="re-download or re-save the checkpoint (a copy or download "
                                                       "may have been cut short)")


def tensor_shapes(model_dir: Path) -> dict[str, tuple[int, ...]]:
    """Every tensor's shape across a directory's *.safetensors files."""
    shapes: dict[str, tuple[int, ...]] = {}
    for file in sorted(model_dir.glob("*.safetensors")):
        shapes.update(_shapes(safetensors_header(file)))
    return shapes


def param_count(model_dir: Path) -> int | None:
    """Number of weights in a directory's *.safetensors files (from headers), or None when there are none."""
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for file in files:
        for info in _shapes(safetensors_header(file)).values():
            count = 1
            for dim in info:
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


def check_special_ids(target: Path, draft: Path, target_name: str, draft_name: str) -> dict[str, Any]:
    """Refuse a pair whose bos/eos/pad ids differ (IncompatibleModelsError naming the token and both ids); returns
    the target's merged special ids."""
    target_ids = merged_special_ids(special_token_ids(Path(target)))
    draft_ids = merged_special_ids(special_token_ids(Path(draft)))
    for key in sorted(set(target_ids) & set(draft_ids)):
        if target_ids[key] != draft_ids[key]:
            raise IncompatibleModelsError(
                f"{key} differs: target {target_name!r} has {target_ids[key]}, draft {draft_name!r} has "
                f"{draft_ids[key]}", hint="draft and target must share the tokenizer and its special tokens")
    return target_ids


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
        check_safetensors(weights, field=field)
        shapes = _shapes(safetensors_header(weights, field=field))
        prefix, layout = "medusa_heads.", "modelopt"
        head_key, lm_key = "medusa_heads.{h}.medusa_layers.{l}.linear.weight", "medusa_heads.{h}.lm_head.weight"
        num_heads, num_layers = config.get("num_medusa_heads"), config.get("num_medusa_layers")
    else:
        weights = next((path / n for n in ("medusa_lm_head.safetensors", "medusa_lm_head.pt")
                        if (path / n).is_file()), None)
        if weights is None:
            raise ConfigError(field, str(path), "has neither medusa_lm_head.safetensors nor medusa_lm_head.pt",
                              hint="point medusa.heads at the FasterDecoding heads directory")
        if weights.suffix != ".pt":
            check_safetensors(weights, field=field)
        shapes = _pt_shapes(weights) if weights.suffix == ".pt" else _shapes(safetensors_header(weights, field=field))
        prefix, layout = "", "fastdecoding"
        head_key, lm_key = "{h}.{l}.linear.weight", "{h}.{n}.weight"
        num_heads, num_layers = config.get("medusa_num_heads"), config.get("medusa_num_layers")
    # The config may under-report heads (medusa-vicuna-7b-v1.3 says 2, holds 4): count heads from the tensors.
    present = {int(k[len(prefix):].split(".")[0]) for k in shapes if k[len(prefix):].split(".")[0].isdigit()}
    num_heads = len(present) if present else num_heads
    num_layers = num_layers or 1
    if not isinstance(num_layers, int) or isinstance(num_layers, bool) or not 1 <= num_layers <= 1024:
        raise ConfigError(field, str(path), f"config.json gives {shown_text(num_layers)} Medusa layers",
                          hint="set medusa_num_layers / num_medusa_layers to a small positive integer")
    if not num_heads:
        raise ConfigError(field, str(path), "holds no Medusa head tensors",
                          hint=f"expected names like {head_key.format(h=0, l=0)}")
    first_lm = lm_key.format(h=0, n=num_layers)
    first_layer = head_key.format(h=0, l=0)
    if first_lm not in shapes or first_layer not in shapes:
        raise ConfigError(field, str(path), f"lacks {first_lm if first_lm not in shapes else first_layer} "
                          f"(num_layers={num_layers})", hint="check medusa_num_layers / num_medusa_layers in config.json")
    if len(shapes[first_lm]) != 2:
        raise ConfigError(field, str(path), f"{first_lm} has shape {list(shapes[first_lm])}, not [vocab, hidden]",
                          hint="point medusa.heads at a Medusa heads directory")
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


def _shapes(header: dict[str, dict[str, Any]]) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v["shape"]) for k, v in header.items() if isinstance(v, dict) and isinstance(v.get("shape"), list)}


def _pt_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a core dependency
        raise ConfigError("medusa.heads", str(path), "is a .pt file and torch is not installed",
                          hint="pip install torch, or convert the heads to safetensors") from None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises many kinds for a damaged file
        raise _bad("medusa.heads", path, f"cannot be loaded by torch.load ({type(exc).__name__}): truncated or not "
                                         "a state dict") from None
    if not isinstance(state, dict):
        raise _bad("medusa.heads", path, "does not hold a state dict")
    return {k: tuple(v.shape) for k, v in state.items() if hasattr(v, "shape")}


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _token_to_id(path: Path) -> Mapping[str, int]:
    """Token -> id of a tokenizer.json (vocab + added tokens; {} when missing or not JSON), remembered per file version
    (path, inode, size, mtime_ns, as trtspec.models.tokenizer_vocab and the manifest's file hashes): preflight reads
    both models' special tokens on every plan of a pair."""
    try:
        stat = path.stat()
    except OSError:
        return {}
    return _token_to_id_of(str(path.absolute()), stat.st_ino, stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _token_to_id_of(path: str, inode: int, size: int, mtime_ns: int) -> Mapping[str, int]:
    data = _json(Path(path))
    vocab = data.get("model", {}).get("vocab", {})
    mapping = dict(vocab) if isinstance(vocab, dict) else {}
    mapping.update({t["content"]: t["id"] for t in data.get("added_tokens", []) if "content" in t})
    return MappingProxyType(mapping)  # shared between calls: read-only
