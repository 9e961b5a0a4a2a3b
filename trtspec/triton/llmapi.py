"""The llmapi repository: NVIDIA's Triton model for TensorRT-LLM's PyTorch workflow (`triton_backend/all_models/llmapi`,
one model, `tensorrt_llm`), planned for a RepoSpec whose form is `llmapi`.

Both flavours render the model's config.pbtxt from the target's facts (`trtspec.targets.triton_llmapi`): the same
input and output names, data types, dims and optional flags, in the facts' order, and its instance group.
- TensorRT-LLM flavour: `1/model.yaml` holds the LLM() arguments: the model, `backend: pytorch`, the tensor and
  pipeline parallel sizes, then the build's LLM-API options as the build wrote them (speculative_config,
  kv_cache_config, ...), and `triton_config` (max_batch_size 0: the model takes one prompt per request; the decoupled
  policy), which NVIDIA's model.py sets on the model itself (auto_complete_config), so config.pbtxt leaves both out as
  NVIDIA's template does. Every model.yaml key is one the template holds or an LLM() argument of the target
  (`trtspec.targets.diff_llm_api`). `1/model.py` runs NVIDIA's own model.py from the container
  (model_repo/common/nvidia_llmapi.py; NVIDIA_MODEL_DIR).
- Torch flavour: `1/model.py` runs trtspec's reference engine (trtspec.triton.llmapi_model); config.pbtxt states
  max_batch_size 0 and the decoupled policy, and carries the engine configuration as `parameters`.
Pure: no torch; yaml is imported by the function that writes model.yaml.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from trtspec.contracts.engine import EngineConfig
from trtspec.errors import ConfigError, UsageError
from trtspec.targets import diff_llm_api
from trtspec.targets.triton_llmapi import LlmapiFacts, llmapi_facts, llmapi_versions
from trtspec.triton.contract import Decl, ModelDecls, decls_block
from trtspec.triton.render import Block, RepoFile, RepoPlan, model_files, pbtxt_parameters


class LlmapiSpec(Protocol):
    """What the llmapi model's plan reads of the repository's spec (triton.repo.RepoSpec, whose form is llmapi)."""

    backend: str  # "torch" (trtspec's shim) | "tensorrtllm" (NVIDIA's model.py)
    engine: EngineConfig
    trtllm_version: str
    decoupled: bool
    llm_api: dict[str, Any] | None
    parallel: tuple[int, int]


FORMS = ("inflight", "llmapi")  # the inflight-batcher model set (engine workflow) | the llmapi model (PyTorch workflow)
TEMPLATE = "llmapi"  # model_repo/llmapi/config.pbtxt.tmpl
SHIMS = {"torch": {"model.py": "llmapi_shim.py"}, "tensorrtllm": {"model.py": "nvidia_llmapi.py"}}
# Where NVIDIA's container holds the llmapi model's version directory (model.py, helpers.py): tensorrtllm_backend
# dockerfile/Dockerfile.triton.trt_llm_backend copies TensorRT-LLM's triton_backend/all_models to /app/all_models.
NVIDIA_MODEL_DIR = "/app/all_models/llmapi/tensorrt_llm/1"
MODEL_YAML = "model.yaml"
PYTORCH = "pytorch"


def facts_for(version: str) -> LlmapiFacts:
    """The llmapi facts of `version`; ConfigError names the targets that have them."""
    facts = llmapi_facts(version)
    if facts is None:
        having = ", ".join(llmapi_versions()) or "none"
        raise ConfigError("trtllm.version", version, "has no Triton llmapi model facts (the PyTorch workflow's "
                          f"repository); targets with them: {having}",
                          hint=f"deploy with --trtllm-version {llmapi_versions()[-1]}" if llmapi_versions()
                          else "deploy with --form inflight")
    return facts


def decls(facts: LlmapiFacts) -> ModelDecls:
    """The model's declarations, exactly the facts' (names, data types, dims, optional flags, order)."""
    return ModelDecls(
        inputs=tuple(Decl(t.name, t.data_type, tuple(t.dims), optional=t.optional) for t in facts.inputs),
        outputs=tuple(Decl(t.name, t.data_type, tuple(t.dims)) for t in facts.outputs))


def _instance_group(facts: LlmapiFacts) -> str:
    groups = ", ".join(f"{{ count: {int(g['count'])} kind: {g['kind']} }}" for g in facts.instance_group)
    return f"instance_group [ {groups} ]"


def model_yaml(spec: LlmapiSpec, facts: LlmapiFacts) -> dict[str, Any]:
    """model.yaml of the TensorRT-LLM flavour: the template's keys, then the build's LLM-API options, then
    triton_config; ConfigError when a key is neither the template's nor an LLM() argument of the target."""
    if spec.llm_api is None:
        raise UsageError("the build wrote no LLM-API options, which the llmapi model's model.yaml holds",
                         hint="build for a target with verified LLM-API facts (e.g. trtllm.version: 1.2.1), or "
                              "deploy with --form inflight")
    tensor, pipeline = spec.parallel
    data: dict[str, Any] = {"model": str(spec.engine.target), "backend": PYTORCH, "tensor_parallel_size": tensor,
                            "pipeline_parallel_size": pipeline}
    clash = sorted(set(spec.llm_api) & set(facts.model_yaml_keys))
    if clash:
        raise ConfigError("llm_api", clash, "are set by the repository's model.yaml itself",
                          hint="leave them out of the build's LLM-API options")
    data |= spec.llm_api
    data["triton_config"] = {"max_batch_size": 0, "decoupled": spec.decoupled}
    problems = model_yaml_problems(data, facts)
    if problems:
        raise ConfigError("model.yaml", problems[0], f"is not read by TensorRT-LLM {facts.version}",
                          hint="; ".join(problems[1:]) or "rebuild with options the target reads")
    return data


