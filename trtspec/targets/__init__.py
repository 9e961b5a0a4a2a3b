"""Supported TensorRT-LLM targets: per-release facts read from NVIDIA's tagged sources, and the checks built on them.

One data file per release (`trtllm-<version>.json`, shipped in the wheel) lists what that release reads: the Triton
models' tensors, dtypes, dims and parameter keys (and which inputs the C++ backend really reads), `trtllm-build`
flags, checkpoint keys, examples layout, the lookahead draft-length formula and a feature table. The LLM-API facts
(PyTorch workflow) have one definition, `pytorch-workflow.json` per release, read by targets/llm_api.py; a release's
data file only says why it has none (0.18.0, 0.19.0). Every section names its source (`repo`, `tag`/`commit`, `path`; `pinned: false` where the index could
not tie the file to the release). Documentation: docs/targets.md. Regenerate the Triton sections with
scripts/extract_trtllm_facts.py.

Pure: json + pydantic only (no torch, no tritonclient at import time).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from trtspec.errors import ConfigError
from trtspec.targets.llm_api import LlmApiFacts, LlmApiProblem, diff_llm_api, llm_api_facts

SUPPORTED_TARGETS: tuple[str, ...] = ("0.18.0", "0.19.0", "1.2.1")  # oldest first
DEFAULT_TARGET = "1.2.1"  # the newest release whose facts are complete (0.18.0/0.19.0: existing engine deployments)
SCHEMA = "trtspec-target/1"
# How a TensorRT-LLM build is served: the LLM API on the PyTorch backend (`trtllm-serve`, Triton's llmapi model, Dynamo's
# TensorRT-LLM worker; NVIDIA's default since 1.0) or engines built by `trtllm-build` (Triton's C++ backend).
Workflow = Literal["pytorch", "engine"]
WORKFLOWS: tuple[Workflow, ...] = ("pytorch", "engine")

FEATURES: dict[str, str] = {
    "seed_min_tokens_names": "request inputs named `seed`/`min_tokens` (older backends read `random_seed`/`min_length`)",
    "per_request_lookahead": "per-request lookahead_window_size/ngram_size/verification_set_size inputs",
    "server_lookahead_params": "server lookahead (W, N, G) parameters on the tensorrt_llm model",
    "acceptance_outputs": "acceptance_rate / total_accepted_draft_tokens / total_draft_tokens outputs",
    "return_perf_metrics_input": "the return_perf_metrics request input",
    "draft_tokens_external": "draft-target / n-gram engines (draft_tokens_external)",
    "medusa": "Medusa engines", "eagle_engine_flow": "EAGLE-1/2 engines", "redrafter": "ReDrafter engines",
    "lookahead_engine": "lookahead_decoding engines", "bls_draft_target": "draft-target speculation in the BLS model",
    "speculative_decoding_fast_logits": "the speculative_decoding_fast_logits parameter",
    "examples_models_core_layout": "examples/models/core/<family> convert_checkpoint.py paths",
    "llmapi_speculative": "a verified LLM-API speculative_config (trtllm-serve --extra_llm_api_options)",
    "eagle3_llmapi": "EAGLE-3 drafters through the LLM API (PyTorch backend)",
    "eagle3_decoding_type": "speculative_config.decoding_type: Eagle3",
}


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="allow")


class Tensor(_Frozen):
    name: str
    data_type: str
    dims: list[int]
    optional: bool = False
    read_by_backend: bool | None = None  # tensorrt_llm inputs: the C++ backend reads the name
    written_by_backend: bool | None = None
    overlay: bool = False  # seen in a later stored version of the templates, not in the pinned base


class TritonModel(_Frozen):
    name: str
    backend: str | None = None
    platform: str | None = None
    max_batch_size: int | str
    decoupled: bool | str | None = None
    inputs: list[Tensor]
    outputs: list[Tensor]
    parameters: dict[str, str]
    placeholders: list[str]
    source: dict[str, Any]

    def input(self, name: str) -> Tensor | None:
        return next((t for t in self.inputs if t.name == name), None)

    def output(self, name: str) -> Tensor | None:
        return next((t for t in self.outputs if t.name == name), None)

    @property
    def required_inputs(self) -> set[str]:
        return {t.name for t in self.inputs if not t.optional}


class TrtllmTarget(_Frozen):
    schema_: str
    trtllm_version: str
    default: bool
    why: str
    container: dict[str, Any]
    templates: dict[str, Any]
    features: dict[str, bool]
    request_names: dict[str, str]
    models: dict[str, TritonModel]
    backend_reads: frozenset[str]  # request inputs the C++ backend reads
    backend_parameters: frozenset[str]  # tensorrt_llm parameter keys the C++ backend reads
    decoding_modes: tuple[str, ...]
    # what the C++ backend reads for EAGLE (triton.backend.eagle_config): its parameters, whether a dynamic tree or a
    # per-request config can be set, the default tree; with the tag, commit, path and quote it was read from
    backend_eagle: dict[str, Any]
    trtllm_build: dict[str, Any]
    checkpoint: dict[str, Any]
    examples: dict[str, Any]
    llm_api: LlmApiFacts  # pytorch-workflow.json's section for this release (targets/llm_api.py)
    lookahead: dict[str, Any]

    @property
    def version(self) -> str:
        return self.trtllm_version

    @property
    def image(self) -> str:
        return self.container["image"]

    def has(self, feature: str) -> bool:
        if feature not in FEATURES:
            raise ConfigError("feature", feature, "is not a known target feature", hint=", ".join(sorted(FEATURES)))
        return bool(self.features.get(feature, False))

    def model(self, name: str) -> TritonModel:
        """A Triton model's facts; `tensorrt_llm_draft` is the tensorrt_llm template under another name."""
        return self.models["tensorrt_llm" if name == "tensorrt_llm_draft" else name]


