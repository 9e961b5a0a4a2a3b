"""The LLM-API options (build/llm_api.py) against each release's facts (targets/llm_api.py): every method maps to a
PyTorch decoding type or is refused naming the method, the target and the nearest method; every written file has
exactly the keys the target's facts allow (a mutation with one unknown key fails the check); schedules that break
the rules are exit 2 naming the entry; `trtspec doctor --llm-api` on good and bad files; no input makes the check
raise."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.build.helpers import plan_of, write_config
from tests.cli_checks import run_cli
from trtspec.build.llm_api import (
    LlmApiRefusal,
    Speculation,
    decoding_type,
    llm_api_options,
    llm_api_yaml,
    load_target_facts,
    speculative_config,
    validate_llm_api,
)
from trtspec.build.plan import engine_config, plan_build
from trtspec.build.preflight import run_preflight
from trtspec.config import load_build_spec
from trtspec.contracts.suffix import SuffixConfig
from trtspec.errors import ConfigError
from trtspec.methods import METHODS
from trtspec.targets import SUPPORTED_TARGETS, diff_llm_api, load_target
from trtspec.targets.llm_api import facts_versions

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "build_configs").glob("*.yaml"))
WITH_FACTS = [v for v in SUPPORTED_TARGETS if load_target(v).llm_api.verified]
MAPPED = {"none": None, "draft_target": "DraftTarget", "ngram": "NGram", "eagle3": "Eagle", "mtp": "MTP"}
# a release's own tag for a mapped type where its facts have it (1.3.0rc29: EAGLE-3's own class; the pydantic
# discriminator spells draft-target with an underscore, pytorch-workflow.json invalid_decoding_types)
LATER_TAG = {"Eagle": "Eagle3", "DraftTarget": "Draft_Target"}
REFUSED = {"medusa": "eagle", "lookahead": "ngram", "redrafter": "eagle", "eagle": "eagle",
           "suffix_draft": "draft_target", "suffix_eagle3": "eagle"}  # hybrids: tests/build/test_hybrid_build.py
# mapped where the release has the decoding type, else refused naming the nearest method (suffix: SA from 1.3)
LATER = {"suffix": ("SA", "ngram")}
# suffix options whose behaviour SA has (tree false, nothing pruned, a cap that never binds; docs/suffix.md)
SA_READY = SuffixConfig(tree=False, min_token_prob=0.0, max_spec_offset=4.0, max_cached_requests=100)


def test_every_method_is_mapped_or_refused():
    assert set(MAPPED) | set(REFUSED) | set(LATER) == set(METHODS)


@pytest.mark.parametrize("version", facts_versions())
@pytest.mark.parametrize("method", sorted(METHODS))
def test_each_method_maps_to_a_pytorch_decoding_type_or_is_refused(method, version):
    facts = load_target_facts(version)
    refused = REFUSED.get(method) or (LATER[method][1] if method in LATER and LATER[method][0] not in
                                      facts.decoding_types else None)
    if refused:
        with pytest.raises(LlmApiRefusal) as err:
            decoding_type(method, facts)
        assert err.value.exit_code == 2 and err.value.field == "method" and err.value.value == method
        assert f"TensorRT-LLM {version}" in err.value.message and f"nearest: {refused}" in err.value.message
        return
    expected = MAPPED[method] if method in MAPPED else LATER[method][0]
    if LATER_TAG.get(expected) in facts.decoding_types:
        expected = LATER_TAG[expected]
    assert decoding_type(method, facts) == expected
    spec = Speculation(method, 4, "/m/target", draft_model="/m/draft" if method in ("draft_target", "eagle3") else None,
                       suffix=SA_READY if method == "suffix" else None)
    config = speculative_config(spec, facts)
    if config is None:
        assert method == "none"
        return
    kind = config["decoding_type"]
    assert facts.decoding_types[kind].runs_on_pytorch
    assert set(config) - {"decoding_type"} <= set(facts.fields_of(kind))
    assert diff_llm_api({"speculative_config": config}, facts) == []
    if spec.draft_model:
        assert config[facts.draft_model_field] == "/m/draft"  # speculative_model (1.2.1) / speculative_model_dir (1.0.0)


def test_eagle3_one_and_two_model():
    facts = load_target_facts("1.2.1")
    one = speculative_config(Speculation("eagle", 3, "/t", draft_model="/e", eagle3=True), facts)
    two = speculative_config(Speculation("eagle", 3, "/t", draft_model="/e", eagle3=True, eagle3_one_model=False),
                             facts)
    assert one == {"decoding_type": "Eagle", "max_draft_len": 3, "speculative_model": "/e", "eagle3_one_model": True}
    assert two is not None and two["eagle3_one_model"] is False


CASES = [(p, v) for p in CONFIGS for v in WITH_FACTS]
# A target and draft given as local checkpoint directories (the embedded pair's): planning reads their config.json,
# weights headers and tokenizer.json only, so these tests need no random pair (a torch and transformers import).
LOCAL_PAIR = (ROOT / "trtspec" / "assets" / "models" / "tiny", ROOT / "trtspec" / "assets" / "models" / "tiny-draft")


@pytest.mark.parametrize(("path", "version"), CASES, ids=[f"{p.stem}@{v}" for p, v in CASES])
def test_written_file_has_exactly_the_keys_the_target_allows(path, version):
    """The engine workflow writes the file beside the engines or notes why not; the PyTorch workflow writes it or
    refuses the method (tests/build/test_pytorch_workflow.py): the same file where both write one."""
    spec = load_build_spec(path, overrides={"trtllm": {"version": version}, "workflow": "engine"})
    if spec.backend == "torch" or spec.method == "suffix":
        pytest.skip(f"{path.name}: no TensorRT-LLM options file ({spec.backend} backend, method {spec.method})")
    if METHODS[spec.method].engine_flow_unsupported:  # MTP: the LLM API only; the file is the PyTorch workflow's
        with pytest.raises(ConfigError, match="workflow='engine'.*trtllm-build has no"):
            run_preflight(spec, dry_run=True)
        spec = spec.model_copy(update={"workflow": "pytorch"})
    plan = plan_build(run_preflight(spec, dry_run=True))
    if plan.llm_api is None:
        assert any(n.startswith(("no LLM-API form", "no LLM-API file")) for n in plan.notes)
        return
    facts = load_target(version).llm_api
    options = yaml.safe_load(next(s.content for s in plan.steps if s.id == "write-llm-api"))
    assert options == plan.llm_api and diff_llm_api(options, facts) == []
    pytorch = plan_build(run_preflight(spec.model_copy(update={"workflow": "pytorch"}), dry_run=True))
    assert pytorch.llm_api == options  # one options file, whichever workflow writes it
    assert set(options) <= {f.name for f in facts.top_level}
    assert set(options["kv_cache_config"]) <= {f.name for f in facts.kv_cache_fields}
    # a throwaway mutation: one unknown key, top level and inside speculative_config, fails the check by name
    top = {**copy.deepcopy(options), "max_batch_sizes": 1}
    assert [p.key for p in diff_llm_api(top, facts)] == ["max_batch_sizes"]
    assert "nearest argument: max_batch_size" in str(diff_llm_api(top, facts)[0])
    if "speculative_config" in options:
        inner = copy.deepcopy(options)
        inner["speculative_config"]["max_draft_length"] = 3
        assert [p.key for p in diff_llm_api(inner, facts)] == ["speculative_config.max_draft_length"]
        assert "nearest key: max_draft_len" in str(diff_llm_api(inner, facts)[0])


def test_the_file_is_yaml_with_comment_only_headers():
    options = {"speculative_config": {"decoding_type": "DraftTarget", "max_draft_len": 2,
                                      "speculative_model": "/m/a: b\n# c"}}
    text = llm_api_yaml(options, ["first\nsecond: x", "third"])
    assert text.splitlines()[:3] == ["# first", "# second: x", "# third"]
    assert yaml.safe_load(text) == options
    # every line break YAML knows (\r, NEL, LS, PS) starts a new comment line, never a key
    text = llm_api_yaml(options, ["a\rb: 1\x85c: 2\u2028d: 3\u2029e: 4\r\nf: 5"])
    assert yaml.safe_load(text) == options


def test_controls_are_written_where_the_target_reads_them():
    target, draft = LOCAL_PAIR
    controls = {"max_concurrency": 8, "draft_len_schedule": {1: 3, 4: 2, 8: 0}, "acceptance_window": 16,
                "acceptance_length_threshold": 1.5}
    _, plan = plan_of(target=str(target), draft=str(draft), method="draft_target", max_draft_len=3,
                      engine={"max_input_len": 64, "max_seq_len": 128}, trtllm={"version": "1.2.1"}, llm_api=controls)
    assert {k: plan.llm_api["speculative_config"][k] for k in controls} == controls


SCHEDULE = "llm_api.draft_len_schedule"
# (llm_api controls, the entry the error names, words of the rule both backends state, the rule is the target's:
# TensorRT-LLM 1.2.1 names itself in the tensorrtllm build's error). The bad input: keys < 1 or above the max
# batch size, draft lengths above max_draft_len or negative, no batch size 1, non-integers, a threshold that is not
# finite, a window < 1.
BAD_CONTROLS = [
    ({"draft_len_schedule": {2: 3}}, SCHEDULE, ("must contain batch size 1",), True),
    ({"draft_len_schedule": {1: 3, 4: 5}}, f"{SCHEDULE}[4]", ("draft length", "max_draft_len 3"), True),
    ({"draft_len_schedule": {1: 3, 0: 1}}, f"{SCHEDULE}[0]", ("batch-size key", "must be an integer"), True),
    ({"draft_len_schedule": {1: 3, -2: 1}}, f"{SCHEDULE}[-2]", ("batch-size key", "must be an integer"), True),
    ({"draft_len_schedule": {1: 3, 4: -1}}, f"{SCHEDULE}[4]", ("must be an integer >= 0",), True),
    ({"draft_len_schedule": {1: 3, 16: 1}}, f"{SCHEDULE}[16]", ("above engine.max_batch_size 8",), False),
    ({"draft_len_schedule": {1: 3, 2.5: 1}}, f"{SCHEDULE}[2.5]", ("batch-size key must be an integer >= 1",), False),
    ({"draft_len_schedule": {1: 3, "4": 1}}, f"{SCHEDULE}['4']", ("batch-size key must be an integer >= 1",), False),
    ({"draft_len_schedule": {1: 3, 4: 1.5}}, f"{SCHEDULE}[4]", ("draft length must be an integer >= 0",), False),
    ({"draft_len_schedule": {1: 3, 4: True}}, f"{SCHEDULE}[4]", ("draft length must be an integer >= 0",), False),
    ({"draft_len_schedule": [1, 3]}, SCHEDULE, ("valid dictionary",), False),
    ({"acceptance_window": 8, "acceptance_length_threshold": float("inf")}, "llm_api.acceptance_length_threshold",
     ("finite number",), False),
    ({"acceptance_window": 8, "acceptance_length_threshold": float("nan")}, "llm_api.acceptance_length_threshold",
     ("finite number",), False),
    ({"acceptance_window": 8, "acceptance_length_threshold": "high"}, "llm_api.acceptance_length_threshold",
     ("valid number",), False),
    ({"acceptance_window": 0, "acceptance_length_threshold": 1.5}, "llm_api.acceptance_window",
     ("needs a window of at least 1",), False),
    ({"acceptance_window": -1, "acceptance_length_threshold": 1.5}, "llm_api.acceptance_window",
     ("greater than or equal to 0",), False),
    ({"acceptance_window": 2.5, "acceptance_length_threshold": 1.5}, "llm_api.acceptance_window",
     ("valid integer",), False),
    ({"acceptance_length_threshold": 1.5}, "llm_api.acceptance_length_threshold", ("needs a window of at least 1",),
     False),
    ({"acceptance_window": 8}, "llm_api.acceptance_length_threshold", ("is required with acceptance_window 8",),
     False),
    ({"max_concurrency": -1}, "llm_api.max_concurrency", ("greater than or equal to 0",), False),
    ({"max_concurrency": "4"}, "llm_api.max_concurrency", ("valid integer",), False),
]


@pytest.mark.parametrize("backend", ["torch", "tensorrtllm"])
@pytest.mark.parametrize(("controls", "entry", "rule", "targets_rule"), BAD_CONTROLS)
def test_bad_controls_exit_2_naming_the_entry_and_rule(tmp_path, backend, controls, entry, rule, targets_rule):
    target, draft = LOCAL_PAIR
    config = write_config(tmp_path / "c.yaml", target=str(target), draft=str(draft), method="draft_target",
                          max_draft_len=3, backend=backend, output=str(tmp_path / "out"),
                          engine={"max_input_len": 64, "max_seq_len": 128, "max_batch_size": 8},
                          trtllm={"version": "1.2.1"}, llm_api=controls)
    code, out, err = run_cli(["build", str(config), "--dry-run"])
    assert code == 2, out + err
    lines = [line for line in err.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1 and f"Error: {entry}=" in lines[0] and all(words in lines[0] for words in rule), lines
    assert ("TensorRT-LLM 1.2.1" in lines[0]) == (targets_rule and backend == "tensorrtllm"), lines


GATE = {"acceptance_window": 8, "acceptance_length_threshold": 0.5}


@pytest.mark.parametrize(("one_model", "refused"), [(True, True), (False, False)])
def test_controls_on_one_model_eagle3_are_refused_naming_the_fix(tmp_path, one_model, refused):
    """TensorRT-LLM 1.2.1 applies the controls through a drafter; one-model EAGLE-3 (its default) has none and would
    ignore them without a word (targets/controls.json, 1.2.1 forms)."""
    config = write_config(tmp_path / "c.yaml", target="/models/t", method="eagle", max_draft_len=3,
                          eagle={"model": "/models/e", "eagle3": True, "one_model": one_model},
                          trtllm={"version": "1.2.1"}, llm_api=GATE, output=str(tmp_path / "out"))
    code, out, err = run_cli(["build", str(config), "--dry-run"])
    if not refused:
        assert code == 0, err
        assert "acceptance_length_threshold: 0.5" in out and "eagle3_one_model: false" in out
        return
    line = next(line for line in err.splitlines() if line.startswith("Error:"))
    assert code == 2 and "llm_api.acceptance_window=8" in line and "ignores it" in line and "no drafter" in line
    assert "eagle3_one_model: false" in err  # the fix


def test_another_releases_gate_is_refused():
    with pytest.raises(ConfigError) as err:
        llm_api_options(Speculation("ngram", 3, "/t", controls={"acceptance_rate_window_size": 8,
                                                                "acceptance_rate_threshold": 0.3}),
                        load_target("1.2.1"), {})
    assert err.value.field == "llm_api.acceptance_rate_window_size" and "1.3.0rc29's gate" in err.value.message


def test_schedule_1_is_max_draft_len_on_the_target(tmp_path):
    """TensorRT-LLM 1.2.1's own rule (schedule[1] == max_draft_len); the reference engine caps k at it instead."""
    target, draft = LOCAL_PAIR
    config = write_config(tmp_path / "c.yaml", target=str(target), draft=str(draft), method="draft_target",
                          max_draft_len=3, engine={"max_input_len": 64, "max_seq_len": 128},
                          trtllm={"version": "1.2.1"}, llm_api={"draft_len_schedule": {1: 2}})
    code, out, err = run_cli(["build", str(config), "--dry-run"])
    line = next(line for line in err.splitlines() if line.startswith("Error:"))
    assert code == 2 and f"{SCHEDULE}[1]=2" in line and "!= max_draft_len 3" in line and "TensorRT-LLM 1.2.1" in line


