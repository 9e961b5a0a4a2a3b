"""SweepSpec: enumeration, stable case ids, and validation errors before any work."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trtspec.contracts.schedule import SpecSchedule
from trtspec.errors import ConfigError, ModelNotFoundError, UnknownMethodError, UsageError
from trtspec.sweep.grid import SweepSpec, parse_int_list, parse_schedule, ramp_limits, schedule_text
from trtspec.sweep.prompts import last_tokens, load_suite, shipped_suites


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
    ({"via": "openai"}, ConfigError, "url"),
    ({"via": "openai", "url": "localhost:8000", "chat_template": "{{ messages }}"}, ConfigError, "chat_template"),
    ({"via": "triton", "url": "localhost:8001", "chat_template": "model"}, ConfigError, "chat_template"),
    ({"backend": "carrier-pigeon"}, ConfigError, "backend"),
    ({"timeout_s": 0}, ConfigError, "timeout_s"),
    ({"bogus_field": 1}, ConfigError, "bogus_field"),
    ({"num_prompts": 0}, ConfigError, "num_prompts"),
    ({"adaptive": [0]}, ConfigError, "adaptive"),
    ({"adaptive": [9]}, ConfigError, "adaptive"),
    ({"adaptive": [4], "methods": ["none"]}, ConfigError, "adaptive"),
    ({"lookahead": ["4,4"], "methods": ["lookahead"]}, ConfigError, "lookahead"),
    ({"lookahead": ["2,1,1"], "methods": ["lookahead"]}, ConfigError, "lookahead"),
    ({"lookahead": ["4,4,4"], "methods": ["ngram"]}, ConfigError, "lookahead"),
    ({"num_requests": 0}, ConfigError, "num_requests"),
    ({"waves": -1}, ConfigError, "waves"),
    ({"prompt_tokens": 0}, ConfigError, "prompt_tokens"),
    ({"max_ngram": 0}, ConfigError, "max_ngram"),
    # the report reads k up to MAX_K and batch sizes up to MAX_BATCH_SIZE (sweep/record_fields.py): never more here
    ({"max_draft_len": 4097}, ConfigError, "max_draft_len"),
    ({"concurrency": [4097]}, ConfigError, "concurrency"),
    ({"calibration_batch_sizes": [1, 4097]}, ConfigError, "calibration_batch_sizes"),
    ({"ramps": ["1,4097"]}, ConfigError, "ramps"),
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


def test_shuffle_reorders_each_point_of_a_round_alone_and_keeps_the_case_ids(spec_kwargs):
    grid = {**spec_kwargs, "methods": ["draft_target", "ngram"], "k": [0, 1, 2, 3], "concurrency": [1, 4],
            "repeats": 3}
    plain, shuffled = SweepSpec.build(**grid).cases(), SweepSpec.build(**grid, shuffle=True).cases()
    assert sorted(c.case_id for c in shuffled) == sorted(c.case_id for c in plain)  # a resume finds its done cases
    size = len(plain) // 6  # 3 rounds x 2 concurrencies
    blocks = [shuffled[i * size:(i + 1) * size] for i in range(6)]
    # rounds in order, and in each round every concurrency's cases together, in grid order: compared cases run close
    assert [({c.repeat for c in b}, {c.concurrency for c in b}) for b in blocks] == [
        ({r}, {c}) for r in range(3) for c in (1, 4)]
    orders = [tuple((c.method, c.k) for c in b) for b in blocks]
    assert len(set(orders)) == 6 and orders[0] != tuple((c.method, c.k) for c in plain[:size])
    assert SweepSpec.build(**grid, shuffle=True).cases() == shuffled  # seeded: the same order every time
    other_seed = SweepSpec.build(**grid, shuffle=True, seed=1).cases()[:size]
    assert tuple((c.method, c.k) for c in other_seed) != orders[0]  # another seed, another order


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


LATER_FIELDS = {"repeat", "lookahead", "max_ngram", "adaptive", "num_requests", "prompt_tokens"}


def test_fields_added_later_leave_case_ids_alone_at_their_defaults(spec_kwargs):
    cases = SweepSpec.build(**spec_kwargs, methods=["draft_target", "ngram", "lookahead"], k=[0, 2],
                            concurrency=[1, 4]).cases()
    assert all(not LATER_FIELDS & set(c.params()) for c in cases)
    set_ = SweepSpec.build(**spec_kwargs, methods=["draft_target", "ngram", "lookahead"], k=[0, 2],
                           concurrency=[1, 4], lookahead=["3,3,2"], max_ngram=2, adaptive=[2], num_requests=3,
                           prompt_tokens=16, repeats=2).cases()
    assert LATER_FIELDS <= set().union(*(c.params() for c in set_))


def test_adaptive_cases_run_beside_fixed_k(spec_kwargs):
    cases = SweepSpec.build(**spec_kwargs, methods=["draft_target"], k=[0, 4], adaptive=[8]).cases()
    assert [(c.method, c.k, c.adaptive) for c in cases] == [("none", 0, False), ("draft_target", 4, False),
                                                            ("draft_target", 8, True)]
    assert cases[2].label().startswith("draft_target/") and "k<=8 adaptive" in cases[2].label()
    assert len({c.case_id for c in cases}) == 3


def test_lookahead_variants_cap_k_at_the_full_trie(spec_kwargs):
    spec = SweepSpec.build(**spec_kwargs, methods=["lookahead"], lookahead=["4,4,4", "7,5,7"], k=[0, 8, 20, 28],
                           max_draft_len=28)
    # G x (N - 1): 12 for 4,4,4 (20 and 28 draft the same as 12), 28 for 7,5,7
    assert [(c.lookahead, c.k) for c in spec.cases()] == [(None, 0), ("4,4,4", 8), ("4,4,4", 12), ("7,5,7", 8),
                                                          ("7,5,7", 20), ("7,5,7", 28)]
    default = SweepSpec.build(**spec_kwargs, methods=["lookahead"], k=[0, 20], max_draft_len=20).cases()
    assert [(c.lookahead, c.k) for c in default] == [(None, 0), (None, 12)]  # the engine's default is 4,4,4


def test_closed_loop_request_counts(spec_kwargs):
    spec = SweepSpec.build(**{**spec_kwargs, "num_prompts": 8}, methods=["ngram"], k=[0, 2], concurrency=[1, 4, 16],
                           num_requests=6, waves=2)
    counts = {c.concurrency: c.num_requests for c in spec.cases()}
    assert counts == {1: 6, 4: None, 16: 32}  # max(6, 2c); None = one per prompt (8)
    plain = SweepSpec.build(**spec_kwargs, methods=["ngram"], k=[0, 2], concurrency=[1, 4]).cases()
    assert all(c.num_requests is None for c in plain)


def test_mixed_suites_round_robin_and_cycle():
    mixed = load_suite("code+prose+grounded", 7)
    code, prose, grounded = (load_suite(s, 3).prompts for s in ("code", "prose", "grounded"))
    assert mixed.prompts == (code[0], prose[0], grounded[0], code[1], prose[1], grounded[1], code[2])
    assert mixed.name == "code+prose+grounded" and mixed.sha256 != load_suite("code+prose+grounded", 6).sha256
    cycled = mixed.cycled(10)
    assert cycled.prompts == mixed.prompts + mixed.prompts[:3] and cycled.sha256 != mixed.sha256
    assert last_tokens([1, 2, 3, 4], 2) == [3, 4] and last_tokens([1, 2, 3], None) == [1, 2, 3]


def test_engine_only_fields_are_refused_via_triton(spec_kwargs):
    with pytest.raises(ConfigError, match="adaptive=\\[4\\]: is applied by the in-process engine only"):
        SweepSpec.build(**spec_kwargs, via="triton", url="x:1", adaptive=[4])


def test_eagle_drafters_and_trees_are_typed_variants(spec_kwargs):
    """eagle3 cases: one per drafter x tree x k, each naming both; other methods' cases keep their ids (the eagle
    field is left out of a case's parameters when unset)."""
    spec = SweepSpec.build(**spec_kwargs, methods=["draft_target", "eagle3"], k=[0, 2, 4], eagle=["tiny-eagle"],
                           eagle_trees=["chain", "dynamic:4x3"])
    eagle = [c for c in spec.cases() if c.method == "eagle3"]
    assert [(c.eagle, c.tree, c.k) for c in eagle] == [("tiny-eagle", "chain", 2), ("tiny-eagle", "chain", 4),
                                                       ("tiny-eagle", "dynamic:4x3", 2),
                                                       ("tiny-eagle", "dynamic:4x3", 4)]
    assert "eagle" not in next(c for c in spec.cases() if c.method == "draft_target").params()
    plain = SweepSpec.build(**spec_kwargs, methods=["draft_target"], k=[0, 2, 4]).cases()
    assert [c.case_id for c in plain] == [c.case_id for c in spec.cases() if c.method != "eagle3"]
    assert "tiny-eagle/chain" in eagle[0].label()


