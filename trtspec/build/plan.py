"""The build planner: (BuildSpec, preflight result) -> ordered steps. PURE: no torch, no file-system access.

Each step is a command line (argv list) or a file to write/copy, with an id, a stage (`convert`, `engines`, `files`),
its inputs and its outputs (outputs relative to the output directory; commands run with it as the working directory,
so the printed commands work verbatim inside a TensorRT-LLM container). Per-method `trtllm-build` flags follow
shared/reference/trtllm-specdec.md section 2.3.

Every TensorRT-LLM artefact is written for the config's target (`trtllm.version`, trtspec.targets): example script
paths come from the target's `examples` facts, and the LLM-API options (`trtllm-serve --extra_llm_api_options`) from
its `llm_api` facts through build/llm_api.py. Targets whose LLM-API facts are not verified (0.18.0, 0.19.0), and
methods without a PyTorch decoding type on the target, get no LLM-API file, only a note that says why; for the others
every emitted key is checked against the facts before the file is planned.

Conversion steps carry two command lines: TensorRT-LLM's `convert_checkpoint.py` (`tool="tensorrt_llm"`), and, for
Llama-family single-rank unquantized checkpoints, trtspec's own converter (`fallback`) that runs anywhere.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import asdict, dataclass, field
from typing import Any

from trtspec import choices as tree_choices
from trtspec.build.llm_api import (
    LLM_API_FILE,
    LlmApiRefusal,
    Speculation,
    decoding_type,
    header_lines,
    llm_api_options,
    llm_api_yaml,
    serve_argv,
    speculation_notes,
)
from trtspec.build.memory import LLM_API
from trtspec.build.preflight import OWN_CONVERTER_ARCHS, Resolved
from trtspec.config import NgramSpec
from trtspec.contracts.engine import CHECKPOINTS, EagleTree, EngineConfig, method_fields
from trtspec.errors import ConfigError
from trtspec.methods.eagle import EAGLE
from trtspec.methods.medusa import MEDUSA
from trtspec.methods.redrafter import REDRAFTER
from trtspec.targets import SUPPORTED_TARGETS, TrtllmTarget, load_target, nearest_target
from trtspec.targets.llm_api import diff_serve_argv

TRTLLM = "tensorrt_llm"
OWN_CONVERTER = ("python", "-m", "trtspec.build.convert")
BUNDLE_FILE = "trtspec-bundle.json"
BUNDLE_FORMAT = "trtspec-bundle/2"  # /1: the settings as loose keys (still read by build/bundle.py)
EAGLE3_NOTE = ("EAGLE-3 runs only through the LLM API (PyTorch backend): no checkpoint conversion or engines; the "
               "engine flow builds EAGLE-1/2")


@dataclass(frozen=True)
class Step:
    """One unit of work. `kind`: command (argv) | write (content -> outputs[0]) | copy (inputs[i] -> outputs[i])."""

    id: str
    stage: str
    kind: str
    title: str
    argv: tuple[str, ...] = ()
    tool: str | None = None
    fallback: tuple[str, ...] = ()
    content: str | None = None
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()

    def command(self, *, use_fallback: bool = False) -> str:
        argv = self.fallback if use_fallback else self.argv
        return shlex.join(argv) if argv else shlex.join([self.kind, *self.inputs, self.outputs[0]])

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data = {k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}
        if data["content"] is not None:
            data["content"] = f"<{len(data['content'])} chars>"
        return data


@dataclass(frozen=True)
class BuildPlan:
    backend: str
    method: str
    steps: tuple[Step, ...]
    engines: dict[str, str] = field(default_factory=dict)
    checkpoints: dict[str, str] = field(default_factory=dict)
    llm_api: dict[str, Any] | None = None
    notes: tuple[str, ...] = ()
    target: str | None = None  # TensorRT-LLM release the artefacts are written for (None: torch bundle)
    container: str | None = None  # the NGC image that ships it
    workflow: str | None = None  # pytorch | engine (trtspec.targets.WORKFLOWS); None: torch bundle
    # PyTorch workflow: each serving form's command (argv, run in the output directory, inside `container`)
    serve: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def select(self, only: str | None) -> list[Step]:
        """Steps of one stage (`convert` or `engines`; file steps go with either), or all."""
        if only is None:
            return list(self.steps)
        return [s for s in self.steps if s.stage in (only, "files")]

    def render(self) -> str:
        """Human-readable plan: one block per step with its command."""
        workflow = f" workflow={self.workflow}" if self.workflow else ""
        lines = [f"# trtspec build plan: backend={self.backend}{workflow} method={self.method}"]
        if self.target:
            lines.append(f"# target: TensorRT-LLM {self.target}, container {self.container}")
        for i, step in enumerate(self.steps, 1):
            lines.append(f"[{i}] {step.id} ({step.stage}) {step.title}")
            lines.append(f"    $ {step.command()}")
            if step.fallback:
                lines.append(f"    $ {step.command(use_fallback=True)}   # without TensorRT-LLM")
        for form, argv in self.serve.items():
            lines.append(f"# serve with {form} (in the output directory, inside {self.container}):")
            lines.append(f"    $ {shlex.join(argv)}")
        if self.workflow == "pytorch":  # the options file itself: what every serving form reads
            for step in self.steps:
                if step.id == "write-llm-api" and step.content is not None:
                    lines.append(f"# {step.outputs[0]}:")
                    lines += [f"    {line}" for line in step.content.splitlines()]
        lines += [f"# note: {n}" for n in self.notes]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "method": self.method, "steps": [s.to_dict() for s in self.steps],
                "engines": self.engines, "checkpoints": self.checkpoints, "llm_api": self.llm_api,
                "notes": list(self.notes), "target": self.target, "container": self.container,
                "workflow": self.workflow, "serve": {form: list(argv) for form, argv in self.serve.items()}}


def plan_build(resolved: Resolved) -> BuildPlan:
    """The ordered steps for `resolved` (see module docstring)."""
    if resolved.spec.backend == "torch":
        return _plan_torch(resolved)
    if resolved.workflow == "pytorch":
        return _plan_pytorch(resolved)
    return _plan_tensorrtllm(resolved)


# --- TensorRT-LLM engine flow ---------------------------------------------------------------------------------------


def _plan_tensorrtllm(r: Resolved) -> BuildPlan:
    method, target = r.method, r.spec.trtllm.target()
    steps: list[Step] = []
    roles: list[str] = []
    if not _eagle3(r):
        # 1. checkpoint conversion, one per model (ReDrafter: base first, then drafter merge)
        converters = {MEDUSA.name: _convert_medusa, EAGLE.name: _convert_eagle, REDRAFTER.name: _convert_redrafter}
        steps += converters.get(method.name, _convert_plain)(r)
        roles = ["target"] + (["draft"] if "draft" in r.models else [])
        if "draft" in r.models:
            steps.append(_convert_base(r, "draft", "checkpoints/draft"))
        # 2. one trtllm-build per engine
        steps += [_engine_step(r, role) for role in roles]
    # 3. LLM-API form where the target's LLM API is verified and runs the method
    llm_api, note = _llm_api(r, target)
    notes = [EAGLE3_NOTE] if _eagle3(r) else []
    if llm_api is None and r.spec.llm_api is not None and r.spec.llm_api.options():
        notes.append(_controls_note(r, f"no LLM-API file for TensorRT-LLM {target.version} and {r.method.name}; "
                                       "trtllm-build engines take no schedule or gate: the PyTorch backend of 1.2.1 "
                                       "reads them"))
    if llm_api is not None:
        steps.append(Step("write-llm-api", "files", "write", "LLM-API options for trtllm-serve / trtllm-bench",
                          content=_llm_api_yaml(llm_api, r, target), outputs=(LLM_API_FILE,)))
    notes.append(note)
    return BuildPlan("tensorrtllm", method.name, tuple(steps),
                     engines={role: f"engines/{role}" for role in roles},
                     checkpoints={role: f"checkpoints/{role}" for role in roles}, llm_api=llm_api, notes=tuple(notes),
                     target=target.version, container=target.image, workflow="engine")


# --- TensorRT-LLM PyTorch workflow -----------------------------------------------------------------------------------


def _plan_pytorch(r: Resolved) -> BuildPlan:
    """The PyTorch workflow (the LLM API on the PyTorch backend): no checkpoint conversion and no trtllm-build. The
    release loads the HF checkpoints where they are (target; the draft model or the EAGLE-3 drafter through
    `speculative_config`), so the plan references them by path; its one file is the `extra_llm_api_options` YAML that
    trtllm-serve reads and that Triton's llmapi model (model.yaml) and Dynamo's TensorRT-LLM workers carry as is."""
    target, spec = r.spec.trtllm.target(), r.spec
    llm_api, _ = _llm_api(r, target)
    if llm_api is None:  # preflight refused the workflow / method already; this is a bug, not bad input
        raise AssertionError(f"PyTorch workflow without LLM-API options for {r.method.name} on {target.version}")
    model = r.models["target"].path
    serve = serve_argv(model, tp_size=spec.engine.tp_size, pp_size=spec.engine.pp_size)
    if problems := diff_serve_argv(serve, target.version):
        raise AssertionError("; ".join(problems))  # serve_argv writes only options the release declares
    roles = [role for role in ("target", "draft", EAGLE.section) if role in r.models]
    step = Step("write-llm-api", "files", "write", "LLM-API options for trtllm-serve, Triton's llmapi model and "
                "Dynamo's TensorRT-LLM workers", content=llm_api_yaml(llm_api, header_lines(r.method.name, target,
                                                                                            model, serve)),
                outputs=(LLM_API_FILE,))
    checkpoints = ", ".join(f"{role} {r.models[role].path}" for role in roles)
    notes = (*tree_notes(llm_api, target.llm_api), *speculation_notes(_speculation(r), target.llm_api),
             f"PyTorch workflow: no checkpoint conversion and no trtllm-build; TensorRT-LLM {target.version} loads the "
             f"HF checkpoints where they are ({checkpoints}): mount them at these paths in {target.image}",
             "Triton: `trtspec deploy --backend tensorrtllm --build OUT --out DIR` renders NVIDIA's llmapi model with "
             "these options in its model.yaml; Dynamo: `trtspec k8s CONFIG --out DIR` writes them as the workers' "
             "engine configs")
    return BuildPlan("tensorrtllm", r.method.name, (step,), checkpoints={role: r.models[role].path for role in roles},
                     llm_api=llm_api, notes=notes, target=target.version, container=target.image, workflow="pytorch",
                     serve={"trtllm-serve": tuple(serve)})


def tree_notes(options: dict[str, Any], facts: Any) -> tuple[str, ...]:
    """What a plan says about an EAGLE-3 tree in the options: the release's tree options unpinned at its tag, or
    eagle_choices deprecated there (the facts' own words)."""
    speculative = options.get("speculative_config") or {}
    kind = speculative.get("decoding_type")
    if not (speculative.get("eagle_choices") or speculative.get("use_dynamic_tree")) or kind not in facts.decoding_types:
        return ()
    cls = facts.raw["classes"][facts.decoding_types[kind].class_name]
    notes = []
    if cls.get("tree", {}).get("pinned") is False:
        notes.append(f"EAGLE-3 tree: TensorRT-LLM {facts.version}'s tree options are not pinned to its tag (stored "
                     "versions disagree: pytorch-workflow.json tree); every value is written out, so each of them reads "
                     "this tree alike; check the file inside the container: trtspec doctor --llm-api FILE")
    status = {f["name"]: f.get("status") for f in cls["fields"]}
    if speculative.get("eagle_choices") and status.get("eagle_choices") == "deprecated":
        notes.append(f"EAGLE-3 tree: eagle_choices is deprecated in TensorRT-LLM {facts.version} (removed in 1.4); "
                     "the dynamic tree (eagle.topk + eagle.depth) is its successor")
    return tuple(notes)


def _eagle3(r: Resolved) -> bool:
    """A build of EAGLE-1/2's method with an EAGLE-3 drafter (eagle.eagle3: true): the reference engine runs it as
    the method's reference_form (eagle3), the LLM API as EAGLE-3."""
    return r.method.reference_form is not None and r.spec.eagle is not None and r.spec.eagle.eagle3


def _examples(r: Resolved, name: str | None) -> str:
    """The target's examples/<dir> for `name` (a model family, a method's `examples_dir`, quantization), under the
    configured examples checkout: examples/llama up to 0.19.0, examples/models/core/llama in 1.2.1 (target facts)."""
    rel = r.spec.trtllm.target().examples["dirs"][name]
    return f"{r.spec.trtllm.examples_dir.rstrip('/')}/{rel.removeprefix('examples/')}"


def _common_convert_args(r: Resolved, tp: int) -> list[str]:
    engine = r.spec.engine
    args = ["--dtype", engine.dtype, "--tp_size", str(tp), "--pp_size", str(engine.pp_size)]
    if engine.quantization in ("int8_wo", "int4_wo"):
        args += ["--use_weight_only", "--weight_only_precision", engine.quantization.removesuffix("_wo")]
    if r.spec.kv_cache.dtype == "int8":
        args += ["--int8_kv_cache"]
    return args


def _needs_quantize_py(r: Resolved) -> bool:
    return r.spec.engine.quantization == "fp8" or r.spec.kv_cache.dtype == "fp8"


def _own_converter_ok(r: Resolved, role: str, tp: int) -> bool:
    arch = r.models[role].architecture
    return (tp == 1 and r.spec.engine.pp_size == 1 and r.spec.engine.quantization == "none"
            and r.spec.kv_cache.dtype == "auto" and (arch is None or arch in OWN_CONVERTER_ARCHS))


def _convert_base(r: Resolved, role: str, out: str) -> Step:
    """HF -> TensorRT-LLM checkpoint for a plain decoder (target, draft, or the ReDrafter base)."""
    model = r.models[role].path
    tp = (r.spec.engine.draft_tp_size or r.spec.engine.tp_size) if role == "draft" else r.spec.engine.tp_size
    family = r.family
    if _needs_quantize_py(r):
        qformat = "fp8" if r.spec.engine.quantization == "fp8" else "full_prec"
        argv = ["python3", f"{_examples(r, 'quantization')}/quantize.py", "--model_dir", model,
                "--output_dir", out, "--dtype", r.spec.engine.dtype, "--qformat", qformat, "--kv_cache_dtype",
                r.spec.kv_cache.dtype if r.spec.kv_cache.dtype != "auto" else "fp8", "--calib_size", "512",
                "--tp_size", str(tp), "--pp_size", str(r.spec.engine.pp_size)]
    else:
        argv = ["python3", f"{_examples(r, family)}/convert_checkpoint.py", "--model_dir", model, "--output_dir", out,
                *_common_convert_args(r, tp)]
    fallback = ()
    if _own_converter_ok(r, role, tp):
        fallback = (*OWN_CONVERTER, "--model_dir", model, "--output_dir", out, "--dtype", r.spec.engine.dtype)
    return Step(f"convert-{out.rsplit('/', 1)[-1]}", "convert", "command", f"convert {role} to a TensorRT-LLM checkpoint",
                argv=tuple(argv), tool=TRTLLM, fallback=fallback, inputs=(model,), outputs=(out,))


def _convert_plain(r: Resolved) -> list[Step]:
    return [_convert_base(r, "target", "checkpoints/target")]


def _convert_medusa(r: Resolved) -> list[Step]:
    spec, model, heads_dir = r.spec, r.models["target"].path, r.models[MEDUSA.section].path
    num_heads = spec.medusa.num_heads or (r.medusa.num_heads if r.medusa else tree_choices.depth(r.choices or [[0]]))
    num_layers = spec.medusa.num_layers or (r.medusa.num_layers if r.medusa else 1)
    out = "checkpoints/target"
    own = (*OWN_CONVERTER, "--model_dir", model, "--output_dir", out, "--dtype", spec.engine.dtype,
           "--medusa_dir", heads_dir, "--num_medusa_heads", str(num_heads), "--max_draft_len", str(r.max_draft_len))
    if r.medusa is not None and r.medusa.layout == "modelopt":
        # TensorRT-LLM's medusa/convert_checkpoint.py reads FasterDecoding heads only: merge with trtspec's converter.
        return [Step("convert-target", "convert", "command", "merge target + ModelOpt Medusa heads into a "
                     "MedusaForCausalLM checkpoint", argv=own, inputs=(model, heads_dir), outputs=(out,))]
    argv = ["python3", f"{_examples(r, MEDUSA.examples_dir)}/convert_checkpoint.py", "--model_dir", model,
            "--medusa_model_dir", heads_dir, "--output_dir", out, *_common_convert_args(r, spec.engine.tp_size),
            "--num_medusa_heads", str(num_heads), "--num_medusa_layers", str(num_layers),
            "--max_medusa_token_len", str(r.max_draft_len)]
    if r.family == "qwen":
        argv += ["--model_type", "qwen2"]
    fallback = own if _own_converter_ok(r, "target", spec.engine.tp_size) else ()
    return [Step("convert-target", "convert", "command", "convert target + Medusa heads (MedusaForCausalLM)",
                 argv=tuple(argv), tool=TRTLLM, fallback=fallback, inputs=(model, heads_dir), outputs=(out,))]


def _convert_eagle(r: Resolved) -> list[Step]:
    spec, model, eagle_dir = r.spec, r.models["target"].path, r.models[EAGLE.section].path
    argv = ("python3", f"{_examples(r, EAGLE.examples_dir)}/convert_checkpoint.py", "--model_dir", model,
            "--eagle_model_dir", eagle_dir, "--output_dir", "checkpoints/target",
            *_common_convert_args(r, spec.engine.tp_size), "--max_draft_len", str(r.max_draft_len),
            "--num_eagle_layers", str(spec.eagle.num_layers),
            "--max_non_leaves_per_layer", str(spec.eagle.max_non_leaves_per_layer))
    return [Step("convert-target", "convert", "command", "convert target + EAGLE drafter (EagleForCausalLM)",
                 argv=argv, tool=TRTLLM, inputs=(model, eagle_dir), outputs=("checkpoints/target",))]


def _convert_redrafter(r: Resolved) -> list[Step]:
    spec, drafter = r.spec, r.models[REDRAFTER.section].path
    base = _convert_base(r, "target", "checkpoints/target-base")
    argv = ["python3", f"{_examples(r, REDRAFTER.examples_dir)}/convert_checkpoint.py",
            "--base_model_checkpoint_dir", "checkpoints/target-base", "--drafter_model_dir", drafter,
            "--output_dir", "checkpoints/target", "--dtype", spec.engine.dtype, "--tp_size", str(spec.engine.tp_size),
            "--redrafter_num_beams", str(spec.redrafter.num_beams),
            "--redrafter_draft_len_per_beam", str(spec.redrafter.draft_len_per_beam)]
    if not spec.redrafter.greedy:
        argv.append("--redrafter_no_greedy_search")
    merge = Step("convert-target", "convert", "command", "add the ReDrafter drafter (ReDrafterForLLaMALM/QWenLM)",
                 argv=tuple(argv), tool=TRTLLM, inputs=("checkpoints/target-base", drafter),
                 outputs=("checkpoints/target",))
    return [base, merge]


def _engine_step(r: Resolved, role: str) -> Step:
    """`trtllm-build` with the per-method flags of trtllm-specdec.md 2.3 (the draft engine is plain)."""
    engine, method = r.spec.engine, r.method
    argv = ["trtllm-build", "--checkpoint_dir", f"checkpoints/{role}", "--output_dir", f"engines/{role}",
            "--max_batch_size", str(engine.max_batch_size), "--max_input_len", str(engine.max_input_len),
            "--max_seq_len", str(engine.max_seq_len), "--max_num_tokens", str(engine.max_num_tokens),
            "--max_beam_width", str(engine.max_beam_width), "--logits_dtype", engine.logits_dtype,
            "--kv_cache_type", "paged", "--use_paged_context_fmha", "enable" if engine.use_paged_context_fmha else "disable"]
    external = method.external_drafts
    if role == "target" and method.trtllm_build_mode is not None:
        argv += ["--speculative_decoding_mode", method.trtllm_build_mode]
        # Medusa and ReDrafter take max_draft_len from the checkpoint (the builder derives it, 2.2).
        if method.build_max_draft_len:
            argv += ["--max_draft_len", str(r.max_draft_len)]
    gather = engine.gather_generation_logits
    if gather is None:
        gather = external or role == "draft"  # run.py hangs without it on DTM builds (TRTLLM #2798)
    if gather:
        argv.append("--gather_generation_logits")
    if engine.workers > 1:
        argv += ["--workers", str(engine.workers)]
    return Step(f"engine-{role}", "engines", "command", f"build the {role} engine", argv=tuple(argv), tool=TRTLLM,
                inputs=(f"checkpoints/{role}",), outputs=(f"engines/{role}",))


# --- LLM-API form --------------------------------------------------------------------------------------------------


def _controls_note(r: Resolved, why: str) -> str:
    """The plan note of `llm_api` controls that are not written, and why."""
    keys = ", ".join(f"llm_api.{key}" for key in r.spec.llm_api.options())  # type: ignore[union-attr]
    return f"not written: {keys} ({why}); the reference engine (torch flavour) runs them"


def _llm_api(r: Resolved, target: TrtllmTarget) -> tuple[dict[str, Any] | None, str]:
    """(`extra_llm_api_options` content or None, the plan note that says what was written or why nothing was). A
    method without a PyTorch decoding type gets the refusal's words as the note (its engine flow still builds); a
    control the target does not read, or a schedule that breaks its rules, is a ConfigError."""
    if not target.llm_api.verified:
        verified = [v for v in SUPPORTED_TARGETS if load_target(v).llm_api.verified]
        return None, (f"no LLM-API file: TensorRT-LLM {target.version}'s LLM-API options are not verified and trtspec "
                      f"writes only keys a release is known to read; trtllm.version: "
                      f"{nearest_target(target.version, verified)} has them")
    try:
        decoding_type(r.method.name, target.llm_api, eagle3=_eagle3(r))
    except LlmApiRefusal as refusal:
        return None, refusal.note()
    options = _options(r, target.llm_api)
    return options, f"TensorRT-LLM {target.version} ({target.image}): {shlex.join(serve_argv(r.models['target'].path))}"


def llm_api_for_release(r: Resolved, version: str) -> dict[str, Any] | None:
    """The LLM-API options of this build for TensorRT-LLM `version`, a release with LLM-API facts that need not be a
    build target (the release inside another image: Dynamo 1.6.1's 1.3.0rc29). None: no speculation form there
    (LlmApiRefusal), a ConfigError for what that release refuses."""
    from trtspec.targets.llm_api import llm_api_facts

    facts = llm_api_facts(version)
    if not facts.verified:
        raise ConfigError("trtllm.version", version, f"has no verified LLM-API facts ({facts.why})",
                          hint="use a release whose facts trtspec has (docs/targets.md)")
    decoding_type(r.method.name, facts, eagle3=_eagle3(r))
    return _options(r, facts)


def llm_api_notes_for_release(r: Resolved, version: str) -> tuple[str, ...]:
    """What `llm_api_for_release` says about its speculative_config (suffix -> SA: the mapping, the options dropped
    because SA behaves the same); () when it maps as it is."""
    from trtspec.targets.llm_api import llm_api_facts

    return speculation_notes(_speculation(r), llm_api_facts(version))


def _options(r: Resolved, facts: Any) -> dict[str, Any]:
    spec = r.spec
    kv: dict[str, Any] = {"enable_block_reuse": spec.kv_cache.enable_block_reuse}
    target_kv = r.kv.get(LLM_API) or r.kv.get("target")  # one cache budget for target and draft (build/memory.py)
    if target_kv and target_kv.max_tokens_in_paged_kv_cache:
        kv["max_tokens"] = target_kv.max_tokens_in_paged_kv_cache
    if target_kv and target_kv.kv_cache_free_gpu_mem_fraction:
        kv["free_gpu_memory_fraction"] = target_kv.kv_cache_free_gpu_mem_fraction
    base = {"max_batch_size": spec.engine.max_batch_size, "max_num_tokens": spec.engine.max_num_tokens,
            "max_seq_len": spec.engine.max_seq_len, "kv_cache_config": kv}
    if spec.iteration_stats:  # trtllm-serve's /metrics iteration statistics, what the monitor reads
        base["enable_iter_perf_stats"] = True
    return llm_api_options(_speculation(r), facts, base)


def _speculation(r: Resolved) -> Speculation:
    """What the LLM-API options take from the resolved build (k = draft layers for EAGLE-3, preflight)."""
    spec, eagle3 = r.spec, _eagle3(r)
    draft = r.models[EAGLE.section].path if eagle3 else r.models["draft"].path if "draft" in r.models else None
    return Speculation(method=r.method.name, max_draft_len=r.max_draft_len, target_model=r.models["target"].path,
                       draft_model=draft, eagle3=eagle3,
                       eagle3_one_model=spec.eagle.one_model if spec.eagle is not None else True,
                       max_matching_ngram_size=(spec.ngram or NgramSpec()).max_matching_ngram_size,
                       controls=spec.llm_api.options() if spec.llm_api is not None else None,
                       max_batch_size=spec.engine.max_batch_size, suffix=spec.suffix,
                       mtp_relaxed=spec.mtp.relaxed() if spec.mtp is not None else None,
                       mtp_one_model=spec.mtp.one_model if spec.mtp is not None else True,
                       eagle_choices=tuple(map(tuple, r.choices)) if eagle3 and r.choices else None,
                       dynamic_tree=(spec.eagle.topk, spec.eagle.depth) if eagle3 and spec.eagle is not None
                       and spec.eagle.topk is not None and spec.eagle.depth is not None else None)


def _llm_api_yaml(options: dict[str, Any], r: Resolved, target: TrtllmTarget) -> str:
    return llm_api_yaml(options, header_lines(r.method.name, target, r.models["target"].path))


# --- torch bundle --------------------------------------------------------------------------------------------------


def _plan_torch(r: Resolved) -> BuildPlan:
    """A self-contained bundle: model dirs copied in, spec settings in trtspec-bundle.json."""
    steps = [Step(f"copy-{role}", "convert", "copy", f"copy the {role} checkpoint into the bundle",
                  inputs=(r.models[role].path,), outputs=(role,))
             for role in CHECKPOINTS if role in r.models]
    steps.append(Step("write-bundle", "files", "write", "bundle settings (method, k, tree, lookahead)",
                      content=json.dumps(bundle_settings(r), indent=2) + "\n", outputs=(BUNDLE_FILE,)))
    return BuildPlan("torch", r.method.name, tuple(steps),
                     notes=("consume with trtspec.build.bundle.load_bundle(<out>) or trtspec deploy --backend torch",))


def engine_config(r: Resolved) -> EngineConfig:
    """The engine configuration this build serves (written into the bundle and the manifest): checkpoints (a torch
    bundle's copies, relative to it; the HF inputs of a TensorRT-LLM build), method, k, each method's knobs and, in
    a torch bundle, what runs the draft model (draft_runtime)."""
    method = r.method.reference_form if _eagle3(r) and r.spec.backend == "torch" else r.method.name
    torch = r.spec.backend == "torch"
    checkpoints = {role: role if torch else r.models[role].path for role in CHECKPOINTS if role in r.models}
    spec = r.spec
    return EngineConfig(
        **checkpoints, **method_fields(
            method, r.max_draft_len, reference=torch, choices=r.choices,
            eagle_tree=lambda: EagleTree.from_section(spec.eagle, r.choices) if spec.eagle is not None else None,
            lookahead=r.lookahead, ngram_size=lambda: spec.ngram.max_matching_ngram_size if spec.ngram else None,
            suffix=spec.suffix),
        dtype=spec.engine.dtype if torch else "float32", draft_runtime=spec.draft_runtime if torch else "torch",
        max_input_len=spec.engine.max_input_len,
        max_output_len=max(1, spec.engine.max_seq_len - spec.engine.max_input_len), schedule=spec.schedule())


def bundle_settings(r: Resolved) -> dict[str, Any]:
    """The torch bundle's settings: its engine configuration (checkpoints relative to the bundle root) and envelope."""
    return {"format": BUNDLE_FORMAT, "engine": engine_config(r).to_dict(),
            "max_batch_size": r.spec.engine.max_batch_size, "max_seq_len": r.spec.engine.max_seq_len}
