"""Typed, validated build specs loaded from YAML. Pure: pydantic + yaml + the target data files (no torch,
no file-system checks).

`BuildSpec` is the single source of truth for `trtspec build`: which checkpoints, which speculative method, the
engine envelope (batch, lengths, dtype, parallelism), KV-cache and GPU-memory settings, and the TensorRT-LLM
release the plan targets (`trtllm.version`, one of trtspec.targets.SUPPORTED_TARGETS, default DEFAULT_TARGET; the
container comes from that target's data file, never from the config) and its workflow (`workflow`: pytorch | engine,
unset = the target's default, `BuildSpec.workflow_name`). This module checks types and ranges only;
cross-field and file-dependent rules (vocab match, Medusa tree vs heads, lookahead budget, features the target lacks)
live in `trtspec.build.preflight`.

Errors: a pydantic ValidationError becomes a ConfigError whose field is the YAML path (`engine.max_batch_size`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import (
    AliasChoices,
    BaseModel,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from trtspec.contracts.engine import spelled
from trtspec.contracts.schedule import SpecSchedule
from trtspec.errors import ConfigError, TrtspecError, shown, shown_text
from trtspec.methods import METHODS

# The method sections' classes live in their homes (trtspec/methods/<method>.py); re-exported here for their readers.
from trtspec.methods.eagle import EAGLE, EagleSpec
from trtspec.methods.lookahead import LookaheadSpec
from trtspec.methods.medusa import MedusaSpec
from trtspec.methods.mtp import MtpSpec
from trtspec.methods.ngram import NgramSpec
from trtspec.methods.options import COUNT_MAX, NAME_MAX, PATH_MAX, Options, PathText  # noqa: F401 (cli/k8s.py)
from trtspec.methods.redrafter import RedrafterSpec
from trtspec.methods.suffix import SuffixConfig
from trtspec.targets import DEFAULT_TARGET, SUPPORTED_TARGETS, TrtllmTarget, Workflow, default_workflow, load_target
from trtspec.textfile import load_yaml_text, read_text_file

MAX_GIB = 16384.0  # GPU memory per device, GiB: far above any GPU, finite
# What a build config file may be: a small UTF-8 YAML mapping (larger, deeper or alias-expanded documents are refused
# before they are walked, so a hostile file cannot hang or exhaust the loader).
MAX_CONFIG_BYTES = 1 << 20
MAX_CONFIG_DEPTH = 32
MAX_CONFIG_NODES = 100_000
# A method's options, as BuildSpec.options returns them: one class per method, each from its home (MethodInfo.options).
MethodOptions = EagleSpec | LookaheadSpec | MedusaSpec | MtpSpec | NgramSpec | RedrafterSpec | SuffixConfig
OptionsT = TypeVar("OptionsT")
# The method sections whose class is not a pydantic model (suffix's SuffixConfig dataclass): each reads its value
# through the class's own `from_options` (errors name `<section>.<field>`, the value and the fix).
_PLAIN_SECTIONS = {m.section: m.options for m in METHODS.values()
                   if m.section and m.options is not None and not issubclass(m.options, BaseModel)}


class LlmApiSpec(Options):
    """The LLM API's speculation controls (PyTorch workflow, `speculative_config`) in trtspec's canonical form; unset
    ones are not written. Each target writes them in its own form and refuses what it would ignore
    (trtspec.targets.controls: 1.2.1 reads the schedule as it is and the gate `acceptance_window` +
    `acceptance_length_threshold`; 1.3.0rc29 reads schedule keys as upper bounds and the gate
    `acceptance_rate_window_size` + `acceptance_rate_threshold`)."""

    max_concurrency: int | None = Field(None, ge=0, le=COUNT_MAX, strict=True,
                                        description="speculation off at batch sizes above it")
    draft_len_schedule: dict[int, int] | None = Field(
        None, description="{batch size: draft length}: from that batch size on, that draft length (0: off); must hold "
                          "1: max_draft_len")
    acceptance_window: int | None = Field(None, ge=0, le=COUNT_MAX, strict=True, description="TensorRT-LLM 1.2.1's "
                                          "gate: completed requests in its rolling average (0: no gate; >= 1 with a "
                                          "threshold)")
    acceptance_length_threshold: float | None = Field(None, ge=0, le=COUNT_MAX, allow_inf_nan=False, strict=True,
                                                      description="TensorRT-LLM 1.2.1's gate: speculation off for good "
                                                                  "once the average falls below it (accepted draft "
                                                                  "tokens per iteration, bonus token excluded)")
    acceptance_rate_window_size: int | None = Field(None, ge=0, le=COUNT_MAX, strict=True, description="TensorRT-LLM "
                                                    "1.3's gate: iterations that drafted in its rolling average")
    acceptance_rate_threshold: float | None = Field(None, ge=0, le=1, allow_inf_nan=False, strict=True,
                                                    description="TensorRT-LLM 1.3's gate: speculation off for good once "
                                                                "the average accepted / drafted falls below it")

    @field_validator("draft_len_schedule", mode="before")
    @classmethod
    def _integers(cls, value: Any) -> Any:
        """Keys and draft lengths are integers (a YAML 2.0, "4" or true is not): errors name the entry and the rule.
        Ranges are the target's rules (build/llm_api.py) and the engine's (contracts/schedule.py)."""
        if not isinstance(value, dict):
            return value  # None, or pydantic's "valid dictionary" error
        for key, draft_len in value.items():
            entry = f"llm_api.draft_len_schedule[{shown_text(key)}]"
            if isinstance(key, bool) or not isinstance(key, int):
                raise ConfigError(entry, shown(key), "a batch-size key must be an integer >= 1",
                                  hint="keys are batch sizes, e.g. draft_len_schedule: {1: 4, 4: 2, 16: 0}")
            if isinstance(draft_len, bool) or not isinstance(draft_len, int):
                raise ConfigError(entry, shown(draft_len), "a draft length must be an integer >= 0 (0: no "
                                  "speculation)", hint="e.g. draft_len_schedule: {1: 4, 4: 2, 16: 0}")
        return value

    @model_validator(mode="after")
    def _gate(self) -> LlmApiSpec:
        """Each gate is a window of at least one and a threshold, or neither (window 0 alone: no gate); one gate at
        most (SpecSchedule's rules, errors naming `llm_api.<field>`)."""
        from trtspec.contracts.engine import spelled

        with spelled(lambda name: "llm_api." + name.removeprefix("parameter ")):
            SpecSchedule.from_llm_api({key: value for key, value in self.options().items()
                                       if key != "draft_len_schedule"})
        return self

    def options(self) -> dict[str, Any]:
        """The fields set here, by their LLM-API name."""
        return {name: value for name, value in self.model_dump().items() if value is not None}


class EngineSpec(Options):
    """`trtllm-build` envelope shared by the target and the draft engine."""

    dtype: Literal["float16", "bfloat16", "float32"] = "float16"
    quantization: Literal["none", "fp8", "int8_wo", "int4_wo"] = "none"
    tp_size: int = Field(1, ge=1, le=COUNT_MAX)
    pp_size: int = Field(1, ge=1, le=COUNT_MAX)
    draft_tp_size: int | None = Field(None, ge=1, le=COUNT_MAX, description="draft engine TP (default: tp_size)")
    max_batch_size: int = Field(8, ge=1, le=COUNT_MAX)
    max_input_len: int = Field(1024, ge=1, le=COUNT_MAX, description="tokens")
    max_seq_len: int = Field(2048, ge=2, le=COUNT_MAX, description="tokens, prompt + output (the builder adds max_draft_len)")
    max_num_tokens: int = Field(8192, ge=1, le=COUNT_MAX, description="tokens per engine step")
    max_beam_width: int = Field(1, ge=1, le=COUNT_MAX, description="must stay 1: speculative decoding is beam-1 only")
    logits_dtype: Literal["float32", "float16"] = "float32"
    use_paged_context_fmha: bool = Field(True, description="required for KV reuse (draft_target, ngram, eagle)")
    gather_generation_logits: bool | None = Field(None, description="default: on for draft_target/ngram engines")
    workers: int = Field(1, ge=1, le=COUNT_MAX)

    @model_validator(mode="after")
    def _lengths(self) -> EngineSpec:
        if self.max_input_len >= self.max_seq_len:
            raise ValueError(f"max_input_len={self.max_input_len} must be < max_seq_len={self.max_seq_len}")
        return self


class KVCacheSpec(Options):
    """Runtime KV-cache settings; unset limits are filled by the GPU memory estimate."""

    enable_block_reuse: bool = True
    free_gpu_memory_fraction: float | None = Field(None, gt=0, le=1, allow_inf_nan=False)
    max_tokens: int | None = Field(None, ge=1, le=COUNT_MAX, description="max_tokens_in_paged_kv_cache per engine")
    dtype: Literal["auto", "fp8", "int8"] = "auto"


class GPUSpec(Options):
    memory_gib: float | None = Field(None, gt=0, le=MAX_GIB, allow_inf_nan=False,
                                     description="memory of one GPU; unset = skip the estimate")
    reserve_gib: float = Field(2.0, ge=0, le=MAX_GIB, allow_inf_nan=False,
                               description="activations/workspace reserved per engine")


class TRTLLMSpec(Options):
    """The TensorRT-LLM release (target) every artefact is written for: checkpoints, `trtllm-build` flags, LLM-API
    options and the Triton repository follow its data file (trtspec/targets, docs/targets.md), and so does the
    recommended container. A top-level `trtllm_version: X` is accepted as an alias of `trtllm: {version: X}`."""

    version: str = Field(DEFAULT_TARGET, description=f"TensorRT-LLM target: one of {', '.join(SUPPORTED_TARGETS)} "
                                                     f"(default {DEFAULT_TARGET}); see docs/targets.md")
    examples_dir: PathText = Field("TensorRT-LLM/examples",
                              description="examples/ of a TensorRT-LLM checkout at the target's tag")

    @model_validator(mode="before")
    @classmethod
    def _no_container(cls, value: Any) -> Any:
        if isinstance(value, dict) and "container" in value:
            version = value.get("version", DEFAULT_TARGET)
            raise ConfigError("trtllm.container", shown(value["container"]), "is not set by hand: the container comes from "
                              "the target (trtllm.version), so it always matches the artefacts rendered for it",
                              hint=f"remove trtllm.container; trtllm.version {shown_text(version)} runs in "
                                   f"{_image_or_supported(version)}")
        return value

    @field_validator("version")
    @classmethod
    def _version(cls, value: str) -> str:
        if len(value) > 32 or not value.isprintable():
            raise ValueError(f"is not a TensorRT-LLM version; use one of {', '.join(SUPPORTED_TARGETS)}")
        load_target(value)  # ConfigError naming the supported targets and the nearest one
        return value

    def target(self) -> TrtllmTarget:
        """The target's facts (data file)."""
        return load_target(self.version)

    def image(self) -> str:
        """The NGC container that ships this TensorRT-LLM release (from the target's data file)."""
        return self.target().image


def _image_or_supported(version: Any) -> str:
    try:
        if not isinstance(version, str) or len(version) > 32:
            raise TrtspecError("not a version")
        return load_target(version).image
    except TrtspecError:
        return f"a supported target's container ({', '.join(SUPPORTED_TARGETS)})"


class BuildSpec(Options):
    """One build: target (+ draft or heads) -> TensorRT-LLM checkpoints/engines or a torch bundle."""

    name: str | None = None
    backend: Literal["tensorrtllm", "torch"] = "tensorrtllm"
    workflow: Workflow | None = Field(
        None, description="backend tensorrtllm: pytorch (TensorRT-LLM's LLM API on the PyTorch backend: trtllm-serve, "
                          "Triton's llmapi model, Dynamo; the HF checkpoints as they are, no engines) or engine "
                          "(convert_checkpoint.py + trtllm-build, Triton's C++ backend). Default: the target's, "
                          "pytorch where trtspec has its LLM-API facts (1.2.1), else engine (0.18.0, 0.19.0)")
    target: PathText = Field(description="embedded model name (tiny) or HF checkpoint directory")
    draft: PathText | None = Field(None, description="draft model for draft_target (embedded name or HF directory)")
    draft_runtime: Literal["torch", "onnx"] = Field(
        "torch", description="backend torch: what runs the draft model of draft_target / suffix_draft: trtspec's "
                             "torch runner, or onnx (ONNX Runtime, float32 on the CPU; needs trtspec[onnx]). The "
                             "engine configuration's draft_runtime")
    method: str = Field("none", description="draft_target, medusa, eagle, lookahead, ngram, suffix, redrafter, mtp, "
                                            "none")
    max_draft_len: int | None = Field(None, ge=0, le=COUNT_MAX, validation_alias=AliasChoices("max_draft_len", "k"),
                                      description="k: draft tokens per step (derived for lookahead/medusa/redrafter)")
    medusa: MedusaSpec | None = None
    lookahead: LookaheadSpec | None = None
    eagle: EagleSpec | None = None
    redrafter: RedrafterSpec | None = None
    ngram: NgramSpec | None = None
    mtp: MtpSpec | None = Field(None, description="method mtp (PyTorch workflow): num_nextn_predict_layers and the "
                                "relaxed acceptance of thinking tokens (MTPDecodingConfig)")
    llm_api: LlmApiSpec | None = Field(None, description="speculation controls of the LLM-API options file (PyTorch "
                                       "workflow): max_concurrency, draft_len_schedule, and the target release's "
                                       "gate (1.2.1: acceptance_window, acceptance_length_threshold; 1.3.0rc29: "
                                       "acceptance_rate_window_size, acceptance_rate_threshold)")
    iteration_stats: bool = Field(False, strict=True, description="write enable_iter_perf_stats: true into the LLM-API "
                                  "options: trtllm-serve's /metrics then answers the iteration statistics `trtspec "
                                  "monitor` reads; poll it when on (TensorRT-LLM's server holds every row until a GET "
                                  "drains it: targets/iteration-stats.json, queue_bounds)")
    suffix: SuffixConfig | None = Field(None, description="method suffix (torch backend): max_tree_depth, "
                                        "max_cached_requests, max_spec_factor, max_spec_offset, min_token_prob, tree "
                                        "(vLLM's suffix_decoding_* options; trtspec.contracts.suffix)")
    engine: EngineSpec = EngineSpec()
    kv_cache: KVCacheSpec = KVCacheSpec()
    gpu: GPUSpec = GPUSpec()
    trtllm: TRTLLMSpec = TRTLLMSpec()
    output: PathText = Field("out/build", description="output directory (relative paths: to the config file's directory)")

    @model_validator(mode="before")
    @classmethod
    def _one_k(cls, data: Any) -> Any:
        if isinstance(data, dict) and "k" in data and "max_draft_len" in data:
            raise ConfigError("k", shown(data["k"]), "is another name of max_draft_len, which is also given",
                              hint="give one of `k:` and `max_draft_len:`")
        return data

    @model_validator(mode="before")
    @classmethod
    def _trtllm_version_alias(cls, data: Any) -> Any:
        """`trtllm_version: X` (top level) -> `trtllm: {version: X}`."""
        if not isinstance(data, dict) or "trtllm_version" not in data:
            return data
        data = dict(data)
        version = data.pop("trtllm_version")
        section = data.get("trtllm") or {}
        if not isinstance(section, dict):
            raise ConfigError("trtllm", shown(section), "is not a mapping", hint="write `trtllm: {version: ...}`")
        section = dict(section)
        if "version" in section and section["version"] != version:
            raise ConfigError("trtllm_version", version, f"conflicts with trtllm.version={section['version']!r}",
                              hint="set the target once: `trtllm: {version: ...}` or `trtllm_version: ...`")
        data["trtllm"] = {**section, "version": version}
        return data

    @model_validator(mode="before")
    @classmethod
    def _eagle_dynamic_tree_file(cls, data: Any) -> Any:
        """`eagle.dynamic_tree: FILE` (a `trtspec tune tree --eagle --out` file) -> the dynamic tree it recorded:
        eagle.topk and eagle.depth, and max_draft_len = its node budget unless given (choices.dynamic_tree_file).
        Excludes eagle.choices; an eagle.topk / eagle.depth that disagrees with the file is refused by name."""
        eagle = data.get(EAGLE.section) if isinstance(data, dict) else None
        if not isinstance(eagle, dict) or eagle.get("dynamic_tree") is None:
            return data
        from trtspec.choices import dynamic_tree_file

        source = eagle["dynamic_tree"]
        if not isinstance(source, str):
            raise ConfigError("eagle.dynamic_tree", shown(source), "is not a file name",
                              hint="eagle.dynamic_tree: eagle-tree.yaml (`trtspec tune tree --eagle --out` output)")
        if eagle.get("choices") is not None:
            raise ConfigError("eagle.dynamic_tree", source, "sets a dynamic tree but eagle.choices sets a static one",
                              hint="drop eagle.choices (dynamic tree) or eagle.dynamic_tree (static tree)")
        topk, depth, nodes = dynamic_tree_file(source)
        for name, value in (("topk", topk), ("depth", depth)):
            if eagle.get(name) is not None and eagle[name] != value:
                raise ConfigError(f"eagle.{name}", shown(eagle[name]), f"disagrees with eagle.dynamic_tree {source} "
                                  f"({name} {value})", hint=f"drop eagle.{name} (the file's shape is used)")
        data = {**data, EAGLE.section: {**{k: v for k, v in eagle.items() if k != "dynamic_tree"}, "topk": topk,
                                  "depth": depth}}
        if data.get("max_draft_len") is None and data.get("k") is None:
            data["max_draft_len"] = nodes
        return data

    @model_validator(mode="before")
    @classmethod
    def _unrendered(cls, data: Any) -> Any:
        """A TensorRT-LLM decoding type or speculative_config option trtspec does not render (`method: pard`,
        `llm_api.use_rejection_sampling`, ...: methods/unrendered.py) is refused with the target's reason and the
        nearest valid choice, before the field checks would call it unknown."""
        if not isinstance(data, dict):
            return data
        from trtspec.methods.unrendered import option_refusal, type_refusal

        section = data.get("trtllm")
        version = data.get("trtllm_version") or (section.get("version") if isinstance(section, dict) else None)
        version = version if isinstance(version, str) else DEFAULT_TARGET
        engine = data.get("engine")
        batch = engine.get("max_batch_size") if isinstance(engine, dict) else None
        batch = batch if isinstance(batch, int) and not isinstance(batch, bool) and batch >= 1 else \
            EngineSpec.model_fields["max_batch_size"].default
        method, llm_api = data.get("method"), data.get("llm_api")
        refusal = (type_refusal(method, version, max_batch_size=batch) if isinstance(method, str) else None) or (
            option_refusal(llm_api, version) if isinstance(llm_api, dict) else None)
        if refusal is not None:
            raise refusal
        return data

    @model_validator(mode="after")
    def _schedule_keys(self) -> BuildSpec:
        """`llm_api.draft_len_schedule` keys are batch sizes this build can run (<= engine.max_batch_size); its other
        rules are the target's (checked where the options are written) and the engine's (`schedule`)."""
        draft_len = self.llm_api.draft_len_schedule if self.llm_api is not None else None
        for key in draft_len or {}:
            if key > self.engine.max_batch_size:
                raise ConfigError(f"llm_api.draft_len_schedule[{key}]", key, "a batch-size key above "
                                  f"engine.max_batch_size {self.engine.max_batch_size} never applies",
                                  hint=f"drop it, or raise engine.max_batch_size to {key}")
        return self

    def schedule(self) -> SpecSchedule | None:
        """The engine configuration's schedule: `llm_api`'s controls through SpecSchedule's rules (errors name
        `llm_api.<entry>`); None when none is set."""
        if self.llm_api is None:
            return None
        with spelled(lambda name: "llm_api." + name.removeprefix("parameter ")):
            schedule = SpecSchedule.from_llm_api(self.llm_api.options())
            if schedule is not None:
                schedule.check(max_k=self.max_draft_len, max_batch_size=self.engine.max_batch_size)
        return schedule

    def workflow_name(self) -> Workflow:
        """The workflow this build plans: `workflow` as given, else the target's default (targets.default_workflow).
        A torch bundle has none of its own; it reports the target's default."""
        return self.workflow or default_workflow(self.trtllm.version)

    @property
    def options(self) -> MethodOptions | None:
        """The options of the method this config builds: the section its home names (`MethodInfo.section`, an
        instance of the home's `options` class: `medusa:` for medusa, `eagle:` for eagle), or None when the method has
        none or the config leaves it unset. The method discriminates, as TensorRT-LLM's decoding_type picks one
        DecodingConfig class."""
        section = METHODS[self.method].section
        return None if section is None else getattr(self, section)

    def method_options(self, kind: type[OptionsT], *, default: bool = False) -> OptionsT:
        """`options`, typed as `kind` (the class the method's home declares, e.g. MedusaSpec). Unset: `kind()` (its
        defaults) when `default`, else a ConfigError (exit 2) naming the section the method needs."""
        info, options = METHODS[self.method], self.options
        if options is None and info.options is kind:
            if default:
                return kind()
            raise ConfigError(info.section, None, f"method {self.method} needs a `{info.section}:` section",
                              hint=f"add `{info.section}:` to the config")
        if not isinstance(options, kind):
            raise TypeError(f"method {self.method}'s options are {info.options}, not {kind.__name__}")
        return options

    @field_validator(*_PLAIN_SECTIONS, mode="before")
    @classmethod
    def _plain_section(cls, value: Any, info: ValidationInfo) -> Any:
        """A section whose class is not a pydantic model, through the class's own checks (SuffixConfig's: errors name
        `suffix.<field>`, the value and the fix)."""
        return None if value is None else _PLAIN_SECTIONS[info.field_name].from_options(value)

    @field_validator("method")
    @classmethod
    def _method(cls, value: str) -> str:
        if value not in METHODS:
            raise ValueError(f"unknown method; use one of: {', '.join(sorted(METHODS))}")
        if METHODS[value].build_as is not None:  # eagle3, the reference engine's name: one EAGLE section for both
            raise ValueError("builds name EAGLE-3 drafters as method: eagle with eagle.eagle3: true (and eagle.model)")
        return value


def parse_build_spec(data: Any, *, source: str = "config") -> BuildSpec:
    """A BuildSpec from a mapping; ValidationError -> ConfigError naming the YAML path, the value and the fix."""
    if not isinstance(data, dict):
        raise ConfigError(source, type(data).__name__, "a build config is a YAML mapping",
                          hint="start from an example: `trtspec build --example tiny-torch > tiny-torch.yaml`")
    check_size(data, source, "a build config")
    try:
        return BuildSpec.model_validate(data)
    except ValidationError as exc:
        raise _config_error(exc, data) from None


def load_build_spec(path: str | Path, *, overrides: dict[str, Any] | None = None) -> BuildSpec:
    """Read a YAML build config. Relative model/output paths are resolved against the file's directory.

    The file must be UTF-8 text of at most MAX_CONFIG_BYTES; every problem (unreadable, another encoding, bad YAML,
    nesting past MAX_CONFIG_DEPTH, anchors expanding past MAX_CONFIG_NODES values) is a ConfigError naming the file.
    """
    path = Path(path)
    data = load_yaml(path, what="a build config")
    if isinstance(data, dict):
        data = {**data, **(overrides or {})}
        data = _anchor_paths(data, path.resolve().parent)
    return parse_build_spec(data, source=str(path))


def load_yaml(path: Path, *, what: str) -> Any:
    """The YAML document of a config file (`what`: "a build config", "a sweep spec"), read as UTF-8 text of at most
    MAX_CONFIG_BYTES. Every problem (unreadable, another encoding, bad YAML, a scalar YAML cannot construct, nesting
    past MAX_CONFIG_DEPTH, anchors expanding past MAX_CONFIG_NODES values) is a ConfigError naming the file."""
    import yaml

    text = read_text_file(path, "config", limit=MAX_CONFIG_BYTES, what=what)
    try:
        data = load_yaml_text(text)
    except yaml.MarkedYAMLError as exc:
        where = f" at line {exc.problem_mark.line + 1}, column {exc.problem_mark.column + 1}" if exc.problem_mark else ""
        problem = " ".join(str(exc.problem or exc.context or "syntax error").split())
        raise ConfigError("config", str(path), f"is not valid YAML: {problem}{where}",
                          hint="fix the YAML syntax") from None
    except yaml.YAMLError as exc:
        raise ConfigError("config", str(path), f"is not valid YAML: {' '.join(str(exc).split())}",
                          hint="fix the YAML syntax") from None
    except RecursionError:
        raise ConfigError("config", str(path), f"nests deeper than {what} can ({MAX_CONFIG_DEPTH} levels)",
                          hint=f"{what} is a mapping with a few flat sections") from None
    except (ValueError, OverflowError) as exc:  # a scalar YAML resolves but cannot construct (2024-13-45, 10**5000)
        raise ConfigError("config", str(path), f"holds a value YAML cannot read ({' '.join(str(exc).split())[:120]})",
                          hint="quote the value if it is a string") from None
    check_size(data, str(path), what)
    return data


def check_size(data: Any, source: str, what: str) -> None:
    """Refuse documents deeper than MAX_CONFIG_DEPTH or with more than MAX_CONFIG_NODES values (YAML aliases count
    once per use: that is how validation would walk them). Iterative: a deep document cannot overflow the stack."""
    stack, nodes = [(data, 1)], 0
    while stack:
        value, depth = stack.pop()
        nodes += 1
        if depth > MAX_CONFIG_DEPTH:
            raise ConfigError(source, f"{depth} levels", f"nests deeper than {what} can ({MAX_CONFIG_DEPTH})",
                              hint=f"{what} is a mapping with a few flat sections")
        if nodes > MAX_CONFIG_NODES:
            raise ConfigError(source, f"> {MAX_CONFIG_NODES} values", f"is far larger than {what} (YAML anchors "
                              "and aliases expand on use)", hint="write the values out; drop the aliases")
        if isinstance(value, dict):
            stack += [(v, depth + 1) for v in value.values()] + [(k, depth + 1) for k in value]
        elif isinstance(value, (list, tuple)):
            stack += [(v, depth + 1) for v in value]


def dump_yaml(spec: BuildSpec) -> str:
    import yaml

    return yaml.safe_dump(spec.model_dump(mode="json", exclude_none=True), sort_keys=False)


def _anchor_paths(data: dict[str, Any], base: Path) -> dict[str, Any]:
    """Resolve relative local paths (those that exist next to the config, and `output`) against the config dir."""

    def anchor(value: Any, always: bool = False) -> Any:
        if not isinstance(value, str) or not value or Path(value).is_absolute() or value.startswith("~"):
            return value
        candidate = base / value
        try:
            exists = candidate.exists()
        except (OSError, ValueError):  # a name the file system cannot hold: the field validator reports it
            return value
        return os.path.normpath(candidate) if always or exists else value

    out = dict(data)
    for key in ("target", "draft"):
        out[key] = anchor(out.get(key)) if key in out else None
        if out[key] is None:
            out.pop(key)
    if "output" in out:
        out["output"] = anchor(out["output"], always=True)
    from trtspec.methods import SECTION_MODELS

    for section, key in SECTION_MODELS.items():
        if isinstance(out.get(section), dict) and key in out[section]:
            out[section] = {**out[section], key: anchor(out[section][key])}
    return out


def _config_error(exc: ValidationError, data: dict[str, Any]) -> TrtspecError:
    err = exc.errors()[0]
    loc = ".".join(p if isinstance(p, str) and re.fullmatch(r"[\w-]{1,64}", p) else
                   str(p) if isinstance(p, int) else shown_text(p) for p in err["loc"]) or "config"
    value = shown(err.get("input"))
    kind = err["type"]
    msg = " ".join(err["msg"].removeprefix("Value error, ").split())
    if kind == "extra_forbidden":
        parent = loc.rsplit(".", 1)[0] if "." in loc else ""
        fields = _fields_at(parent)
        return ConfigError(loc, value, "is not a known field",
                           hint=f"known fields{' of ' + parent if parent else ''}: {', '.join(fields)}")
    if kind == "missing":
        return ConfigError(loc, None, "is required", hint=f"add `{loc.rsplit('.', 1)[-1]}:` to the config")
    more = f" ({len(exc.errors()) - 1} more problem(s) after fixing this)" if len(exc.errors()) > 1 else ""
    return ConfigError(loc, value, msg + more, hint="see `trtspec build --schema` for every field and its type")


def _fields_at(dotted: str) -> list[str]:
    model: type[BaseModel] = BuildSpec
    for part in [p for p in dotted.split(".") if p]:
        info = model.model_fields.get(part)
        ann = getattr(info, "annotation", None)
        nested = [a for a in getattr(ann, "__args__", (ann,)) if isinstance(a, type) and issubclass(a, BaseModel)]
        if not nested:
            break
        model = nested[0]
    return list(model.model_fields)
