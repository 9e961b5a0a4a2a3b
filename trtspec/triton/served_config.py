"""The engine configuration of a served torch-flavour model: its Triton model config, and its version's checkpoints.

- `from_model_config`: the model's `parameters` (every value a string, as Triton hands them to `initialize` and as
  the model-control API returns them) parsed by EngineConfig.from_parameters.
- `for_version`: a model version's own checkpoints, `MODEL/N/trtspec-version.json` (written by `trtspec
  rollout-draft`, `write_version_file`). Triton's `parameters` belong to the model, so what differs between its
  versions (a retrained draft's checkpoint, kept inside the version directory) lives in the version directory.
Pure Python.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from trtspec.contracts.engine import EngineConfig
from trtspec.errors import ConfigError

VERSION_FILE = "trtspec-version.json"  # per-version overrides in a model's version directory
VERSION_FIELDS = ("target", "draft")  # the checkpoints a version may bring (tensorrt_llm_draft runs its draft as target)


def from_model_config(config: Mapping[str, Any]) -> EngineConfig:
    """From a Triton model config as a dict (`json.loads(args["model_config"])`, or the model-control API's)."""
    return EngineConfig.from_parameters({k: v["string_value"] for k, v in (config.get("parameters") or {}).items()})


def for_version(config: EngineConfig, version_dir: Path) -> EngineConfig:
    """`config` with the overrides of one model version (`version_dir/trtspec-version.json`): relative paths are
    resolved against `version_dir`; only the checkpoint fields (VERSION_FIELDS) may be overridden."""
    path = Path(version_dir) / VERSION_FILE
    if not path.is_file():
        return config
    try:
        overrides = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(str(path), "unreadable", f"is not UTF-8 JSON ({exc})",
                          hint="roll the version out again with `trtspec rollout-draft`") from None
    if not isinstance(overrides, dict) or set(overrides) - set(VERSION_FIELDS) or not all(
            isinstance(v, str) and v for v in overrides.values()):
        raise ConfigError(str(path), overrides, f"must map some of {', '.join(VERSION_FIELDS)} to checkpoint paths",
                          hint="roll the version out again with `trtspec rollout-draft`")
    return replace(config, **{k: str(Path(version_dir) / v) for k, v in overrides.items()})


def write_version_file(version_dir: Path, checkpoints: dict[str, str]) -> Path:
    """Name the checkpoints (relative to `version_dir`) a version brings; atomic."""
    from trtspec.atomic import write_json

    path = Path(version_dir) / VERSION_FILE
    write_json(path, checkpoints)
    return path
