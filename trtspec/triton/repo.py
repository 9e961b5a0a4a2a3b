"""RepoSpec: what a Triton deployment of one build output looks like, and the checks that refuse bad ones.

`RepoSpec.from_build(build_dir, backend)` reads the build output (`trtspec.triton.build_output`) and refuses
inconsistent deployments with the reason: no manifest, a target engine not built for draft tokens, k above the
engine's max_draft_len, lookahead (W, N, G) that does not match the engine, a Medusa/EAGLE tree the engine cannot
hold, draft and target vocabularies that differ, a method or decoding mode the TensorRT-LLM target lacks.
`RepoSpec.trtllm_version` is the target release (the build's `config.trtllm.version`, else
trtspec.targets.DEFAULT_TARGET); `RepoSpec.form` which of NVIDIA's repositories is rendered: the inflight-batcher
model set, or the PyTorch workflow's llmapi model (trtspec.triton.llmapi; the default for a PyTorch-workflow build).
`plan_repository(spec)` turns a RepoSpec into the repository's files. Every
declaration comes from that target's facts (`trtspec.triton.contract`), and so do the parameter keys, which are
checked against them. Pure Python: no torch, no tritonclient (except `render.validate_model_config`, imported lazily).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from trtspec import choices as tree_choices
from trtspec import text_codec
from trtspec.contracts import observability, series
from trtspec.contracts.baseline import BASELINE_FILE, Baseline
from trtspec.contracts.engine import EagleTree, EngineConfig, Lookahead, MedusaTree
from trtspec.contracts.repository import REPO_RECORD, RepoRecord
from trtspec.contracts.suffix import SuffixConfig
from trtspec.errors import ConfigError, UsageError
from trtspec.methods import BASELINE, METHODS, DerivedTable, derived, lookahead_max_draft_len, resolve
from trtspec.targets import DEFAULT_TARGET, TrtllmTarget, load_target, require_feature
from trtspec.triton import contract, llmapi
from trtspec.triton.build_output import EngineInfo, read_build_output
from trtspec.triton.contract import ModelDecls
from trtspec.triton.render import Block, RepoFile, RepoPlan, model_files, pbtxt_parameters

BACKENDS = ("tensorrtllm", "torch")
ENGINE_BACKEND = {"tensorrtllm": "tensorrtllm", "torch": "python"}  # Triton backend of the engine models
SERIES_MODULE = "trtspec_series.py"  # trtspec.contracts.series, next to the tensorrtllm flavour's BLS model.py
CODEC = {"text_codec.py": Path(text_codec.__file__)}  # what the tokenizing Python models import
ENGINE_SHIM = {"model.py": "engine_shim.py"}  # the torch flavour's engine models: 1/model.py -> EngineModel
LOGITS_DATATYPE = "TYPE_FP32"  # the `${logits_datatype}` of NVIDIA's templates (draft_logits, *_logits outputs)
# What each method needs from the TensorRT-LLM target (trtspec.targets.FEATURES), on the tensorrtllm flavour: its
# home's target_features and repository_features, for the methods with an engine-flow form (derived at each read).
METHOD_FEATURES: DerivedTable[str, tuple[str, ...]] = derived(lambda: {
    m.name: m.target_features + m.repository_features for m in METHODS.values() if m.trtllm_build_mode is not None})


@dataclass(frozen=True)
class RepoSpec:
    """Everything the templates need; built from a build output (`from_build`) or directly in code."""

    backend: str
    # torch: what the tensorrt_llm model serves; tensorrtllm: the engines' method, k, tree and lookahead
    engine: EngineConfig
    tokenizer_dir: Path
    triton_max_batch_size: int = 8
    max_queue_delay_microseconds: int = 0
    max_queue_size: int = 0
    preprocessing_instances: int = 1
    postprocessing_instances: int = 1
    # tensorrtllm flavour
    engines: dict[str, EngineInfo] = field(default_factory=dict)
    build_lookahead: Lookahead | None = None  # what the engine was built for
    enable_kv_cache_reuse: bool = True
    trtllm_version: str = DEFAULT_TARGET  # the TensorRT-LLM release whose Triton contract is rendered
    build_trtllm_version: str | None = None  # what the build planned for (None: the manifest does not say)
    # NVIDIA's decoupled_mode, for tensorrt_llm, tensorrt_llm_draft and tensorrt_llm_bls: streaming needs it; unary
    # gRPC infer and HTTP generate need it off. Off by default, as in tensorrtllm_backend's quick start.
    decoupled: bool = False
    # The sweep/calibration that chose k (`trtspec deploy --baseline`): stored in the repository as BASELINE_FILE,
    # the reference of `trtspec monitor` and of the rendered drift alert.
    baseline: Baseline | None = None
    # which repository: "inflight" (preprocessing, tensorrt_llm, ..., ensemble) or "llmapi" (NVIDIA's llmapi model)
    form: str = "inflight"
    llm_api: dict[str, Any] | None = None  # tensorrtllm flavour, llmapi form: the build's LLM-API options
    parallel: tuple[int, int] = (1, 1)  # llmapi form: the LLM API's tensor and pipeline parallel sizes

    @property
    def method(self) -> str:
        return self.engine.method

    @property
    def has_draft_model(self) -> bool:
        """Whether the repository serves `tensorrt_llm_draft` (the method drafts with a draft model that was built)."""
        if not resolve(self.method).needs_draft_model:
            return False
        return self.engine.draft is not None if self.backend == "torch" else "draft" in self.engines

    @property
    def model_names(self) -> list[str]:
        if self.form == "llmapi":
            return [llmapi.facts_for(self.trtllm_version).name]
        return ["preprocessing", "postprocessing", "ensemble", "tensorrt_llm", "tensorrt_llm_bls",
                *(["tensorrt_llm_draft"] if self.has_draft_model else [])]

    @property
    def target(self) -> TrtllmTarget:
        """The facts of `trtllm_version` (ConfigError names the supported targets when it is not one)."""
        return load_target(self.trtllm_version)

    @property
    def world_size(self) -> int:
        """MPI ranks the TensorRT-LLM models need (1 for the torch flavour and the llmapi model, whose LLM API starts
        its own ranks)."""
        if self.form == "llmapi":
            return 1
        return max((e.world_size for e in self.engines.values()), default=1)

    @classmethod
    def from_build(cls, build_dir: Path, backend: str, *, engine: Mapping[str, object] | None = None,
                   **overrides: Any) -> RepoSpec:
        """The RepoSpec of a build output with `engine` (EngineConfig parameters, e.g. {"default_k": "2"}) applied over
        the build's engine configuration and `overrides` over the repository's own fields; checked."""
        if backend not in BACKENDS:
            raise ConfigError("backend", backend, f"is not one of {', '.join(BACKENDS)}", hint="--backend torch")
        runtime = (engine or {}).get("draft_runtime", "torch")
        if backend != "torch" and runtime != "torch":  # before the build's engine takes it (its checks would speak)
            raise ConfigError("draft_runtime", runtime, "chooses what runs the reference engine's draft model; "
                              "NVIDIA's tensorrtllm backend runs its own draft engine", hint="deploy with --backend "
                              "torch, or leave --draft-runtime out")
        build = read_build_output(build_dir)
        if build.backend != backend:
            raise UsageError(f"{build.root} was built for backend {build.backend!r}, not {backend!r}",
                             hint=f"deploy it with --backend {build.backend}, or build for {backend}")
        resolve(build.method)
        if backend == "torch" or build.workflow == "pytorch":  # the llmapi model: the LLM API loads it where it runs
            tokenizer = overrides.get("tokenizer_dir") or build.engine.target
        else:
            from trtspec.models import resolve_model

            tokenizer = overrides.get("tokenizer_dir") or resolve_model(build.engine.target, field="target")
        spec = cls(backend=backend, engine=build.engine.with_parameters(engine or {}), tokenizer_dir=Path(tokenizer),
                   triton_max_batch_size=build.max_batch_size, engines=build.engines,
                   build_lookahead=build.engine.lookahead, enable_kv_cache_reuse=build.enable_kv_cache_reuse,
                   trtllm_version=build.trtllm_version or DEFAULT_TARGET, build_trtllm_version=build.trtllm_version,
                   form="llmapi" if build.workflow == "pytorch" else "inflight", llm_api=build.llm_api,
                   parallel=(build.tp_size, build.pp_size))
        spec = replace(spec, **{k: v for k, v in overrides.items() if v is not None})
        spec.check()
        return spec

    def check(self) -> None:
        """Refuse a spec whose engines cannot serve its method (the reason names the field and the fix)."""
        info = resolve(self.method)
        facts = self.target  # refuses an unsupported trtllm_version on both flavours
        engine = self.engine
        if self.form not in llmapi.FORMS:
            raise ConfigError("form", self.form, f"is not one of {', '.join(llmapi.FORMS)}", hint="--form llmapi")
        if self.form == "llmapi":
            llmapi.facts_for(self.trtllm_version)
        if self.form != "llmapi" and not self.tokenizer_dir.is_dir():
            raise UsageError(f"tokenizer_dir {self.tokenizer_dir} does not exist",
                             hint="the deployment tokenizes with the target's Hugging Face tokenizer")
        if engine.prompt_log is not None and self.backend != "torch":
            raise ConfigError("log_prompts", engine.prompt_log.directory, "needs the torch flavour (the reference "
                              "engine logs prompts; NVIDIA's C++ backend does not)", hint="deploy with --backend "
                              "torch, or leave --log-prompts out")
        dynamic = engine.eagle_tree.dynamic_values() if engine.eagle_tree is not None else {}
        speculative = (self.llm_api or {}).get("speculative_config") or {}
        written = {"eagle_topk": speculative.get("dynamic_tree_max_topK"), "eagle_depth": speculative.get(
            "max_draft_len")} if self.form == "llmapi" and speculative.get("use_dynamic_tree") else {}
        if self.backend != "torch" and dynamic and any(written.get(k) != v for k, v in dynamic.items()):
            name, value = next((k, v) for k, v in dynamic.items() if written.get(k) != v)
            if self.form == "llmapi":  # the build's LLM-API options (model.yaml) hold the tree the release runs
                raise ConfigError(name, value, "differs from the build's LLM-API tree (model.yaml: "
                                  f"use_dynamic_tree {bool(written)}, dynamic_tree_max_topK "
                                  f"{written.get('eagle_topk')}, max_draft_len {written.get('eagle_depth')})",
                                  hint="rebuild with eagle.topk / eagle.depth, or drop it")
            raise ConfigError(name, value, "shapes the reference engine's dynamic tree; NVIDIA's tensorrtllm backend "
                              "reads only eagle_choices (no dynamic tree)", hint="deploy with --backend torch, or drop "
                              "it")
        if self.backend == "torch":
            if info.proposer is None and not info.baseline:
                raise UsageError(f"method {self.method!r} has no reference-engine proposer",
                                 hint="deploy it with --backend tensorrtllm")
            if info.needs_draft_model and engine.draft is None:
                raise UsageError(f"method {self.method} needs a draft model; the bundle has none",
                                 hint="rebuild the bundle with a draft model")
            if info.needs_eagle_drafter and engine.eagle is None:
                raise UsageError(f"method {self.method} needs an EAGLE-3 drafter; the bundle has none",
                                 hint="rebuild with method: eagle, eagle: {model: DIR, eagle3: true}")
            return
        if self.form == "llmapi":  # the LLM API loads the HF checkpoints itself: no engines to check
            if self.llm_api is None:
                raise UsageError("the llmapi repository needs the build's LLM-API options, and this build wrote none",
                                 hint="build for a target with verified LLM-API facts (trtllm.version: 1.2.1), or "
                                      "deploy with --form inflight")
            return
        self._check_features(facts)
        if "target" not in self.engines:
            raise UsageError("the build lists no target engine", hint="rebuild with `trtspec build CONFIG`")
        target = self.engines["target"]
        if info.external_drafts:  # draft_target, ngram: the caller's draft tokens
            if target.max_draft_len < 1 or target.speculative_decoding_mode not in (None, "draft_tokens_external"):
                raise UsageError(
                    f"target engine {target.path} was not built for draft tokens (speculative_decoding_mode="
                    f"{target.speculative_decoding_mode!r}, max_draft_len={target.max_draft_len})",
                    hint="rebuild the target with --speculative_decoding_mode draft_tokens_external --max_draft_len K",
                )
            if engine.default_k > target.max_draft_len:
                raise ConfigError("k", engine.default_k, f"exceeds the target engine's max_draft_len="
                                  f"{target.max_draft_len}", hint="lower --k or rebuild with a larger max_draft_len")
        if info.needs_draft_model:
            draft = self.engines.get("draft")
            if draft is None:
                raise UsageError(f"method {self.method} needs a draft engine; the build lists none",
                                 hint="add a draft model to the build config and rebuild")
            if None not in (draft.vocab_size, target.vocab_size) and draft.vocab_size != target.vocab_size:
                raise UsageError(f"draft engine vocab_size {draft.vocab_size} != target's {target.vocab_size}",
                                 hint="draft and target must share one tokenizer and vocab size")
        if info.jacobi:
            self._check_lookahead(target)
        choices = self.choices
        if info.tree and choices is not None:
            tree_choices.validate(choices, max_depth=target.num_medusa_heads, max_nodes=target.max_draft_len or None,
                                  field=f"{self.method}_choices")

    @property
    def choices(self) -> list[list[int]] | None:
        """The static tree of a tree method (Medusa, EAGLE), as lists of ranks; None when it has none."""
        part = resolve(self.method).engine_part
        tree = getattr(self.engine, part) if part is not None else None
        if not isinstance(tree, (MedusaTree, EagleTree)):  # a method without a static tree part (suffix: options)
            return None
        return [list(p) for p in tree.choices] if tree.choices is not None else None

    def _check_features(self, facts: TrtllmTarget) -> None:
        """Refuse a method, or a decoding mode, that the TensorRT-LLM target lacks (naming the nearest that has it)."""
        for feature in METHOD_FEATURES.get(self.method, ()):
            require_feature(facts, feature)
        mode = resolve(self.method).triton_decoding_mode
        if mode and mode not in facts.decoding_modes:
            raise ConfigError("decoding_mode", mode, f"is not parsed by TensorRT-LLM {facts.version}'s backend",
                              hint=f"it parses: {', '.join(facts.decoding_modes)}")

    def _check_lookahead(self, target: EngineInfo) -> None:
        if self.engine.lookahead is None:
            raise UsageError("method lookahead needs the server's (W, N, G)",
                             hint="the build records them (derived.lookahead); or pass --lookahead W,N,G")
        window, ngram, verification = self.engine.lookahead.as_tuple()
        need = lookahead_max_draft_len(window, ngram, verification)
        built = f" (built for {list(self.build_lookahead.as_tuple())})" if self.build_lookahead else ""
        if target.max_draft_len != need:
            raise UsageError(f"lookahead {[window, ngram, verification]} needs max_draft_len={need} but the target engine has "
                             f"{target.max_draft_len}{built}",
                             hint="deploy with the engine's (W, N, G), or rebuild with lookahead: "
                                  f"[{window}, {ngram}, {verification}] (max_draft_len {need})")


# ---------------------------------------------------------------------------------------------------------------------
# Repository plan


def plan_repository(spec: RepoSpec) -> RepoPlan:
    """All files of the repository for `spec` (rendered configs are already validated as ModelConfig).

    The inflight form: both flavours render the same six models with the target's declarations: preprocessing,
    postprocessing, ensemble, tensorrt_llm_bls (Python), and tensorrt_llm (+ tensorrt_llm_draft with a draft model):
    NVIDIA's C++ backend on TensorRT-LLM engines, or, in the torch flavour, the reference engine behind the Python
    backend. The llmapi form: NVIDIA's llmapi model `tensorrt_llm` (trtspec.triton.llmapi).
    """
    if spec.form == "llmapi":
        return _with_records(spec, llmapi.plan(spec, engine_parameters(spec)["tensorrt_llm"]))
    target, dtypes = spec.target, {"logits_datatype": LOGITS_DATATYPE}
    tokenizer = {"tokenizer_dir": str(spec.tokenizer_dir)}
    batch = {"triton_max_batch_size": spec.triton_max_batch_size}
    models = {name: contract.model_decls(target, name, dtypes) for name in ("preprocessing", "postprocessing")}
    plan: RepoPlan = {}
    plan |= _model(target, "preprocessing", models["preprocessing"], {**tokenizer, "add_special_tokens": True},
                   {**batch, "instance_count": spec.preprocessing_instances}, shared=CODEC)
    plan |= _model(target, "postprocessing", models["postprocessing"], {**tokenizer, "skip_special_tokens": True},
                   {**batch, "instance_count": spec.postprocessing_instances}, shared=CODEC)
    models["tensorrt_llm"] = contract.model_decls(target, "tensorrt_llm", dtypes)
    if spec.backend == "torch":
        plan |= _torch_engine_models(spec, contract.engine_decls(target, dtypes))
    else:
        plan |= _trtllm_models(spec, models["tensorrt_llm"])
    bls = {"tensorrt_llm_model_name": "tensorrt_llm",
           "tensorrt_llm_draft_model_name": "tensorrt_llm_draft" if spec.has_draft_model else None}
    plan |= _model(target, "tensorrt_llm_bls", contract.model_decls(target, "tensorrt_llm_bls", dtypes), bls,
                   {**batch, "decoupled": spec.decoupled, "instance_count": 1})
    if spec.backend == "tensorrtllm":  # the C++ backend publishes no acceptance series: the BLS does (SERIES_MODULE)
        plan[f"tensorrt_llm_bls/1/{SERIES_MODULE}"] = RepoFile(copy_from=Path(series.__file__))
    ensemble = contract.ensemble(target, models, dtypes=dtypes)
    plan |= model_files("ensemble", "ensemble", {**batch, **_blocks(ensemble.decls),
                                                 "steps": Block(contract.steps_block(ensemble.steps))})
    return _with_records(spec, plan)


def _with_records(spec: RepoSpec, plan: RepoPlan) -> RepoPlan:
    """`plan` plus the files every repository holds: the baseline, the observability files, the repository record."""
    if spec.baseline is not None:
        plan[BASELINE_FILE] = RepoFile(text=spec.baseline.to_json())
    plan |= {rel: RepoFile(text=text) for rel, text in observability.plan(spec.baseline).items()}
    plan[REPO_RECORD] = RepoFile(text=repo_record(spec).to_json())
    return plan


def _blocks(decls: ModelDecls) -> dict[str, Block]:
    return {key: Block(text) for key, text in contract.decls_block(decls).items()}


def _model(target: TrtllmTarget, name: str, decls: ModelDecls, params: dict[str, object],
           values: dict[str, object], *, template: str | None = None,
           shared: dict[str, str] | None = None) -> RepoPlan:
    """One model rendered from its template, with the target's declarations and parameter keys the target reads."""
    contract.check_parameters(target, name, [k for k, v in params.items() if v is not None])
    return model_files(name, template or name, {**values, **_blocks(decls), "parameters": pbtxt_parameters(params)},
                       shared=shared)


