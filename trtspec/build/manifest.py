"""File hashing for build outputs: `Hasher` (the manifest's `file_hashes` and each step's input/output digests).
Pure (hashlib). The manifest itself is the build-output contract, trtspec.contracts.build_output.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

# sha256 of files this process has read, by (path, device, inode, size, mtime_ns): a build's inputs (model weights)
# are hashed once per process, not once per build. The same trust as the manifest's file_hashes (size, mtime_ns),
# narrowed to one file (its inode: a file replaced, as trtspec writes them, is another file). Not ctime: hard-linking
# a model into a bundle or a staging directory changes it without changing the content.
_DIGESTS: dict[tuple[str, int, int, int, int], str] = {}
_DIGESTS_MAX = 4096


class Hasher:
    """sha256 of files and directory trees, cached by (size, mtime_ns) so re-runs do not re-read big weights."""

    def __init__(self, cache: dict[str, list[Any]] | None = None) -> None:
        self.cache: dict[str, list[Any]] = {k: v for k, v in (cache if isinstance(cache, dict) else {}).items()
                                            if isinstance(v, list) and len(v) == 3}
        self._used: set[str] = set()

    def used(self) -> dict[str, list[Any]]:
        """The cache entries of the files hashed by this run (what the manifest keeps)."""
        return {k: self.cache[k] for k in sorted(self._used) if k in self.cache}

    def file(self, path: Path, key: str) -> str:
        stat = path.stat()
        self._used.add(key)
        hit = self.cache.get(key)
        if hit and hit[0] == stat.st_size and hit[1] == stat.st_mtime_ns:
            return str(hit[2])
        seen = (str(Path(path).absolute()), stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)
        hexdigest = _DIGESTS.get(seen)
        if hexdigest is None:
            digest = hashlib.sha256()
            with open(path, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(chunk)
            hexdigest = digest.hexdigest()
            if len(_DIGESTS) >= _DIGESTS_MAX:
                _DIGESTS.clear()
            _DIGESTS[seen] = hexdigest
        self.cache[key] = [stat.st_size, stat.st_mtime_ns, hexdigest]
        return hexdigest

    def tree(self, path: Path, key: str) -> str | None:
        """One digest over a file or every file under a directory (names + contents); None when missing."""
        if path.is_file():
            return self.file(path, key)
        if not path.is_dir():
            return None
        digest = hashlib.sha256()
        for file in sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith(".")):
            rel = file.relative_to(path).as_posix()
            digest.update(f"{rel}\0{self.file(file, f'{key}/{rel}')}\n".encode())
        return digest.hexdigest()
