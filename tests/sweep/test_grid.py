"""SweepSpec: enumeration, stable case ids, and validation errors before any work."""

from __future__ import annotations

import pytest

from trtspec.errors import ConfigError, ModelNotFoundError, UnknownMethodError, UsageError
from trtspec.sweep.grid import SweepSpec, parse_int_list
from trtspec.sweep.prompts import load_suite, shipped_suites


@pytest.fixture
def spec_kwargs(random_pair):
    target, draft = random_pair
    return {"model": str(target), "drafts": [str(draft)], "suites": ["code"], "num_prompts": 2}


def test_enumeration_counts_and_order(spec_kwargs):
    spec = SweepSpec.build(**spec_kwargs, methods=["draft_target", "ngram"], k=[0, 1, 2, 4],
                           temperatures=[0.0, 1.0], concurrency=[1, 4])
    cases = spec.cases()
    # per (suite, T, concurrency): 1 baseline + 3 draft_target + 3 ngram
    assert len(cases) == 2 * 2 * 7
    assert [c.method for c in cases[:7]] == ["none"] + ["draft_target"] * 3 + ["ngram"] * 3
    assert [c.k for c in cases[:7]] == [0, 1, 2, 4, 1, 2, 4]
    assert cases[1].draft == spec_kwargs["drafts"][0] and cases[4].draft is None
    ids = [c.case_id for c in cases]
    assert len(set(ids)) == len(ids)
    assert ids == [c.case_id for c in SweepSpec.build(**spec_kwargs, methods=["draft_target", "ngram"],
                                                       k=[0, 1, 2, 4], temperatures=[0.0, 1.0],
                                                       concurrency=[1, 4]).cases()]


def test_baseline_always_present_and_ids_depend_on_params(spec_kwargs):
    a = SweepSpec.build(**spec_kwargs, methods=["ngram"], k=[2]).cases()
    b = SweepSpec.build(**spec_kwargs, methods=["ngram"], k=[2], max_new_tokens=65).cases()
    assert [c.method for c in a] == ["none", "ngram"]
    assert a[1].case_id != b[1].case_id


def test_yaml_with_flag_overrides(tmp_path, spec_kwargs):
    cfg = tmp_path / "sweep.yaml"
    cfg.write_text(f"model: {spec_kwargs['model']}\ndrafts: [{spec_kwargs['drafts'][0]}]\nmethods: [ngram]\n"
                   "k: [0, 3]\nsuites: [code]\nnum_prompts: 2\n")
    spec = SweepSpec.from_yaml(cfg, k=[1], temperatures=None)
    assert spec.k == [1] and spec.methods == ["ngram"] and spec.temperatures == [0.0]


@pytest.mark.parametrize("override, error, field", [
    ({"methods": ["warp_drive"]}, UnknownMethodError, None),
    ({"methods": ["eagle"]}, ConfigError, "methods"),  # no proposer in the reference engine
    ({"k": [0, 9]}, ConfigError, "k"),
    ({"k": [4], "max_draft_len": 3}, ConfigError, "k"),
    ({"temperatures": [-1.0]}, ConfigError, "temperatures"),
    ({"concurrency": [0]}, ConfigError, "concurrency"),
    ({"suites": ["no-such-suite"]}, ConfigError, "suites"),
    ({"via": "triton"}, ConfigError, "url"),
    ({"backend": "triton"}, ConfigError, "url"),  # the pre-`via` name is an alias
    ({"via": "carrier-pigeon"}, ConfigError, "via"),
    ({"backend": "carrier-pigeon"}, ConfigError, "backend"),
    ({"timeout_s": 0}, ConfigError, "timeout_s"),
    ({"bogus_field": 1}, ConfigError, "bogus_field"),
    ({"num_prompts": 0}, ConfigError, "num_prompts"),
])
def test_validation_errors_name_the_field(spec_kwargs, override, error, field):
    with pytest.raises(error) as exc:
        SweepSpec.build(**{**spec_kwargs, **override})
    if field:
        assert exc.value.field == field
    assert exc.value.hint


def test_unknown_model_and_draft(spec_kwargs, tmp_path):
    with pytest.raises(ModelNotFoundError, match="model="):
        SweepSpec.build(**{**spec_kwargs, "model": str(tmp_path / "nope")})
    with pytest.raises(ModelNotFoundError, match="drafts="):
        SweepSpec.build(**{**spec_kwargs, "drafts": [str(tmp_path / "nope")]})


def test_malformed_prompts_file(spec_kwargs, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{"prompt": \n')
    with pytest.raises(ConfigError, match="line 2 is not valid JSON"):
        SweepSpec.build(**{**spec_kwargs, "suites": [str(bad)]})
    bad.write_text('{"text": "no prompt key"}\n')
    with pytest.raises(ConfigError, match='line 1 has no non-empty string "prompt"'):
        SweepSpec.build(**{**spec_kwargs, "suites": [str(bad)]})


def test_user_and_shipped_suites(tmp_path):
    assert {"code", "prose", "grounded"} <= set(shipped_suites())
    user = tmp_path / "mine.jsonl"
    user.write_text('{"prompt": "a"}\n\n{"prompt": "b", "extra": 1}\n{"prompt": "c"}\n')
    suite = load_suite(str(user), 2)
    assert suite.name == "mine" and suite.prompts == ("a", "b")
    assert load_suite("code", 3).prompts == load_suite("code", 3).prompts and len(load_suite("code", 3).prompts) == 3


def test_parse_int_list():
    assert parse_int_list("0-3,6", "k") == [0, 1, 2, 3, 6]
    with pytest.raises(UsageError, match="--k"):
        parse_int_list("a-b", "k")


def test_repeats_run_in_rounds_and_keep_round_zero_ids(spec_kwargs):
    one = SweepSpec.build(**spec_kwargs, methods=["ngram"], k=[0, 2]).cases()
    two = SweepSpec.build(**spec_kwargs, methods=["ngram"], k=[0, 2], repeats=2).cases()
    assert [c.case_id for c in two[:2]] == [c.case_id for c in one]
    assert [c.repeat for c in two] == [0, 0, 1, 1] and len({c.case_id for c in two}) == 4


def test_via_and_its_old_name_backend(tmp_path, spec_kwargs):
    assert SweepSpec.build(**spec_kwargs).via == "engine"
    spec = SweepSpec.build(**spec_kwargs, via="triton", url="x:1")
    assert spec.via == "triton" and spec.cases()[0].via == "triton" and spec.timeout_s == 120.0
    assert "backend" not in spec.model_dump() and spec.model_dump()["via"] == "triton"
    cfg = tmp_path / "old.yaml"  # a sweep config written when the field was called `backend`
    cfg.write_text(f"model: {spec_kwargs['model']}\ndrafts: [{spec_kwargs['drafts'][0]}]\nsuites: [code]\n"
                   "num_prompts: 2\nbackend: triton\nurl: x:1\n")
    old = SweepSpec.from_yaml(cfg, timeout_s=5.0)
    assert old.via == "triton" and old.timeout_s == 5.0
    assert [c.case_id for c in old.cases()] == [c.case_id for c in spec.cases()]  # the timeout is not in a case
    assert spec.cases()[1].case_id != SweepSpec.build(**spec_kwargs).cases()[1].case_id  # via is
