"""BuildSpec loading: YAML paths in errors, aliases, lookahead lists, relative paths, --schema."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tests.build.helpers import spec_of
from trtspec.cli.main import cli
from trtspec.config import BuildSpec, load_build_spec, parse_build_spec
from trtspec.errors import ConfigError
from trtspec.targets import DEFAULT_TARGET, SUPPORTED_TARGETS, load_target


def test_error_names_yaml_path_value_and_fix(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("target: tiny\nengine:\n  max_batch_size: 0\n")
    with pytest.raises(ConfigError) as err:
        load_build_spec(path)
    assert err.value.field == "engine.max_batch_size" and err.value.value == 0
    assert "greater than or equal to 1" in err.value.message and "--schema" in err.value.hint


def test_unknown_field_lists_known_fields():
    with pytest.raises(ConfigError) as err:
        spec_of(target="tiny", engine={"max_batch": 4})
    assert err.value.field == "engine.max_batch" and "max_batch_size" in err.value.hint


def test_missing_target_and_unknown_method():
    with pytest.raises(ConfigError, match="is required") as err:
        spec_of(method="none")
    assert err.value.field == "target"
    with pytest.raises(ConfigError, match="unknown method") as err:
        spec_of(target="tiny", method="speculative")
    assert err.value.field == "method" and "draft_target" in err.value.message


def test_cross_field_lengths():
    with pytest.raises(ConfigError, match="max_input_len=512 must be < max_seq_len=256") as err:
        spec_of(target="tiny", engine={"max_input_len": 512, "max_seq_len": 256})
    assert err.value.field == "engine"


def test_k_alias_and_lookahead_list():
    spec = spec_of(target="tiny", method="lookahead", k=23, lookahead=[4, 4, 4])
    assert spec.max_draft_len == 23 and spec.lookahead.as_tuple() == (4, 4, 4)
    with pytest.raises(ConfigError) as err:
        spec_of(target="tiny", lookahead=[4, 4])
    assert err.value.field == "lookahead" and "[W, N, G]" in err.value.message


def test_target_defaults_and_container_comes_from_its_data_file():
    spec = parse_build_spec({"target": "tiny"})  # spec_of pins the build tests' engine target
    assert spec.trtllm.version == DEFAULT_TARGET == "1.2.1" and spec.trtllm.target() is load_target(DEFAULT_TARGET)
    assert spec.workflow is None and spec.workflow_name() == "pytorch"  # the default target's default workflow
    for version in SUPPORTED_TARGETS:
        for fields in ({"trtllm": {"version": version}}, {"trtllm_version": version}):
            spec = spec_of(target="tiny", **fields)
            assert spec.trtllm.version == version and spec.trtllm.image() == load_target(version).image
    assert BuildSpec.model_json_schema()["$defs"]["TRTLLMSpec"]["properties"]["version"]["default"] == DEFAULT_TARGET


@pytest.mark.parametrize("fields, field, words", [
    ({"trtllm": {"version": "1.0.0"}}, "trtllm.version", ["0.18.0", "0.19.0", "1.2.1", "nearest: 1.2.1"]),
    ({"trtllm_version": "0.17"}, "trtllm.version", ["nearest: 0.18.0"]),
    ({"trtllm": {"version": "0.19.0", "container": "25.03"}}, "trtllm.container", ["25.05"]),
    ({"trtllm_version": "1.2.1", "trtllm": {"version": "0.19.0"}}, "trtllm_version", ["trtllm.version"]),
])
def test_bad_target_is_refused_with_the_fix(fields, field, words):
    with pytest.raises(ConfigError) as err:
        spec_of(target="tiny", **fields)
    assert err.value.field == field and err.value.exit_code == 2
    assert all(w in str(err.value) + err.value.hint for w in words), (str(err.value), err.value.hint)


def test_unsupported_target_exits_2_with_one_error_line(tmp_path, capsys):
    from trtspec.cli.main import main

    path = tmp_path / "c.yaml"
    path.write_text("target: tiny\ntrtllm_version: 0.20.0\n")
    with pytest.raises(SystemExit) as exc:
        main(["build", str(path), "--dry-run"])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert [line for line in err.splitlines() if line.startswith("Error:")] == [
        "Error: trtllm.version='0.20.0': is not a supported TensorRT-LLM target (nearest: 0.19.0)"]


def test_relative_paths_resolve_against_config_dir(tmp_path, random_pair):
    (tmp_path / "cfg").mkdir()
    path = tmp_path / "cfg" / "c.yaml"
    path.write_text("target: ../t\noutput: ../out/x\nmethod: none\n")
    (tmp_path / "t").mkdir()
    spec = load_build_spec(path)
    assert spec.target == str(tmp_path / "t") and spec.output == str(tmp_path / "out" / "x")
    assert load_build_spec(path, overrides={"output": "/abs"}).output == "/abs"


def test_schema_cli_prints_json_schema():
    result = CliRunner().invoke(cli, ["build", "--schema"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    schema = json.loads(result.output)
    assert schema == BuildSpec.model_json_schema()
    assert {"target", "method", "engine", "kv_cache", "medusa", "lookahead"} <= set(schema["properties"])
    assert "max_batch_size" in schema["$defs"]["EngineSpec"]["properties"]


def test_build_without_config_is_usage_error():
    from trtspec.cli.main import main

    with pytest.raises(SystemExit) as exc:
        main(["build"])
    assert exc.value.code == 2