def test_a_control_a_release_does_not_read_is_refused():
    with pytest.raises(ConfigError) as err:
        speculative_config(Speculation("ngram", 3, "/t", controls={"max_concurrency": 2}), load_target_facts("1.0.0"))
    assert err.value.field == "llm_api.max_concurrency" and "1.0.0" in err.value.message and "1.2.1" in err.value.hint


def test_refused_method_in_the_plan_notes_names_the_nearest():
    _, plan = plan_of(target=str(LOCAL_PAIR[0]), method="lookahead", lookahead=[4, 4, 4],
                      engine={"max_input_len": 64, "max_seq_len": 128}, trtllm={"version": "1.2.1"}, workflow="engine")
    assert plan.llm_api is None
    assert any("Lookahead does not run on TensorRT-LLM 1.2.1's PyTorch backend" in n and "nearest method: ngram" in n
               for n in plan.notes)


# --- doctor --llm-api ---------------------------------------------------------------------------------------------

GOOD = {"max_batch_size": 8, "kv_cache_config": {"free_gpu_memory_fraction": 0.8},
        "speculative_config": {"decoding_type": "NGram", "max_draft_len": 4, "max_matching_ngram_size": 2,
                               "draft_len_schedule": {1: 4, 8: 2, 32: 0}, "acceptance_window": 0}}


