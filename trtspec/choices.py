"""Speculation trees as choices lists: parse, validate, serialise. Pure Python (no torch).

A tree is given the Medusa/EAGLE way, as a list of paths: `[[0], [0, 0], [1], ...]`. The path `[a, b]` is the node
reached by taking the a-th most likely token of head 1 and then the b-th most likely token of head 2. Every prefix of
a path must itself be a path (prefix-closed); the root (the last committed token) is implicit.

Formats:
- JSON/YAML/Python list of lists (`run.py`, LLM API, trtspec build configs);
- TensorRT-LLM's C++/Triton parameter form `{0}, {0, 0}, {1}` (`medusa_choices` / `eagle_choices` in config.pbtxt).

`trtspec.spec.tree_build` turns validated choices into masks, positions and retrieve indices (torch).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

from trtspec.errors import ConfigError, shown
from trtspec.textfile import load_yaml_text, read_text_file

Choices = list[list[int]]
# Bounds checked before a tree is walked or built: ranks go into int32 tensors; real trees have tens to hundreds of
# nodes (TensorRT-LLM's EAGLE allows 256, Medusa's default tree has 63).
RANK_MAX = 2**31 - 1
MAX_NODES = 4096
MAX_DEPTH = 64
MAX_TOPK = 64  # children per node of a dynamic (EAGLE-2) tree at most (the proposer also caps it at its vocabulary)
MAX_FILE_BYTES = 1 << 20

# Medusa's default 63-node tree (FasterDecoding/Medusa `medusa_choices.py`, also TensorRT-LLM's default):
# depth 4, so it needs >= 4 heads and max_draft_len >= 63.
MC_SIM_7B_63: Choices = [
    [0], [0, 0], [1], [0, 1], [2], [0, 0, 0], [1, 0], [0, 2], [3], [0, 3], [4], [0, 4], [2, 0], [0, 5], [0, 0, 1],
    [5], [0, 6], [6], [0, 7], [0, 1, 0], [1, 1], [7], [0, 8], [0, 0, 2], [3, 0], [0, 9], [8], [9], [1, 0, 0],
    [0, 2, 0], [1, 2], [0, 0, 3], [4, 0], [2, 1], [0, 0, 4], [0, 0, 5], [0, 0, 0, 0], [0, 1, 1], [0, 0, 6],
    [0, 3, 0], [5, 0], [1, 3], [0, 0, 7], [0, 0, 8], [0, 0, 9], [6, 0], [0, 4, 0], [1, 4], [7, 0], [0, 1, 2],
    [2, 0, 0], [3, 1], [2, 2], [8, 0], [0, 5, 0], [1, 5], [1, 0, 1], [0, 2, 1], [9, 0], [0, 6, 0], [0, 0, 0, 1],
    [1, 6], [0, 7, 0],
]  # fmt: skip

PRESETS: dict[str, Choices] = {"mc_sim_7b_63": MC_SIM_7B_63}


def chain(depth: int) -> Choices:
    """The degenerate tree of a single path of `depth` top-1 tokens: [[0], [0, 0], ...]."""
    return [[0] * d for d in range(1, depth + 1)]


def parse(value: str | Sequence[Sequence[int]] | Path, field: str = "choices") -> Choices:
    """Choices from a preset name, a JSON/YAML/Triton string, a file path, or a list of lists.

    Raises ConfigError naming `field` and the offending entry; for a file, the error names the file and what is wrong
    with it, never its content. Does not check depth, node or vocabulary budgets: see `validate`.
    """
    if isinstance(value, Path):
        return _parse_file(value, field)
    if isinstance(value, str):
        text = value.strip()
        if text in PRESETS:
            return [list(p) for p in PRESETS[text]]
        if not text.startswith(("[", "{", "-", "#")) and "\n" not in text and _is_file(Path(text)):
            return _parse_file(Path(text), field)
        return _coerce(_parse_text(text, field), field)
    return _coerce(value, field)


def validate(
    choices: Choices,
    *,
    max_depth: int | None = None,
    max_nodes: int | None = None,
    max_rank: int | None = None,
    field: str = "choices",
) -> Choices:
    """Check a tree: non-empty, non-negative ints, no duplicates, prefix-closed, depth, node and vocabulary budgets.

    Args:
        max_depth: number of heads (Medusa) / draft layers (EAGLE); every path must be at most this long.
        max_nodes: the engine's max_draft_len; the tree may have at most this many nodes.
        max_rank: the vocabulary size; a rank picks one of a head's top-k tokens, so every rank must be below it.
    Returns the choices sorted by (depth, path), the order TensorRT-LLM and Medusa use.
    """
    if not choices:
        raise ConfigError(field, choices, "the tree is empty", hint="give at least one path, e.g. [[0]]")
    seen: set[tuple[int, ...]] = set()
    for path in choices:
        key = tuple(path)
        if key in seen:
            raise ConfigError(field, path, "duplicate path", hint="list every node once")
        seen.add(key)
    for path in choices:
        for cut in range(1, len(path)):
            if tuple(path[:cut]) not in seen:
                raise ConfigError(
                    field, path, f"is not prefix-closed: its parent {path[:cut]} is missing",
                    hint=f"add {path[:cut]} to the tree or drop {path}",
                )  # fmt: skip
    if max_depth is not None:
        deepest = max(choices, key=len)
        if len(deepest) > max_depth:
            raise ConfigError(
                field, deepest, f"has depth {len(deepest)} but only {max_depth} heads/draft layers exist",
                hint=f"use paths of at most {max_depth} entries, or train more heads",
            )  # fmt: skip
    if max_rank is not None:
        widest = max(choices, key=max)
        if max(widest) >= max_rank:
            raise ConfigError(
                field, widest, f"has rank {max(widest)}, but the vocabulary has {max_rank} tokens (ranks index a "
                f"head's top-k tokens)", hint=f"use ranks below {max_rank}",
            )  # fmt: skip
    if max_nodes is not None and len(choices) > max_nodes:
        raise ConfigError(
            field, f"{len(choices)} nodes", f"exceeds max_draft_len={max_nodes}",
            hint=f"drop nodes (keep at most {max_nodes}) or rebuild with a larger max_draft_len",
        )  # fmt: skip
    return sorted((list(p) for p in choices), key=lambda p: (len(p), p))


def depth(choices: Choices) -> int:
    return max(len(p) for p in choices)


def to_triton(choices: Choices) -> str:
    """TensorRT-LLM's C++ parameter form: `{0}, {0, 0}, {1}`."""
    return ", ".join("{" + ", ".join(str(i) for i in path) + "}" for path in choices)