def _from_data(data: dict[str, Any]) -> TrtllmTarget:
    if data.get("schema") != SCHEMA:
        raise ConfigError("trtllm.version", data.get("trtllm_version"), f"data file has schema {data.get('schema')!r}",
                          hint=f"expected {SCHEMA}")
    triton = data["triton"]
    backend = triton.get("backend", {})
    fields = {k: data[k] for k in ("trtllm_version", "default", "why", "container", "templates", "features",
                                   "request_names", "trtllm_build", "checkpoint", "examples", "lookahead")}
    return TrtllmTarget(
        schema_=data["schema"], **fields, llm_api=llm_api_facts(data["trtllm_version"], data.get("llm_api")),
        models={name: TritonModel(**model) for name, model in triton["models"].items()},
        backend_reads=frozenset(i["name"] for i in backend.get("inputs", []) if i.get("used")),
        backend_parameters=frozenset(backend.get("parameters", [])),
        decoding_modes=tuple(backend.get("decoding_modes", [])),
        backend_eagle=backend.get("eagle_config", {}),
    )


def data_file(version: str) -> str:
    return f"trtllm-{version}.json"


def load_target(version: str | None = None) -> TrtllmTarget:
    """The facts of a supported release (default: DEFAULT_TARGET); ConfigError names the supported ones."""
    return _load(version or DEFAULT_TARGET)


@cache
def _load(version: str) -> TrtllmTarget:
    if version not in SUPPORTED_TARGETS:
        near = nearest_target(version)
        raise ConfigError("trtllm.version", version, f"is not a supported TensorRT-LLM target (nearest: {near})",
                          hint=f"supported: {', '.join(SUPPORTED_TARGETS)} (default {DEFAULT_TARGET}); nearest: {near}")
    text = resources.files(__name__).joinpath(data_file(version)).read_text(encoding="utf-8")
    return _from_data(json.loads(text))


def _key(version: str) -> tuple[int, ...]:
    parts = []
    for part in version.split(".")[:3]:
        digits = "".join(c for c in part.split("rc")[0] if c.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts + [0] * (3 - len(parts)))


def nearest_target(version: str, candidates: Iterable[str] = SUPPORTED_TARGETS) -> str | None:
    """The candidate closest to `version` by (major, minor, patch); ties go to the newer release."""
    pool = list(candidates)
    if not pool:
        return None
    want = _key(version)

    def distance(v: str) -> tuple[int, ...]:
        k = _key(v)
        return (abs(k[0] - want[0]), abs(k[1] - want[1]), abs(k[2] - want[2]), -SUPPORTED_TARGETS.index(v)
                if v in SUPPORTED_TARGETS else 0)

    return min(pool, key=distance)


def default_workflow(target: TrtllmTarget | str) -> Workflow:
    """A target's default workflow: pytorch where trtspec has its verified LLM-API facts (1.2.1), else engine (0.18.0,
    0.19.0: trtspec writes only keys a release is known to read)."""
    target = load_target(target) if isinstance(target, str) else target
    return "pytorch" if target.llm_api.verified else "engine"


