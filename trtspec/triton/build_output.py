"""Read what `trtspec build` produced: `trtspec-manifest.json`, and a torch bundle through its `load_bundle`.

Facts about each engine come from the engine itself when it is built (`engines/<role>/config.json`, written by
trtllm-build: `build_config.max_draft_len`, `pretrained_config.vocab_size` and `mapping`), else from the manifest
(the planned `trtllm-build` flags and the derived values). Pure: json, shlex, pathlib.

Manifest fields used (format `trtspec-manifest/1`: the contract trtspec.contracts.build_output, `Manifest`): backend, method, config.target,
config.engine.{tp_size, pp_size, draft_tp_size, max_batch_size, max_input_len, max_seq_len},
config.kv_cache.enable_block_reuse, config.trtllm.version (the TensorRT-LLM target the plan was made for), workflow
(pytorch | engine; older manifests: config.workflow, else pytorch when there are LLM-API options and no engines), derived.{max_draft_len, choices.json, lookahead, kv_cache.<role>,
medusa_heads.num_heads}, engines.<role> (relative path), llm_api (the LLM-API options file, relative path),
steps[].{id, command | argv}.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trtspec.contracts.build_output import MANIFEST, Manifest
from trtspec.contracts.engine import EagleTree, EngineConfig, Lookahead, method_fields
from trtspec.errors import ConfigError, UsageError
from trtspec.methods import BASELINE, resolve
from trtspec.methods.lookahead import LOOKAHEAD
from trtspec.targets import WORKFLOWS, Workflow
from trtspec.textfile import load_yaml_text


@dataclass(frozen=True)
class EngineInfo:
    """One TensorRT-LLM engine of a build (target or draft)."""

    role: str
    path: Path
    max_draft_len: int = 0
    speculative_decoding_mode: str | None = None
    tp_size: int = 1
    pp_size: int = 1
    vocab_size: int | None = None
    num_medusa_heads: int | None = None
    kv_cache_free_gpu_mem_fraction: float | None = None
    max_tokens_in_paged_kv_cache: int | None = None
    gpu_device_ids: str | None = None
    built: bool = False  # the engine directory exists with its config.json

    @property
    def world_size(self) -> int:
        return self.tp_size * self.pp_size


@dataclass(frozen=True)
class BuildOutput:
    """A build output directory, as far as deployment cares: the engine configuration it serves, its engines and
    envelope."""

    root: Path
    backend: str
    engine: EngineConfig  # torch: the bundle's (absolute checkpoints); tensorrtllm: method, k, tree, lookahead, target
    engines: dict[str, EngineInfo] = field(default_factory=dict)  # tensorrtllm: role -> engine
    max_batch_size: int = 8
    max_input_len: int = 1024
    max_seq_len: int = 2048
    enable_kv_cache_reuse: bool = True
    trtllm_version: str | None = None  # config.trtllm.version; None when the manifest does not say
    tp_size: int = 1  # config.engine.tp_size / pp_size
    pp_size: int = 1
    # the LLM-API options the build wrote (its `extra_llm_api_options` file, as a mapping); None: it wrote none
    llm_api: dict[str, Any] | None = None
    workflow: Workflow = "engine"  # pytorch: served through the LLM API (the manifest's workflow; targets.WORKFLOWS)

    @property
    def method(self) -> str:
        return self.engine.method


def read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path} is not valid JSON ({exc})", hint=f"rebuild; the {what} is written atomically") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path} is not a JSON object", hint="rebuild")
    return data


def read_build_output(build_dir: Path) -> BuildOutput:
    """Read a build output; UsageError when it is not one (names the missing file and the command to make it)."""
    root = Path(build_dir).expanduser().resolve()
    if not root.is_dir():
        raise UsageError(f"--build {build_dir} is not a directory", hint="pass the output directory of `trtspec build`")
    if not (root / MANIFEST).is_file():
        raise UsageError(f"{root} has no {MANIFEST}: it is not a trtspec build output",
                         hint="run `trtspec build CONFIG --out DIR` first and deploy DIR")
    manifest = Manifest.from_dict(read_json(root / MANIFEST, "manifest"))
    backend = str(manifest.backend or "tensorrtllm")
    method = str(manifest.method or BASELINE)
    config = manifest.config
    engine_cfg = config.get("engine") or {}
    derived = manifest.derived
    common: dict[str, Any] = {
        "max_batch_size": int(engine_cfg.get("max_batch_size", 8)),
        "max_input_len": int(engine_cfg.get("max_input_len", 1024)),
        "max_seq_len": int(engine_cfg.get("max_seq_len", 2048)),
        "enable_kv_cache_reuse": bool((config.get("kv_cache") or {}).get("enable_block_reuse", True)),
        "trtllm_version": _trtllm_version(config),
        "tp_size": int(engine_cfg.get("tp_size", 1)), "pp_size": int(engine_cfg.get("pp_size", 1)),
    }
    if backend == "torch":
        return _read_bundle(root, common)
    llm_api = _llm_api(root, manifest.llm_api)
    workflow = str(manifest.workflow or config.get("workflow")
                   or ("pytorch" if llm_api is not None and not manifest.engines else "engine"))
    if workflow not in WORKFLOWS:
        raise UsageError(f"{root / MANIFEST}: workflow {workflow!r} is not one of {', '.join(WORKFLOWS)}",
                         hint="rebuild with this trtspec")
    heads = (derived.get("medusa_heads") or {}).get("num_heads")
    steps = {s.get("id"): s for s in manifest.steps if isinstance(s, dict)}
    engine = _manifest_engine(root, manifest, method)
    engines = {}
    for role, rel in manifest.engines.items():
        tp = engine_cfg.get("draft_tp_size") if role == "draft" else None
        # Medusa/EAGLE engines take max_draft_len from their checkpoint, not from a trtllm-build flag.
        from_checkpoint = int(derived.get("max_draft_len") or 0) if role == "target" and resolve(method).tree else 0
        engines[role] = _engine(root, role, str(rel), steps.get(f"engine-{role}"),
                                (derived.get("kv_cache") or {}).get(role) or {}, from_checkpoint,
                                tp_size=int(tp or engine_cfg.get("tp_size", 1)),
                                pp_size=int(engine_cfg.get("pp_size", 1)),
                                num_medusa_heads=int(heads) if heads and role == "target" else None)
    return BuildOutput(root=root, backend=backend, engine=engine, engines=engines, llm_api=llm_api, workflow=workflow,
                       **common)


def _llm_api(root: Path, rel: Any) -> dict[str, Any] | None:
    """The LLM-API options file the manifest names (YAML), as a mapping; None when the build wrote none."""
    if not rel:
        return None
    path = root / str(rel)
    if not path.is_file():
        raise UsageError(f"{root / MANIFEST} names the LLM-API options {rel}, but {path} does not exist",
                         hint="re-run `trtspec build` (its files steps write it anywhere)")
    import yaml

    try:
        data = load_yaml_text(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise UsageError(f"{path} is not valid YAML ({exc})", hint="rebuild; trtspec writes it atomically") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path} is not a YAML mapping of LLM-API options", hint="rebuild")
    return data


def _manifest_engine(root: Path, manifest: Manifest, method: str) -> EngineConfig:
    """The engine configuration a TensorRT-LLM build's manifest records (`engine`), or, in a manifest written before
    it recorded one, the same derived from `config.target` and `derived` (max_draft_len, choices, lookahead)."""
    try:
        if isinstance(manifest.engine, dict):
            return EngineConfig.from_dict(manifest.engine, "engine")
        target = manifest.config.get("target")
        if not target:
            raise UsageError(f"{root / MANIFEST} names no target model (config.target)", hint="rebuild")
        derived = manifest.derived
        k = int(derived.get("max_draft_len") or 0)
        choices = (derived.get("choices") or {}).get("json")
        paths = tuple(map(tuple, json.loads(choices) if isinstance(choices, str) else choices)) if choices else None
        window = derived.get(LOOKAHEAD.section)
        return EngineConfig(target=str(target), **method_fields(
            method, k, reference=False, choices=paths,
            eagle_tree=lambda: EagleTree(choices=paths) if paths else None,
            lookahead=lambda: Lookahead.from_dict(window, f"derived.{LOOKAHEAD.section}").as_tuple()
            if window else None))
    except (ConfigError, KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{root / MANIFEST}: {exc}", hint="rebuild with this trtspec") from None


def _trtllm_version(config: dict[str, Any]) -> str | None:
    version = (config.get("trtllm") or {}).get("version")
    return str(version) if version else None


def _read_bundle(root: Path, common: dict[str, Any]) -> BuildOutput:
    """A torch bundle through the build's own reader (`trtspec.build.bundle.load_bundle`)."""
    from trtspec.build.bundle import load_bundle

    bundle = load_bundle(root)
    return BuildOutput(root=root, backend="torch", engine=bundle.engine,
                       **{**common, "max_batch_size": bundle.max_batch_size, "max_seq_len": bundle.max_seq_len})


