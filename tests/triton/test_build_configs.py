"""Every example build config renders a TensorRT-LLM-flavour repository whose configs all parse as ModelConfig.

The manifest is made the way `trtspec build` makes it, from the dry-run plan (engines pending). The checkpoints of the
large example models are not on this machine, so the test tokenizer stands in for their tokenizers.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trtspec.triton.render import validate_model_config
from trtspec.triton.repo import RepoSpec, plan_repository

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "build_configs").glob("*.yaml"))


def manifest_from_plan(config: Path) -> dict:
    from trtspec.build.execute import derived_values
    from trtspec.build.plan import plan_build
    from trtspec.build.preflight import run_preflight
    from trtspec.config import load_build_spec

    spec = load_build_spec(config)
    resolved = run_preflight(spec, dry_run=True)
    plan = plan_build(resolved)
    return {"format": "trtspec-manifest/1", "backend": plan.backend, "method": plan.method,
            "config": spec.model_dump(mode="json"), "derived": derived_values(resolved), "engines": plan.engines,
            "steps": [step.to_dict() for step in plan.steps]}


@pytest.mark.parametrize("config", CONFIGS, ids=[c.stem for c in CONFIGS])
def test_example_build_config_renders(tmp_path, tokenizer_dir, config):
    from tests.triton.helpers import write_manifest

    manifest = manifest_from_plan(config)
    if manifest["backend"] != "tensorrtllm":
        pytest.skip("torch bundles are deployed in test_server_torch")
    build = write_manifest(tmp_path / "build", manifest)
    spec = RepoSpec.from_build(build, "tensorrtllm", tokenizer_dir=tokenizer_dir)
    plan = plan_repository(spec)
    configs = {rel: validate_model_config(f.text, source=rel) for rel, f in plan.items() if rel.endswith(".pbtxt")}
    assert {"ensemble/config.pbtxt", "preprocessing/config.pbtxt", "postprocessing/config.pbtxt",
            "tensorrt_llm/config.pbtxt", "tensorrt_llm_bls/config.pbtxt"} <= set(configs)
    target = {k: v.string_value for k, v in configs["tensorrt_llm/config.pbtxt"].parameters.items()}
    assert target["gpt_model_path"] == str(build / manifest["engines"]["target"])
    assert ("tensorrt_llm_draft/config.pbtxt" in configs) == (manifest["method"] == "draft_target")
    assert not any("${" in f.text for f in plan.values() if f.text)