@pytest.mark.parametrize("changes, field", [
    ({"eagle": []}, "eagle"),
    ({"eagle": ["no-such-drafter"]}, "eagle"),
    ({"eagle_trees": ["dynamic:4"]}, "eagle_trees"),
    ({"eagle_trees": ["dynamic:0x3"]}, "eagle_trees"),
    ({"eagle_trees": ["[[0], [5, 0]]"]}, "eagle_trees"),  # not prefix-closed
])
def test_bad_eagle_fields_are_refused_naming_the_field(spec_kwargs, changes, field):
    kwargs = {"methods": ["eagle3"], "k": [0, 2], "eagle": ["tiny-eagle"]} | changes
    with pytest.raises((ConfigError, ModelNotFoundError), match=field):
        SweepSpec.build(**spec_kwargs, **kwargs)


def test_eagle_trees_are_checked_when_the_spec_is_built(spec_kwargs):
    with pytest.raises(ConfigError, match="dynamic:TOPKxDEPTH"):
        SweepSpec.build(**spec_kwargs, methods=["eagle3"], eagle=["tiny-eagle"], eagle_trees=["dynamic:4"])


def test_schedules_and_ramps_are_cases_beside_fixed_k_and_concurrency(spec_kwargs):
    """A schedule is a case per method variant asking its draft length at batch 1; a ramp is a point with its own
    baseline whose concurrency is its largest phase and whose requests are ramp_waves x each phase; the cases of a
    spec without either keep their ids."""
    text = "draft_len_schedule=1:3,4:1;max_concurrency=8;acceptance_window=4;acceptance_length_threshold=1.5"
    kwargs = dict(**spec_kwargs, methods=["draft_target", "ngram"], k=[0, 2], concurrency=[1, 4], waves=2)
    spec = SweepSpec.build(**kwargs, schedules=[text], ramps=["1,4,2"], ramp_waves=2, max_draft_len=4)
    cases = spec.cases()
    assert len(cases) == 3 * 5  # (c=1, c=4, the ramp) x (plain, 2 fixed k, 2 schedules)
    scheduled = [c for c in cases if c.schedule]
    assert {(c.method, c.k) for c in scheduled} == {("draft_target", 3), ("ngram", 3)}
    assert parse_schedule(scheduled[0].schedule) == parse_schedule(text)
    ramp = [c for c in cases if c.ramp]
    assert len(ramp) == 5 and {c.concurrency for c in ramp} == {4} and {c.num_requests for c in ramp} == {14}
    assert ramp_limits("1,4,2", 2) == [1, 1, 4, 4, 4, 4, 4, 4, 4, 4, 2, 2, 2, 2]
    assert ramp_limits("3,1", 1) == [3, 3, 3, 1]
    assert "ramp=1,4,2" in ramp[0].label() and "schedule draft_len_schedule=1:3,4:1" in scheduled[0].label()
    plain = SweepSpec.build(**kwargs).cases()
    assert [c.case_id for c in plain] == [c.case_id for c in cases if not c.schedule and not c.ramp]


