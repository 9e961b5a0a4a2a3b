"""EngineParams, the deploy -> served-model contract: what the repository renders is what the model reads back."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.test_suffix_config import CONFIGS
from trtspec.contracts.suffix import SuffixConfig
from trtspec.errors import ConfigError
from trtspec.triton.engine_params import EngineParams
from trtspec.triton.render import pbtxt_parameters, validate_model_config

NAMES = st.text(st.characters(min_codepoint=33, max_codepoint=0x2FF, blacklist_characters="$,"), min_size=1,
                max_size=20)


def through_triton(params: EngineParams) -> EngineParams:
    """Render as config.pbtxt parameters, parse as Triton's ModelConfig, read back as Triton hands it to the model."""
    from google.protobuf.json_format import MessageToDict

    text = f'name: "m"\nbackend: "python"\n{pbtxt_parameters(params.to_parameters())}\n'
    config = MessageToDict(validate_model_config(text), preserving_proto_field_name=True)
    return EngineParams.from_model_config(json.loads(json.dumps(config)))


@settings(deadline=None)  # protobuf parsing on a shared machine: some examples take longer than 200 ms
@given(target=NAMES, draft=st.none() | NAMES, k=st.integers(0, 64), lookahead=st.none() | st.tuples(
    st.integers(1, 9), st.integers(1, 9), st.integers(0, 9)), exclude=st.booleans(), normalize=st.booleans(),
    timeout=st.floats(0, 1e6, allow_nan=False), device=st.sampled_from(["cpu", "cuda:1"]),
    method=st.sampled_from(["draft_target", "none", "ngram", "suffix", "eagle3"]), suffix=st.none() | CONFIGS,
    log=st.none() | NAMES, rate=st.floats(0, 1), max_mb=st.floats(0.01, 1e6), eagle=st.none() | NAMES,
    eagle_tree=st.none() | st.sampled_from(["{0}, {0, 0}, {1}", "[[0], [1], [0, 0]]"]) | st.tuples(
        st.none() | st.integers(1, 64), st.none() | st.integers(1, 64)))
def test_round_trip_through_model_config(target, draft, k, lookahead, exclude, normalize, timeout, device, method,
                                         suffix, log, rate, max_mb, eagle, eagle_tree):
    # method eagle3's tree: static choices, or the dynamic tree's (eagle_topk, eagle_depth); other methods: none
    static = eagle_tree if isinstance(eagle_tree, str) and method == "eagle3" else None
    topk, depth = eagle_tree if isinstance(eagle_tree, tuple) and method == "eagle3" else (None, None)
    params = EngineParams(target=target, draft=draft, method=method, max_k=k + 1, default_k=k, lookahead=lookahead,
                          exclude_input_in_output=exclude, normalize_log_probs=normalize, drain_timeout_s=timeout,
                          device=device, max_queue=3, suffix=suffix, log_prompts=log, log_sample_rate=rate,
                          log_max_mb=max_mb, eagle=eagle, eagle_choices=static, eagle_topk=topk, eagle_depth=depth)
    assert through_triton(params) == params


def test_suffix_options_are_rendered_one_parameter_each():
    params = EngineParams(target="tiny", method="suffix", suffix=SuffixConfig(max_cached_requests=7, tree=False))
    rendered = params.to_parameters()
    assert rendered["suffix_max_cached_requests"] == "7" and rendered["suffix_tree"] == "false"
    assert rendered["suffix_min_token_prob"] == "0.1" and "suffix" not in rendered
    assert not [k for k in EngineParams(target="tiny").to_parameters() if k.startswith("suffix")]  # unset: none
    # a repository written by hand may set only some: the rest are the defaults
    partial = EngineParams.from_parameters({"target": "tiny", "method": "suffix", "suffix_max_spec_factor": "2.5"})
    assert partial.suffix == SuffixConfig(max_spec_factor=2.5)


def test_defaults_are_defined_once():
    from trtspec.triton.repo import RepoSpec

    # RepoSpec (deploy) takes its torch-flavour defaults from EngineParams (the served model)
    for repo_field, param in [("max_k", "max_k"), ("default_k", "default_k"), ("engine_max_queue", "max_queue"),
                              ("max_input_len", "max_input_len"), ("max_output_len", "max_output_len")]:
        assert RepoSpec.__dataclass_fields__[repo_field].default == EngineParams.__dataclass_fields__[param].default
    # NVIDIA's defaults of the same-named tensorrt_llm parameters (unset): the prompt is part of the output
    assert EngineParams.__dataclass_fields__["exclude_input_in_output"].default is False
    assert EngineParams.__dataclass_fields__["normalize_log_probs"].default is True


@pytest.mark.parametrize("params, message", [
    ({"target": "tiny", "max_k": "eight"}, "parameter max_k='eight': is not an integer"),
    ({"target": "tiny", "exclude_input_in_output": "yes"}, "parameter exclude_input_in_output='yes': is not true"),
    ({"target": "tiny", "lookahead": "4,4"}, "parameter lookahead='4,4': is not three integers"),
    ({"target": "tiny", "max_batch": "4"}, "parameter max_batch='4': is not an engine parameter"),
    ({"method": "ngram"}, "parameter target=None: is required"),
    ({"target": "tiny", "suffix_max_cached_requests": "lots"},
     "parameter suffix_max_cached_requests='lots': is not an integer"),
    ({"target": "tiny", "suffix_min_token_prob": "1.5"}, "parameter suffix_min_token_prob=1.5: must be a probability"),
    ({"target": "tiny", "suffix_cache": "9"}, "parameter suffix_cache='9': is not a suffix decoding option"),
])  # fmt: skip
def test_bad_parameters_are_refused_by_name(params, message):
    with pytest.raises(ConfigError) as info:
        EngineParams.from_parameters(params)
    assert message in str(info.value)


def test_a_version_directory_overrides_its_checkpoints(tmp_path):
    """`trtspec rollout-draft` puts a draft inside version N+1 and names it in trtspec-version.json."""
    from trtspec.triton.engine_params import VERSION_FILE

    params = EngineParams(target="tiny", draft="tiny-draft", default_k=3)
    assert params.for_version(tmp_path) == params  # no file: the model's parameters
    (tmp_path / VERSION_FILE).write_text(json.dumps({"draft": "draft"}))
    assert params.for_version(tmp_path) == EngineParams(target="tiny", draft=str(tmp_path / "draft"), default_k=3)
    for bad in ('{"default_k": "2"}', '{"draft": ""}', "[1]", "not json"):
        (tmp_path / VERSION_FILE).write_text(bad)
        with pytest.raises(ConfigError, match=VERSION_FILE):
            params.for_version(tmp_path)
