"""EAGLE tree settings per target.

torch flavour: the dynamic tree's shape (eagle.topk / eagle.depth in a build config, --eagle-topk / --eagle-depth at
deploy) reaches the served model's `eagle_topk` / `eagle_depth` parameters and the engine's proposer; out-of-limit or
contradictory settings are refused naming the field, the value and the limit (served: test_server_eagle.py).
TensorRT-LLM targets: what trtspec renders for EAGLE is exactly what each release reads (the targets' facts:
triton.backend.eagle_config, llm_api.speculative_config.Eagle), and what a release cannot take is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.build.helpers import plan_of
from tests.triton.helpers import trt_manifest, write_manifest
from tests.triton.test_server_suffix import deploy, served_params
from trtspec import choices
from trtspec.contracts.engine import MAX_DEPTH, MAX_TOPK, EagleTree, EngineConfig
from trtspec.errors import ConfigError
from trtspec.spec.engine import SpecEngine
from trtspec.targets import SUPPORTED_TARGETS, load_target
from trtspec.triton.render import validate_model_config
from trtspec.triton.repo import RepoSpec, plan_repository

CONFIGS = Path(__file__).resolve().parents[2] / "build_configs"


def build_eagle(out: Path, **eagle: object) -> Path:
    """build_configs/tiny-eagle.yaml with `eagle` fields changed, built (in-process) into `out`."""
    from trtspec.build.execute import execute
    from trtspec.build.plan import plan_build
    from trtspec.build.preflight import run_preflight
    from trtspec.config import load_yaml, parse_build_spec

    data = load_yaml(CONFIGS / "tiny-eagle.yaml", what="a build config")
    data["eagle"] |= eagle
    data["output"] = str(out)
    resolved = run_preflight(parse_build_spec(data))
    execute(plan_build(resolved), resolved, out, quiet=True)
    return out


@pytest.fixture(scope="module")
def shaped(tmp_path_factory) -> Path:
    return build_eagle(tmp_path_factory.mktemp("eagle-tree") / "bundle", topk=2, depth=3)


def test_build_config_shape_reaches_the_parameters_and_the_engine(shaped, tmp_path):
    code, output = deploy(shaped, tmp_path / "repo")
    assert code == 0, output
    params = served_params(tmp_path / "repo")
    assert (params.method, params.eagle_tree) == ("eagle3", EagleTree(topk=2, depth=3))
    proposer = SpecEngine.from_config(params).proposers["eagle"]  # what the served model builds on load
    assert (proposer.topk, proposer.depth, proposer.choices) == (2, 3, None)


def test_deploy_flags_override_the_build(shaped, tmp_path):
    code, output = deploy(shaped, tmp_path / "repo", "--eagle-topk", "1", "--eagle-depth", "8")
    assert code == 0, output
    assert served_params(tmp_path / "repo").eagle_tree == EagleTree(topk=1, depth=8)
    code, output = deploy(shaped, tmp_path / "deep", "--eagle-depth", str(MAX_DEPTH + 1))
    assert code == 2 and f"'--eagle-depth': {MAX_DEPTH + 1} is not in the range 1<=x<={MAX_DEPTH}" in output, output


def test_default_bundle_leaves_the_shape_to_the_proposer(tmp_path):
    """No eagle.topk/depth: nothing is rendered, and the engine runs the proposer's defaults."""
    from trtspec.spec.proposers.eagle import DEFAULT_DEPTH, DEFAULT_TOPK

    bundle = build_eagle(tmp_path / "bundle")
    code, output = deploy(bundle, tmp_path / "repo")
    assert code == 0, output
    text = (tmp_path / "repo" / "tensorrt_llm" / "config.pbtxt").read_text()
    assert "eagle_topk" not in text and "eagle_depth" not in text
    proposer = SpecEngine.from_config(served_params(tmp_path / "repo")).proposers["eagle"]
    assert (proposer.topk, proposer.depth) == (DEFAULT_TOPK, DEFAULT_DEPTH)


@pytest.mark.parametrize("eagle, message", [
    ({"topk": MAX_TOPK + 1}, f"eagle.topk={MAX_TOPK + 1}: Input should be less than or equal to {MAX_TOPK}"),
    ({"depth": 0}, "eagle.depth=0: Input should be greater than or equal to 1"),
    ({"topk": 2, "choices": [[0], [0, 0]]}, "eagle.topk=2: sets a dynamic tree but eagle.choices sets a static one"),
])  # fmt: skip
def test_bad_tree_in_a_build_config_is_refused(tmp_path, eagle, message):
    with pytest.raises(ConfigError) as info:
        build_eagle(tmp_path / "bundle", **eagle)
    assert message in str(info.value)


def test_a_static_bundle_refuses_a_dynamic_override(tmp_path):
    bundle = build_eagle(tmp_path / "bundle", choices=[[0], [1], [0, 0]])
    code, output = deploy(bundle, tmp_path / "repo", "--eagle-topk", "2")
    assert code == 2 and "--eagle-topk=2: sets a dynamic tree but eagle_choices sets a static one" in output


