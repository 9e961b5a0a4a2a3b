"""The controls model of each TensorRT-LLM release (trtspec/targets/controls.py, facts in controls.json): NVIDIA's own
unit-test vectors pass through it, the canonical schedule round-trips through each release's form, and what a release
ignores or refuses is named."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trtspec.contracts.schedule import SpecSchedule
from trtspec.targets.controls import facts, release, releases, vectors


def test_every_fact_names_its_sources():
    known = facts()["sources"]
    for rel in releases():
        for section in ("schedule", "max_concurrency", "gate", "forms"):
            assert rel.facts[section]["sources"], (rel.name, section)
            assert set(rel.facts[section]["sources"]) <= set(known), (rel.name, section)
    for source in known.values():
        assert source.get("commit") or source.get("index_id") or source.get("url") or source.get("via")
    for kind in ("gate", "max_concurrency", "draft_len_schedule"):
        assert all(v["source"] in known for v in vectors(kind))


@pytest.mark.parametrize("vector", vectors("gate"), ids=lambda v: f"{v['release']}-{v['test']}")
def test_nvidia_gate_vectors(vector):
    """1.2.1's test passes avg decoded tokens per iteration (record_avg_decoded(2.0) counts 1.0: the bonus token is not
    an accepted draft token); 1.3.0rc29's passes rates."""
    rel = release(vector["release"])
    gate = rel.gate(vector["window"], vector["threshold"])
    for value, (disabled_now, mean) in zip(vector["records"], vector["expect"], strict=True):
        recorded = rel.accepted_per_iteration(value) if rel.unit == "accepted_per_iteration" else value
        got_disabled, got_mean = gate.record(recorded)
        assert got_disabled is disabled_now
        assert got_mean == (None if mean is None else pytest.approx(mean))
    assert gate.disabled is vector["disabled"]


def test_the_recorded_value_is_accepted_draft_tokens_per_iteration():
    rel = release("1.2.1")
    assert rel.accepted_per_iteration(2.0) == 1.0 and rel.accepted_per_iteration(0.5) == 0.0  # clamped at 0
    # a request of 10 tokens in 5 target forwards (its prompt pass included) decoded 2.0 per iteration: 1.0 accepted
    assert rel.request_gate_value(10, 5) == 1.0 and rel.request_gate_value(0, 0) == 0.0
    assert release("1.3.0rc29").iteration_gate_value(8, 2) == 0.25 and release("1.3.0rc29").iteration_gate_value(0, 0) is None
    with pytest.raises(ValueError):
        release("1.3.0rc29").gate(3, 0.5).record(1.5)  # a rate outside [0, 1]


@pytest.mark.parametrize("vector", vectors("max_concurrency"), ids=lambda v: v["release"])
def test_nvidia_max_concurrency_vectors(vector):
    rel = release(vector["release"])
    for case in vector["cases"]:
        assert rel.speculates(vector["max_concurrency"], case["requests"], case["max_batch_size"],
                              case["max_num_tokens"], vector["draft_len"]) is case["speculates"], case


@pytest.mark.parametrize("vector", vectors("draft_len_schedule"), ids=lambda v: v["release"])
def test_nvidia_schedule_vectors(vector):
    rel = release(vector["release"])
    schedule = {int(k): v for k, v in vector["schedule"].items()}
    for batch, draft_len in vector["expect"].items():
        assert rel.lookup(schedule, int(batch), vector["max_draft_len"]) == draft_len, batch


def test_the_schedule_in_each_release_form():
    """1.2.1 reads it as it is; 1.3.0rc29's keys are the last batch size of each run, max_concurrency folded in (the
    release refuses both together), 0 above the last key."""
    canonical = {1: 4, 4: 2, 8: 0}
    assert release("1.2.1").release_schedule(canonical, 12, 16) == (canonical, 12)
    assert release("1.3.0rc29").release_schedule(canonical, None, 16) == ({3: 4, 7: 2}, None)
    assert release("1.3.0rc29").release_schedule({1: 4, 4: 2}, 6, 16) == ({3: 4, 6: 2}, None)
    assert release("1.3.0rc29").release_schedule({1: 4}, None, 16) == ({16: 4}, None)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 24), st.dictionaries(st.integers(2, 24), st.integers(0, 6), max_size=6), st.integers(0, 6),
       st.one_of(st.none(), st.integers(1, 24)))