def model_yaml_problems(data: Mapping[str, Any], facts: LlmapiFacts) -> list[str]:
    """Keys of a model.yaml mapping the release would not read: neither its template's keys nor LLM() arguments of
    the target (with the LLM-API facts' own problems of those arguments)."""
    llm_args = {k: v for k, v in data.items() if k not in facts.model_yaml_keys}
    return [str(p) for p in diff_llm_api(llm_args, facts.version)]


def _yaml_text(data: Mapping[str, Any], facts: LlmapiFacts) -> str:
    import yaml

    header = (f"# trtspec: the LLM() arguments of NVIDIA's llmapi model (TensorRT-LLM {facts.version}, PyTorch "
              "backend); triton_config sets its\n# max_batch_size and decoupled policy. Served by NVIDIA's model.py "
              f"({NVIDIA_MODEL_DIR}/model.py in the container).\n")
    return header + yaml.safe_dump(dict(data), sort_keys=False, default_flow_style=False)


def plan(spec: LlmapiSpec, engine: EngineConfig) -> RepoPlan:
    """The llmapi model's files for `spec` (`engine`: what the torch flavour's model serves, as parameters)."""
    facts = facts_for(spec.trtllm_version)
    torch = spec.backend == "torch"
    batching = (f"max_batch_size: 0\nmodel_transaction_policy {{ decoupled: {'true' if spec.decoupled else 'false'} }}"
                if torch else "")
    values = {"model_name": facts.name, "batching": Block(batching), "instance_group": Block(_instance_group(facts)),
              "parameters": pbtxt_parameters(engine.to_parameters() if torch else {}),
              **{key: Block(text) for key, text in decls_block(decls(facts)).items()}}
    files = model_files(facts.name, TEMPLATE, values, shared=SHIMS[spec.backend])
    if not torch:
        files[f"{facts.name}/1/{MODEL_YAML}"] = RepoFile(text=_yaml_text(model_yaml(spec, facts), facts))
    return files


def source_line(facts: LlmapiFacts) -> str:
    """Where the rendered llmapi model's names come from (repository, commit, path), for the repository record."""
    first = next(iter(facts.sources.values()), {})
    commit = str(first.get("commit", ""))[:8]
    line = f"{first.get('repo', '?')}@{commit} {first.get('path', '?')}"
    return line + ("" if facts.pinned else " (not pinned to the release tag)")
