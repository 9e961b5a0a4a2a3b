"""Every example build config, for every supported TensorRT-LLM target, renders a TensorRT-LLM-flavour repository
that conforms to the target's facts. Every name is one the target reads, nothing it requires is missing, and dtypes,
dims, flags, parameter keys and the ensemble's internal tensor names match. Every config parses as ModelConfig. A
method the target lacks is refused, naming the target, the feature and the nearest target that has it.

The manifest is made the way `trtspec build` makes it, from the dry-run plan (engines pending). The checkpoints of the
large example models are not on this machine, so the test tokenizer stands in for their tokenizers.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.triton.contract_check import contract_problems, parsed_configs
from trtspec.errors import ConfigError
from trtspec.targets import SUPPORTED_TARGETS, load_target
from trtspec.triton.repo import METHOD_FEATURES, RepoSpec, plan_repository

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "build_configs").glob("*.yaml"))
LOOKAHEAD_PARAMS = {"lookahead_window_size", "lookahead_ngram_size", "lookahead_verification_set_size"}


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


@pytest.fixture(scope="module")
def manifests() -> dict[str, dict]:
    return {config.stem: manifest_from_plan(config) for config in CONFIGS}


@pytest.mark.parametrize("version", [None, *SUPPORTED_TARGETS], ids=["as-built", *SUPPORTED_TARGETS])
@pytest.mark.parametrize("config", CONFIGS, ids=[c.stem for c in CONFIGS])
def test_example_build_config_renders_the_targets_contract(tmp_path, tokenizer_dir, manifests, config, version):
    from tests.triton.helpers import write_manifest

    manifest = manifests[config.stem]
    if manifest["backend"] != "tensorrtllm":
        pytest.skip("torch bundles need the built bundle: checked per target in test_target_contract (flavour torch)")
    if manifest["config"].get("workflow") == "pytorch":
        pytest.skip("a PyTorch-workflow build has no engines: its llmapi repository is checked in test_llmapi.py")
    build = write_manifest(tmp_path / "build", manifest)
    target = load_target(version or (manifest["config"].get("trtllm") or {}).get("version"))
    lacking = [f for f in METHOD_FEATURES.get(manifest["method"], ()) if not target.has(f)]
    if lacking:  # e.g. lookahead on 0.18.0: refused with the target, the feature and the nearest target
        with pytest.raises(ConfigError, match=rf"{target.version}.*lacks {lacking[0]}") as exc:
            RepoSpec.from_build(build, "tensorrtllm", tokenizer_dir=tokenizer_dir, trtllm_version=version)
        assert "0.19.0" in (exc.value.hint or "")
        return
    spec = RepoSpec.from_build(build, "tensorrtllm", tokenizer_dir=tokenizer_dir, trtllm_version=version)
    assert spec.trtllm_version == target.version
    plan = plan_repository(spec)
    assert contract_problems(plan, target) == []
    configs = parsed_configs(plan)
    assert {"ensemble", "preprocessing", "postprocessing", "tensorrt_llm", "tensorrt_llm_bls"} <= set(configs)
    params = {k: v.string_value for k, v in configs["tensorrt_llm"].parameters.items()}
    assert params["gpt_model_path"] == str(build / manifest["engines"]["target"])
    assert ("tensorrt_llm_draft" in configs) == (manifest["method"] == "draft_target")
    assert not any("${" in f.text for f in plan.values() if f.text)
    # the server lookahead parameters only where the target reads them (and the method uses them)
    want = manifest["method"] == "lookahead" and target.has("server_lookahead_params")
    assert (LOOKAHEAD_PARAMS <= set(params)) == want and (LOOKAHEAD_PARAMS & set(params) == set()) == (not want)
    spelled = {target.request_names["seed"], target.request_names["min_tokens"]}  # this release's spelling
    for model in ("ensemble", "tensorrt_llm", "tensorrt_llm_bls"):
        names = {i.name for i in configs[model].input}
        assert spelled <= names and not ({"seed", "random_seed", "min_tokens", "min_length"} - spelled) & names, model
    outputs = {o.name for o in configs["ensemble"].output}
    assert ("acceptance_rate" in outputs) == target.has("acceptance_outputs")
    record = json.loads(plan["trtspec-repo.json"].text)
    assert (record["trtllm_version"], record["image"]) == (target.version, target.image)
    assert target.templates["repo"] in record["templates"]