def to_json(choices: Choices) -> str:
    """The run.py / LLM-API form: `[[0], [0, 0], [1]]`."""
    return json.dumps(choices)


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):  # a name too long for the file system, a NUL: not a file
        return False


def _parse_file(path: Path, field: str) -> Choices:
    """Choices from a file; errors name the file and the problem, not the content (it may be any file)."""
    text = read_text_file(path, field, limit=MAX_FILE_BYTES, what="a choices file")
    try:
        return _coerce(_parse_text(text.strip(), field), field)
    except ConfigError as exc:
        raise ConfigError(field, str(path), f"does not hold a choices list: {getattr(exc, 'problem', 'not a list of paths')}",
                          hint="a choices file holds one list of paths, e.g. [[0], [0, 0], [1]]") from None


def _parse_text(text: str, field: str) -> object:
    if text.startswith("{") and not text.lstrip("{ \n").startswith('"'):  # Triton form: {0}, {0, 0}
        groups = re.findall(r"\{([^{}]*)\}", text)
        rest = re.sub(r"\{[^{}]*\}", "", text).replace(",", "").strip()
        if not groups or rest:
            raise _Problem(field, text, "is not in the `{0}, {0, 0}` form", hint="e.g. '{0}, {0, 0}, {1}'")
        try:
            return [[int(x) for x in g.split(",") if x.strip()] for g in groups]
        except ValueError:
            raise _Problem(field, text, "has a non-integer entry", hint="use integers only") from None
    try:
        return json.loads(text)
    except RecursionError:
        raise _Problem(field, text, "nests too deeply", hint="a tree is a list of lists of ranks") from None
    except ValueError:
        pass
    import yaml

    try:
        return load_yaml_text(text)
    except RecursionError:
        raise _Problem(field, text, "nests too deeply", hint="a tree is a list of lists of ranks") from None
    except yaml.MarkedYAMLError as exc:
        where = f" at line {exc.problem_mark.line + 1}" if exc.problem_mark else ""
        raise _Problem(field, text, f"is neither JSON nor YAML ({exc.problem}{where})",
                       hint="e.g. [[0], [0, 0], [1]]") from None
    except (yaml.YAMLError, ValueError, OverflowError):
        raise _Problem(field, text, "is neither JSON nor YAML", hint="e.g. [[0], [0, 0], [1]]") from None