def require_feature(target: TrtllmTarget | str, feature: str, *, needed_by: str | None = None) -> TrtllmTarget:
    """`target` if it has `feature`; else one-line ConfigError naming the target, the feature (and what needs it, e.g.
    "method lookahead") and the nearest supported target that has it."""
    target = load_target(target) if isinstance(target, str) else target
    if target.has(feature):
        return target
    having = [v for v in SUPPORTED_TARGETS if load_target(v).has(feature)]
    near = nearest_target(target.version, having)
    why = f", which {needed_by} needs" if needed_by else ""
    where = f"nearest target with it: {near}" if near else "no supported target has it"
    hint = (f"use trtllm.version: {near} (the nearest supported target with it)" if near
            else f"no supported target ({', '.join(SUPPORTED_TARGETS)}) has it")
    raise ConfigError("trtllm.version", target.version,
                      f"TensorRT-LLM {target.version} lacks {feature} ({FEATURES[feature]}){why}; {where}", hint=hint)


def validate_lookahead(window: int, ngram: int, verification_set: int, field: str | None = None) -> None:
    """TensorRT-LLM's `LookaheadDecodingConfig::isLegal`: N >= 1, W >= 1, G >= 0, and N == 1 implies W == 1, G == 0.
    Raises ConfigError naming `field` (default: the build config's section, `lookahead`; `--lookahead` on the command
    line)."""
    if field is None:
        from trtspec.methods.lookahead import LOOKAHEAD  # its home names the section (trtspec.methods imports this)

        field = LOOKAHEAD.section or ""
    value = (window, ngram, verification_set)
    if window < 1 or ngram < 1 or verification_set < 0:
        raise ConfigError(field, value, "needs W >= 1, N >= 1, G >= 0", hint="e.g. lookahead: [4, 4, 4]")
    if ngram == 1 and (window != 1 or verification_set != 0):
        raise ConfigError(field, value, "N == 1 requires W == 1 and G == 0", hint="use N >= 2, e.g. [4, 4, 4]")


def lookahead_max_draft_len(window: int, ngram: int, verification_set: int) -> int:
    """TensorRT-LLM's lookahead draft budget for (W, N, G) (LookaheadDecodingConfig::calculateSpeculativeResourceTuple):
    (N == 1 ? 0 : N - 2) + (W - 1 + G) * (N - 1), e.g. (7, 7, 7) -> 83, (4, 4, 4) -> 23, (1, 1, 0) -> 0. The one
    definition in trtspec (the data files' `lookahead.max_draft_len` states the same expression; a property test
    compares them). The engine's `--max_draft_len` must equal it for the server's (W, N, G); per-request (w, n, g)
    must each be <= the server's. Illegal combinations (isLegal) raise ConfigError."""
    validate_lookahead(window, ngram, verification_set)
    return (0 if ngram == 1 else ngram - 2) + (window - 1 + verification_set) * (ngram - 1)


# --- checking rendered artefacts against a target ---------------------------------------------------------------------


@dataclass
class ModelDiff:
    """How one rendered Triton model departs from the target's template (empty lists = conforms)."""

    model: str
    unknown_model: bool = False
    unknown_inputs: list[str] = field(default_factory=list)  # rendered, not declared by the target
    not_read_inputs: list[str] = field(default_factory=list)  # declared by the target but its backend ignores them
    missing_required: list[str] = field(default_factory=list)  # non-optional target inputs not rendered
    unknown_outputs: list[str] = field(default_factory=list)
    dtype_mismatches: list[str] = field(default_factory=list)  # "name: rendered != target"
    unknown_parameters: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.unknown_model or self.unknown_inputs or self.not_read_inputs or self.missing_required
                    or self.unknown_outputs or self.dtype_mismatches or self.unknown_parameters)


def _as_map(items: Iterable[str] | Mapping[str, str] | None) -> dict[str, str | None]:
    if items is None:
        return {}
    return dict(items) if isinstance(items, Mapping) else {name: None for name in items}


