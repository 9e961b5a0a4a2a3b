"""EngineConfig, the one engine configuration: what the build writes, the repository renders as Triton parameters and
the Dynamo worker takes as arguments is what the served model reads back; every bad value is refused by name."""

from __future__ import annotations

import json
import re
from dataclasses import fields

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.test_suffix_config import CONFIGS
from trtspec.contracts.engine import EagleTree, EngineConfig, Lookahead, MedusaTree, Ngram, PromptLog, spelled
from trtspec.contracts.suffix import SuffixConfig
from trtspec.errors import ConfigError
from trtspec.triton.render import pbtxt_parameters, validate_model_config
from trtspec.triton.served_config import for_version, from_model_config

NAMES = st.text(st.characters(min_codepoint=33, max_codepoint=0x2FF, blacklist_characters="$,"), min_size=1,
                max_size=20)
TREES = st.sampled_from([((0,), (0, 0), (1,)), ((0,), (1,), (2,), (0, 0))])


def through_triton(config: EngineConfig) -> EngineConfig:
    """Render as config.pbtxt parameters, parse as Triton's ModelConfig, read back as Triton hands it to the model."""
    from google.protobuf.json_format import MessageToDict

    text = f'name: "m"\nbackend: "python"\n{pbtxt_parameters(config.to_parameters())}\n'
    model_config = MessageToDict(validate_model_config(text), preserving_proto_field_name=True)
    return from_model_config(json.loads(json.dumps(model_config)))


@st.composite
def configs(draw: st.DrawFn) -> EngineConfig:
    """Any valid configuration: each method with its own part (or none)."""
    method = draw(st.sampled_from(["draft_target", "none", "ngram", "suffix", "eagle3", "medusa", "lookahead"]))
    k = draw(st.integers(0, 64))
    part = {
        "eagle3": st.none() | st.builds(EagleTree, choices=TREES) | st.builds(
            EagleTree, topk=st.none() | st.integers(1, 64), depth=st.none() | st.integers(1, 64)),
        "medusa": st.none() | st.builds(MedusaTree, choices=TREES),
        "lookahead": st.none() | st.builds(Lookahead, st.integers(1, 9), st.integers(2, 9), st.integers(0, 9)),
        "ngram": st.none() | st.builds(Ngram, max_size=st.integers(3, 9), min_size=st.integers(1, 3)),
        "suffix": st.none() | CONFIGS,
    }
    name = {"eagle3": "eagle_tree", "medusa": "medusa_tree"}.get(method, method)
    parts = {name: draw(part[method])} if method in part else {}
    log = draw(st.none() | st.builds(PromptLog, NAMES, sample_rate=st.floats(0, 1), max_mb=st.floats(0.01, 1e6)))
    return EngineConfig(target=draw(NAMES), draft=draw(st.none() | NAMES), eagle=draw(st.none() | NAMES),
                        method=method, max_k=k + 1, default_k=k, exclude_input_in_output=draw(st.booleans()),
                        normalize_log_probs=draw(st.booleans()), drain_timeout_s=draw(st.floats(0, 1e6)),
                        device=draw(st.sampled_from(["cpu", "cuda:1"])), max_queue=3, prompt_log=log, **parts)


@settings(deadline=None)  # protobuf parsing on a shared machine: some examples take longer than 200 ms
@given(config=configs())
def test_every_form_round_trips(config):
    assert through_triton(config) == config
    assert EngineConfig.from_parameters(config.to_parameters()) == config
    assert EngineConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config


@settings(deadline=None)
@given(config=configs())
def test_the_process_arguments_round_trip(config):
    """What a launcher passes a Dynamo worker or the trtllm-serve server, parsed back as they parse it."""
    import argparse

    from trtspec.contracts.engine_args import add_engine_arguments, engine_argv, engine_from_args

    argv = engine_argv(config)
    assume(not any(value.startswith("-") for value in argv[1::2]))  # argparse reads such a value as an option
    parser = argparse.ArgumentParser()
    add_engine_arguments(parser)
    assert engine_from_args(parser.parse_args(argv)) == config
    with pytest.raises(ConfigError, match="^--default-k="):
        engine_from_args({"engine_target": "tiny", "engine_default_k": "x"})


