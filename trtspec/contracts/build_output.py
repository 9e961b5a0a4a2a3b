"""The build-output contract: `trtspec-manifest.json`, what a build output holds and how it was made. Torch-free
(json, dataclasses). `trtspec build` writes it (trtspec.build.execute, through `write_manifest`); deploy, serve,
Dynamo and the change planners read it (trtspec.triton.build_output, trtspec.build.change, through `read_manifest` /
`Manifest.from_dict`). A torch build also holds `trtspec-bundle.json` (trtspec.build.bundle).

Format (version 1), written atomically into the output directory by the executor, keys in this order:

    {
      "format": "trtspec-manifest/1",
      "updated": "2026-11-29T10:00:00Z",
      "backend": "tensorrtllm" | "torch",
      "workflow": "pytorch" | "engine" | null (a torch bundle),
      "method": the method's name (draft_target, eagle3, ...),
      "config": {...BuildSpec as JSON...},
      "config_sha256": "...",
      "versions": {"trtspec", "python", "torch", "tensorrt_llm" (null when absent), "target_tensorrt_llm",
                   "container"},
      "derived": {"max_draft_len", "choices": {"json", "triton"} | null,
                  lookahead: (W, N, G) as Lookahead.to_dict(), window, ngram and verification_set | null,
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
      "pending_checks": [{"name", "status", "detail"}],
      "notes": ["..."],
      "file_hashes": {path: [size, mtime_ns, sha256]}
    }

Output paths are relative to the output directory; model inputs are absolute. Keys this version does not name (a
failure report's "error") are kept in `Manifest.extra`, after the named ones. Older manifests may lack keys: each
field then has its empty default, and readers apply their own fallbacks (trtspec.triton.build_output).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from trtspec.atomic import write_json

MANIFEST = "trtspec-manifest.json"
FORMAT = "trtspec-manifest/1"


@dataclass(frozen=True)
class Manifest:
    """One build output's manifest (format `trtspec-manifest/1`); the field order is the file's key order."""

    format: str = FORMAT
    updated: str | None = None
    backend: str | None = None  # "tensorrtllm" | "torch"
    workflow: str | None = None  # "pytorch" | "engine" | None (a torch bundle; older manifests: config.workflow)
    method: str | None = None
    config: dict[str, Any] = field(default_factory=dict)  # config.BuildSpec as JSON
    config_sha256: str | None = None
    versions: dict[str, Any] = field(default_factory=dict)
    derived: dict[str, Any] = field(default_factory=dict)
    engine: dict[str, Any] | None = None  # contracts.engine.EngineConfig.to_dict(); None in older manifests
    engines: dict[str, str] = field(default_factory=dict)
    checkpoints: dict[str, str] = field(default_factory=dict)
    llm_api: str | None = None
    serve: dict[str, Any] = field(default_factory=dict)
    steps: list[dict[str, Any]] = field(default_factory=list)
    pending: list[dict[str, Any]] = field(default_factory=list)
    pending_checks: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    file_hashes: dict[str, list[Any]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)  # keys this version does not name, kept in their order

    def to_dict(self) -> dict[str, Any]:
        """The file's JSON object: the named keys in order, then `extra`."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        return {**data, **self.extra}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Manifest:
        """A manifest object (any format: `read_manifest` checks it); a missing or null key takes its default."""
        names = [f.name for f in fields(cls) if f.name != "extra"]
        known = {name: data[name] for name in names if data.get(name) is not None}
        return cls(**known, extra={k: v for k, v in data.items() if k not in names})


def write_manifest(out_dir: Path, manifest: Manifest) -> Path:
    """Write `<out_dir>/trtspec-manifest.json` atomically (indent 2, a final newline); returns its path."""
    path = Path(out_dir) / MANIFEST
    write_json(path, manifest.to_dict())
    return path


def read_manifest(out_dir: Path) -> Manifest | None:
    """`<out_dir>/trtspec-manifest.json`, or None when it is missing, unreadable, not JSON or not this format."""
    path = Path(out_dir) / MANIFEST
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # missing, not UTF-8, not JSON: not a manifest (rebuild)
        return None
    return Manifest.from_dict(data) if isinstance(data, dict) and data.get("format") == FORMAT else None