def diff_against_target(rendered: Mapping[str, Mapping[str, Any]], target: TrtllmTarget | str) -> dict[str, ModelDiff]:
    """Compare rendered models with the target's facts.

    `rendered` maps a model name (tensorrt_llm, tensorrt_llm_draft, ensemble, ...) to {"inputs", "outputs",
    "parameters"}, each a list of names or a {name: data_type} mapping (dtypes are then compared; a target dtype that
    is a `${placeholder}` accepts any). Parameters are checked for the tensorrt_llm models only: a key must be
    declared by the target template or read by its C++ backend.
    """
    target = load_target(target) if isinstance(target, str) else target
    out: dict[str, ModelDiff] = {}
    for name, parts in rendered.items():
        diff = out[name] = ModelDiff(name)
        try:
            facts = target.model(name)
        except KeyError:
            diff.unknown_model = True
            continue
        core = name in ("tensorrt_llm", "tensorrt_llm_draft")
        inputs, outputs = _as_map(parts.get("inputs")), _as_map(parts.get("outputs"))
        for kind, names, lookup, unknown in (("input", inputs, facts.input, diff.unknown_inputs),
                                             ("output", outputs, facts.output, diff.unknown_outputs)):
            for tensor_name, dtype in names.items():
                tensor = lookup(tensor_name)
                if tensor is None:
                    unknown.append(tensor_name)
                    continue
                if dtype is not None and not tensor.data_type.startswith("${") and dtype != tensor.data_type:
                    diff.dtype_mismatches.append(f"{kind} {tensor_name}: {dtype} != {tensor.data_type}")
                if kind == "input" and core and tensor.read_by_backend is False:
                    diff.not_read_inputs.append(tensor_name)
        diff.missing_required = sorted(facts.required_inputs - set(inputs))
        if core:
            known = set(facts.parameters) | target.backend_parameters
            diff.unknown_parameters = sorted(set(parts.get("parameters") or ()) - known)
    return out


def pbtxt_names(text: str) -> dict[str, Any]:
    """{"inputs": {name: dtype}, "outputs": {...}, "parameters": [...]} of a rendered config.pbtxt (tritonclient)."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    config = text_format.Parse(text, model_config_pb2.ModelConfig())
    dtype = model_config_pb2.DataType.Name
    return {"inputs": {t.name: dtype(t.data_type) for t in config.input},
            "outputs": {t.name: dtype(t.data_type) for t in config.output},
            "parameters": sorted(config.parameters)}


def diff_build_argv(argv: Iterable[str], target: TrtllmTarget | str) -> list[str]:
    """Problems of one `trtllm-build` command line: flags the target lacks, values outside its choices, required
    flags missing (`--checkpoint_dir`; `--max_draft_len` for the modes whose builder cannot derive it)."""
    target = load_target(target) if isinstance(target, str) else target
    build = target.trtllm_build
    known = set(build["flags"]) | set(build["plugin_flags"]["flags"])
    choices = {**build["choices"], **build["plugin_flags"].get("values", {})}
    args, problems = list(argv), []
    if args and not args[0].startswith("--"):
        args = args[1:]  # the program name
    for i, arg in enumerate(args):
        if not arg.startswith("--"):
            continue
        if arg not in known:
            problems.append(f"{arg}: not a trtllm-build flag of TensorRT-LLM {target.version}")
        elif arg in choices and (i + 1 >= len(args) or args[i + 1] not in choices[arg]):
            value = args[i + 1] if i + 1 < len(args) else None
            problems.append(f"{arg} {value}: not one of {', '.join(choices[arg])}")
    problems += [f"{flag}: required by trtllm-build" for flag in build.get("required", []) if flag not in args]
    mode = args[args.index("--speculative_decoding_mode") + 1] if "--speculative_decoding_mode" in args[:-1] else None
    if mode in build["max_draft_len"].get("required_for", []) and "--max_draft_len" not in args:
        problems.append(f"--max_draft_len: required with --speculative_decoding_mode {mode}")
    return problems


from trtspec.targets.checkpoint import (  # noqa: E402 - needs the names above
    checkpoint_keys,
    checkpoint_tensor_names,
    diff_checkpoint,
    diff_convert_argv,
)

__all__ = [
    "DEFAULT_TARGET", "FEATURES", "SUPPORTED_TARGETS", "WORKFLOWS", "LlmApiFacts", "Workflow", "LlmApiProblem", "ModelDiff", "TritonModel", "TrtllmTarget", "checkpoint_keys",
    "checkpoint_tensor_names", "default_workflow", "diff_against_target", "diff_build_argv", "diff_checkpoint", "diff_convert_argv",
    "diff_llm_api", "load_target", "lookahead_max_draft_len", "nearest_target", "pbtxt_names", "require_feature",
    "validate_lookahead",
]