def test_doctor_llm_api_good_file(tmp_path):
    path = tmp_path / "o.yaml"
    path.write_text(yaml.safe_dump(GOOD))
    code, out, _ = run_cli(["doctor", "--llm-api", str(path), "--trtllm-version", "1.2.1"])
    assert code == 0 and "valid for TensorRT-LLM 1.2.1 (validator: facts 1.2.1)" in out
    assert "tensorrt_llm is not importable here" in out  # the fallback says so


@pytest.mark.parametrize(("mutate", "key", "words"), [
    (lambda o: o.update(max_batch_sizes=1), "max_batch_sizes", "nearest argument: max_batch_size"),
    (lambda o: o["speculative_config"].update(max_matching_ngram=2), "speculative_config.max_matching_ngram",
     "nearest key: max_matching_ngram_size"),
    (lambda o: o["speculative_config"].update(decoding_type="Eagle3"), "speculative_config.decoding_type",
     "nearest decoding type: Eagle"),
    (lambda o: o["speculative_config"].update(draft_len_schedule={2: 4}), "speculative_config.draft_len_schedule",
     "must contain batch size 1"),
    (lambda o: o["speculative_config"].update(acceptance_length_threshold=-1.0),
     "speculative_config.acceptance_length_threshold", "is outside >= 0"),
    (lambda o: o["speculative_config"].update(max_concurrency=-1), "speculative_config.max_concurrency",
     "is not an integer >= 0"),
    (lambda o: o.update(speculative_config={"decoding_type": "Eagle", "max_draft_len": 3, "speculative_model": "/e",
                                            "acceptance_window": 8, "acceptance_length_threshold": 0.5}),
     "speculative_config.acceptance_window", "ignores it"),
    (lambda o: o["speculative_config"].update(acceptance_rate_window_size=8, acceptance_rate_threshold=0.3),
     "speculative_config.acceptance_rate_threshold", "1.3.0rc29's gate"),
    (lambda o: o["speculative_config"].update(decoding_type="Medusa", max_draft_len=4), "speculative_config.decoding_type",
     "does not run on TensorRT-LLM 1.2.1's PyTorch backend"),
])
def test_doctor_llm_api_bad_file_exits_2_naming_the_key(tmp_path, mutate, key, words):
    options = copy.deepcopy(GOOD)
    mutate(options)
    path = tmp_path / "o.yaml"
    path.write_text(yaml.safe_dump(options))
    code, out, _ = run_cli(["doctor", "--llm-api", str(path), "--trtllm-version", "1.2.1"])
    assert code == 2
    assert any(line.strip().startswith(f"{key}:") and words in line for line in out.splitlines()), out


