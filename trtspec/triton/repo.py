"""RepoSpec: what a Triton deployment of one build output looks like, read from its `trtspec-manifest.json`.

`RepoSpec.from_build(build_dir, backend)` reads the manifest the build step wrote and refuses inconsistent builds
(no manifest, a target not built for draft tokens, lookahead sizes that differ from the engine's, a Medusa tree the
engine cannot hold, draft and target vocabularies that differ). `plan_repository(spec)` turns it into the files of the
repository. Pure Python: no torch, no tritonclient (except `render.validate_model_config`, imported lazily).

Manifest fields read here (the rest is ignored):
    backend: "tensorrtllm" | "torch";  method: a trtspec.methods name;  tokenizer_dir: path (relative to the build)
    engines: {"target": {path, max_draft_len, speculative_decoding_mode, tp_size, pp_size, vocab_size,
              lookahead: [W, N, G], num_medusa_heads, kv_cache_free_gpu_mem_fraction, max_tokens_in_paged_kv_cache,
              gpu_device_ids}, "draft": {...}}                                   (tensorrtllm)
    models: {"target": path|embedded name, "draft": ..., "medusa": ...}           (torch)
    spec: {k, max_k, medusa_choices, eagle_choices, lookahead: [W, N, G], max_input_len, max_output_len}
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from trtspec import choices as tree_choices
from trtspec.errors import ConfigError, UsageError
from trtspec.methods import lookahead_max_draft_len, resolve
from trtspec.triton.render import (
    TEMPLATES_PINNED,
    Block,
    RepoFile,
    RepoPlan,
    model_files,
    pbtxt_parameters,
    pbtxt_string,
)

MANIFEST = "trtspec-manifest.json"
BACKENDS = ("tensorrtllm", "torch")
CORE_MODEL = {"tensorrtllm": "tensorrt_llm", "torch": "trtspec_engine"}


@dataclass(frozen=True)
class EngineInfo:
    """One TensorRT-LLM engine of a build (target or draft), as the manifest describes it."""

    role: str
    path: Path
    max_draft_len: int = 0
    speculative_decoding_mode: str | None = None
    tp_size: int = 1
    pp_size: int = 1
    vocab_size: int | None = None
    lookahead: tuple[int, int, int] | None = None
    num_medusa_heads: int | None = None
    kv_cache_free_gpu_mem_fraction: float | None = None
    max_tokens_in_paged_kv_cache: int | None = None
    gpu_device_ids: str | None = None

    @property
    def world_size(self) -> int:
        return self.tp_size * self.pp_size


@dataclass(frozen=True)
class RepoSpec:
    """Everything the templates need; built from a manifest (`from_build`) or directly in code."""

    backend: str
    method: str
    tokenizer_dir: Path
    triton_max_batch_size: int = 8
    max_queue_delay_microseconds: int = 0
    max_queue_size: int = 0
    preprocessing_instances: int = 1
    postprocessing_instances: int = 1
    # tensorrtllm flavour
    engines: dict[str, EngineInfo] = field(default_factory=dict)
    medusa_choices: list[list[int]] | None = None
    eagle_choices: list[list[int]] | None = None
    lookahead: tuple[int, int, int] | None = None
    enable_kv_cache_reuse: bool = True
    # torch flavour
    models: dict[str, str] = field(default_factory=dict)
    max_k: int = 8
    default_k: int = 4
    device: str = "cpu"
    dtype: str = "float32"
    max_input_len: int = 1024
    max_output_len: int = 512

    @property
    def core_model(self) -> str:
        return CORE_MODEL[self.backend]

    @property
    def world_size(self) -> int:
        """MPI ranks the TensorRT-LLM models need (1 for the torch flavour)."""
        return max((e.world_size for e in self.engines.values()), default=1)

    @classmethod
    def from_build(cls, build_dir: Path, backend: str, **overrides: Any) -> RepoSpec:
        """Read `build_dir/trtspec-manifest.json` and check it can be deployed with `backend`."""
        build_dir = Path(build_dir).resolve()
        manifest = read_manifest(build_dir)
        built = manifest.get("backend", backend)
        if backend not in BACKENDS:
            raise ConfigError("backend", backend, f"is not one of {', '.join(BACKENDS)}", hint="--backend torch")
        if built != backend:
            raise UsageError(f"{build_dir} was built for backend {built!r}, not {backend!r}",
                             hint=f"deploy it with --backend {built}, or build for {backend}")
        method = str(manifest.get("method", "none"))
        resolve(method)
        spec = manifest.get("spec") or {}
        tokenizer = manifest.get("tokenizer_dir")
        common: dict[str, Any] = {"backend": backend, "method": method}
        for key in ("max_input_len", "max_output_len"):
            if key in spec:
                common[key] = int(spec[key])
        if backend == "torch":
            models = {role: _model_ref(build_dir, ref) for role, ref in (manifest.get("models") or {}).items()}
            if "target" not in models:
                raise UsageError(f"{build_dir / MANIFEST} lists no target model under `models`",
                                 hint="rebuild the torch bundle with `trtspec build`")
            tok = _resolve(build_dir, tokenizer) if tokenizer else Path(models["target"])
            max_k = int(spec.get("max_k", max(8, int(spec.get("k", 4)))))
            result = cls(tokenizer_dir=tok, models=models, max_k=max_k,
                         default_k=int(spec.get("k", min(4, max_k))), **common)
        else:
            engines = {role: _engine_info(build_dir, role, raw) for role, raw in (manifest.get("engines") or {}).items()}
            if "target" not in engines:
                raise UsageError(f"{build_dir / MANIFEST} lists no target engine under `engines`",
                                 hint="rebuild with `trtspec build CONFIG`")
            tok = _resolve(build_dir, tokenizer) if tokenizer else None
            if tok is None:
                raise UsageError(f"{build_dir / MANIFEST} has no tokenizer_dir",
                                 hint="the build records the target's tokenizer directory; rebuild")
            lookahead = spec.get("lookahead")
            result = cls(
                tokenizer_dir=tok, engines=engines,
                medusa_choices=_choices(spec.get("medusa_choices"), "spec.medusa_choices"),
                eagle_choices=_choices(spec.get("eagle_choices"), "spec.eagle_choices"),
                lookahead=tuple(int(x) for x in lookahead) if lookahead else None,  # type: ignore[arg-type]
                default_k=int(spec.get("k", 4)), **common,
            )  # fmt: skip
        result = replace(result, **overrides)
        result.check()
        return result

    def check(self) -> None:
        """Refuse a spec whose engines cannot serve its method (the reason names the field and the fix)."""
        info = resolve(self.method)
        if not self.tokenizer_dir.is_dir():
            raise UsageError(f"tokenizer_dir {self.tokenizer_dir} does not exist",
                             hint="the deployment tokenizes with the target's Hugging Face tokenizer")
        if self.backend == "torch":
            if info.proposer is None and self.method != "none":
                raise UsageError(f"method {self.method!r} has no reference-engine proposer",
                                 hint="deploy it with --backend tensorrtllm")
            if info.needs_draft_model and "draft" not in self.models:
                raise UsageError(f"method {self.method} needs a draft model; the bundle has none",
                                 hint="rebuild the bundle with a draft model")
            if not 0 <= self.default_k <= self.max_k:
                raise ConfigError("spec.k", self.default_k, f"must be in [0, max_k={self.max_k}]")
            return
        target = self.engines["target"]
        if info.needs_draft_model or self.method == "ngram":
            if target.speculative_decoding_mode != "draft_tokens_external" or target.max_draft_len < 1:
                raise UsageError(
                    f"target engine {target.path} was not built for draft tokens (speculative_decoding_mode="
                    f"{target.speculative_decoding_mode!r}, max_draft_len={target.max_draft_len})",
                    hint="rebuild the target with --speculative_decoding_mode draft_tokens_external --max_draft_len K",
                )
            if self.default_k > target.max_draft_len:
                raise ConfigError("spec.k", self.default_k, f"exceeds the target engine's max_draft_len="
                                  f"{target.max_draft_len}", hint="lower k or rebuild with a larger max_draft_len")
        if info.needs_draft_model:
            draft = self.engines.get("draft")
            if draft is None:
                raise UsageError(f"method {self.method} needs a draft engine; the manifest lists none",
                                 hint="add a draft model to the build config and rebuild")
            if None not in (draft.vocab_size, target.vocab_size) and draft.vocab_size != target.vocab_size:
                raise UsageError(f"draft engine vocab_size {draft.vocab_size} != target's {target.vocab_size}",
                                 hint="draft and target must share one tokenizer and vocab size")
        if self.method == "lookahead":
            self._check_lookahead(target)
        if self.method in ("medusa", "eagle"):
            tree = self.medusa_choices if self.method == "medusa" else self.eagle_choices
            if tree is not None:
                tree_choices.validate(tree, max_depth=target.num_medusa_heads, max_nodes=target.max_draft_len or None,
                                      field=f"spec.{self.method}_choices")

    def _check_lookahead(self, target: EngineInfo) -> None:
        if self.lookahead is None:
            raise UsageError("method lookahead needs spec.lookahead [W, N, G] in the manifest",
                             hint="the build records the server's (W, N, G); rebuild")
        window, ngram, verification = self.lookahead
        need = lookahead_max_draft_len(window, ngram, verification)
        if target.lookahead is not None and tuple(target.lookahead) != tuple(self.lookahead):
            raise UsageError(f"lookahead {list(self.lookahead)} differs from the engine's {list(target.lookahead)}",
                             hint=f"deploy with the engine's (W, N, G) or rebuild with --lookahead {window},{ngram},"
                                  f"{verification}")
        if target.max_draft_len != need:
            raise UsageError(f"target engine max_draft_len={target.max_draft_len} but lookahead {list(self.lookahead)}"
                             f" needs {need}", hint=f"rebuild the target with --max_draft_len {need}")


def read_manifest(build_dir: Path) -> dict[str, Any]:
    path = Path(build_dir) / MANIFEST
    if not Path(build_dir).is_dir():
        raise UsageError(f"--build {build_dir} is not a directory", hint="pass the output directory of `trtspec build`")
    if not path.is_file():
        raise UsageError(f"{build_dir} has no {MANIFEST}: it is not a trtspec build output",
                         hint="run `trtspec build CONFIG --out DIR` first and deploy DIR")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path} is not valid JSON ({exc})", hint="rebuild; the manifest is written atomically") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path} is not a JSON object", hint="rebuild")
    return data


def _resolve(build_dir: Path, ref: str) -> Path:
    path = Path(ref).expanduser()
    return path if path.is_absolute() else (build_dir / path).resolve()


def _model_ref(build_dir: Path, ref: str) -> str:
    """A torch-bundle model: an embedded name (`tiny`) stays a name; anything else is a path under the build."""
    from trtspec.models import EMBEDDED

    return ref if ref in EMBEDDED else str(_resolve(build_dir, ref))


def _choices(value: Any, name: str) -> list[list[int]] | None:
    return None if value is None else tree_choices.parse(value, field=name)


def _engine_info(build_dir: Path, role: str, raw: dict[str, Any]) -> EngineInfo:
    if "path" not in raw:
        raise UsageError(f"{build_dir / MANIFEST}: engines.{role} has no path", hint="rebuild")
    la = raw.get("lookahead")
    opt = {k: raw[k] for k in ("vocab_size", "num_medusa_heads", "kv_cache_free_gpu_mem_fraction",
                               "max_tokens_in_paged_kv_cache", "gpu_device_ids", "speculative_decoding_mode")
           if raw.get(k) is not None}
    return EngineInfo(role=role, path=_resolve(build_dir, raw["path"]), max_draft_len=int(raw.get("max_draft_len", 0)),
                      tp_size=int(raw.get("tp_size", 1)), pp_size=int(raw.get("pp_size", 1)),
                      lookahead=tuple(int(x) for x in la) if la else None, **opt)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------------------------
# Repository plan


def plan_repository(spec: RepoSpec) -> RepoPlan:
    """All files of the repository for `spec` (rendered configs are already validated as ModelConfig)."""
    tokenizer = {"tokenizer_dir": str(spec.tokenizer_dir)}
    batch = {"triton_max_batch_size": spec.triton_max_batch_size}
    plan: RepoPlan = {}
    plan |= model_files("preprocessing", "preprocessing", {
        **batch, "instance_count": spec.preprocessing_instances,
        "parameters": pbtxt_parameters({**tokenizer, "add_special_tokens": True,
                                        "max_input_len": spec.max_input_len})})
    plan |= model_files("postprocessing", "postprocessing", {
        **batch, "instance_count": spec.postprocessing_instances,
        "parameters": pbtxt_parameters({**tokenizer, "skip_special_tokens": True})})
    plan |= model_files("ensemble", "ensemble", {**batch, "core_model": spec.core_model, **_ensemble_extras(spec)})
    if spec.backend == "torch":
        plan |= model_files("trtspec_engine", "trtspec_engine", {
            **batch, "model_name": "trtspec_engine", "parameters": pbtxt_parameters(_engine_parameters(spec))})
    else:
        plan |= _trtllm_models(spec)
    plan["trtspec-repo.json"] = RepoFile(text=json.dumps(_repo_record(spec), indent=2) + "\n")
    return plan


def _ensemble_extras(spec: RepoSpec) -> dict[str, Block]:
    """Core-model inputs the ensemble passes through: `num_draft_tokens` exists on trtspec_engine only."""
    if spec.backend != "torch":
        return {"extra_inputs": Block(""), "extra_input_map": Block("")}
    name = pbtxt_string("num_draft_tokens")
    return {
        "extra_inputs": Block(f",\n  {{ name: {name} data_type: TYPE_INT32 dims: [ 1 ] optional: true }}"),
        "extra_input_map": Block(f"\n      input_map {{ key: {name} value: {name} }}"),
    }


def _engine_parameters(spec: RepoSpec) -> dict[str, object]:
    return {
        "method": spec.method,
        "target": spec.models["target"],
        "draft": spec.models.get("draft"),
        "medusa": spec.models.get("medusa"),
        "max_k": spec.max_k,
        "default_k": spec.default_k,
        "device": spec.device,
        "dtype": spec.dtype,
        "max_input_len": spec.max_input_len,
        "max_output_len": spec.max_output_len,
        "exclude_input_in_output": True,
    }


def _trtllm_models(spec: RepoSpec) -> RepoPlan:
    info = resolve(spec.method)
    queue = {"triton_max_batch_size": spec.triton_max_batch_size,
             "max_queue_delay_microseconds": spec.max_queue_delay_microseconds, "max_queue_size": spec.max_queue_size,
             "logits_datatype": "TYPE_FP32"}
    plan: RepoPlan = {}
    roles = ["target"] + (["draft"] if "draft" in spec.engines and info.needs_draft_model else [])
    for role in roles:
        engine = spec.engines[role]
        name = "tensorrt_llm" if role == "target" else "tensorrt_llm_draft"
        params = _trtllm_parameters(spec, engine, speculative=role == "target")
        # BLS draft-target calls both engines non-streaming; the ensemble streams from a decoupled target otherwise.
        decoupled = not info.needs_draft_model
        plan |= model_files(name, "tensorrt_llm", {**queue, "model_name": name, "decoupled": decoupled,
                                                   "parameters": pbtxt_parameters(params)})
    bls = {"tensorrt_llm_model_name": "tensorrt_llm", "accumulate_tokens": False,
           "tensorrt_llm_draft_model_name": "tensorrt_llm_draft" if "draft" in roles else None,
           "tokenizer_dir": str(spec.tokenizer_dir)}
    plan |= model_files("tensorrt_llm_bls", "tensorrt_llm_bls", {
        "triton_max_batch_size": spec.triton_max_batch_size, "decoupled": False, "instance_count": 1,
        "parameters": pbtxt_parameters(bls)})
    return plan


def _trtllm_parameters(spec: RepoSpec, engine: EngineInfo, *, speculative: bool) -> dict[str, object]:
    """tensorrtllm_backend `parameters` for one engine; unset values are omitted, never left as `${...}`."""
    info = resolve(spec.method)
    params: dict[str, object] = {
        "gpt_model_path": str(engine.path),
        "gpt_model_type": "inflight_fused_batching",
        "max_beam_width": 1,
        "FORCE_CPU_ONLY_INPUT_TENSORS": "no",
        "executor_worker_path": "/opt/tritonserver/backends/tensorrtllm/trtllmExecutorWorker",
        "enable_kv_cache_reuse": spec.enable_kv_cache_reuse,
        "kv_cache_free_gpu_mem_fraction": engine.kv_cache_free_gpu_mem_fraction,
        "max_tokens_in_paged_kv_cache": engine.max_tokens_in_paged_kv_cache,
        "gpu_device_ids": engine.gpu_device_ids,
        "exclude_input_in_output": not info.needs_draft_model,  # the BLS loop slices outputs after the prompt
        "batch_scheduler_policy": "guaranteed_no_evict",
    }
    if engine.kv_cache_free_gpu_mem_fraction is None and engine.max_tokens_in_paged_kv_cache is None:
        # Two engines on one GPU: each takes a fraction of what is free after it loads.
        params["kv_cache_free_gpu_mem_fraction"] = 0.45 if len(spec.engines) > 1 else 0.9
    if speculative and info.triton_decoding_mode:
        params["decoding_mode"] = info.triton_decoding_mode
    if speculative and spec.method == "medusa":
        params["medusa_choices"] = tree_choices.to_triton(spec.medusa_choices or tree_choices.MC_SIM_7B_63)
    if speculative and spec.method == "eagle":
        params["eagle_choices"] = tree_choices.to_triton(spec.eagle_choices or tree_choices.MC_SIM_7B_63)
    if speculative and spec.method == "lookahead" and spec.lookahead is not None:
        window, ngram, verification = spec.lookahead
        params |= {"lookahead_window_size": window, "lookahead_ngram_size": ngram,
                   "lookahead_verification_set_size": verification}
    return params


def _repo_record(spec: RepoSpec) -> dict[str, Any]:
    """`trtspec-repo.json`: what `trtspec serve` needs to know about the repository (flavour, world size, models)."""
    models = ["preprocessing", "postprocessing", "ensemble", spec.core_model]
    if spec.backend == "tensorrtllm":
        models += ["tensorrt_llm_bls"] + (["tensorrt_llm_draft"] if resolve(spec.method).needs_draft_model
                                          and "draft" in spec.engines else [])
    return {"backend": spec.backend, "method": spec.method, "core_model": spec.core_model, "models": models,
            "world_size": spec.world_size, "max_k": spec.max_k, "templates": TEMPLATES_PINNED}

