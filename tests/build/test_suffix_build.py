"""`trtspec build` / `trtspec k8s` with method suffix: the torch backend builds it (the reference engine serves it);
TensorRT-LLM's form is SA (suffix automaton), which 1.3.0rc29 has and 1.2.1 lacks (targets/pytorch-workflow.json):
rendered per release with the options that mean the same, the rest dropped with a note or refused by name
(methods/suffix.py `sa_form`, docs/suffix.md "TensorRT-LLM's SA")."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from tests.build.helpers import plan_of, spec_of
from tests.cli_checks import run_cli
from trtspec.build.llm_api import LlmApiRefusal, Speculation, llm_api_options, speculation_notes
from trtspec.build.plan import llm_api_for_release, llm_api_notes_for_release
from trtspec.build.preflight import run_preflight
from trtspec.config import load_build_spec
from trtspec.contracts.suffix import SuffixConfig
from trtspec.dynamo.k8s import dynamo_facts, render, validate
from trtspec.errors import ConfigError
from trtspec.methods.suffix import SUFFIX
from trtspec.resources import data_dir
from trtspec.targets import SUPPORTED_TARGETS, diff_llm_api, load_target
from trtspec.targets.llm_api import llm_api_facts

RC29 = "1.3.0rc29"
PIN = dynamo_facts()["trtllm_pin"]["tensorrt_llm"]  # the TensorRT-LLM inside Dynamo 1.6.1's image
EXAMPLE = data_dir("build_configs") / "tiny-suffix-sa.yaml"
# the values under which arctic-inference's options behave as SA does: one chain, nothing pruned, no cap
SA_READY = SuffixConfig(max_tree_depth=24, max_cached_requests=100, max_spec_factor=1.0, max_spec_offset=4.0,
                        min_token_prob=0.0, tree=False)
BASE = {"max_batch_size": 8, "kv_cache_config": {"enable_block_reuse": True}}


def suffix_spec(random_pair, **extra):
    return {"target": str(random_pair[0]), "method": "suffix",
            "engine": {"max_input_len": 64, "max_seq_len": 128}, **extra}


def sa(suffix: SuffixConfig | None, k: int = 4, batch: int = 8) -> Speculation:
    return Speculation("suffix", k, "/m/target", suffix=suffix, max_batch_size=batch)


# --- per release ------------------------------------------------------------------------------------------------


def test_the_facts_behind_the_mapping():
    assert PIN == RC29
    assert "SA" in llm_api_facts(RC29).decoding_types and "SA" not in load_target("1.2.1").llm_api.decoding_types
    assert {"max_matching_ngram_size", "enable_global_pool", "global_pool_size"} <= set(
        llm_api_facts(RC29).fields_of("SA"))


def test_rc29_renders_sa_with_the_options_that_mean_the_same():
    options = llm_api_options(sa(SA_READY), llm_api_facts(RC29), BASE)
    assert options["speculative_config"] == {"decoding_type": "SA", "max_draft_len": 4, "max_matching_ngram_size": 24,
                                             "enable_global_pool": True, "global_pool_size": 108}
    assert diff_llm_api(options, RC29) == []
    mapped, dropped = speculation_notes(sa(SA_READY), llm_api_facts(RC29))
    assert "max_tree_depth 24 -> max_matching_ngram_size 24" in mapped
    assert "max_cached_requests 100 -> enable_global_pool true, global_pool_size 108" in mapped
    for name in ("suffix.tree", "suffix.min_token_prob", "suffix.max_spec_factor", "max_spec_offset"):
        assert name in dropped


def test_rc29_without_the_cross_request_cache_has_no_pool():
    config = dataclasses.replace(SA_READY, max_cached_requests=0, max_tree_depth=200)  # no pool: no 64-token cap
    speculative = llm_api_options(sa(config), llm_api_facts(RC29), BASE)["speculative_config"]
    assert speculative == {"decoding_type": "SA", "max_draft_len": 4, "max_matching_ngram_size": 200,
                           "enable_global_pool": False}
    assert diff_llm_api({"speculative_config": speculative}, RC29) == []
    assert "enable_global_pool false" in speculation_notes(sa(config), llm_api_facts(RC29))[0]


@pytest.mark.parametrize(("change", "field", "words"), [
    ({"tree": True}, "suffix.tree", "one chain"),
    ({}, "suffix.tree", "one chain"),  # the defaults: a tree, refused by name as the default
    ({"min_token_prob": 0.1}, "suffix.min_token_prob", "prunes nothing"),
    ({"max_spec_offset": 0.0}, "suffix.max_spec_offset", "max_spec_factor 1.0"),
    ({"max_spec_factor": 2.0, "max_spec_offset": 1.0}, "suffix.max_spec_offset", "max_spec_factor 2.0"),
    ({"max_tree_depth": 65}, "suffix.max_tree_depth", "at most 64 tokens"),
    ({"max_cached_requests": 1017}, "suffix.max_cached_requests", "at most 1024 requests"),
])
def test_rc29_refuses_by_name_what_sa_has_no_counterpart_for(change, field, words):
    config = dataclasses.replace(SA_READY, **change) if change else SuffixConfig()
    with pytest.raises(ConfigError) as err:
        llm_api_options(sa(config), llm_api_facts(RC29), BASE)
    assert err.value.field == field and err.value.exit_code == 2
    assert f"TensorRT-LLM {RC29}'s SA has no counterpart" in err.value.message and words in err.value.message
    assert "backend: torch" in err.value.hint


def test_rc29_pool_limits_at_their_edges():
    assert llm_api_options(sa(dataclasses.replace(SA_READY, max_tree_depth=64, max_cached_requests=1016)),
                           llm_api_facts(RC29), BASE)["speculative_config"]["global_pool_size"] == 1024
    big_k = dataclasses.replace(SA_READY, max_spec_factor=2.0, max_spec_offset=6.0)  # 2 + 6 >= k 8: never binds
    assert llm_api_options(sa(big_k, k=8), llm_api_facts(RC29), BASE)["speculative_config"]["max_draft_len"] == 8


def test_rc29_pool_limits_are_read_from_the_facts():
    facts = llm_api_facts(RC29)
    sa_type = facts.decoding_types["SA"]
    pool = sa_type.limits["global_pool"]
    assert (pool["match_max"], pool["slots_max"]) == (64, 1024) and sa_type.limits["sources"] == ["llm_args_1_3_c1"]
    # other limits in the facts move the refusals with them (nothing is hard-coded in the suffix home)
    tighter = dataclasses.replace(sa_type, limits={"global_pool": {"match_max": 16, "slots_max": 200}})
    narrow = dataclasses.replace(facts, decoding_types={**facts.decoding_types, "SA": tighter})
    with pytest.raises(ConfigError, match="at most 16 tokens") as err:
        llm_api_options(sa(SA_READY), narrow, BASE)  # max_tree_depth 24 > 16
    assert err.value.field == "suffix.max_tree_depth"
    with pytest.raises(ConfigError, match="at most 200 requests") as err:
        llm_api_options(sa(dataclasses.replace(SA_READY, max_tree_depth=16, max_cached_requests=193)), narrow, BASE)
    assert err.value.field == "suffix.max_cached_requests" and "max_cached_requests <= 192" in err.value.hint
    assert llm_api_options(sa(dataclasses.replace(SA_READY, max_tree_depth=16, max_cached_requests=192)), narrow,
                           BASE)["speculative_config"]["global_pool_size"] == 200


def test_1_2_1_refuses_suffix_naming_the_fact(random_pair):
    fact = load_target("1.2.1").llm_api.invalid_decoding_types["SA"]
    assert "llm_args_sa_later" in fact
    spec = spec_of(**suffix_spec(random_pair, backend="tensorrtllm", workflow="pytorch", trtllm={"version": "1.2.1"},
                                 suffix=dataclasses.asdict(SA_READY)))
    with pytest.raises(LlmApiRefusal) as err:
        run_preflight(spec, dry_run=True)
    assert err.value.field == "method" and err.value.exit_code == 2
    assert "TensorRT-LLM 1.2.1 has no SA decoding type" in err.value.message and fact in err.value.message
    assert "SA exists from 1.3: render for Dynamo with `trtspec k8s" in err.value.hint
    assert "nearest: ngram" in err.value.message


@pytest.mark.parametrize("version", SUPPORTED_TARGETS)
def test_the_engine_flow_refuses_suffix_with_the_reason(random_pair, version):
    target = load_target(version)  # no build mode or Triton decoding mode has suffix decoding
    words = [*target.trtllm_build["choices"]["--speculative_decoding_mode"], *target.decoding_modes]
    assert not [w for w in words if "suffix" in w.lower() or w == "SA"]
    with pytest.raises(ConfigError) as err:
        run_preflight(spec_of(**suffix_spec(random_pair, backend="tensorrtllm", workflow="engine",
                                            trtllm={"version": version})), dry_run=True)
    assert err.value.field == "workflow" and err.value.exit_code == 2
    assert SUFFIX.engine_flow_unsupported in err.value.message and "trtspec k8s" in err.value.hint


def test_torch_backend_builds_suffix(random_pair):
    resolved, plan = plan_of(**suffix_spec(random_pair, backend="torch", max_draft_len=16))
    assert resolved.max_draft_len == 16 and plan.method == "suffix"
    assert run_preflight(spec_of(**suffix_spec(random_pair, backend="torch"))).max_draft_len == 4  # the default k


# --- trtspec k8s: Dynamo 1.6.1 / TensorRT-LLM 1.3.0rc29 -----------------------------------------------------------


def test_the_example_renders_sa_for_dynamo_and_validates():
    spec = load_build_spec(EXAMPLE)
    resolved = run_preflight(spec, dry_run=True, release=PIN)
    options = llm_api_for_release(resolved, PIN)
    assert options["speculative_config"] == {"decoding_type": "SA", "max_draft_len": 4, "max_matching_ngram_size": 24,
                                             "enable_global_pool": True, "global_pool_size": 256}
    assert diff_llm_api(options, PIN) == []
    assert len(llm_api_notes_for_release(resolved, PIN)) == 2
    for mode in ("agg", "disagg"):
        result = render(options, name="tiny-suffix-sa", model_path=resolved.models["target"].path,
                        served_model_name="tiny-suffix-sa", tp_size=1, trtllm_version=PIN, mode=mode)
        assert validate(result) == []


def test_trtspec_k8s_writes_sa_and_prints_the_mapping(tmp_path):
    code, out, err = run_cli(["k8s", str(EXAMPLE), "--out", str(tmp_path / "o")])
    assert code == 0, err
    written = yaml.safe_load((tmp_path / "o" / "engine_configs" / "agg.yaml").read_text())
    assert written["speculative_config"]["decoding_type"] == "SA" and diff_llm_api(written, PIN) == []
    assert f"# note: suffix -> TensorRT-LLM {PIN}'s SA: max_tree_depth 24" in out
    assert "# note: dropped (SA behaves the same): suffix.tree false" in out


def test_trtspec_k8s_refuses_a_suffix_tree_by_name(tmp_path):
    config = yaml.safe_load(EXAMPLE.read_text())
    config["suffix"]["tree"] = True
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    code, _, err = run_cli(["k8s", str(tmp_path / "c.yaml"), "--out", str(tmp_path / "o")])
    assert code == 2 and "Error: suffix.tree=" in err and "SA has no counterpart" in err
    assert not (tmp_path / "o").exists()


def test_trtspec_build_on_1_2_1_still_refuses_with_the_k8s_hint(tmp_path):
    config = {**yaml.safe_load(EXAMPLE.read_text()), "backend": "tensorrtllm", "workflow": "pytorch",
              "trtllm": {"version": "1.2.1"}, "output": str(tmp_path / "out")}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    code, _, err = run_cli(["build", str(tmp_path / "c.yaml"), "--dry-run"])
    assert code == 2 and "has no SA decoding type" in err and "llm_args_sa_later" in err
    assert "SA exists from 1.3: render for Dynamo with `trtspec k8s" in err