@pytest.mark.parametrize(("text", "words"), [("a: [1\n", "is not valid YAML: "), (None, "cannot be read")])
def test_doctor_llm_api_unreadable_file_is_one_line_exit_2(tmp_path, text, words):
    path = tmp_path / "o.yaml"
    if text is not None:
        path.write_text(text)
    code, _, err = run_cli(["doctor", "--llm-api", str(path)])
    assert code == 2 and words in err and "Traceback" not in err


def test_doctor_llm_api_release_without_facts(tmp_path):
    path = tmp_path / "o.yaml"
    path.write_text("{}\n")
    code, _, err = run_cli(["doctor", "--llm-api", str(path), "--trtllm-version", "0.19.0"])
    assert code == 2 and "has no LLM-API facts" in err and "1.2.1" in err
    code, out, _ = run_cli(["doctor", "--llm-api", str(path), "--trtllm-version", "1.0.0", "--json"])
    assert code == 0 and '"validator": "facts 1.0.0"' in out


# --- never a traceback ------------------------------------------------------------------------------------------------

KEYS = st.sampled_from(["max_batch_size", "speculative_config", "kv_cache_config", "decoding_type", "max_draft_len",
                        "draft_len_schedule", "speculative_model", "speculative_model_dir", "eagle3_one_model",
                        "acceptance_window", "x", "", "1"])
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-5, 40), st.floats(allow_nan=True),
                    st.sampled_from(["NGram", "Eagle", "DraftTarget", "Medusa", "AUTO", "Eagle3", "", "\x00"]))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.one_of(KEYS, st.integers(-2, 40), st.booleans()), inner,
                                                 max_size=4)), max_leaves=12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(options=st.one_of(VALUES, st.dictionaries(KEYS, VALUES, max_size=5)), version=st.sampled_from(["1.0.0", "1.2.1"]))