def _engine_values(spec: RepoSpec, name: str) -> dict[str, object]:
    """The tensorrt_llm template's values other than declarations and parameters (both flavours)."""
    return {"model_name": name, "backend": ENGINE_BACKEND[spec.backend], "decoupled": spec.decoupled,
            "triton_max_batch_size": spec.triton_max_batch_size,
            "max_queue_delay_microseconds": spec.max_queue_delay_microseconds, "max_queue_size": spec.max_queue_size}


def engine_parameters(spec: RepoSpec) -> dict[str, EngineConfig]:
    """The torch flavour's engine models and their configurations: `tensorrt_llm` runs the repository's engine (and
    verifies a caller's draft_input_ids); `tensorrt_llm_draft`, when there is a draft model, runs the draft alone with
    plain decoding (as its target, in torch: draft_runtime chooses what runs `tensorrt_llm`'s draft proposer)."""
    engine = spec.engine
    # suffix decoding: every option written out, so config.pbtxt says them all
    if resolve(engine.method).cross_request_cache and engine.suffix is None:
        engine = replace(engine, suffix=SuffixConfig())
    models = {"tensorrt_llm": engine}
    if spec.has_draft_model:
        assert engine.draft is not None
        # plain decoding: no speculation to schedule, and no draft model of its own to run in ONNX Runtime
        models["tensorrt_llm_draft"] = replace(engine, target=engine.draft, draft=None, medusa=None, eagle=None,
                                               method=BASELINE, default_k=0, eagle_tree=None, medusa_tree=None,
                                               lookahead=None, ngram=None, suffix=None, prompt_log=None,
                                               schedule=None, draft_runtime="torch")
    return models


