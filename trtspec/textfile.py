"""Reading a small user-named text file (a config, a choices file) without ever echoing it: one definition of the
errors for a missing, oversized, binary or non-UTF-8 file, or one that is not a regular file (a FIFO, a device, a
directory: refused after a stat, before anything is opened, so a FIFO never blocks the read)."""

from __future__ import annotations

import codecs
import os
import stat
from functools import cache
from pathlib import Path
from typing import Any

from trtspec.errors import ConfigError, file_kind


def read_text_file(path: Path, field: str, *, limit: int, what: str) -> str:
    """The text of a small UTF-8 file (a UTF-8 byte-order mark is dropped); ConfigError naming `field`, the file and
    the fix when it cannot be read, is not a regular file, is larger than `limit` bytes or is not UTF-8. Never echoes
    the file's content."""
    try:
        _regular(os.stat(path).st_mode, path, field, what)
        # O_NONBLOCK: a file swapped for a FIFO after the stat opens without waiting for a writer, and fstat refuses it
        with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as fh:
            _regular(os.fstat(fh.fileno()).st_mode, path, field, what)
            raw = fh.read(limit + 1)
    except OSError as exc:
        raise ConfigError(field, str(path), f"cannot be read ({exc.strerror or exc})", hint="check the path") from None
    if len(raw) > limit:
        raise ConfigError(field, str(path), f"is larger than {size_text(limit)}: not {what}",
                          hint=f"check the path; {what} is a small text file")
    if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE, codecs.BOM_UTF32_BE)):
        raise ConfigError(field, str(path), "is UTF-16/UTF-32 text, not UTF-8",
                          hint=f"save it as UTF-8, e.g. `iconv -f UTF-16 -t UTF-8 {path.name} > {path.stem}-utf8{path.suffix}`")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(field, str(path), f"is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})",
                          hint=f"save it as UTF-8; check that it is {what}") from None
    if "\0" in text:
        raise ConfigError(field, str(path), "contains NUL bytes: a binary file, or UTF-16 without a byte-order mark",
                          hint=f"save it as UTF-8; check that it is {what}")
    return text


def _regular(mode: int, path: Path, field: str, what: str) -> None:
    if not stat.S_ISREG(mode):
        raise ConfigError(field, str(path), f"is {file_kind(mode)}, not a regular file", hint=f"pass the path of {what}")


def load_yaml_text(text: str) -> Any:
    """The YAML document in `text`, read with PyYAML's safe loader: the libyaml (C) one where PyYAML has it, whose
    parse time stays linear in hostile nesting, else the pure-Python one. A mapping that gives a key twice is a
    yaml.constructor.ConstructorError ("found duplicate key", with its line): YAML says keys are unique, and PyYAML
    would keep the last silently. Nesting past what the loader can hold raises RecursionError with either loader
    (libyaml reports it as a scanner error); other problems raise yaml.YAMLError, ValueError or OverflowError, as
    `yaml.safe_load` does."""
    import yaml

    try:
        return yaml.load(text, Loader=_unique_keys_loader())  # noqa: S506 - a safe loader
    except yaml.MarkedYAMLError as exc:
        if "maximum nesting depth" in str(exc.problem or ""):
            raise RecursionError(str(exc.problem)) from None
        raise


@cache
def _unique_keys_loader() -> type:
    """PyYAML's safe loader (the C one where present) whose mappings refuse a key given twice."""
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class UniqueKeyLoader(base):  # type: ignore[misc, valid-type]
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: set[Any] = set()
            for key_node, _ in node.value:  # the mapping's own keys (merged ones (<<) may be overridden)
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=deep)
                try:
                    twice = key in seen
                    seen.add(key)
                except TypeError:  # an unhashable key: the base constructor names it
                    continue
                if twice:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark, f"found duplicate key {key!r:.60}",
                        key_node.start_mark)
            return super().construct_mapping(node, deep=deep)

    return UniqueKeyLoader


def size_text(limit: int) -> str:
    """A byte count as people write a limit: `4 MiB`, `512 KiB`, `100 bytes`."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if limit >= size and limit % size == 0:
            return f"{limit // size} {unit}"
    return f"{limit:,} bytes"
