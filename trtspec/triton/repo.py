"""RepoSpec: what a Triton deployment of one build output looks like, and the checks that refuse bad ones.

`RepoSpec.from_build(build_dir, backend)` reads the build output (`trtspec.triton.build_output`) and refuses
inconsistent deployments with the reason: no manifest, a target engine not built for draft tokens, k above the
engine's max_draft_len, lookahead (W, N, G) that does not match the engine, a Medusa/EAGLE tree the engine cannot
hold, draft and target vocabularies that differ. `plan_repository(spec)` turns a RepoSpec into the repository's
files. Pure Python: no torch, no tritonclient (except `render.validate_model_config`, imported lazily).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from trtspec import choices as tree_choices
from trtspec.errors import ConfigError, UsageError
from trtspec.methods import lookahead_max_draft_len, resolve
from trtspec.triton.build_output import EngineInfo, read_build_output
from trtspec.triton.engine_params import EngineParams
from trtspec.triton.render import (
    TEMPLATES_PINNED,
    Block,
    RepoFile,
    RepoPlan,
    model_files,
    pbtxt_parameters,
    pbtxt_string,
)

BACKENDS = ("tensorrtllm", "torch")
CORE_MODEL = {"tensorrtllm": "tensorrt_llm", "torch": "trtspec_engine"}
CODEC = ("text_codec.py",)  # model_repo/common/ helper the tokenizing Python models import


@dataclass(frozen=True)
class RepoSpec:
    """Everything the templates need; built from a build output (`from_build`) or directly in code."""

    backend: str
    method: str
    tokenizer_dir: Path
    triton_max_batch_size: int = 8
    max_queue_delay_microseconds: int = 0
    max_queue_size: int = 0
    preprocessing_instances: int = 1
    postprocessing_instances: int = 1
    default_k: int = EngineParams.default_k  # draft tokens per request when the request does not say
    max_input_len: int = EngineParams.max_input_len
    max_output_len: int = EngineParams.max_output_len
    # tensorrtllm flavour
    engines: dict[str, EngineInfo] = field(default_factory=dict)
    choices: list[list[int]] | None = None  # Medusa / EAGLE tree (server-level)
    lookahead: tuple[int, int, int] | None = None  # the server's (W, N, G)
    build_lookahead: tuple[int, int, int] | None = None  # what the engine was built for
    enable_kv_cache_reuse: bool = True
    # torch flavour
    models: dict[str, str] = field(default_factory=dict)  # role -> checkpoint directory or embedded name
    max_k: int = EngineParams.max_k
    engine_max_queue: int = EngineParams.max_queue  # requests waiting + running in the reference engine
    device: str = EngineParams.device
    dtype: str = EngineParams.dtype

    @property
    def core_model(self) -> str:
        return CORE_MODEL[self.backend]

    @property
    def world_size(self) -> int:
        """MPI ranks the TensorRT-LLM models need (1 for the torch flavour)."""
        return max((e.world_size for e in self.engines.values()), default=1)

    @classmethod
    def from_build(cls, build_dir: Path, backend: str, **overrides: Any) -> RepoSpec:
        """The RepoSpec of a build output, with `overrides` (e.g. default_k, lookahead, choices) applied, checked."""
        if backend not in BACKENDS:
            raise ConfigError("backend", backend, f"is not one of {', '.join(BACKENDS)}", hint="--backend torch")
        build = read_build_output(build_dir)
        if build.backend != backend:
            raise UsageError(f"{build.root} was built for backend {build.backend!r}, not {backend!r}",
                             hint=f"deploy it with --backend {build.backend}, or build for {backend}")
        resolve(build.method)
        common: dict[str, Any] = {
            "backend": backend, "method": build.method, "triton_max_batch_size": build.max_batch_size,
            "max_input_len": build.max_input_len,
            "max_output_len": max(1, build.max_seq_len - build.max_input_len),
            "default_k": build.max_draft_len if build.method in ("draft_target", "ngram") or backend == "torch" else 0,
            "choices": build.choices, "lookahead": build.lookahead, "build_lookahead": build.lookahead,
        }  # fmt: skip
        if backend == "torch":
            spec = cls(tokenizer_dir=Path(build.models["target"]), models=build.models, dtype=build.dtype,
                       max_k=max(build.max_draft_len, 1), **common)
        else:
            from trtspec.models import resolve_model

            tokenizer = overrides.get("tokenizer_dir") or resolve_model(build.target_model, field="target")
            spec = cls(tokenizer_dir=Path(tokenizer), engines=build.engines,
                       enable_kv_cache_reuse=build.enable_kv_cache_reuse, **common)
        spec = replace(spec, **{k: v for k, v in overrides.items() if v is not None})
        spec.check()
        return spec

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
                raise ConfigError("k", self.default_k, f"must be in [0, max_k={self.max_k}]",
                                  hint="lower --k or raise --max-k")
            return
        if "target" not in self.engines:
            raise UsageError("the build lists no target engine", hint="rebuild with `trtspec build CONFIG`")
        target = self.engines["target"]
        if info.needs_draft_model or self.method == "ngram":
            if target.max_draft_len < 1 or target.speculative_decoding_mode not in (None, "draft_tokens_external"):
                raise UsageError(
                    f"target engine {target.path} was not built for draft tokens (speculative_decoding_mode="
                    f"{target.speculative_decoding_mode!r}, max_draft_len={target.max_draft_len})",
                    hint="rebuild the target with --speculative_decoding_mode draft_tokens_external --max_draft_len K",
                )
            if self.default_k > target.max_draft_len:
                raise ConfigError("k", self.default_k, f"exceeds the target engine's max_draft_len="
                                  f"{target.max_draft_len}", hint="lower --k or rebuild with a larger max_draft_len")
        if info.needs_draft_model:
            draft = self.engines.get("draft")
            if draft is None:
                raise UsageError(f"method {self.method} needs a draft engine; the build lists none",
                                 hint="add a draft model to the build config and rebuild")
            if None not in (draft.vocab_size, target.vocab_size) and draft.vocab_size != target.vocab_size:
                raise UsageError(f"draft engine vocab_size {draft.vocab_size} != target's {target.vocab_size}",
                                 hint="draft and target must share one tokenizer and vocab size")
        if self.method == "lookahead":
            self._check_lookahead(target)
        if info.tree and self.choices is not None:
            tree_choices.validate(self.choices, max_depth=target.num_medusa_heads,
                                  max_nodes=target.max_draft_len or None, field=f"{self.method}_choices")

    def _check_lookahead(self, target: EngineInfo) -> None:
        if self.lookahead is None:
            raise UsageError("method lookahead needs the server's (W, N, G)",
                             hint="the build records them (derived.lookahead); or pass --lookahead W,N,G")
        window, ngram, verification = self.lookahead
        need = lookahead_max_draft_len(window, ngram, verification)
        built = f" (built for {list(self.build_lookahead)})" if self.build_lookahead else ""
        if target.max_draft_len != need:
            raise UsageError(f"lookahead {list(self.lookahead)} needs max_draft_len={need} but the target engine has "
                             f"{target.max_draft_len}{built}",
                             hint="deploy with the engine's (W, N, G), or rebuild with lookahead: "
                                  f"[{window}, {ngram}, {verification}] (max_draft_len {need})")


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
                                        "max_input_len": spec.max_input_len})}, shared=CODEC)
    plan |= model_files("postprocessing", "postprocessing", {
        **batch, "instance_count": spec.postprocessing_instances,
        "parameters": pbtxt_parameters({**tokenizer, "skip_special_tokens": True})}, shared=CODEC)
    plan |= model_files("ensemble", "ensemble", {**batch, "core_model": spec.core_model, **_ensemble_extras(spec)})
    if spec.backend == "torch":
        plan |= model_files("trtspec_engine", "trtspec_engine", {
            **batch, "model_name": "trtspec_engine", "parameters": pbtxt_parameters(_engine_parameters(spec).to_parameters())})
    else:
        plan |= _trtllm_models(spec)
    plan["trtspec-repo.json"] = RepoFile(text=json.dumps(repo_record(spec), indent=2) + "\n")
    return plan


def _ensemble_extras(spec: RepoSpec) -> dict[str, Block]:
    """Core-model tensors the ensemble passes through that only trtspec_engine has: the `num_draft_tokens` input
    (k per request) and the `num_drafts` output (for the mean acceptance length)."""
    if spec.backend != "torch":
        return {name: Block("") for name in ("extra_inputs", "extra_input_map", "extra_outputs", "extra_output_map")}
    k, drafts = pbtxt_string("num_draft_tokens"), pbtxt_string("num_drafts")
    return {
        "extra_inputs": Block(f",\n  {{ name: {k} data_type: TYPE_INT32 dims: [ 1 ] optional: true }}"),
        "extra_input_map": Block(f"\n      input_map {{ key: {k} value: {k} }}"),
        "extra_outputs": Block(f",\n  {{ name: {drafts} data_type: TYPE_INT32 dims: [ 1 ] }}"),
        "extra_output_map": Block(f"\n      output_map {{ key: {drafts} value: {drafts} }}"),
    }


def _engine_parameters(spec: RepoSpec) -> EngineParams:
    return EngineParams(
        target=spec.models["target"], method=spec.method, draft=spec.models.get("draft"),
        medusa=spec.models.get("medusa"), max_k=spec.max_k, default_k=spec.default_k,
        lookahead=tuple(spec.lookahead) if spec.method == "lookahead" and spec.lookahead else None, device=spec.device, dtype=spec.dtype,
        max_input_len=spec.max_input_len, max_output_len=spec.max_output_len, max_queue=spec.engine_max_queue,
    )


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
        # The target is decoupled so the ensemble can stream; the BLS reads either kind (exec(decoupled=True)).
        plan |= model_files(name, "tensorrt_llm", {**queue, "model_name": name, "decoupled": role == "target",
                                                   "parameters": pbtxt_parameters(params)})
    bls = {"tensorrt_llm_model_name": "tensorrt_llm", "accumulate_tokens": False,
           "tensorrt_llm_draft_model_name": "tensorrt_llm_draft" if "draft" in roles else None,
           "tokenizer_dir": str(spec.tokenizer_dir)}
    plan |= model_files("tensorrt_llm_bls", "tensorrt_llm_bls", {
        "triton_max_batch_size": spec.triton_max_batch_size, "decoupled": False, "instance_count": 1,
        "parameters": pbtxt_parameters(bls)}, shared=CODEC)
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
        "exclude_input_in_output": True,  # completions only (the BLS asks for the same per request)
        "batch_scheduler_policy": "guaranteed_no_evict",
    }
    if engine.kv_cache_free_gpu_mem_fraction is None and engine.max_tokens_in_paged_kv_cache is None:
        # Two engines on one GPU: each takes a fraction of what is free after it loads.
        params["kv_cache_free_gpu_mem_fraction"] = 0.45 if len(spec.engines) > 1 else 0.9
    if speculative and info.triton_decoding_mode:
        params["decoding_mode"] = info.triton_decoding_mode
    if speculative and info.tree:  # medusa_choices / eagle_choices, in the C++ `{0}, {0, 0}` form
        params[f"{spec.method}_choices"] = tree_choices.to_triton(spec.choices or tree_choices.MC_SIM_7B_63)
    if speculative and spec.method == "lookahead" and spec.lookahead is not None:
        window, ngram, verification = spec.lookahead
        params |= {"lookahead_window_size": window, "lookahead_ngram_size": ngram,
                   "lookahead_verification_set_size": verification}
    return params


def repo_record(spec: RepoSpec) -> dict[str, Any]:
    """`trtspec-repo.json`: what `trtspec serve` needs to know about the repository (flavour, world size, models)."""
    models = ["preprocessing", "postprocessing", "ensemble", spec.core_model]
    if spec.backend == "tensorrtllm":
        models += ["tensorrt_llm_bls"] + (["tensorrt_llm_draft"] if resolve(spec.method).needs_draft_model
                                          and "draft" in spec.engines else [])
    return {"backend": spec.backend, "method": spec.method, "core_model": spec.core_model, "models": models,
            "world_size": spec.world_size, "max_k": spec.max_k, "templates": TEMPLATES_PINNED}

