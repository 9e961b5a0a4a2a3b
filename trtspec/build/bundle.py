"""Load a torch-path bundle written by `trtspec build` with `backend: torch`. Pure (json + pathlib; no torch).

A bundle is a directory:

    <bundle>/
      target/                  HF checkpoint of the target (config.json, *.safetensors, tokenizer files)
      draft/                   HF checkpoint of the draft (draft_target only)
      medusa/                  Medusa heads directory (medusa only; FasterDecoding or ModelOpt layout)
      eagle/                   EAGLE-3 drafter (method eagle3: built from method eagle with eagle.eagle3; HF layout)
      trtspec-bundle.json      spec settings: method, max_draft_len (k), choices, lookahead, ngram, suffix, dtype, ...
      trtspec-manifest.json    how it was built (config, versions, hashes, steps)

`load_bundle(path)` returns a BundleInfo with absolute paths and settings, ready for
`SpecEngine.from_pretrained(target=info.target, draft=info.draft, medusa=info.medusa, max_k=info.max_draft_len)`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trtspec.build.manifest import MANIFEST
from trtspec.build.plan import BUNDLE_FILE
from trtspec.contracts.suffix import SuffixConfig
from trtspec.errors import ConfigError, ModelNotFoundError

BUNDLE_FORMAT = "trtspec-bundle/1"


@dataclass(frozen=True)
class BundleInfo:
    """A torch-path bundle: absolute paths plus the speculative settings it was built for."""

    root: Path
    method: str
    max_draft_len: int                     # k for draft_target/ngram; tree nodes (medusa); f(W,N,G) (lookahead)
    target: Path
    draft: Path | None = None
    medusa: Path | None = None
    eagle: Path | None = None              # EAGLE-3 drafter (method eagle3)
    choices: list[list[int]] | None = None  # Medusa / EAGLE static tree, list-of-paths form
    eagle_topk: int | None = None           # EAGLE dynamic tree: children per expansion (None: the proposer's default)
    eagle_depth: int | None = None          # EAGLE dynamic tree: levels (None: the proposer's default)
    lookahead: tuple[int, int, int] | None = None  # (W, N, G)
    ngram: dict[str, Any] | None = None     # {"max_matching_ngram_size": n}
    suffix: SuffixConfig | None = None      # method suffix: the options the served engine runs with
    dtype: str = "float32"
    max_batch_size: int = 1
    max_seq_len: int = 2048
    manifest: dict[str, Any] = field(default_factory=dict, repr=False)


def load_bundle(path: str | Path) -> BundleInfo:
    """Read `<path>/trtspec-bundle.json` (+ the manifest); raise ModelNotFoundError naming what is missing."""
    root = Path(path).expanduser().resolve()
    settings_file = root / BUNDLE_FILE
    if not settings_file.is_file():
        raise ModelNotFoundError(f"bundle={str(path)!r}: {settings_file} is missing",
                                 hint="build one with `trtspec build CONFIG --backend torch --out DIR`")
    try:
        settings = json.loads(settings_file.read_text())
    except json.JSONDecodeError as exc:
        raise ModelNotFoundError(f"bundle={str(path)!r}: {settings_file} is not valid JSON ({exc})",
                                 hint="rebuild the bundle") from None
    if settings.get("format") != BUNDLE_FORMAT:
        raise ModelNotFoundError(f"bundle={str(path)!r}: format {settings.get('format')!r}, expected {BUNDLE_FORMAT}",
                                 hint="rebuild the bundle with this trtspec version")

    def sub(key: str) -> Path | None:
        name = settings.get(key)
        if name is None:
            return None
        full = root / name
        if not (full / "config.json").is_file():
            raise ModelNotFoundError(f"bundle={str(path)!r}: {key} directory {full} has no config.json",
                                     hint="rebuild the bundle (a copy step did not complete)")
        return full

    manifest_file = root / MANIFEST
    manifest = json.loads(manifest_file.read_text()) if manifest_file.is_file() else {}
    lookahead = settings.get("lookahead")
    try:
        suffix = SuffixConfig.from_options(settings["suffix"]) if settings.get("suffix") is not None else None
    except ConfigError as exc:
        raise ModelNotFoundError(f"bundle={str(path)!r}: {settings_file}: {exc}",
                                 hint="rebuild the bundle with this trtspec version") from None
    target = sub("target")
    if target is None:
        raise ModelNotFoundError(f"bundle={str(path)!r}: {settings_file} names no target model",
                                 hint="rebuild the bundle with `trtspec build CONFIG`")
    return BundleInfo(root=root, method=settings["method"], max_draft_len=int(settings["max_draft_len"]),
                      target=target, draft=sub("draft"), medusa=sub("medusa"), eagle=sub("eagle"),
                      choices=settings.get("choices"), eagle_topk=settings.get("eagle_topk"),
                      eagle_depth=settings.get("eagle_depth"),
                      lookahead=tuple(lookahead) if lookahead else None, ngram=settings.get("ngram"), suffix=suffix,
                      dtype=settings.get("dtype", "float32"), max_batch_size=settings.get("max_batch_size", 1),
                      max_seq_len=settings.get("max_seq_len", 2048), manifest=manifest)
