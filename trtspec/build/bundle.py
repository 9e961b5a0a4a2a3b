"""Load a torch-path bundle written by `trtspec build` with `backend: torch`. Pure (json + pathlib; no torch).

A bundle is a directory:

    <bundle>/
      target/                  HF checkpoint of the target (config.json, *.safetensors, tokenizer files)
      draft/                   HF checkpoint of the draft (draft_target only)
      medusa/                  Medusa heads directory (medusa only; FasterDecoding or ModelOpt layout)
      eagle/                   EAGLE-3 drafter (method eagle3: built from method eagle with eagle.eagle3; HF layout)
      trtspec-bundle.json      {"format": "trtspec-bundle/2", "engine": EngineConfig (checkpoints relative to the
                               bundle), "max_batch_size", "max_seq_len"}
      trtspec-manifest.json    how it was built (config, versions, hashes, steps)

`load_bundle(path)` returns a BundleInfo whose `engine` (trtspec.contracts.engine.EngineConfig) names the bundle's
checkpoints by absolute path, ready for `SpecEngine.from_config(info.engine)`. Bundles of format /1 (the settings as
loose keys) are read too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from trtspec.build.plan import BUNDLE_FILE, BUNDLE_FORMAT
from trtspec.contracts.build_output import MANIFEST
from trtspec.contracts.engine import CHECKPOINTS, EagleTree, EngineConfig, method_fields
from trtspec.errors import ConfigError, ModelNotFoundError
from trtspec.methods.lookahead import LOOKAHEAD
from trtspec.methods.ngram import NGRAM
from trtspec.methods.suffix import SUFFIX

FORMAT_V1 = "trtspec-bundle/1"


@dataclass(frozen=True)
class BundleInfo:
    """A torch-path bundle: its engine configuration (absolute checkpoint paths) and the envelope it was built for."""

    root: Path
    engine: EngineConfig
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
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelNotFoundError(f"bundle={str(path)!r}: {settings_file} is not valid JSON ({exc})",
                                 hint="rebuild the bundle") from None
    if not isinstance(settings, dict) or settings.get("format") not in (BUNDLE_FORMAT, FORMAT_V1):
        found = settings.get("format") if isinstance(settings, dict) else None
        raise ModelNotFoundError(f"bundle={str(path)!r}: format {found!r}, expected {BUNDLE_FORMAT}",
                                 hint="rebuild the bundle with this trtspec version")
    manifest_file = root / MANIFEST
    manifest = json.loads(manifest_file.read_text()) if manifest_file.is_file() else {}
    try:
        engine = EngineConfig.from_dict(settings["engine"], "engine") if settings["format"] == BUNDLE_FORMAT \
            else _engine_v1(settings, manifest)
    except (ConfigError, KeyError, TypeError, ValueError) as exc:
        raise ModelNotFoundError(f"bundle={str(path)!r}: {settings_file}: {exc}",
                                 hint="rebuild the bundle with this trtspec version") from None

    def checkpoint(role: str, name: str) -> str:
        full = root / name
        if not (full / "config.json").is_file():
            raise ModelNotFoundError(f"bundle={str(path)!r}: {role} directory {full} has no config.json",
                                     hint="rebuild the bundle (a copy step did not complete)")
        return str(full)

    return BundleInfo(root=root, engine=engine.with_checkpoints(checkpoint),
                      max_batch_size=int(settings.get("max_batch_size", 1)),
                      max_seq_len=int(settings.get("max_seq_len", 2048)), manifest=manifest)


def _engine_v1(settings: dict[str, Any], manifest: dict[str, Any]) -> EngineConfig:
    """A format /1 bundle's loose settings (and its manifest's envelope) as an EngineConfig."""
    method, k = settings["method"], int(settings["max_draft_len"])
    envelope = (manifest.get("config") or {}).get("engine") or {}
    max_input_len = int(envelope.get("max_input_len", 1024))
    choices = tuple(map(tuple, settings["choices"])) if settings.get("choices") else None
    ngram = settings.get(NGRAM.section)
    return EngineConfig(
        **{role: settings[role] for role in CHECKPOINTS if settings.get(role)},
        **method_fields(  # the EAGLE-3 dynamic shape was kept under its parameter names
            method, k, reference=True, choices=choices,
            eagle_tree=lambda: replace(EagleTree.from_parameters(
                {key: str(v) for key, v in settings.items() if v is not None and key in EagleTree.PARAMETERS.values()}),
                choices=choices),
            lookahead=settings.get(LOOKAHEAD.section),
            ngram_size=lambda: int(ngram["max_matching_ngram_size"]) if ngram else None,
            suffix=lambda: settings[SUFFIX.section]),
        dtype=settings.get("dtype", "float32"), max_input_len=max_input_len,
        max_output_len=max(1, int(settings.get("max_seq_len", 2048)) - max_input_len))