@pytest.mark.parametrize("changes, field, words", [
    ({"schedules": ["draft_len_schedule=2:1"]}, "draft_len_schedule", "batch size 1"),
    ({"schedules": ["draft_len_schedule=1:9"]}, "draft_len_schedule[1]", "at most max_draft_len 8"),
    ({"schedules": ["max_concurrency"]}, "schedules", "NAME=VALUE"),
    ({"schedules": ["draft_len=1:4"]}, "schedules", "NAME=VALUE"),
    ({"schedules": ["acceptance_window=4"]}, "acceptance_length_threshold", "required"),
    ({"schedules": ["acceptance_window=4;acceptance_length_threshold=nan"]}, "acceptance_length_threshold",
     "finite"),
    ({"ramps": ["1,0,2"]}, "ramps", "positive"),
    ({"ramps": ["1,x"]}, "ramps", "comma-separated"),
    ({"ramps": ["1,2"], "ramp_waves": 0}, "ramp_waves", "positive"),
    ({"methods": ["none"], "schedules": ["draft_len_schedule=1:2"]}, "schedules", "speculative method"),
    ({"via": "triton", "url": "x:1", "ramps": ["1,2"]}, "ramps", "in-process engine only"),
    ({"via": "triton", "url": "x:1", "stagger_start": True}, "stagger_start", "in-process engine only"),
])
def test_bad_schedules_and_ramps_name_the_field(spec_kwargs, changes, field, words):
    with pytest.raises(ConfigError, match=words) as exc:
        SweepSpec.build(**{**spec_kwargs, **changes})
    assert exc.value.field == field


