"""`trtspec-manifest.json`: what a build output holds and how it was made. Pure (hashlib + json).

Format (version 1), written atomically into the output directory by the executor:

    {
      "format": "trtspec-manifest/1",
      "updated": "2026-11-29T10:00:00Z",
      "backend": "tensorrtllm" | "torch",
      "workflow": "pytorch" | "engine" | null (a torch bundle),
      "method": "draft_target",
      "config": {...BuildSpec as JSON...},
      "config_sha256": "...",
      "versions": {"trtspec", "python", "torch", "tensorrt_llm" (null when absent), "target_tensorrt_llm",
                   "container"},
      "derived": {"max_draft_len", "choices": {"json", "triton"} | null, "lookahead": {...} | null,
                  "kv_cache": {role: {max_tokens_in_paged_kv_cache, kv_cache_free_gpu_mem_fraction, ...}},
                  "medusa_heads": {...} | null, "checks": [{"name", "status", "detail"}]},
      "engine": {...EngineConfig.to_dict(): what the build serves: checkpoints, method, k, each method's knobs...},
      "engines": {"target": "engines/target", ...} ({} in the PyTorch workflow),
      "checkpoints": {role: converted checkpoint dir (engine workflow) | the HF checkpoint it serves (PyTorch)},
      "llm_api": "llm-api/...yaml" | null,
      "serve": {"trtllm-serve": {"argv", "command": "cd OUT && trtllm-serve ..." (shell-quoted), "cwd", "container"}}
               (PyTorch workflow; {} otherwise),
      "steps": [{"id", "stage", "kind", "title", "status": "done" | "pending", "runner": "tensorrt_llm" | "trtspec"
                 | null, "command" (shell-quoted), "inputs": {path: sha256}, "outputs": {path: sha256}, "seconds",
                 "key" (sha256 of everything the step reads; a re-run skips it only while unchanged), "code" (the
                 runner's version)}],
      "pending": [{"id", "command": "cd OUT && ..." (shell-quoted, paste as is), "cwd", "argv", "container"}],
      "file_hashes": {path: [size, mtime_ns, sha256]}
    }

Output paths are relative to the output directory; model inputs are absolute.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

MANIFEST = "trtspec-manifest.json"
FORMAT = "trtspec-manifest/1"
# sha256 of files this process has read, by (path, device, inode, size, mtime_ns): a build's inputs (model weights)
# are hashed once per process, not once per build. The same trust as the manifest's file_hashes (size, mtime_ns),
# narrowed to one file (its inode: a file replaced, as trtspec writes them, is another file). Not ctime: hard-linking
# a model into a bundle or a staging directory changes it without changing the content.
_DIGESTS: dict[tuple[str, int, int, int, int], str] = {}
_DIGESTS_MAX = 4096


def read_manifest(out_dir: Path) -> dict[str, Any] | None:
    path = Path(out_dir) / MANIFEST
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # missing, not UTF-8, not JSON: not a manifest (rebuild)
        return None
    return data if isinstance(data, dict) and data.get("format") == FORMAT else None


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