def _coerce(value: object, field: str) -> Choices:
    if isinstance(value, dict):
        for key in ("medusa_choices", "eagle_choices", "choices"):
            if key in value:
                return _coerce(value[key], field)
    if not isinstance(value, (list, tuple)):
        raise _Problem(field, value, f"is a {type(value).__name__}, not a list of paths", hint="e.g. [[0], [0, 0], [1]]")
    if len(value) > MAX_NODES:  # bounded before walking: YAML aliases can make a short text enormous
        raise _Problem(field, f"{len(value)} paths", f"has more than {MAX_NODES} nodes", hint="use a smaller tree")
    out: Choices = []
    for i, path in enumerate(value):
        if not isinstance(path, (list, tuple)) or not path:
            raise _Problem(field, path, f"path {i} is not a non-empty list of token ranks", hint="e.g. [0, 1]")
        if len(path) > MAX_DEPTH:
            raise _Problem(field, f"{len(path)} ranks", f"path {i} is deeper than {MAX_DEPTH}", hint="use a shallower tree")
        for rank in path:
            if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank <= RANK_MAX:
                raise _Problem(field, path, f"path {i} has a rank that is not an integer in 0..{RANK_MAX}",
                               hint="e.g. [0, 1]")
        out.append([int(r) for r in path])
    return out


class _Problem(ConfigError):
    """A ConfigError whose value is shown short (a file's errors show only the problem, never the content)."""

    def __init__(self, field: str, value: object, problem: str, *, hint: str | None = None) -> None:
        super().__init__(field, shown(value), problem, hint=hint)


def dynamic_tree_file(value: str | Path, field: str = "eagle.dynamic_tree") -> tuple[int, int, int]:
    """(top-k, depth, nodes) of the `dynamic_tree:` block of a `trtspec tune tree --eagle --out` file: the dynamic
    (EAGLE-2) tree's shape and its node budget (the LLM API's dynamic_tree_max_topK, max_draft_len and
    max_total_draft_tokens). ConfigError naming `field` and the file when it has no such block or the block does not
    describe a tree the LLM API takes (nodes in [depth, top-k x depth])."""
    path = Path(value)
    text = read_text_file(path, field, limit=MAX_FILE_BYTES, what="a `trtspec tune tree --eagle --out` file")
    hint = "write it with `trtspec tune tree --eagle DRAFTER --budget K --out FILE` (it records dynamic_tree)"
    try:
        data = _parse_text(text.strip(), field)
    except ConfigError as exc:
        raise ConfigError(field, str(path), f"is not a tune-tree file: {exc.problem}", hint=hint) from None
    block = data.get("dynamic_tree") if isinstance(data, dict) else None
    if not isinstance(block, dict):
        raise ConfigError(field, str(path), "has no dynamic_tree block (a Medusa or older tune-tree file, or not one)",
                          hint=hint)
    shape = {}
    for key, limit in (("topk", MAX_TOPK), ("depth", MAX_DEPTH), ("max_total_draft_tokens", MAX_NODES)):
        number = block.get(key)
        if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= limit:
            raise ConfigError(field, str(path), f"dynamic_tree.{key} is {shown(number)}, not an integer in 1..{limit}",
                              hint=hint)
        shape[key] = number
    topk, levels, nodes = shape["topk"], shape["depth"], shape["max_total_draft_tokens"]
    if not levels <= nodes <= topk * levels:
        raise ConfigError(field, str(path), f"dynamic_tree's {nodes} nodes lie outside [depth {levels}, top-k x depth "
                          f"{topk * levels}]: the LLM API's dynamic tree cannot draft them",
                          hint=f"tune again with --budget >= {levels}, or a smaller --eagle-depth")
    return topk, levels, nodes