def _engine(root: Path, role: str, rel: str, step: dict[str, Any] | None, kv: dict[str, Any], from_checkpoint: int,
            *, tp_size: int, pp_size: int, num_medusa_heads: int | None) -> EngineInfo:
    path = (root / rel).resolve() if not Path(rel).is_absolute() else Path(rel)
    flags = _flags(step)
    info: dict[str, Any] = {
        "max_draft_len": int(flags.get("--max_draft_len", from_checkpoint)),
        "speculative_decoding_mode": flags.get("--speculative_decoding_mode"),
        "tp_size": tp_size, "pp_size": pp_size, "num_medusa_heads": num_medusa_heads,
        "kv_cache_free_gpu_mem_fraction": kv.get("kv_cache_free_gpu_mem_fraction"),
        "max_tokens_in_paged_kv_cache": kv.get("max_tokens_in_paged_kv_cache"),
    }
    built = (path / "config.json").is_file()
    if built:  # the engine itself wins over the plan
        engine = read_json(path / "config.json", "engine config")
        build_cfg, pretrained = engine.get("build_config") or {}, engine.get("pretrained_config") or {}
        mapping = pretrained.get("mapping") or {}
        info["max_draft_len"] = int(build_cfg.get("max_draft_len", info["max_draft_len"]) or 0)
        info["vocab_size"] = pretrained.get("vocab_size")
        info["tp_size"] = int(mapping.get("tp_size", tp_size))
        info["pp_size"] = int(mapping.get("pp_size", pp_size))
        mode = build_cfg.get("speculative_decoding_mode")
        if isinstance(mode, str):
            info["speculative_decoding_mode"] = mode.lower().removeprefix("speculativedecodingmode.")
    return EngineInfo(role=role, path=path, built=built, **info)


def _flags(step: dict[str, Any] | None) -> dict[str, str]:
    """`--flag value` pairs of a planned command (manifest steps carry `command`, plans carry `argv`)."""
    if not step:
        return {}
    argv = step.get("argv") or shlex.split(step.get("command") or "")
    return {a: b for a, b in zip(argv, [*argv[1:], ""], strict=True) if a.startswith("--") and not b.startswith("--")}
