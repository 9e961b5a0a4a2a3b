"""set-k's and rollout-draft's file side, without a server: the config.pbtxt edit is exact and refuses another
repository's model; a rollout plan names the versions and checks the draft; staging writes a complete version."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trtspec.contracts.engine import EngineConfig
from trtspec.errors import ConfigError, IncompatibleModelsError, UsageError
from trtspec.triton.control import check_k, config_params, config_with_parameter
from trtspec.triton.render import validate_model_config, write_repository
from trtspec.triton.repo import RepoSpec, plan_repository
from trtspec.triton.rollout import plan_rollout, stage_version, with_versions
from trtspec.triton.served_config import VERSION_FILE, for_version

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def repo(tmp_path):
    from tests.triton.helpers import torch_bundle
    from trtspec.models import resolve_model

    bundle = torch_bundle(tmp_path / "bundle", resolve_model("tiny"), resolve_model("tiny-draft"), k=4)
    spec = RepoSpec.from_build(bundle, "torch", engine={"max_k": 6, "default_k": 3})
    return write_repository(plan_repository(spec), tmp_path / "repo")


def test_the_config_edit_changes_default_k_and_nothing_else(repo):
    path = repo / "tensorrt_llm" / "config.pbtxt"
    live = config_params(path)
    _, text = config_with_parameter(path, "default_k", "1", expect=live)
    old, new = validate_model_config(path.read_text()), validate_model_config(text)
    assert new.parameters["default_k"].string_value == "1" and old.parameters["default_k"].string_value == "3"
    new.parameters["default_k"].string_value = "3"
    assert new == old  # every other field, parameter and declaration as it was
    assert text.count("\n") == path.read_text().count("\n")  # comments and layout kept


def test_the_config_edit_refuses_another_repositorys_model(repo):
    path = repo / "tensorrt_llm" / "config.pbtxt"
    other = EngineConfig(target="/elsewhere/target", draft="/elsewhere/draft", default_k=3)
    with pytest.raises(UsageError, match="not the served model"):
        config_with_parameter(path, "default_k", "1", expect=other)
    with pytest.raises(UsageError, match="does not exist"):
        config_with_parameter(repo / "nosuch" / "config.pbtxt", "default_k", "1", expect=other)


@pytest.mark.parametrize("k, error", [(7, ConfigError), (-1, ConfigError)])
def test_k_outside_the_models_range_is_refused(k, error):
    with pytest.raises(error, match=r"must be in \[0, max_k=6\]"):
        check_k(EngineConfig(target="tiny", max_k=6), k, "tensorrt_llm")
    with pytest.raises(UsageError, match="method none"):
        check_k(EngineConfig(target="tiny", method="none"), 1, "tensorrt_llm_draft")


def test_rollout_plan_and_staged_version(repo, tmp_path):
    plan = plan_rollout(repo, ROOT / "trtspec" / "assets" / "models" / "tiny-draft")
    assert [(s.model, s.field, s.old_version, s.new_version) for s in plan.steps] == [
        ("tensorrt_llm_draft", "target", 1, 2), ("tensorrt_llm", "draft", 1, 2)]
    for step in plan.steps:
        version = stage_version(plan, step)
        assert sorted(p.name for p in version.iterdir()) == ["draft", "model.py", VERSION_FILE]
        assert (version / "model.py").read_bytes() == (repo / step.model / "1" / "model.py").read_bytes()
        assert json.loads((version / VERSION_FILE).read_text()) == {step.field: "draft"}
        params = for_version(config_params(repo / step.model / "config.pbtxt"), version)
        assert getattr(params, step.field) == str(version / "draft")
        with pytest.raises(UsageError, match="already exists"):
            stage_version(plan, step)
    assert not list(repo.glob("*/.*tmp*"))  # no staging left behind
    assert with_versions({"name": "m"}, [1, 2]) == {"name": "m", "version_policy": {"specific": {"versions": [1, 2]}}}


def test_rollout_refuses_a_draft_of_another_vocabulary_before_writing(repo, random_pair):
    before = sorted(p.relative_to(repo) for p in repo.rglob("*"))
    with pytest.raises(IncompatibleModelsError):
        plan_rollout(repo, random_pair[1])
    assert sorted(p.relative_to(repo) for p in repo.rglob("*")) == before


def test_rollout_refuses_a_tensorrtllm_repository(tmp_path):
    (tmp_path / "trtspec-repo.json").write_text(json.dumps({"backend": "tensorrtllm"}))
    with pytest.raises(UsageError, match="backend is 'tensorrtllm'"):
        plan_rollout(tmp_path, ROOT / "trtspec" / "assets" / "models" / "tiny-draft")