def test_a_part_is_rendered_only_when_set_and_owns_its_names():
    config = EngineConfig(target="tiny", method="suffix", suffix=SuffixConfig(max_cached_requests=7, tree=False))
    rendered = config.to_parameters()
    assert rendered["suffix_max_cached_requests"] == "7" and rendered["suffix_tree"] == "false"
    assert rendered["suffix_min_token_prob"] == "0.1" and "suffix" not in rendered
    plain = EngineConfig(target="tiny").to_parameters()
    assert not [k for k in plain if k.startswith(("suffix", "eagle", "medusa", "lookahead", "ngram", "log_"))]
    eagle = EngineConfig(target="tiny", method="eagle3", eagle_tree=EagleTree(topk=2)).to_parameters()
    assert eagle["eagle_topk"] == "2" and "eagle_depth" not in eagle and "eagle_choices" not in eagle
    assert EngineConfig(target="t", method="lookahead", lookahead=Lookahead(4, 4, 4)).to_parameters()["lookahead"] == "4,4,4"
    # a repository written by hand may set only some: the rest are the defaults
    partial = EngineConfig.from_parameters({"target": "tiny", "method": "suffix", "suffix_max_spec_factor": "2.5"})
    assert partial.suffix == SuffixConfig(max_spec_factor=2.5)
    # repositories rendered before a part existed list the log's rate and size with logging off
    assert EngineConfig.from_parameters({"target": "t", "log_sample_rate": "0.1", "log_max_mb": "64.0"}).prompt_log is None


def test_parameter_names_are_every_field_once():
    names = EngineConfig.parameter_names()
    assert len(names) == len(set(names))
    rendered = EngineConfig(target="t", method="eagle3", eagle_tree=EagleTree(topk=1, depth=2),
                            prompt_log=PromptLog("d")).to_parameters()
    assert set(rendered) <= set(names)


def test_nvidias_defaults_of_the_same_named_parameters():
    # NVIDIA's defaults of the same-named tensorrt_llm parameters (unset): the prompt is part of the output
    defaults = {f.name: f.default for f in fields(EngineConfig)}
    assert defaults["exclude_input_in_output"] is False and defaults["normalize_log_probs"] is True


@pytest.mark.parametrize("params, message", [
    ({"target": "tiny", "max_k": "eight"}, "parameter max_k='eight': is not an integer"),
    ({"target": "tiny", "exclude_input_in_output": "yes"}, "parameter exclude_input_in_output='yes': is not true"),
    ({"target": "tiny", "method": "lookahead", "lookahead": "4,4"}, "parameter lookahead='4,4': is not three integers"),
    ({"target": "tiny", "max_batch": "4"}, "parameter max_batch='4': is not an engine parameter"),
    ({"method": "ngram"}, "parameter target=None: is required"),
    ({"target": "tiny", "default_k": "9", "max_k": "8"}, "parameter default_k=9: must be in [0, max_k=8]"),
    ({"target": "tiny", "method": "suffix", "suffix_max_cached_requests": "lots"},
     "parameter suffix_max_cached_requests='lots': is not an integer"),
    ({"target": "tiny", "method": "suffix", "suffix_min_token_prob": "1.5"},
     "parameter suffix_min_token_prob=1.5: must be a probability"),
    ({"target": "tiny", "suffix_cache": "9"}, "parameter suffix_cache='9': is not a suffix decoding option"),
    ({"target": "tiny", "method": "ngram", "suffix_tree": "true"}, "shapes method suffix, but the method is ngram"),
    ({"target": "tiny", "log_prompts": "d", "log_sample_rate": "2"}, "parameter log_sample_rate=2.0: must be in [0, 1]"),
    ({"target": "tiny", "method": "ngram", "ngram_max_size": "1", "ngram_min_size": "2"}, "parameter ngram_max_size=1"),
])  # fmt: skip
def test_bad_parameters_are_refused_by_name(params, message):
    with pytest.raises(ConfigError) as info:
        EngineConfig.from_parameters(params)
    assert message in str(info.value)


def test_overrides_are_checked_as_a_whole_and_spelled_as_the_caller_names_them():
    config = EngineConfig(target="tiny", method="eagle3", eagle="tiny-eagle", eagle_tree=EagleTree(topk=2))
    assert config.with_parameters({"eagle_depth": "3", "default_k": None}).eagle_tree == EagleTree(topk=2, depth=3)
    with pytest.raises(ConfigError, match=r"^--eagle-topk=0: must be an integer in \[1, 64\]"):
        with spelled(lambda name: "--" + name.removeprefix("parameter ").replace("_", "-")):
            config.with_parameters({"eagle_topk": "0"})
    with pytest.raises(ConfigError, match="parameter eagle_topk=2: sets a dynamic tree but eagle_choices"):
        config.with_parameters({"eagle_choices": "{0}, {0, 0}"})


