"""Checks a rendered repository against a TensorRT-LLM target's facts, independently of trtspec.triton.contract.

`contract_problems(plan, target)` parses every config.pbtxt of the target's models, runs
trtspec.targets.diff_against_target on it (unknown names, names the backend does not read, missing required inputs,
dtype mismatches, unknown tensorrt_llm parameter keys), and adds what that does not cover: dims, optional, reshape and
ragged-batch flags, the parameter keys of every model, the ensemble's step maps (its internal tensor names) and the
decoding mode. An empty list means the repository conforms.

The torch flavour (`flavour="torch"`) renders the same models; its engine models (tensorrt_llm, tensorrt_llm_draft) may
add exactly trtspec's declared extensions (`trtspec.triton.contract.EXTENSIONS`, checked against their declaration
there), and their parameters are the Python model's EngineConfig parameters, not the C++ backend's keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trtspec.contracts.engine import EngineConfig
from trtspec.targets import TrtllmTarget, diff_against_target, load_target, pbtxt_names
from trtspec.triton.contract import EXTENSIONS
from trtspec.triton.render import RepoFile, validate_model_config

TARGET_MODELS = ("preprocessing", "postprocessing", "ensemble", "tensorrt_llm", "tensorrt_llm_draft",
                 "tensorrt_llm_bls")
LOGITS_DATATYPE = "TYPE_FP32"


def parsed_configs(plan: Mapping[str, RepoFile]) -> dict[str, Any]:
    """model -> ModelConfig protobuf, for every rendered config.pbtxt."""
    return {rel.split("/")[0]: validate_model_config(f.text or "", source=rel) for rel, f in plan.items()
            if rel.endswith("/config.pbtxt")}


def contract_problems(plan: Mapping[str, RepoFile], target: TrtllmTarget | str, *,
                      flavour: str = "tensorrtllm") -> list[str]:
    target = load_target(target) if isinstance(target, str) else target
    torch = flavour == "torch"
    from tritonclient.grpc import model_config_pb2

    dtype_name = model_config_pb2.DataType.Name
    configs = parsed_configs(plan)
    texts = {rel.split("/")[0]: f.text or "" for rel, f in plan.items() if rel.endswith("/config.pbtxt")}
    rendered = {m: pbtxt_names(texts[m]) for m in TARGET_MODELS if m in configs}
    engine_models = ("tensorrt_llm", "tensorrt_llm_draft")
    diffs = diff_against_target(rendered, target)
    for model in engine_models if torch else ():
        if model in diffs:
            diff = diffs[model]
            diff.unknown_inputs = [n for n in diff.unknown_inputs if EXTENSIONS.input(n) is None]
            diff.unknown_outputs = [n for n in diff.unknown_outputs if EXTENSIONS.output(n) is None]
            diff.unknown_parameters = []  # EngineConfig parameters, checked below
    problems = [f"{m}: {d}" for m, d in diffs.items() if not d.ok]
    for model in rendered:
        config, facts = configs[model], target.model(model)
        for kind, tensors, lookup in (("input", config.input, facts.input), ("output", config.output, facts.output)):
            for tensor in tensors:
                fact = lookup(tensor.name)
                if fact is None:
                    extension = (EXTENSIONS.input if kind == "input" else EXTENSIONS.output)(tensor.name)
                    if torch and model in engine_models and extension is not None:
                        problems += _extension_problems(model, kind, tensor, extension)
                    continue  # otherwise reported by diff_against_target
                want_type = LOGITS_DATATYPE if fact.data_type == "${logits_datatype}" else fact.data_type
                extra = fact.model_extra or {}
                got = (dtype_name(tensor.data_type), list(tensor.dims))
                if got != (want_type, list(fact.dims)):
                    problems.append(f"{model} {kind} {tensor.name}: {got} != {(want_type, list(fact.dims))}")
                reshape = list(tensor.reshape.shape) if tensor.HasField("reshape") else None
                if reshape != extra.get("reshape"):
                    problems.append(f"{model} {kind} {tensor.name}: reshape {reshape} != {extra.get('reshape')}")
                if kind == "input" and (tensor.optional, tensor.allow_ragged_batch) != (
                        fact.optional, bool(extra.get("allow_ragged_batch", False))):
                    problems.append(f"{model} input {tensor.name}: optional/ragged {tensor.optional}/"
                                    f"{tensor.allow_ragged_batch} != the target's")
        if torch and model in engine_models:
            params = {key: value.string_value for key, value in config.parameters.items()}
            try:
                EngineConfig.from_parameters(params)
            except Exception as exc:  # noqa: BLE001 - reported as a problem
                problems.append(f"{model}: parameters are not EngineConfig parameters: {exc}")
            continue
        known = set(facts.parameters)
        if model in engine_models:
            known |= target.backend_parameters
            mode = config.parameters.get("decoding_mode")
            if mode is not None and mode.string_value not in target.decoding_modes:
                problems.append(f"{model}: decoding_mode {mode.string_value!r} not parsed by {target.version}")
        problems += [f"{model}: parameter {key!r} not read by {target.version}" for key in config.parameters
                     if key not in known]
    if "ensemble" in configs:
        problems += _step_problems(configs["ensemble"], target)
    return problems


def _extension_problems(model: str, kind: str, tensor: Any, decl: Any) -> list[str]:
    from tritonclient.grpc import model_config_pb2

    got = (model_config_pb2.DataType.Name(tensor.data_type), tuple(tensor.dims),
           tuple(tensor.reshape.shape) if tensor.HasField("reshape") else None,
           bool(getattr(tensor, "optional", False)) if kind == "input" else False)
    want = (decl.data_type, decl.dims, decl.reshape, decl.optional if kind == "input" else False)
    return [] if got == want else [f"{model} {kind} {tensor.name} (extension): {got} != {want}"]


def _step_problems(config: Any, target: TrtllmTarget) -> list[str]:
    facts = (target.model("ensemble").model_extra or {})["ensemble_steps"]
    steps = config.ensemble_scheduling.step
    if [s.model_name for s in steps] != [s["model_name"] for s in facts]:
        return [f"ensemble steps {[s.model_name for s in steps]} != the target's"]
    problems = []
    for step, fact in zip(steps, facts, strict=True):
        for kind, rendered, expected in (("input_map", step.input_map, fact["input_map"]),
                                         ("output_map", step.output_map, fact["output_map"])):
            problems += [f"ensemble {step.model_name} {kind} {k} -> {v}: the target maps it to {expected.get(k)}"
                         for k, v in rendered.items() if expected.get(k) != v]
    return problems
