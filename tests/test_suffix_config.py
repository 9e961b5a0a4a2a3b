"""SuffixConfig, suffix decoding's options: one definition for the build config's `suffix:` section, `trtspec deploy
--suffix NAME=VALUE`, the served model's `suffix_*` parameters and the proposer. Text round-trips exactly; every bad
value is refused naming where it came from, the value and the fix; the section belongs to method suffix only."""

from __future__ import annotations

import math
from dataclasses import asdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trtspec.config import parse_build_spec
from trtspec.contracts.suffix import MAX_CACHED_REQUESTS, MAX_TREE_DEPTH, SuffixConfig
from trtspec.errors import ConfigError

CONFIGS = st.builds(
    SuffixConfig,
    max_tree_depth=st.integers(1, MAX_TREE_DEPTH), max_cached_requests=st.integers(0, MAX_CACHED_REQUESTS),
    max_spec_factor=st.floats(min_value=0, exclude_min=True, allow_nan=False, allow_infinity=False),
    max_spec_offset=st.floats(allow_nan=False, allow_infinity=False),
    min_token_prob=st.floats(0, 1), tree=st.booleans(),
)  # fmt: skip


@settings(deadline=None)
@given(config=CONFIGS)
def test_text_round_trip_is_exact(config):
    assert SuffixConfig.from_strings(config.to_strings()) == config
    assert SuffixConfig.from_options(asdict(config)) == config


def test_unset_names_keep_their_defaults_and_text_is_parsed_by_type():
    config = SuffixConfig.from_strings({"max_cached_requests": "12", "tree": "False", "min_token_prob": " 0.25 "})
    assert config == SuffixConfig(max_cached_requests=12, tree=False, min_token_prob=0.25)
    assert SuffixConfig.from_strings({}) == SuffixConfig()


@pytest.mark.parametrize(("values", "field", "message"), [
    ({"max_cached_requests": "1.5"}, "parameter suffix_", "parameter suffix_max_cached_requests='1.5': is not an integer"),
    ({"max_spec_factor": "fast"}, "--suffix ", "--suffix max_spec_factor='fast': is not a number"),
    ({"tree": "yes"}, "suffix.", "suffix.tree='yes': is not true or false"),
    ({"max_spec_factor": "nan"}, "--suffix ", "--suffix max_spec_factor=nan: must be a finite number > 0"),
    ({"min_token_prob": "2"}, "--suffix ", r"--suffix min_token_prob=2.0: must be a probability in [0, 1]"),
    ({"max_cached_requests": "-1"}, "parameter suffix_", "parameter suffix_max_cached_requests=-1: must be an integer"),
    ({"cache_size": "10"}, "--suffix ", "--suffix cache_size='10': is not a suffix decoding option"),
])  # fmt: skip
def test_bad_text_is_refused_naming_its_source(values, field, message):
    with pytest.raises(ConfigError) as info:
        SuffixConfig.from_strings(values, field=field)
    assert str(info.value).startswith(message) and info.value.hint and info.value.exit_code == 2


# --- the build config's `suffix:` section --------------------------------------------------------------------------


def build(**extra):
    return parse_build_spec({"target": "tiny", "method": "suffix", "backend": "torch", **extra})


def test_build_config_section_is_a_suffix_config():
    spec = build(suffix={"max_cached_requests": 500, "max_spec_factor": 2, "tree": False})
    assert spec.suffix == SuffixConfig(max_cached_requests=500, max_spec_factor=2.0, tree=False)
    assert build().suffix is None
    again = parse_build_spec(spec.model_dump(mode="json"))  # what `trtspec build --example`/the manifest writes
    assert again == spec


@pytest.mark.parametrize(("section", "message"), [
    ({"max_spec_factor": 0}, "suffix.max_spec_factor=0: must be a finite number > 0"),
    ({"max_cached_requests": 2**31}, "suffix.max_cached_requests=2147483648: must be an integer in [0, 2147483647]"),
    ({"max_cached_requests": True}, "suffix.max_cached_requests=True"),
    ({"min_token_prob": math.inf}, "suffix.min_token_prob=inf: must be a probability"),
    ({"cache": 3}, "suffix.cache=3: is not a suffix decoding option"),
    ([1, 2], "suffix=[1, 2]: must be a mapping"),
])  # fmt: skip
def test_build_config_section_errors_name_field_value_and_fix(section, message):
    with pytest.raises(ConfigError) as info:
        build(suffix=section)
    assert str(info.value).startswith(message) and info.value.hint


def test_bundle_records_the_options_the_served_engine_runs_with(random_pair, tmp_path):
    import json

    from tests.build.helpers import plan_of
    from trtspec.build.bundle import load_bundle
    from trtspec.triton.build_output import read_build_output

    common = {"target": str(random_pair[0]), "backend": "torch", "engine": {"max_input_len": 64, "max_seq_len": 128}}
    section = {"max_cached_requests": 500, "min_token_prob": 0.25, "tree": False}
    for method, suffix, want in [("suffix", section, SuffixConfig(**section)), ("suffix", None, SuffixConfig()),
                                 ("ngram", None, None)]:
        _, plan = plan_of(method=method, **({"suffix": suffix} if suffix else {}), **common)
        (write,) = [s for s in plan.steps if s.id == "write-bundle"]
        bundle = tmp_path / method / str(bool(suffix))
        (bundle / "target").mkdir(parents=True)
        (bundle / "target" / "config.json").write_text("{}")
        (bundle / "trtspec-bundle.json").write_text(write.content)
        (bundle / "trtspec-manifest.json").write_text(json.dumps({"backend": "torch", "method": method}))
        assert load_bundle(bundle).engine.suffix == want and read_build_output(bundle).engine.suffix == want


def test_a_bundle_with_bad_options_is_refused_naming_the_file(tmp_path):
    from trtspec.build.bundle import load_bundle
    from trtspec.errors import ModelNotFoundError

    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "config.json").write_text("{}")
    (tmp_path / "trtspec-bundle.json").write_text('{"format": "trtspec-bundle/1", "method": "suffix", '
                                                  '"max_draft_len": 8, "target": "target", '
                                                  '"suffix": {"max_spec_factor": -1}}')
    with pytest.raises(ModelNotFoundError, match=r"trtspec-bundle.json: suffix.max_spec_factor=-1: must be a finite"):
        load_bundle(tmp_path)


def test_section_belongs_to_method_suffix(random_pair):
    from tests.build.helpers import spec_of
    from trtspec.build.preflight import run_preflight

    with pytest.raises(ConfigError, match="suffix='set': belongs to method suffix, but method is ngram") as info:
        run_preflight(spec_of(target=str(random_pair[0]), method="ngram", backend="torch",
                              suffix={"max_cached_requests": 5}, engine={"max_input_len": 64, "max_seq_len": 128}),
                      dry_run=True)
    assert "method: suffix" in info.value.hint
