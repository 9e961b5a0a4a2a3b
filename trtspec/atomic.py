"""Atomic outputs (stdlib and trtspec.errors only): the one definition of trtspec's temp-then-rename writes.

A file is written to a temp file beside it (same directory, so the rename is atomic), flushed to disk (fsync) and
renamed over the destination: a reader, or a re-run after kill -9 or a power loss, sees the old file or the new one,
never half of one. A write that fails (an exception, disk full) removes its temp file and leaves the old file as it
was. The directory entry is not fsynced: after a power loss the rename itself may be lost, leaving the old, complete
file.

What is replaced, as `cp` and editors do:

- A destination that is a symbolic link is followed: the file it points to (at the end of the chain) is replaced, its
  temp file beside it in that file's directory, and the link stays a link. A dangling link creates the file it names.
- A file that is replaced keeps its permission bits (`st_mode & 0o777`: a 0444 file is rewritten and stays 0444; the
  directory's write permission is what allows the rename). Its owner and group are not carried over. A new file gets
  the permissions a plain `open(path, "w")` gives (0666 minus the umask: 0644 under the usual umask 022).
- A destination that exists and is not a regular file (a FIFO, a device, a socket, a directory) is refused before
  anything is opened or created: UsageError (exit 2) naming the path and what it is.

- `write_text`, `write_bytes`, `write_json`: a whole file from memory.
- `atomic_path`: a temp path for writers that take a file name (torch.save, safetensors, a subprocess's log).
- `replace_dir`: a finished staging directory replaces a directory in two renames.

Temp names start with `.NAME.` and end with `.tmp` (`.NAME.<pid>-<random>.tmp`, NAME the name of the file replaced);
directories renamed aside are `.NAME.trtspec-old-<pid>` (build/execute.py's `recover_interrupted` finishes a swap cut
between the two renames).

Every trtspec module that writes a file uses these. The stdlib-only Python models copied into model repositories
(model_repo/: the BLS, pre/postprocessing) write no files, so they need no copy of them.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trtspec.errors import UsageError, file_kind


@contextlib.contextmanager
def atomic_path(path: Path | str, *, publish_on_error: bool = False) -> Iterator[Path]:
    """`with atomic_path(path) as tmp:` write the file `tmp` (it exists, empty, with a new file's permissions); when
    the block ends it takes the mode of the file it replaces, is fsynced and renamed over `path` (over the file a
    symbolic link `path` points to). If the block raises, `tmp` is removed and `path` keeps its old content; with
    `publish_on_error` (a log of a failed command) it is renamed into place all the same. A `path` that is not a
    regular file is refused first (module docstring)."""
    path = _destination(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))  # the umask applies, as for open()
    published = False
    try:
        try:
            yield tmp
        except BaseException:
            if publish_on_error:
                _publish(tmp, path)
                published = True
            raise
        _publish(tmp, path)
        published = True
    finally:
        if not published:
            tmp.unlink(missing_ok=True)


def write_bytes(path: Path | str, data: bytes) -> None:
    """Write `data` to `path` atomically (see the module docstring)."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_text(path: Path | str, text: str) -> None:
    """Write `text` (UTF-8) to `path` atomically."""
    write_bytes(path, text.encode("utf-8"))


def write_json(path: Path | str, data: Any, *, indent: int | None = 2, sort_keys: bool = False,
               ensure_ascii: bool = True) -> None:
    """Write `data` as JSON (`indent` 2, a final newline) to `path` atomically."""
    write_text(path, json.dumps(data, indent=indent, sort_keys=sort_keys, ensure_ascii=ensure_ascii) + "\n")


def replace_dir(staging: Path, out: Path) -> None:
    """Rename the finished `staging` directory to `out`. An earlier `out` is first renamed aside (so `out` is at every
    instant the old or the new directory, or, killed between the two renames, absent with both kept beside it) and
    removed after the swap."""
    old = out.parent / f".{out.name}.trtspec-old-{os.getpid()}"
    if out.exists():
        os.replace(out, old)
    os.replace(staging, out)
    shutil.rmtree(old, ignore_errors=True)


def _destination(path: Path | str) -> Path:
    """The file a write to `path` replaces: `path`, or the file at the end of its chain of symbolic links. UsageError
    (exit 2) naming `path` when what is there is not a regular file (checked with stat: nothing is opened)."""
    path = Path(path)
    real = Path(os.path.realpath(path)) if path.is_symlink() else path
    try:
        mode = os.stat(real).st_mode
    except FileNotFoundError:
        return real
    if not stat.S_ISREG(mode):
        via = f" (a link to {real})" if real != path else ""
        raise UsageError(f"{path}{via}: is {file_kind(mode)}, not a regular file: trtspec writes a file whole by "
                         "renaming a new one over it", hint="name a regular file, or a new one")
    return real


def _publish(tmp: Path, path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.chmod(tmp, os.stat(path).st_mode & 0o777)  # the replaced file's permissions
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