def test_a_version_directory_overrides_its_checkpoints(tmp_path):
    """`trtspec rollout-draft` puts a draft inside version N+1 and names it in trtspec-version.json."""
    from trtspec.triton.served_config import VERSION_FILE

    config = EngineConfig(target="tiny", draft="tiny-draft", default_k=3)
    assert for_version(config, tmp_path) == config  # no file: the model's configuration
    (tmp_path / VERSION_FILE).write_text(json.dumps({"draft": "draft"}))
    assert for_version(config, tmp_path) == EngineConfig(target="tiny", draft=str(tmp_path / "draft"), default_k=3)
    for bad in ('{"default_k": "2"}', '{"draft": ""}', "[1]", "not json"):
        (tmp_path / VERSION_FILE).write_text(bad)
        with pytest.raises(ConfigError, match=VERSION_FILE):
            for_version(config, tmp_path)


def test_eagle_tree_text_forms():
    assert EagleTree.parse("chain") == EagleTree(topk=1)
    assert EagleTree.parse("dynamic") == EagleTree()
    assert EagleTree.parse("dynamic:2x5") == EagleTree(topk=2, depth=5)
    assert EagleTree.parse("[[0], [1], [0, 0]]") == EagleTree(choices=((0,), (1,), (0, 0)))
    for bad in ("dynamic:2", "dynamic:0x5", "dynamic:2x99"):
        with pytest.raises(ConfigError, match="eagle_tree"):
            EagleTree.parse(bad)


@settings(deadline=None, max_examples=200)
@given(params=st.dictionaries(st.sampled_from(EngineConfig.parameter_names() + ["nope"]),
                              st.text(max_size=12) | st.sampled_from(["", "nan", "inf", "-1", "0", "1e400", "9" * 5000,
                                                                        "{0}, {0, 0}", "1,1,1", "true"]),
                              max_size=6))
def test_any_text_parameters_are_a_configuration_or_an_error_naming_one(params):
    """Whatever a repository or a worker command line says: a valid configuration, or a ConfigError naming a
    parameter (never another exception)."""
    try:
        config = EngineConfig.from_parameters({"target": "t", **params})
    except ConfigError as exc:
        assert exc.field.startswith("parameter "), exc
        return
    assert EngineConfig.from_parameters(config.to_parameters()) == config


def test_the_repository_record_round_trips_with_its_engine_configuration(tmp_path):
    from trtspec.contracts.repository import REPO_RECORD, RepoRecord

    engine = EngineConfig(target="/models/t", method="eagle3", eagle="/models/e", eagle_tree=EagleTree(topk=2))
    record = RepoRecord(backend="torch", method="eagle3", models=("preprocessing", "tensorrt_llm"), max_k=8,
                        trtllm_version="0.19.0", image="nvcr.io/x", templates="tensorrtllm_backend v0.19.0",
                        engine=engine, observability={"prometheus_rules": "rules.yml"})
    (tmp_path / REPO_RECORD).write_text(record.to_json())
    assert RepoRecord.read(tmp_path) == record and RepoRecord.read(tmp_path).engine == engine
    assert RepoRecord.read(tmp_path / "..") is None  # not rendered by trtspec: served as it is
    old = json.loads(record.to_json())
    del old["engine"]  # records written before the engine configuration was
    (tmp_path / REPO_RECORD).write_text(json.dumps(old))
    assert RepoRecord.read(tmp_path).engine is None
    for bad, field in (("{", "='unreadable': is not UTF-8 JSON"), ("[1]", "='unreadable': is not a JSON object"), ('{"backend": "gpu"}', ": backend"),
                       (json.dumps({**old, "engine": {"target": "t", "max_k": -1}}), ": engine.max_k")):
        (tmp_path / REPO_RECORD).write_text(bad)
        with pytest.raises(ConfigError, match=re.escape(f"{REPO_RECORD}{field}")):
            RepoRecord.read(tmp_path)