@example(options={"speculative_config": {"decoding_type": []}}, version="1.0.0")  # found by CI: unhashable type
def test_any_mapping_gets_problems_not_a_traceback(options, version):
    problems = diff_llm_api(options, load_target_facts(version))
    assert all(isinstance(str(p), str) and p.key for p in problems)
    validation = validate_llm_api(options, version, release=False)
    assert validation.validator == f"facts {version}" and validation.ok == (not problems)


SCHEDULE_CONTROLS = {"max_concurrency": 6, "draft_len_schedule": {1: 3, 2: 2, 4: 1}, "acceptance_window": 8,
                     "acceptance_length_threshold": 1.25}


def test_the_schedule_is_written_where_the_target_reads_it_and_matches_its_facts():
    """1.2.1 PyTorch workflow: the file holds the schedule with {1: max_draft_len}, max_concurrency and the gate, the
    facts find no problem in it, and the build's engine configuration (torch flavour, Dynamo) runs the same."""
    target, draft = LOCAL_PAIR
    resolved, plan = plan_of(target=str(target), draft=str(draft), method="draft_target", max_draft_len=3,
                             engine={"max_input_len": 64, "max_seq_len": 128}, workflow="pytorch",
                             trtllm={"version": "1.2.1"}, llm_api=SCHEDULE_CONTROLS)
    written = yaml.safe_load(next(s.content for s in plan.steps if s.id == "write-llm-api") or "")
    speculative = written["speculative_config"]
    assert {k: speculative[k] for k in SCHEDULE_CONTROLS} == SCHEDULE_CONTROLS
    assert speculative["draft_len_schedule"][1] == speculative["max_draft_len"] == 3
    assert diff_llm_api(written, load_target_facts("1.2.1")) == []
    schedule = engine_config(resolved).schedule
    assert schedule is not None and schedule.llm_api_options() == SCHEDULE_CONTROLS
    assert [schedule.draft_len_at(b, 3) for b in (1, 2, 3, 4, 6, 7)] == [3, 2, 2, 1, 1, 0]