@given(draft_len=st.dictionaries(st.integers(2, 64), st.integers(0, 8), max_size=4), k1=st.integers(0, 8),
       max_concurrency=st.none() | st.integers(0, 64), window=st.none() | st.integers(1, 64),
       threshold=st.floats(0, 9, allow_nan=False), probe_every=st.none() | st.integers(0, 32))
def test_schedule_text_round_trips(draft_len, k1, max_concurrency, window, threshold, probe_every):
    schedule = SpecSchedule(draft_len=((1, k1), *draft_len.items()), max_concurrency=max_concurrency,
                            acceptance_window=window, acceptance_length_threshold=threshold if window else None,
                            probe_every=probe_every)
    assert parse_schedule(schedule_text(schedule)) == schedule


def test_draft_runtime_onnx_cases_are_other_cases_and_the_torch_ids_stay(spec_kwargs):
    """draft_runtime onnx marks the draft-model cases (params, id, label); the baseline and model-free cases keep
    their ids, and the default (torch) writes nothing, so results files of earlier sweeps resume."""
    grid = {"methods": ["draft_target", "suffix_draft", "ngram"], "k": [0, 2], "suffix_cache": ["cold"]}
    plain = SweepSpec.build(**spec_kwargs, **grid).cases()
    onnx = SweepSpec.build(**spec_kwargs, **grid, draft_runtime="onnx").cases()
    assert all("draft_runtime" not in c.params() for c in plain)
    for a, b in zip(plain, onnx, strict=True):
        if a.method in ("draft_target", "suffix_draft"):
            assert b.params() == {**a.params(), "draft_runtime": "onnx"} and a.case_id != b.case_id
            assert b.label() == a.label().replace(f"/{a.draft} ", f"/{a.draft}@onnx ")
        else:
            assert b == a
    assert SweepSpec.build(**spec_kwargs, **grid, draft_runtime="torch").cases() == plain


@pytest.mark.parametrize("changes, words", [
    ({"draft_runtime": "tvm"}, "Input should be 'torch' or 'onnx'"),
    ({"methods": ["ngram"]}, "no method of the sweep has one"),
    ({"dtype": "float16"}, "dtype float16, device cpu"),
    ({"via": "triton", "url": "localhost:8001"}, "in-process engine only"),
])
def test_a_draft_runtime_the_sweep_cannot_run_is_refused_naming_the_field(spec_kwargs, changes, words):
    with pytest.raises(ConfigError, match=words) as exc:
        SweepSpec.build(**{**spec_kwargs, "draft_runtime": "onnx", **changes})
    assert exc.value.field == "draft_runtime" and exc.value.hint and exc.value.exit_code == 2