@pytest.mark.parametrize("params, message", [
    ({"eagle_topk": "65"}, "parameter eagle_topk=65: must be an integer in [1, 64]"),
    ({"eagle_depth": "deep"}, "parameter eagle_depth='deep': is not an integer"),
    ({"eagle_topk": "2", "eagle_choices": "{0}"}, "parameter eagle_topk=2: sets a dynamic tree but eagle_choices "
                                                  "sets a static one"),
    ({"method": "draft_target", "eagle_depth": "3"}, "parameter eagle_depth=3: shapes method eagle / eagle3, but "
                                                     "the method is draft_target"),
])  # fmt: skip
def test_bad_tree_parameters_are_refused_by_name(params, message):
    with pytest.raises(ConfigError) as info:
        EngineConfig.from_parameters({"target": "tiny", "method": "eagle3", "eagle": "tiny-eagle", **params})
    assert message in str(info.value)


# -- TensorRT-LLM targets ------------------------------------------------------------------------------------------

TREE = [[0], [0, 0], [1], [0, 0, 0]]


@pytest.mark.parametrize("version", SUPPORTED_TARGETS)
@pytest.mark.parametrize("tree", [TREE, None])
def test_trtllm_eagle_parameters_are_what_the_release_reads(tmp_path, tokenized_pair, version, tree):
    """decoding_mode and eagle_choices, nothing else EAGLE-related: the backend builds EagleConfig(eagle_choices) only
    (no dynamic tree, no per-request config); without a tree trtspec writes the release's own default out."""
    facts = load_target(version).backend_eagle
    build = write_manifest(tmp_path / "build", trt_manifest("eagle", tokenized_pair[0], max_draft_len=6, heads=3,
                                                            tree=tree))
    plan = plan_repository(RepoSpec.from_build(build, "tensorrtllm", trtllm_version=version))
    config = validate_model_config(plan["tensorrt_llm/config.pbtxt"].text)
    params = {k: v.string_value for k, v in config.parameters.items()}
    eagle_keys = {k for k in params if "eagle" in k or "decoding" in k or "tree" in k}
    assert eagle_keys == set(facts["parameters"]), (version, eagle_keys)
    assert params["decoding_mode"] == facts["decoding_mode"] and facts["dynamic_tree"] is False
    default = {"mc_sim_7b_63": choices.MC_SIM_7B_63}[facts["default_choices"]]
    assert choices.parse(params["eagle_choices"]) == (tree or default)
    assert facts["per_request_inputs"] == [] and facts["source"]["commit"]
    refused = "shapes the reference engine's dynamic tree" if tree is None else "sets a dynamic tree but eagle_choices"
    with pytest.raises(ConfigError, match=f"eagle_topk=2: {refused}"):
        RepoSpec.from_build(build, "tensorrtllm", trtllm_version=version, engine={"eagle_topk": 2})


def test_llm_api_eagle3_chain_and_trees_render_their_own_fields(random_pair, tmp_path):
    """1.2.1's EagleDecodingConfig: without a tree trtspec writes the linear tree (no tree key); a static or dynamic
    tree writes its own keys with every value spelled out (the tree options are not pinned to the tag: the stored
    versions read explicit values alike, tests/build/test_eagle_tree_llm_api.py); half a dynamic shape is refused."""
    facts = load_target("1.2.1").llm_api
    tree = facts.raw["classes"]["EagleDecodingConfig"]["tree"]
    (tmp_path / "eagle3").mkdir()
    fields = dict(target=str(random_pair[0]), method="eagle", engine={"max_input_len": 64, "max_seq_len": 128},
                  trtllm={"version": "1.2.1"})
    _, plan = plan_of(eagle={"model": str(tmp_path / "eagle3"), "eagle3": True, "num_layers": 3}, **fields)
    rendered = plan.llm_api["speculative_config"]
    assert sorted(rendered) == ["decoding_type", "eagle3_one_model", "max_draft_len", "speculative_model"]
    assert set(facts.decoding_types["Eagle"].required) <= set(rendered)
    assert not tree["pinned"] and not set(rendered) & {*tree["static"], *tree["dynamic"]}
    _, plan = plan_of(eagle={"model": str(tmp_path / "eagle3"), "eagle3": True, "choices": [[0], [0, 0]]}, **fields)
    assert plan.llm_api["speculative_config"]["eagle_choices"] == [[0], [0, 0]]
    bad = [({"topk": 4}, "eagle.depth=None: the LLM API's dynamic tree needs both"),
           ({"depth": 4}, "eagle.topk=None: the LLM API's dynamic tree needs both")]
    for extra, message in bad:
        with pytest.raises(ConfigError) as info:
            plan_of(eagle={"model": str(tmp_path / "eagle3"), "eagle3": True, **extra}, **fields)
        assert message in str(info.value)


def test_engine_flow_eagle_refuses_a_dynamic_tree(random_pair, tmp_path):
    """EAGLE-1/2 engines served by Triton: the backend has no dynamic-tree parameter (eagle_config.dynamic_tree)."""
    (tmp_path / "eagle").mkdir()
    with pytest.raises(ConfigError, match="eagle.topk=4: sets the reference engine's dynamic tree; TensorRT-LLM's "
                                          "EAGLE-1/2 engines"):
        plan_of(target=str(random_pair[0]), method="eagle", engine={"max_input_len": 64, "max_seq_len": 128},
                eagle={"model": str(tmp_path / "eagle"), "topk": 4}, trtllm={"version": "0.19.0"}, dry_run=True)