def test_a_target_that_reads_no_schedule_gets_none_and_a_note():
    """0.19.0 (engine workflow, no LLM-API file): nothing carries the controls to TensorRT-LLM; the plan says which
    keys were not written and why, and the reference engine's configuration still runs them."""
    target, draft = LOCAL_PAIR
    resolved, plan = plan_of(target=str(target), draft=str(draft), method="draft_target", max_draft_len=3,
                             engine={"max_input_len": 64, "max_seq_len": 128}, trtllm={"version": "0.19.0"},
                             llm_api=SCHEDULE_CONTROLS)
    assert plan.llm_api is None and not any(s.id == "write-llm-api" for s in plan.steps)
    note = next(n for n in plan.notes if n.startswith("not written:"))
    assert all(f"llm_api.{key}" in note for key in SCHEDULE_CONTROLS) and "0.19.0" in note
    assert engine_config(resolved).schedule.llm_api_options() == SCHEDULE_CONTROLS


def test_schedule_keys_above_the_max_batch_size_exit_2(tmp_path):
    target, draft = LOCAL_PAIR
    config = write_config(tmp_path / "c.yaml", target=str(target), draft=str(draft), method="draft_target",
                          max_draft_len=3, engine={"max_input_len": 64, "max_seq_len": 128, "max_batch_size": 4},
                          trtllm={"version": "1.2.1"}, llm_api={"draft_len_schedule": {1: 3, 8: 0}})
    code, out, err = run_cli(["build", str(config), "--dry-run"])
    assert code == 2, out + err
    line = next(line for line in err.splitlines() if line.startswith("Error:"))
    assert "llm_api.draft_len_schedule[8]" in line and "engine.max_batch_size 4" in line


BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
    f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n" for i in range(8)) + "speculative_config: *i\n"


@pytest.mark.process
def test_doctor_llm_api_hostile_files_are_one_line_exit_2_under_an_address_space_limit(tmp_path):
    """An alias bomb (a few hundred bytes, 9^9 values expanded), a FIFO, a key given twice and an integer past 64
    bits: each one line naming the file or the key, exit 2, quickly, within 1 GiB of address space."""
    import os
    import resource
    import subprocess
    import sys

    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    cases = {"bomb.yaml": (BOMB, "is far larger than an LLM-API options file"),
             "twice.yaml": ("max_batch_size: 8\nmax_batch_size: 16\n", "found duplicate key 'max_batch_size'"),
             "huge.yaml": ("speculative_config: {decoding_type: NGram, max_draft_len: 99999999999999999999999, "
                           "max_matching_ngram_size: 2}\n", "does not fit a 64-bit integer")}
    for name, (text, _) in cases.items():
        (tmp_path / name).write_text(text)
    cases["fifo.yaml"] = ("", "not a regular file")
    for name, (_, words) in cases.items():
        run = subprocess.run([sys.executable, "-m", "trtspec", "doctor", "--llm-api", str(tmp_path / name),
                              "--trtllm-version", "1.2.1"], capture_output=True, text=True, timeout=60,
                             preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30)))
        assert run.returncode == 2, (name, run.stdout, run.stderr)
        assert "Traceback" not in run.stderr and words in run.stdout + run.stderr, (name, run.stdout, run.stderr)


def test_iteration_stats_are_written_only_when_asked():
    """`iteration_stats: true` writes enable_iter_perf_stats (what trtllm-serve's /metrics needs, a typed 1.2.1
    field); off by default, as TensorRT-LLM's own default (its server keeps every row until a GET drains it)."""
    path = ROOT / "build_configs" / "tiny-ngram.yaml"
    spec = load_build_spec(path, overrides={"trtllm": {"version": "1.2.1"}, "workflow": "pytorch"})
    assert "enable_iter_perf_stats" not in plan_build(run_preflight(spec, dry_run=True)).llm_api
    on = plan_build(run_preflight(spec.model_copy(update={"iteration_stats": True}), dry_run=True)).llm_api
    assert on["enable_iter_perf_stats"] is True and diff_llm_api(on, load_target("1.2.1").llm_api) == []


@pytest.mark.parametrize("version", ["1.2.1", "1.3.0rc29"])
def test_two_model_draft_target_turns_the_overlap_scheduler_off_in_every_release(version):
    """Two-model speculation runs without the overlap scheduler (trtllm-specdec.md 3.5): written for the method, not
    for one release's spelling of its decoding type (1.3.0rc29 writes Draft_Target)."""
    from trtspec.build.plan import llm_api_for_release

    spec = load_build_spec(ROOT / "build_configs" / "llama3.1-8b-draft-target.yaml",
                           overrides={"workflow": "pytorch"})
    options = llm_api_for_release(run_preflight(spec, dry_run=True, release=version), version)
    assert options["disable_overlap_scheduler"] is True