def test_release_forms_read_as_the_canonical_schedule(max_batch, rest, first, max_concurrency):
    """At every batch size up to the max batch size, each release reads its own form of a schedule (and
    max_concurrency) as trtspec's engine runs the canonical one."""
    max_draft_len = max([first, *rest.values()])
    canonical = SpecSchedule(draft_len=((1, max_draft_len), *sorted(rest.items())), max_concurrency=max_concurrency)
    for rel in releases():
        schedule, concurrency = rel.release_schedule(dict(canonical.draft_len or ()), max_concurrency, max_batch)
        for batch in range(1, max_batch + 1):
            draft = rel.lookup(schedule, batch, max_draft_len) if rel.speculates(concurrency, batch, max_batch) else 0
            assert draft == canonical.draft_len_at(batch, max_draft_len), (rel.name, batch, schedule)
        if schedule:
            assert schedule[min(schedule)] == max_draft_len or rel.facts["schedule"]["requires_batch_1"]


def test_forms_that_ignore_or_lack_facts_are_named():
    rel = release("1.2.1")
    one_model = {"decoding_type": "Eagle", "max_draft_len": 3, "acceptance_window": 8,
                 "acceptance_length_threshold": 0.5}
    problems = rel.problems(one_model, "Eagle")
    assert [p.key for p in problems] == ["acceptance_window", "acceptance_length_threshold"]
    assert "ignores it" in problems[0].problem and "eagle3_one_model: false" in problems[0].fix
    assert rel.problems({**one_model, "eagle3_one_model": False}, "Eagle") == []
    assert rel.problems({"draft_len_schedule": {1: 4}}, "DraftTarget") == []
    rc29 = release("1.3.0rc29")
    renamed = rc29.problems({"acceptance_window": 8, "acceptance_length_threshold": 0.5}, "Eagle3")
    assert {p.key for p in renamed} == {"acceptance_window", "acceptance_length_threshold"}
    assert all("acceptance_rate" in p.fix for p in renamed)
    both = rc29.problems({"draft_len_schedule": {4: 4}, "max_concurrency": 4}, "Eagle3")
    assert [p.key for p in both] == ["max_concurrency"] and "mutually exclusive" in both[0].problem
    unverified = rc29.problems({"max_concurrency": 4}, "NGram")
    assert unverified and "no fact was read" in unverified[0].problem
    assert [p.key for p in rc29.problems({"acceptance_rate_window_size": 4, "acceptance_rate_threshold": 1.5},
                                         "Eagle3")] == ["acceptance_rate_threshold"]


def test_the_engine_refuses_a_releases_exact_controls_for_a_form_that_ignores_them():
    from trtspec.contracts.engine import EngineConfig
    from trtspec.errors import ConfigError

    base = {"target": "tiny", "draft_len_schedule": "1:3", "max_k": "4"}
    with pytest.raises(ConfigError) as err:
        EngineConfig.from_parameters({**base, "method": "eagle3", "speculation_controls": "trtllm-1.2.1"})
    assert "speculation_controls" in err.value.field and "no drafter" in err.value.problem
    # trtspec's own controls run them for any method; 1.3.0rc29 reads them on one-model forms (its Draft_Target)
    assert EngineConfig.from_parameters({**base, "method": "eagle3"}).schedule is not None
    assert release("1.3.0rc29").tag("DraftTarget") == "Draft_Target" and release("1.2.1").tag("DraftTarget") == "DraftTarget"
    assert EngineConfig.from_parameters({**base, "method": "draft_target", "draft": "tiny-draft",
                                         "speculation_controls": "trtllm-1.3.0rc29"}).schedule.exact


def test_what_1_3_cannot_express_is_refused_not_rendered_empty():
    """max_concurrency 0 (never speculate) has no 1.3.0rc29 form (a positive integer, and an empty schedule means
    max_draft_len everywhere); an empty schedule is refused by the check of any file."""
    from trtspec.build.llm_api import Speculation, llm_api_options
    from trtspec.errors import ConfigError
    from trtspec.targets.llm_api import diff_llm_api, llm_api_facts

    facts = llm_api_facts("1.3.0rc29")
    with pytest.raises(ConfigError) as err:
        llm_api_options(Speculation("eagle", 3, "/t", draft_model="/e", eagle3=True, max_batch_size=8,
                                    controls={"draft_len_schedule": {1: 3, 4: 2}, "max_concurrency": 0}), facts, {})
    assert err.value.field == "llm_api.max_concurrency" and "method: none" in err.value.hint
    problems = diff_llm_api({"speculative_config": {"decoding_type": "Eagle3", "max_draft_len": 3,
                                                    "speculative_model": "/e", "draft_len_schedule": {}}}, facts)
    assert [p.key for p in problems] == ["speculative_config.draft_len_schedule"] and "empty" in problems[0].problem


@pytest.mark.parametrize("text", ["\u0663", "1_0", " 4x"])
def test_integer_parameters_are_ascii_digits(text):
    from trtspec.errors import ConfigError

    with pytest.raises(ConfigError):
        SpecSchedule.from_parameters({"max_concurrency": text})
