"""MTP (method mtp, trtspec/methods/mtp.py): the LLM-API rendering against each release's facts (1.2.1 and Dynamo's
1.3.0rc29), the checkpoint checks on the stand-ins the tests ship (tests/data/deepseek-v3-mtp with one MTP layer,
tests/data/deepseek-v3-no-mtp without; config.json only), and the refusals: the engine flow (0.18.0, 0.19.0, and
workflow: engine on 1.2.1), the reference engine, a target without MTP layers, more layers than the target has, a
two-model MTP on a one-model release; each exit 2 naming the field, the value and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.cli_checks import run_cli
from trtspec.build.llm_api import Speculation, decoding_type, load_target_facts, speculative_config
from trtspec.build.plan import llm_api_for_release, plan_build
from trtspec.build.preflight import run_preflight
from trtspec.config import load_build_spec, parse_build_spec
from trtspec.contracts.engine import EngineConfig, method_fields
from trtspec.errors import ConfigError
from trtspec.targets import diff_llm_api
from trtspec.targets.llm_api import facts_versions

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "build_configs" / "deepseek-v3-mtp.yaml"
WITH_MTP = str(ROOT / "tests" / "data" / "deepseek-v3-mtp")
WITHOUT_MTP = str(ROOT / "tests" / "data" / "deepseek-v3-no-mtp")


def spec_of(**fields):
    data = {"name": "mtp", "workflow": "pytorch", "method": "mtp", "target": WITH_MTP, "output": "/tmp/out",
            "trtllm": {"version": "1.2.1"}, **fields}
    return parse_build_spec({k: v for k, v in data.items() if v is not None})


def plan(**fields):
    resolved = run_preflight(spec_of(**fields), dry_run=True)
    return resolved, plan_build(resolved)


def test_example_renders_mtp_with_its_layers_on_1_2_1():
    resolved = run_preflight(load_build_spec(EXAMPLE), dry_run=True)
    built = plan_build(resolved)
    spec = built.llm_api["speculative_config"]
    assert spec == {"decoding_type": "MTP", "max_draft_len": 1, "num_nextn_predict_layers": 1,
                    "use_relaxed_acceptance_for_thinking": True, "relaxed_topk": 3, "relaxed_delta": 0.6,
                    "mtp_eagle_one_model": True}
    assert diff_llm_api(built.llm_api, "1.2.1") == []
    assert "disable_overlap_scheduler" not in built.llm_api  # one model
    text = built.steps[0].content
    assert "decoding_type: MTP" in text and "num_nextn_predict_layers: 1" in text
    assert any(c.name == "mtp layers" and c.status == "ok" for c in resolved.checks)


def test_rc29_says_the_layers_by_max_draft_len_and_has_no_one_model_key():
    resolved = run_preflight(load_build_spec(EXAMPLE), dry_run=True)
    options = llm_api_for_release(resolved, "1.3.0rc29")
    spec = options["speculative_config"]
    # rc29 fills num_nextn_predict_layers from the checkpoint and remaps a user's value to max_draft_len
    assert spec == {"decoding_type": "MTP", "max_draft_len": 1, "use_relaxed_acceptance_for_thinking": True,
                    "relaxed_topk": 3, "relaxed_delta": 0.6}
    assert diff_llm_api(options, "1.3.0rc29") == []


@pytest.mark.parametrize("version", facts_versions())
def test_every_release_with_facts_maps_mtp(version):
    facts = load_target_facts(version)
    assert decoding_type("mtp", facts) == "MTP"
    config = speculative_config(Speculation("mtp", 2, "/t"), facts)
    assert diff_llm_api({"speculative_config": config}, facts) == []


def test_two_model_mtp_on_1_2_1_and_refused_on_rc29():
    resolved, built = plan(mtp={"one_model": False})
    assert built.llm_api["speculative_config"]["mtp_eagle_one_model"] is False
    assert built.llm_api["disable_overlap_scheduler"] is True
    assert diff_llm_api(built.llm_api, "1.2.1") == []
    with pytest.raises(ConfigError) as err:
        llm_api_for_release(resolved, "1.3.0rc29")
    assert err.value.field == "mtp.one_model" and "1.3.0rc29" in err.value.message and "one_model: true" in err.value.hint


def test_layers_default_to_the_targets():
    resolved, built = plan()
    assert resolved.max_draft_len == 1 and built.llm_api["speculative_config"]["num_nextn_predict_layers"] == 1
    assert "use_relaxed_acceptance_for_thinking" not in built.llm_api["speculative_config"]  # off: not written


def test_a_target_without_mtp_layers_is_refused_naming_the_key():
    with pytest.raises(ConfigError) as err:
        plan(target=WITHOUT_MTP)
    e = err.value
    assert e.exit_code == 2 and e.field == "target" and "num_nextn_predict_layers=0" in e.message
    assert "eagle.eagle3" in e.hint and "\n" not in str(e)


def test_more_layers_than_the_target_has_are_refused():
    with pytest.raises(ConfigError) as err:
        plan(mtp={"num_nextn_predict_layers": 3})
    e = err.value
    assert e.field == "mtp.num_nextn_predict_layers" and e.value == 3 and "num_nextn_predict_layers 1" in e.message
    assert "<= 1" in e.hint
    with pytest.raises(ConfigError, match="max_draft_len"):
        plan(max_draft_len=2)  # above the target's 1, by the draft length's name
    with pytest.raises(ConfigError, match="!= mtp.num_nextn_predict_layers 1"):
        plan(max_draft_len=2, mtp={"num_nextn_predict_layers": 1})


def test_an_unreadable_target_is_unchecked_not_refused():
    resolved, built = plan(target="/models/DeepSeek-V3", mtp={"num_nextn_predict_layers": 2})
    assert any(c.name == "mtp layers" and c.status == "unchecked" for c in resolved.checks)
    assert built.llm_api["speculative_config"]["num_nextn_predict_layers"] == 2


@pytest.mark.parametrize("version", ["0.18.0", "0.19.0"])
def test_engine_targets_refuse_mtp_with_the_reason(version):
    with pytest.raises(ConfigError) as err:
        run_preflight(spec_of(workflow=None, trtllm={"version": version}), dry_run=True)
    e = err.value
    assert e.field == "workflow" and f"TensorRT-LLM {version}" in e.message and "trtllm-build has no" in e.message
    assert "trtllm.version: 1.2.1" in e.hint


def test_workflow_engine_on_1_2_1_is_refused():
    with pytest.raises(ConfigError) as err:
        run_preflight(spec_of(workflow="engine"), dry_run=True)
    assert err.value.field == "workflow" and err.value.value == "engine" and "workflow: pytorch" in err.value.hint


def test_the_reference_engine_refuses_mtp_with_the_reason():
    with pytest.raises(ConfigError) as err:
        run_preflight(spec_of(backend="torch", workflow=None), dry_run=True)
    assert err.value.field == "backend" and err.value.value == "torch"
    assert "num_nextn_predict_layers" in err.value.message and "backend: tensorrtllm" in err.value.hint
    from trtspec.spec.host import check

    with pytest.raises(ConfigError) as err:
        check(EngineConfig(target="tiny", **method_fields("mtp", 1, reference=False)))
    assert err.value.field == "method" and "cannot serve MTP honestly" in err.value.message


@pytest.mark.parametrize("bad", [{"relaxed_topk": 3}, {"relaxed_delta": 0.5}])
def test_relaxed_fields_need_relaxed_acceptance(bad):
    with pytest.raises(ConfigError) as err:
        spec_of(mtp=bad)
    assert err.value.field == f"mtp.{next(iter(bad))}" and "use_relaxed_acceptance_for_thinking: true" in err.value.hint


@pytest.mark.parametrize("version", ["1.2.1", "1.3.0rc29"])
def test_mutations_are_refused_by_name(version):
    resolved, built = plan(mtp={"num_nextn_predict_layers": 1, "use_relaxed_acceptance_for_thinking": True})
    options = built.llm_api if version == "1.2.1" else llm_api_for_release(resolved, version)
    for key, value, expect in (("num_nextn_predict_layerz", 1, "num_nextn_predict_layers"),
                               ("relaxed_topk", "3", "relaxed_topk"), ("relaxed_delta", "x", "relaxed_delta")):
        mutated = {**options, "speculative_config": {**options["speculative_config"], key: value}}
        problems = diff_llm_api(mutated, version)
        assert problems and problems[0].key == f"speculative_config.{key}", problems
        assert expect in str(problems[0])


def test_dynamo_k8s_renders_mtp_for_rc29(tmp_path):
    """`trtspec k8s` (Dynamo 1.6.1's TensorRT-LLM 1.3.0rc29) writes MTP through the LLM-API options; Dynamo's own
    validate finds nothing."""
    from trtspec.dynamo.k8s import validate
    code, out, err = run_cli(["k8s", str(EXAMPLE), "--out", str(tmp_path)])
    assert code == 0, err
    engine = yaml.safe_load((tmp_path / "engine_configs" / "agg.yaml").read_text())
    assert engine["speculative_config"]["decoding_type"] == "MTP"
    assert diff_llm_api(engine, "1.3.0rc29") == []
    assert "decoding_type: MTP" in (tmp_path / "dynamo-graph.yaml").read_text()
    from tests.dynamo.test_k8s import rendered

    result, _ = rendered(EXAMPLE, "disagg")
    assert validate(result) == []
