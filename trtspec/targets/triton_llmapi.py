"""The Triton llmapi model's facts per target: `targets.<version>.triton_llmapi` of `pytorch-workflow.json`.

NVIDIA's `triton_backend/all_models/llmapi/tensorrt_llm` model: config.pbtxt inputs and outputs, the model.yaml keys
of its template (its other keys are LLM() arguments, checked by `trtspec.targets.diff_llm_api`), the inputs later
releases add and the documented requests, with the sources the data file names. The section's `independent_checks`
say what is compared with a second source (another stored config.pbtxt, model.py and helpers.py, NVIDIA's test
vectors: tests/test_facts_independent.py) and `no_independent_check` what rests on one source only. Pure: json only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from trtspec.targets import Tensor

DATA_FILE = "pytorch-workflow.json"


@dataclass(frozen=True)
class LlmapiFacts:
    """What one release's llmapi model declares and reads."""

    version: str
    name: str  # the model's name (tensorrt_llm)
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    instance_group: tuple[dict[str, Any], ...]
    model_yaml_keys: frozenset[str]  # model.yaml keys the template holds (triton_config is not an LLM() argument)
    later_inputs: tuple[str, ...]  # inputs later releases declare and this one does not (image_url, LoRA)
    requests: dict[str, Any]  # the documented endpoint and request examples
    pinned: bool
    sources: dict[str, Any]  # key -> the data file's source entry (repo, commit, path)


@cache
def _data() -> dict[str, Any]:
    return json.loads(resources.files("trtspec.targets").joinpath(DATA_FILE).read_text(encoding="utf-8"))


def llmapi_facts(version: str) -> LlmapiFacts | None:
    """The llmapi model of TensorRT-LLM `version`, or None where the data file records none for it."""
    data = _data()
    target = data["targets"].get(version) or {}
    triton = target.get("triton_llmapi")
    if not isinstance(triton, dict) or not isinstance(triton.get("model"), dict):
        return None
    model, yaml_facts = triton["model"], triton["model_yaml"]
    return LlmapiFacts(
        version=version, name=model["name"], inputs=tuple(Tensor(**t) for t in model["inputs"]),
        outputs=tuple(Tensor(**t) for t in model["outputs"]),
        instance_group=tuple(model.get("instance_group", [])), model_yaml_keys=frozenset(yaml_facts["keys"]),
        later_inputs=tuple(triton.get(f"not_in_{version.replace('.', '_')}", [])),
        requests=dict(triton.get("requests") or {}), pinned=bool(triton.get("pinned")),
        sources={key: data["sources"][key] for key in triton.get("sources", []) if key in data["sources"]})


def llmapi_versions() -> tuple[str, ...]:
    """The releases whose llmapi model the data file records."""
    return tuple(v for v in _data()["targets"] if llmapi_facts(v) is not None)
