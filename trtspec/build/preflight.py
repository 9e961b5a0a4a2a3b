"""Preflight: every check that can fail a build, run before anything executes. Pure (no torch, no writes).

`run_preflight(spec, dry_run=...)` resolves model paths, derives the values the plan needs (max_draft_len, tree
choices, lookahead envelope, per-engine KV-cache limits) and raises a ConfigError / IncompatibleModelsError /
ModelNotFoundError that names the field and the fix on the first problem. In dry-run, checks that need files which
do not exist here are recorded as `unchecked` instead of failing; real builds refuse missing paths.

Sources: shared/reference/trtllm-specdec.md sections 1.2-1.6 (formats), 2.2-2.4 (builder rules), 6 (pitfalls).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from trtspec import choices as tree_choices
from trtspec.build.checkpoint import (
    MedusaHeads,
    check_heads_match,
    check_special_ids,
    check_weights,
    medusa_heads,
)
from trtspec.build.memory import EngineMemory, estimate_kv
from trtspec.config import COUNT_MAX, BuildSpec, EagleSpec
from trtspec.contracts.engine import EagleTree
from trtspec.errors import ConfigError, IncompatibleModelsError, ModelNotFoundError
from trtspec.methods import METHOD_SECTIONS, SECTION_MODELS, MethodInfo, lookahead_max_draft_len, resolve
from trtspec.methods.eagle import EAGLE3
from trtspec.methods.lookahead import LOOKAHEAD, LookaheadSpec
from trtspec.methods.medusa import MEDUSA, MedusaSpec
from trtspec.methods.redrafter import RedrafterSpec
from trtspec.models import check_pair, embedded_path, read_config, resolve_model
from trtspec.targets import SUPPORTED_TARGETS, TrtllmTarget, load_target, nearest_target, require_feature

T = TypeVar("T")

# HF architecture -> TensorRT-LLM convert_checkpoint.py family (examples/<family> or examples/models/core/<family>).
CONVERT_FAMILIES = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "llama", "MixtralForCausalLM": "llama",
                    "Qwen2ForCausalLM": "qwen", "QWenForCausalLM": "qwen"}
# Architectures trtspec's own HF -> TensorRT-LLM converter handles (used where TensorRT-LLM is not importable).
OWN_CONVERTER_ARCHS = ("LlamaForCausalLM", "MistralForCausalLM")
# Config sections that belong to one method each (the section is named after its method).
DEFAULT_K = 4
EAGLE_MAX_DRAFT_LEN, EAGLE_MAX_BATCH = 256, 512  # builder asserts (trtllm-specdec.md 2.3)


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # "ok" | "unchecked" | "skipped"
    detail: str = ""


@dataclass(frozen=True)
class ModelRef:
    """One input checkpoint: as written in the config, resolved path, and its config.json when readable."""

    role: str
    spec: str
    path: str
    exists: bool
    config: dict[str, Any] | None = None

    @property
    def architecture(self) -> str | None:
        archs = (self.config or {}).get("architectures") or []
        return archs[0] if archs else None


@dataclass(frozen=True)
class Resolved:
    """Everything the planner needs beyond the spec: resolved inputs and derived values."""

    spec: BuildSpec
    method: MethodInfo
    models: dict[str, ModelRef]
    max_draft_len: int
    family: str
    choices: list[list[int]] | None = None
    medusa: MedusaHeads | None = None
    lookahead: tuple[int, int, int] | None = None
    kv: dict[str, EngineMemory] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    dry_run: bool = False

    @property
    def workflow(self) -> str | None:
        """pytorch | engine for a TensorRT-LLM build (BuildSpec.workflow_name); None for a torch bundle."""
        return self.spec.workflow_name() if self.spec.backend == "tensorrtllm" else None


def run_preflight(spec: BuildSpec, *, dry_run: bool = False, release: str | None = None) -> Resolved:
    """Check `spec` and derive the plan's inputs; raise on the first problem (see module docstring). `release`: the
    TensorRT-LLM release whose LLM API will run the PyTorch workflow's options when it is not the build target
    (`trtspec k8s`: Dynamo 1.6.1's 1.3.0rc29, which has LLM-API facts only); its facts decide the decoding type."""
    method = resolve(spec.method)
    checks: list[Check] = []
    _check_backend(spec, method)
    _check_sections(spec, method)
    _check_target(spec, method, checks, release)
    # the PyTorch workflow refers to checkpoints by their path where TensorRT-LLM runs and converts nothing: a host
    # without them renders the deployment, the checks that read the files pending (as a dry run's are)
    authoring = spec.backend == "tensorrtllm" and spec.workflow_name() == "pytorch"
    models = _resolve_models(spec, method, dry_run or authoring, checks)
    family = _check_architecture(spec, method, models, checks)
    if "draft" in models:
        _check_pair(spec, models["target"], models["draft"], checks)
    heads = _medusa(spec, models, checks) if spec.medusa else None
    max_draft_len, tree, lookahead = _draft_len(spec, heads, checks)
    if method.target_layers_key:
        max_draft_len = _check_target_layers(spec, method, models["target"], max_draft_len, checks)
    if max_draft_len > COUNT_MAX - spec.engine.max_seq_len:
        raise ConfigError("max_draft_len", max_draft_len, f"+ engine.max_seq_len {spec.engine.max_seq_len} exceeds "
                          f"the int32 range TensorRT-LLM counts tokens in", hint="use a smaller tree / lookahead / k")
    if tree is not None:
        _check_tree_vocab(spec, tree, heads, models, checks)
    _check_parallelism(spec, models, checks)
    _check_engine_flags(spec, method, max_draft_len, models, checks)
    kv = estimate_kv(spec, models, max_draft_len, heads, checks)
    return Resolved(spec=spec, method=method, models=models, max_draft_len=max_draft_len, family=family,
                    choices=tree, medusa=heads, lookahead=lookahead, kv=kv, checks=checks, dry_run=dry_run)


# --- method and inputs ---------------------------------------------------------------------------------------------


def _check_draft_runtime(spec: BuildSpec, method: MethodInfo) -> None:
    """`draft_runtime` other than torch: a torch bundle whose method runs a draft model, in float32 (ONNX Runtime runs
    it on the CPU; the engine configuration checks the device where it is served)."""
    runtime = spec.draft_runtime
    if runtime == "torch":
        return
    if spec.backend != "torch":
        raise ConfigError("draft_runtime", runtime, "chooses what runs the reference engine's draft model; backend "
                          f"{spec.backend} runs TensorRT-LLM's own draft engine", hint="set backend: torch, or drop "
                          "draft_runtime")
    if not method.needs_draft_model:
        raise ConfigError("draft_runtime", runtime, f"runs the draft model, and method {method.name} has none",
                          hint="use method: draft_target (or suffix_draft) with draft:, or drop draft_runtime")
    if spec.engine.dtype != "float32":
        raise ConfigError("draft_runtime", runtime, f"runs a float32 draft model, and engine.dtype is "
                          f"{spec.engine.dtype}", hint="set engine.dtype: float32, or drop draft_runtime")


def _check_backend(spec: BuildSpec, method: MethodInfo) -> None:
    _check_draft_runtime(spec, method)
    if spec.backend == "tensorrtllm" and method.trtllm_unsupported:
        raise ConfigError("method", method.name, f"cannot be built for TensorRT-LLM: {method.trtllm_unsupported}",
                          hint="use backend: torch (Triton's Python backend serves the reference engine, which runs it)")
    if spec.backend == "torch" and method.reference_form:  # the reference engine runs EAGLE-3 drafters (eagle3)
        if spec.eagle is not None and not spec.eagle.eagle3:
            raise ConfigError("eagle.eagle3", False, "the torch reference engine runs EAGLE-3 drafters only",
                              hint="set eagle.eagle3: true with an EAGLE-3 drafter (`trtspec train eagle`), or use "
                                   "backend: tensorrtllm for an EAGLE-1/2 drafter")
        return
    if spec.backend == "torch" and method.reference_unsupported:
        raise ConfigError("backend", "torch", f"method {method.name}: {method.reference_unsupported}",
                          hint="use backend: tensorrtllm with workflow: pytorch (TensorRT-LLM's LLM API serves it)")
    if spec.backend == "torch" and method.proposer is None and not method.baseline:
        from trtspec.methods import engine_methods

        raise ConfigError("method", method.name, "has no proposer in the torch reference engine",
                          hint=f"use backend: tensorrtllm, or one of: {', '.join(engine_methods())}")


def _check_target(spec: BuildSpec, method: MethodInfo, checks: list[Check], release: str | None = None) -> None:
    """The TensorRT-LLM target has every feature the method needs (EAGLE-3: its LLM API); else a ConfigError naming
    the target, the feature and the nearest target with it. The PyTorch workflow needs the target's LLM-API facts and
    a PyTorch decoding type for the method instead (`_check_pytorch_workflow`)."""
    if spec.backend != "tensorrtllm":
        return
    target = spec.trtllm.target()
    if spec.workflow_name() == "pytorch":
        _check_pytorch_workflow(spec, method, target, checks, release)
        return
    if method.engine_flow_unsupported:
        having = [v for v in SUPPORTED_TARGETS if load_target(v).llm_api.verified
                  and method.llmapi_decoding_type in load_target(v).llm_api.decoding_types]
        where = (f"TensorRT-LLM {target.version}'s default workflow is engine (it has no verified LLM-API facts)"
                 if not target.llm_api.verified else f"TensorRT-LLM {target.version}")
        hint = (f"set workflow: pytorch with trtllm.version: {nearest_target(target.version, having)} (the nearest "
                "target whose LLM API has it)" if having else method.llmapi_hint or "use backend: torch")
        raise ConfigError("workflow", "engine", f"method {method.name} on {where}: {method.engine_flow_unsupported}",
                          hint=hint)
    features = list(method.target_features)
    if spec.eagle is not None and spec.eagle.eagle3:
        features = ["eagle3_llmapi"]  # EAGLE-3 runs through the LLM API only: no engine-flow EAGLE
    for feature in features:
        require_feature(target, feature, needed_by=f"method {method.name}" + (" (eagle.eagle3)" if
                                                                               feature == "eagle3_llmapi" else ""))
    checks.append(Check("target", "ok", f"TensorRT-LLM {target.version} ({target.image})"
                        + (f" has {', '.join(features)}" if features else "")))


def _check_pytorch_workflow(spec: BuildSpec, method: MethodInfo, target: TrtllmTarget, checks: list[Check],
                            release: str | None = None) -> None:
    """`workflow: pytorch` needs a target whose LLM-API facts trtspec has and a PyTorch decoding type for the method
    there: else exit 2 naming `workflow` (the target, the nearest target with facts, or workflow: engine) or the
    method (LlmApiRefusal: the reason and the nearest method that has one)."""
    from trtspec.build.llm_api import decoding_type

    if not target.llm_api.verified:
        having = [v for v in SUPPORTED_TARGETS if load_target(v).llm_api.verified]
        near = nearest_target(target.version, having)
        raise ConfigError("workflow", "pytorch", f"TensorRT-LLM {target.version} has no verified LLM-API facts "
                          f"(trtspec writes only keys a release is known to read); nearest target with them: {near}",
                          hint=f"set trtllm.version: {near}, or workflow: engine for {target.version}'s trtllm-build "
                               "engines")
    eagle3 = spec.eagle is not None and spec.eagle.eagle3
    if release is not None and release != target.version:  # the options are that release's (trtspec k8s)
        from trtspec.targets.llm_api import llm_api_facts

        kind = decoding_type(method.name, llm_api_facts(release), eagle3=eagle3)  # LlmApiRefusal when it has none
        checks.append(Check("target", "ok", f"TensorRT-LLM {release} (LLM API), PyTorch workflow: "
                            + (f"decoding_type {kind}" if kind else "no speculative_config")))
        return
    kind = decoding_type(method.name, target.llm_api, eagle3=eagle3)  # LlmApiRefusal (exit 2) when it has none
    checks.append(Check("target", "ok", f"TensorRT-LLM {target.version} ({target.image}), PyTorch workflow: "
                        + (f"decoding_type {kind}" if kind else "no speculative_config")))


def _check_sections(spec: BuildSpec, method: MethodInfo) -> None:
    for section in METHOD_SECTIONS:
        if getattr(spec, section) is not None and section != method.section:
            raise ConfigError(section, "set", f"belongs to method {section}, but method is {method.name}",
                              hint=f"remove the `{section}:` section or set method: {section}")
    if method.needs_draft_model and not spec.draft:
        raise ConfigError("draft", None, f"method {method.name} needs a draft model",
                          hint="add `draft: <embedded name or HF dir>` (e.g. tiny-draft)")
    if spec.draft and not method.needs_draft_model:
        raise ConfigError("draft", spec.draft, f"is only used by draft-model methods, not {method.name}",
                          hint="remove `draft:` or set method: draft_target")
    for section, key in SECTION_MODELS.items():
        if method.section == section and getattr(spec, section) is None:
            raise ConfigError(section, None, f"method {section} needs a `{section}:` section",
                              hint=f"add `{section}: {{{key}: <dir>}}`")


def _resolve_models(spec: BuildSpec, method: MethodInfo, dry_run: bool, checks: list[Check]) -> dict[str, ModelRef]:
    wanted = {"target": spec.target, "draft": spec.draft}
    extra = {section: (options := getattr(spec, section)) and getattr(options, key)
             for section, key in SECTION_MODELS.items()}
    models: dict[str, ModelRef] = {}
    for role, value in wanted.items():
        if not value:
            continue
        if dry_run and role == "target" and method.target_layers_key and (weightless := _weightless(value)):
            # a stand-in or a checkpoint whose weights live where TensorRT-LLM runs: its config.json declares the
            # layers the method drafts with, so that check runs; the weights' checks are pending
            checks.append(Check(f"{role} checkpoint", "unchecked", f"{weightless} has config.json but no weights here"))
            models[role] = ModelRef(role, value, str(weightless), exists=False,
                                    config=read_config(weightless, field=role))
            continue
        try:
            path = resolve_model(value, field=role)
        except ModelNotFoundError as exc:
            if not dry_run or Path(str(value)).expanduser().exists():
                raise
            checks.append(Check(f"{role} checkpoint", "unchecked", f"{value} does not exist here ({exc.message})"))
            models[role] = ModelRef(role, value, value, exists=False)
            continue
        config = read_config(path, field=role)
        if not isinstance(config, dict):
            raise ModelNotFoundError(f"{role}={value!r}: {path / 'config.json'} is not a JSON object",
                                     hint="re-export the checkpoint")
        files = check_weights(path, field=role)
        models[role] = ModelRef(role, value, str(path), exists=True, config=config)
        checks.append(Check(f"{role} checkpoint", "ok", f"{path} ({len(files)} weight file(s) complete)"))
    for role, value in extra.items():
        if not value:
            continue
        embedded = embedded_path(value)
        path = embedded if "/" not in value and embedded.is_dir() else Path(value).expanduser()
        if not path.is_dir():
            if not dry_run:
                raise ModelNotFoundError(f"{role}={value!r}: no directory at {path}",
                                         hint=f"point {role} at a local directory")
            checks.append(Check(f"{role} directory", "unchecked", f"{value} does not exist here"))
            models[role] = ModelRef(role, value, value, exists=False)
            continue
        check_weights(path, field=f"{role} directory")
        models[role] = ModelRef(role, value, str(path.resolve()), exists=True)
    return models


def _weightless(value: str) -> Path | None:
    """A local directory with a config.json and no weight file (not an embedded name), else None."""
    from trtspec.models import EMBEDDED, WEIGHT_FILES

    if value in EMBEDDED:
        return None
    path = Path(value).expanduser()
    try:
        if path.is_dir() and (path / "config.json").is_file() and not any((path / w).exists() for w in WEIGHT_FILES):
            return path
    except OSError:
        return None
    return None


def _check_target_layers(spec: BuildSpec, method: MethodInfo, target: ModelRef, k: int, checks: list[Check]) -> int:
    """A method that drafts with the target's own layers (MTP: config.json num_nextn_predict_layers): the target
    declares more than 0 and at least the k asked for; returns k (default: every layer the target declares). Exit 2
    naming the field, the value and the fix; unchecked where the target's config.json is not readable here."""
    key = method.target_layers_key
    section = getattr(spec, method.section) if method.section else None
    field_name = f"{method.section}.{key}" if getattr(section, key, None) else "max_draft_len"
    if target.config is None:
        checks.append(Check(f"{method.name} layers", "unchecked", f"target config.json not readable here; "
                            f"{key} {k or 1} assumed"))
        return k or 1
    declared = target.config.get(key)
    if isinstance(declared, bool) or not isinstance(declared, int) or declared <= 0:
        raise ConfigError("target", spec.target, f"declares no {method.name.upper()} layers (config.json {key}="
                          f"{declared!r}, method {method.name} needs > 0)",
                          hint=f"use a checkpoint that ships them (DeepSeek-V3/R1: {key}: 1), or method eagle with "
                               "eagle.eagle3: true and a drafter")
    if k > declared:
        raise ConfigError(field_name, k, f"is above the target's config.json {key} {declared}",
                          hint=f"set {field_name} <= {declared} (or drop it: the target's {declared})")
    checks.append(Check(f"{method.name} layers", "ok", f"target declares {key} {declared}; {k or declared} draft"))
    return k or declared


def _check_architecture(spec: BuildSpec, method: MethodInfo, models: dict[str, ModelRef], checks: list[Check]) -> str:
    target = models["target"]
    arch = target.architecture
    if arch is None:
        checks.append(Check("architecture", "unchecked", "target config.json not readable here; assuming Llama"))
        return "llama"
    engine_flow = spec.backend == "tensorrtllm" and spec.workflow_name() == "engine"  # PyTorch: HF checkpoints as is
    if engine_flow and method.engine_architectures and arch not in method.engine_architectures:
        raise ConfigError("target", spec.target, f"is a {arch}; TensorRT-LLM's {method.name} engine flow supports "
                          f"only {', '.join(method.engine_architectures)}",
                          hint="pick a target of a supported architecture, or another method (e.g. draft_target)")
    for role in ("target", "draft"):
        ref = models.get(role)
        if engine_flow and ref and ref.architecture and ref.architecture not in CONVERT_FAMILIES:
            raise ConfigError(role, ref.spec, f"is a {ref.architecture}; trtspec plans conversion only for "
                              f"{', '.join(sorted(CONVERT_FAMILIES))}",
                              hint="convert it yourself with TensorRT-LLM and build with trtllm-build")
    checks.append(Check("architecture", "ok", f"{arch} supports {method.name}"))
    return CONVERT_FAMILIES.get(arch, "llama")


def _check_pair(spec: BuildSpec, target: ModelRef, draft: ModelRef, checks: list[Check]) -> None:
    if not (target.exists and draft.exists):
        checks.append(Check("tokenizer/vocab", "unchecked", "draft or target not available here"))
        return
    check_pair(Path(target.path), Path(draft.path))
    vocab = (target.config or {}).get("vocab_size", 0)
    tp_target, tp_draft = spec.engine.tp_size, spec.engine.draft_tp_size or spec.engine.tp_size
    width_target, width_draft = _padded(vocab, tp_target), _padded(vocab, tp_draft)
    if width_target != width_draft:
        raise IncompatibleModelsError(
            f"padded logits width differs: target (tp_size={tp_target}) {width_target}, draft "
            f"(draft_tp_size={tp_draft}) {width_draft} for vocab_size {vocab}",
            hint="use the same TP size for both engines, or a vocab divisible by both TP sizes")
    target_ids = check_special_ids(Path(target.path), Path(draft.path), target.spec, draft.spec)
    checks.append(Check("tokenizer/vocab", "ok", f"vocab {vocab}, logits width {width_target}, "
                        f"special ids {target_ids}"))


def _padded(vocab: int, tp: int) -> int:
    """TensorRT-LLM pads the lm_head rows to a multiple of the TP size."""
    return -(-vocab // tp) * tp


# --- speculation shape -----------------------------------------------------------------------------------------


def _medusa(spec: BuildSpec, models: dict[str, ModelRef], checks: list[Check]) -> MedusaHeads | None:
    _section(spec.medusa, MEDUSA.section, spec.method)
    ref = models[MEDUSA.section]
    if not ref.exists:
        return None
    heads = medusa_heads(Path(ref.path))
    target = models["target"]
    if target.config:
        check_heads_match(heads, target.config, spec.target)
    if spec.medusa.num_heads and spec.medusa.num_heads > heads.num_heads:
        raise ConfigError("medusa.num_heads", spec.medusa.num_heads, f"but {ref.path} holds {heads.num_heads} heads",
                          hint=f"set medusa.num_heads <= {heads.num_heads} or drop it")
    if spec.medusa.num_layers and spec.medusa.num_layers != heads.num_layers:
        raise ConfigError("medusa.num_layers", spec.medusa.num_layers, f"but the heads have {heads.num_layers} layers",
                          hint="drop medusa.num_layers (it is read from the heads)")
    engine = spec.engine
    if spec.backend == "tensorrtllm" and heads.layout == "modelopt" and (
            engine.tp_size > 1 or engine.pp_size > 1 or engine.quantization != "none"):
        raise ConfigError("medusa.heads", str(ref.path), "ModelOpt-layout heads are merged by trtspec's single-rank, "
                          "unquantized converter (TensorRT-LLM's medusa/convert_checkpoint.py reads FasterDecoding heads)",
                          hint="use tp_size/pp_size 1 and no quantization, or FasterDecoding-layout heads")
    checks.append(Check("medusa heads", "ok", f"{heads.layout} layout, {heads.num_heads} heads x {heads.num_layers} "
                        f"layers, hidden {heads.hidden_size}, vocab {heads.vocab_size}"))
    return heads


def _tree(value: Any, depth: int, field_name: str) -> list[list[int]]:
    """Parsed choices, or mc_sim_7b_63 pruned to `depth` levels when none are given."""
    if value is None:
        return [p for p in tree_choices.MC_SIM_7B_63 if len(p) <= depth]
    return tree_choices.parse(value, field=field_name)


# (max_draft_len, tree choices, lookahead envelope)
DraftShape = tuple[int, list[list[int]] | None, tuple[int, int, int] | None]


def _draft_len(spec: BuildSpec, heads: MedusaHeads | None, checks: list[Check]) -> DraftShape:
    """(max_draft_len, tree choices, lookahead envelope) following each method's rule (trtllm-specdec.md 2.2-2.4)."""
    return DRAFT_LEN_RULES[resolve(spec.method).draft_len_rule](spec, spec.max_draft_len, heads, checks)


def _rule_none(spec: BuildSpec, given: int | None, heads: MedusaHeads | None, checks: list[Check]) -> DraftShape:
    if given:
        raise ConfigError("max_draft_len", given, "a baseline (method: none) engine has no draft tokens",
                          hint="drop max_draft_len or pick a speculative method")
    return 0, None, None


def _rule_external(spec: BuildSpec, given: int | None, heads: MedusaHeads | None, checks: list[Check]) -> DraftShape:
    if given == 0:
        raise ConfigError("max_draft_len", 0, f"method {spec.method} needs at least one draft token",
                          hint="set max_draft_len (k) to the largest k you will sweep, e.g. 4")
    if given is None:
        checks.append(Check("max_draft_len", "ok", f"defaulted to k={DEFAULT_K}"))
    return given or DEFAULT_K, None, None


def _rule_medusa(spec: BuildSpec, given: int | None, heads: MedusaHeads | None, checks: list[Check]) -> DraftShape:
    medusa = spec.method_options(MedusaSpec)
    num_heads = medusa.num_heads or (heads.num_heads if heads else None)
    if num_heads is None:
        num_heads = 4
        checks.append(Check("medusa tree", "unchecked", "heads not available here; assuming 4 heads"))
    tree = tree_choices.validate(_tree(medusa.choices, num_heads, "medusa.choices"),
                                 max_depth=num_heads, max_nodes=given, field="medusa.choices")
    checks.append(Check("medusa tree", "ok", f"{len(tree)} nodes, depth {tree_choices.depth(tree)} <= {num_heads} heads"))
    return given or len(tree), tree, None


def _rule_eagle(spec: BuildSpec, given: int | None, heads: MedusaHeads | None, checks: list[Check]) -> DraftShape:
    eagle = spec.method_options(EagleSpec)
    if spec.backend != "torch":
        _refuse_untranslatable_eagle_tree(eagle)
    if eagle.eagle3 and spec.backend == "torch":
        # the reference engine: max_draft_len is the node budget k; a static tree (eagle.choices) or, without one,
        # the dynamic EAGLE-2 tree (its shape: EagleTree.from_section)
        if eagle.choices is not None and eagle.dynamic_shape():
            name, value = next(iter(eagle.dynamic_shape().items()))
            raise ConfigError(name, value, "sets a dynamic tree but eagle.choices sets a static one",
                              hint=f"drop {name} (static tree) or eagle.choices (dynamic tree)")
        tree = None if eagle.choices is None else tree_choices.validate(
            _tree(eagle.choices, tree_choices.MAX_DEPTH, "eagle.choices"), max_depth=tree_choices.MAX_DEPTH,
            max_nodes=given, field="eagle.choices")
        EagleTree.from_section(eagle, tree)  # the engine configuration's own checks
        k = given or (len(tree) if tree else eagle.num_layers)
        checks.append(Check(EAGLE3.name, "ok", f"max_draft_len {k} = draft tree nodes (reference engine, "
                            + ("static tree)" if tree else "dynamic tree)")))
        return k, tree, None
    if eagle.eagle3:
        return _llm_api_eagle_tree(eagle, given, checks)
    tree = tree_choices.validate(_tree(eagle.choices, eagle.num_layers, "eagle.choices"),
                                 max_depth=eagle.num_layers, max_nodes=given, field="eagle.choices")
    max_draft_len = given or len(tree)
    if max_draft_len > EAGLE_MAX_DRAFT_LEN:
        raise ConfigError("max_draft_len", max_draft_len, f"EAGLE engines allow at most {EAGLE_MAX_DRAFT_LEN}",
                          hint="use a smaller tree")
    if spec.engine.max_batch_size > EAGLE_MAX_BATCH:
        raise ConfigError("engine.max_batch_size", spec.engine.max_batch_size,
                          f"EAGLE engines allow at most {EAGLE_MAX_BATCH}", hint=f"set max_batch_size <= {EAGLE_MAX_BATCH}")
    if spec.engine.pp_size != 1:
        raise ConfigError("engine.pp_size", spec.engine.pp_size, "EAGLE does not support pipeline parallelism",
                          hint="use pp_size: 1 (tensor parallelism is fine)")
    return max_draft_len, tree, None


def _refuse_untranslatable_eagle_tree(eagle: EagleSpec) -> None:
    """TensorRT-LLM targets: what trtspec renders is what each release reads (the targets' `eagle_tree` facts). The
    Triton tensorrtllm backend builds EagleConfig(eagle_choices) only: no dynamic tree for EAGLE-1/2 engines. EAGLE-3
    goes through the LLM API, which takes both trees (`_llm_api_eagle_tree`)."""
    if eagle.dynamic_shape() and not eagle.eagle3:
        name, value = next(iter(eagle.dynamic_shape().items()))
        raise ConfigError(name, value, "sets the reference engine's dynamic tree; TensorRT-LLM's EAGLE-1/2 engines do "
                          "not take it (the Triton backend reads only eagle_choices)",
                          hint=f"use backend: torch or eagle.eagle3: true (the LLM API's dynamic tree), or drop "
                               f"{' / '.join(eagle.dynamic_shape())}")


def _llm_api_eagle_tree(eagle: EagleSpec, given: int | None, checks: list[Check]) -> DraftShape:
    """EAGLE-3 through the LLM API (PyTorch backend). k (max_draft_len in the build config) counts draft-tree nodes,
    as the reference engine's does, so one config means one tree on both: a static tree (eagle.choices: a preset, a
    list or `trtspec tune tree --eagle --out` output) is eagle_choices, k = len(choices) (the release sets
    max_total_draft_tokens = len(choices) and max_draft_len = its depth); a dynamic tree (eagle.topk + eagle.depth)
    is use_dynamic_tree + dynamic_tree_max_topK = topk, max_draft_len = depth, max_total_draft_tokens = k in
    [depth, topk x depth] (default topk x depth, the release's); neither is the chain of k draft layers."""
    if eagle.choices is not None and eagle.dynamic_shape():
        name, value = next(iter(eagle.dynamic_shape().items()))
        raise ConfigError(name, value, "sets a dynamic tree but eagle.choices sets a static one (eagle_choices and "
                          "use_dynamic_tree exclude each other)", hint=f"drop {name} (static tree) or eagle.choices "
                                                                       "(dynamic tree)")
    if eagle.choices is not None:
        tree = tree_choices.validate(_tree(eagle.choices, tree_choices.MAX_DEPTH, "eagle.choices"),
                                     max_depth=tree_choices.MAX_DEPTH, max_nodes=given, field="eagle.choices")
        if given is not None and given != len(tree):
            raise ConfigError("max_draft_len", given, f"!= the static tree's {len(tree)} nodes: eagle_choices sets "
                              "max_total_draft_tokens = len(choices) in the LLM API",
                              hint=f"drop max_draft_len (trtspec writes {len(tree)}) or set it to {len(tree)}")
        checks.append(Check(EAGLE3.name, "ok", f"static tree: {len(tree)} nodes, depth {tree_choices.depth(tree)} "
                            "(LLM API eagle_choices)"))
        return len(tree), tree, None
    if eagle.dynamic_shape():
        if eagle.topk is None or eagle.depth is None:
            missing, example = ("eagle.depth", 6) if eagle.depth is None else ("eagle.topk", 4)
            raise ConfigError(missing, None, "the LLM API's dynamic tree needs both eagle.topk "
                              "(dynamic_tree_max_topK) and eagle.depth (max_draft_len)", hint=f"add {missing}: "
                              f"{example}, or drop eagle.topk / eagle.depth for a chain")
        low, high = eagle.depth, eagle.topk * eagle.depth
        k = given or high
        if not low <= k <= high:
            raise ConfigError("max_draft_len", k, f"the dynamic tree's node budget (max_total_draft_tokens) must lie "
                              f"in [eagle.depth {low}, eagle.topk x eagle.depth {high}]",
                              hint=f"set max_draft_len between {low} and {high}, or change eagle.topk / eagle.depth")
        checks.append(Check(EAGLE3.name, "ok", f"dynamic tree: top-{eagle.topk} x depth {eagle.depth}, {k} nodes "
                            "(LLM API use_dynamic_tree)"))
        return k, None, None
    # the chain: max_draft_len counts draft layers (chain steps), one node each
    checks.append(Check(EAGLE3.name, "ok", f"max_draft_len {given or eagle.num_layers} = draft layers (LLM API)"))
    return given or eagle.num_layers, None, None


def _rule_mtp(spec: BuildSpec, given: int | None, heads: MedusaHeads | None, checks: list[Check]) -> DraftShape:
    """MTP: max_draft_len = num_nextn_predict_layers (TensorRT-LLM sets one from the other); 0 = the target's."""
    layers = spec.mtp.num_nextn_predict_layers if spec.mtp is not None else None
    if given == 0:
        raise ConfigError("max_draft_len", 0, "method mtp drafts at least one token per MTP layer",
                          hint="drop max_draft_len (the target's num_nextn_predict_layers) or set it >= 1")
    if given is not None and layers is not None and given != layers:
        raise ConfigError("max_draft_len", given, f"!= mtp.num_nextn_predict_layers {layers}: MTP drafts one token "
                          "per layer", hint="give one of them")
    return layers or given or 0, None, None


def _rule_lookahead(spec: BuildSpec, given: int | None, heads: MedusaHeads | None, checks: list[Check]) -> DraftShape:
    wng = spec.method_options(LookaheadSpec, default=True).as_tuple()
    derived = lookahead_max_draft_len(*wng)
    if given is not None and given != derived:
        raise ConfigError("max_draft_len", given, f"lookahead (W, N, G)={list(wng)} needs exactly {derived} "
                          "(TensorRT-LLM: (N==1 ? 0 : N-2) + (W-1+G)*(N-1))",
                          hint=f"drop max_draft_len (trtspec derives {derived}) or set it to {derived}")
    if derived == 0:
        raise ConfigError(LOOKAHEAD.section, list(wng), "gives max_draft_len 0 (plain decoding)",
                          hint="use N >= 2, e.g. lookahead: [4, 4, 4]")
    checks.append(Check(LOOKAHEAD.section, "ok", f"(W, N, G)={list(wng)} -> max_draft_len {derived}"))
    return derived, None, wng


def _rule_redrafter(spec: BuildSpec, given: int | None, heads: MedusaHeads | None, checks: list[Check]) -> DraftShape:
    redrafter = spec.method_options(RedrafterSpec)
    derived = redrafter.num_beams * redrafter.draft_len_per_beam
    if given is not None and given != derived:
        raise ConfigError("max_draft_len", given, f"ReDrafter fixes it to num_beams x draft_len_per_beam = {derived}",
                          hint="drop max_draft_len; change redrafter.num_beams / draft_len_per_beam instead")
    return derived, None, None


# each method's rule, by its home's draft_len_rule (suffix: external, torch backend only, the k cap)
DRAFT_LEN_RULES = {"plain": _rule_none, "external": _rule_external, "heads": _rule_medusa, "layers": _rule_eagle,
                   "window": _rule_lookahead, "beams": _rule_redrafter, "own_layers": _rule_mtp}


# --- engine flags ---------------------------------------------------------------------------------------------------


def _check_engine_flags(spec: BuildSpec, method: MethodInfo, max_draft_len: int, models: dict[str, ModelRef],
                        checks: list[Check]) -> None:
    engine = spec.engine
    speculative = method.trtllm_build_mode is not None
    if method.needs_paged_context_fmha and not engine.use_paged_context_fmha:
        raise ConfigError("engine.use_paged_context_fmha", False, f"{method.name} needs paged context FMHA: without "
                          "it TensorRT-LLM silently turns KV-cache reuse off", hint="set use_paged_context_fmha: true")
    if speculative and engine.max_beam_width != 1:
        raise ConfigError("engine.max_beam_width", engine.max_beam_width,
                          "speculative decoding supports beam width 1 only", hint="set max_beam_width: 1")
    if speculative and engine.logits_dtype != "float32":
        raise ConfigError("engine.logits_dtype", engine.logits_dtype, "speculative engines must return float32 logits "
                          "(fp16 logits break draft/target logits comparison)", hint="set logits_dtype: float32")
    if spec.backend == "tensorrtllm" and engine.quantization != "none" and engine.dtype == "float32":
        raise ConfigError("engine.quantization", engine.quantization, "quantized engines need dtype float16/bfloat16",
                          hint="set engine.dtype: float16")
    for role in ("target", "draft"):
        cfg = models[role].config if role in models else None
        limit = (cfg or {}).get("max_position_embeddings")
        if limit and engine.max_seq_len + max_draft_len > limit:
            raise ConfigError("engine.max_seq_len", engine.max_seq_len,
                              f"+ max_draft_len {max_draft_len} exceeds the {role}'s max_position_embeddings {limit}",
                              hint=f"set engine.max_seq_len <= {limit - max_draft_len}")
    checks.append(Check("engine flags", "ok", f"beam 1, logits {engine.logits_dtype}, paged context FMHA "
                        f"{'on' if engine.use_paged_context_fmha else 'off'}"))


def _check_tree_vocab(spec: BuildSpec, tree: list[list[int]], heads: MedusaHeads | None,
                      models: dict[str, ModelRef], checks: list[Check]) -> None:
    """Tree ranks index a head's top-k tokens: each must be below the vocabulary size (heads, else target)."""
    field_name = f"{spec.method}.choices"
    vocab = heads.vocab_size if heads is not None else (models["target"].config or {}).get("vocab_size")
    if not isinstance(vocab, int) or isinstance(vocab, bool) or vocab < 1:
        checks.append(Check("tree ranks", "unchecked", "vocabulary size not known here"))
        return
    tree_choices.validate(tree, max_rank=vocab, field=field_name)
    checks.append(Check("tree ranks", "ok", f"largest rank {max(max(p) for p in tree)} < vocab {vocab}"))


def _check_parallelism(spec: BuildSpec, models: dict[str, ModelRef], checks: list[Check]) -> None:
    """TensorRT-LLM splits attention heads across TP ranks and layers across PP ranks: tp must divide the attention
    heads, the KV heads must split or replicate evenly (kv % tp == 0, or tp % kv == 0), and pp must not exceed the
    layers. Checked per engine against its checkpoint's config.json (unchecked where it is not readable)."""
    engine = spec.engine
    seen = []
    for role, tp in (("target", engine.tp_size), ("draft", engine.draft_tp_size or engine.tp_size)):
        config = models[role].config if role in models else None
        if config is None:
            continue
        field_name = "engine.draft_tp_size" if role == "draft" and engine.draft_tp_size else "engine.tp_size"
        heads, layers = config.get("num_attention_heads"), config.get("num_hidden_layers")
        kv = config.get("num_key_value_heads") or heads
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in (heads, kv, layers)):
            checks.append(Check(f"{role} parallelism", "unchecked", "config.json lacks head/layer counts"))
            continue
        if heads % tp:
            divisors = [d for d in range(1, heads + 1) if heads % d == 0]
            raise ConfigError(field_name, tp, f"does not divide the {role}'s num_attention_heads={heads}",
                              hint=f"use one of: {', '.join(map(str, divisors))}")
        if kv % tp and tp % kv:
            raise ConfigError(field_name, tp, f"neither divides nor is a multiple of the {role}'s "
                              f"num_key_value_heads={kv}", hint=f"use a divisor of {kv} or a multiple of it")
        if engine.pp_size > layers:
            raise ConfigError("engine.pp_size", engine.pp_size, f"exceeds the {role}'s num_hidden_layers={layers}",
                              hint=f"use pp_size <= {layers}")
        seen.append(f"{role}: tp {tp} x pp {engine.pp_size} over {heads} heads / {kv} KV heads / {layers} layers")
    if seen:
        checks.append(Check("parallelism", "ok", "; ".join(seen)))


def _section(value: T | None, name: str, method: str) -> T:
    """The config section a method needs (the spec's validator normally refuses it missing earlier)."""
    if value is None:
        raise ConfigError(name, None, f"method {method} needs a `{name}:` section", hint=f"add `{name}:` to the config")
    return value