def _torch_engine_models(spec: RepoSpec, decls: ModelDecls) -> RepoPlan:
    """The reference engine behind NVIDIA's tensorrt_llm tensors (+ EXTENSIONS). Its parameters are its EngineConfig's,
    the Python model's own keys (not the C++ backend's), so they are not checked against the target's."""
    plan: RepoPlan = {}
    for name, params in engine_parameters(spec).items():
        plan |= model_files(name, "tensorrt_llm", {**_engine_values(spec, name), **_blocks(decls),
                                                   "parameters": pbtxt_parameters(params.to_parameters())},
                            shared=ENGINE_SHIM)
    return plan


def _trtllm_models(spec: RepoSpec, core: ModelDecls) -> RepoPlan:
    plan: RepoPlan = {}
    for role in ["target"] + (["draft"] if spec.has_draft_model else []):
        name = "tensorrt_llm" if role == "target" else "tensorrt_llm_draft"
        params = _trtllm_parameters(spec, spec.engines[role], speculative=role == "target")
        plan |= _model(spec.target, name, core, params, _engine_values(spec, name), template="tensorrt_llm")
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
        "batch_scheduler_policy": "guaranteed_no_evict",
    }
    if engine.kv_cache_free_gpu_mem_fraction is None and engine.max_tokens_in_paged_kv_cache is None:
        # Two engines on one GPU: each takes a fraction of what is free after it loads.
        params["kv_cache_free_gpu_mem_fraction"] = 0.45 if len(spec.engines) > 1 else 0.9
    if speculative and info.triton_decoding_mode:
        params["decoding_mode"] = info.triton_decoding_mode
    if speculative and info.tree:  # medusa_choices / eagle_choices, in the C++ `{0}, {0, 0}` form
        params[f"{spec.method}_choices"] = tree_choices.to_triton(spec.choices or tree_choices.MC_SIM_7B_63)
    if speculative and info.jacobi and spec.engine.lookahead is not None \
            and spec.target.has("server_lookahead_params"):
        window, ngram, verification = spec.engine.lookahead.as_tuple()
        params |= {"lookahead_window_size": window, "lookahead_ngram_size": ngram,
                   "lookahead_verification_set_size": verification}
    return params


def repo_record(spec: RepoSpec) -> RepoRecord:
    """`trtspec-repo.json`: what `trtspec serve` and the operations commands need to know about the repository."""
    target = spec.target
    templates = (llmapi.source_line(llmapi.facts_for(spec.trtllm_version)) if spec.form == "llmapi"
                 else contract.templates_source(target))
    return RepoRecord(backend=spec.backend, method=spec.method, models=tuple(spec.model_names),
                      decoupled=spec.decoupled, world_size=spec.world_size, max_k=spec.engine.max_k,
                      trtllm_version=target.version, image=target.image, templates=templates,
                      baseline=BASELINE_FILE if spec.baseline is not None else None, engine=spec.engine,
                      observability={"prometheus_rules": observability.RULES_FILE,
                                     "grafana_dashboard": observability.DASHBOARD_FILE})
