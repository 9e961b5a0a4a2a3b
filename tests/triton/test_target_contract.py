"""The rendered repository follows the chosen TensorRT-LLM target: the target comes from the build (or
`deploy --trtllm-version`), a method the target lacks is refused, the contract checker catches regressions, and the
torch flavour shares the target's preprocessing/postprocessing/ensemble names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.triton.contract_check import contract_problems, parsed_configs
from tests.triton.helpers import torch_bundle, trt_manifest, write_manifest
from trtspec.cli.main import cli, main
from trtspec.errors import ConfigError
from trtspec.targets import DEFAULT_TARGET, SUPPORTED_TARGETS, load_target
from trtspec.triton import contract
from trtspec.triton.render import RepoFile
from trtspec.triton.repo import RepoSpec, plan_repository


def trt_build(tmp_path: Path, target: Path, method: str = "draft_target", version: str | None = None) -> Path:
    options = {"draft_target": {"max_draft_len": 4, "draft": True}, "lookahead": {"max_draft_len": 23,
                                                                                  "lookahead": (4, 4, 4)}}[method]
    manifest = trt_manifest(method, target, **options)
    if version is not None:
        manifest["config"]["trtllm"] = {"version": version}
    return write_manifest(tmp_path / f"build-{method}-{version}", manifest)


def test_the_target_comes_from_the_build_and_can_be_overridden(tmp_path, tokenized_pair):
    assert RepoSpec.from_build(trt_build(tmp_path, tokenized_pair[0]), "tensorrtllm").trtllm_version == DEFAULT_TARGET
    build = trt_build(tmp_path, tokenized_pair[0], version="1.2.1")
    spec = RepoSpec.from_build(build, "tensorrtllm")
    assert (spec.trtllm_version, spec.build_trtllm_version) == ("1.2.1", "1.2.1")
    assert RepoSpec.from_build(build, "tensorrtllm", trtllm_version="0.18.0").trtllm_version == "0.18.0"
    with pytest.raises(ConfigError, match=r"trtllm.version='0.17.0'.*not a supported") as exc:
        RepoSpec.from_build(trt_build(tmp_path, tokenized_pair[0], version="0.17.0"), "tensorrtllm")
    assert "nearest: 0.18.0" in exc.value.hint


def test_lookahead_on_a_target_without_server_lookahead_is_refused(tmp_path, tokenized_pair, capsys):
    build = trt_build(tmp_path, tokenized_pair[0], "lookahead", version="0.18.0")
    with pytest.raises(ConfigError, match=r"TensorRT-LLM 0.18.0 lacks server_lookahead_params") as exc:
        RepoSpec.from_build(build, "tensorrtllm")
    assert "0.19.0" in exc.value.hint
    with pytest.raises(SystemExit) as code:
        main(["deploy", "--backend", "tensorrtllm", "--build", str(build), "--out", str(tmp_path / "repo")])
    err = capsys.readouterr().err
    assert code.value.code == 2 and "Error: trtllm.version='0.18.0'" in err and "server_lookahead_params" in err
    assert "Hint: use trtllm.version: 0.19.0" in err and not (tmp_path / "repo").exists()
    # onto a target that reads the server parameters it renders them
    out = tmp_path / "ok"
    result = CliRunner().invoke(cli, ["deploy", "--backend", "tensorrtllm", "--build", str(build), "--out", str(out),
                                      "--trtllm-version", "0.19.0"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "planned for TensorRT-LLM 0.18.0" in result.output and "25.05-trtllm-python-py3" in result.output
    text = (out / "tensorrt_llm" / "config.pbtxt").read_text()
    assert '"lookahead_window_size" value: { string_value: "4" }' in text
    assert json.loads((out / "trtspec-repo.json").read_text())["trtllm_version"] == "0.19.0"


@pytest.mark.parametrize("version", SUPPORTED_TARGETS)
def test_the_checker_catches_a_template_regression(tmp_path, tokenized_pair, version):
    """Reintroduce another release's spelling, a wrong dim or a foreign internal tensor: the checker reports it."""
    spec = RepoSpec.from_build(trt_build(tmp_path, tokenized_pair[0]), "tensorrtllm", trtllm_version=version)
    plan = plan_repository(spec)
    assert contract_problems(plan, version) == []
    seed = load_target(version).request_names["seed"]
    other = "seed" if seed == "random_seed" else "random_seed"
    mutations = {
        "tensorrt_llm/config.pbtxt": (f'name: "{seed}"', f'name: "{other}"'),
        "tensorrt_llm_bls/config.pbtxt": ('name: "max_tokens" data_type: TYPE_INT32 dims: [ 1 ]',
                                          'name: "max_tokens" data_type: TYPE_INT32 dims: [ -1 ]'),
        "ensemble/config.pbtxt": ('"_REQUEST_INPUT_LEN"', '"_INPUT_LEN"'),
        "preprocessing/config.pbtxt": ('key: "add_special_tokens"', 'key: "max_input_len"'),
    }
    for rel, (old, new) in mutations.items():
        assert old in plan[rel].text, rel
        broken = {**plan, rel: RepoFile(text=plan[rel].text.replace(old, new))}
        assert contract_problems(broken, version), f"{rel}: {new} went unnoticed"


@pytest.mark.parametrize("version", SUPPORTED_TARGETS)
def test_bls_and_tensorrt_llm_of_a_release_spell_the_renamed_inputs_alike(version):
    """The BLS forwards seed/min-length under its own input names; that is right because each release's BLS,
    ensemble and tensorrt_llm declare the same spelling."""
    target = load_target(version)
    for role in contract.REQUEST_ROLES:
        name = target.request_names[role]
        for model in ("tensorrt_llm", "tensorrt_llm_bls", "ensemble"):
            assert target.model(model).input(name) is not None, (model, name)


@pytest.mark.parametrize("decoupled", [False, True])
@pytest.mark.parametrize("version", SUPPORTED_TARGETS)
def test_torch_flavour_renders_the_targets_models(tmp_path, tokenized_pair, version, decoupled):
    """The torch flavour renders the same six models as the TensorRT-LLM flavour with the target's names (its engine
    models add only trtspec's declared extensions), and the same ensemble."""
    target_dir, draft_dir = tokenized_pair
    build = torch_bundle(tmp_path / "bundle", target_dir, draft_dir, k=3)
    plan = plan_repository(RepoSpec.from_build(build, "torch", trtllm_version=version, decoupled=decoupled, triton_max_batch_size=8, engine={"max_k": 6}))
    configs = parsed_configs(plan)
    assert set(configs) == {"preprocessing", "postprocessing", "ensemble", "tensorrt_llm", "tensorrt_llm_draft",
                            "tensorrt_llm_bls"}
    assert contract_problems(plan, version, flavour="torch") == []
    for name in ("tensorrt_llm", "tensorrt_llm_draft", "tensorrt_llm_bls"):
        assert configs[name].backend == "python"
        assert configs[name].model_transaction_policy.decoupled is decoupled
    engine_extras = {i.name for i in configs["tensorrt_llm"].input} - {t.name for t in load_target(version)
                                                                        .model("tensorrt_llm").inputs}
    assert engine_extras == {"num_draft_tokens"}
    trt = plan_repository(RepoSpec.from_build(trt_build(tmp_path, target_dir), "tensorrtllm", trtllm_version=version,
                                              triton_max_batch_size=8))
    assert plan["ensemble/config.pbtxt"].text == trt["ensemble/config.pbtxt"].text  # the same ensemble
    for model in ("preprocessing", "postprocessing", "tensorrt_llm_bls"):
        assert configs[model].input == parsed_configs(trt)[model].input
    assert configs["ensemble"].ensemble_scheduling.step[1].model_name == "tensorrt_llm"
    record = json.loads(plan["trtspec-repo.json"].text)
    assert (record["trtllm_version"], record["decoupled"]) == (version, decoupled)


def test_the_checker_allows_only_the_declared_extensions(tmp_path, tokenized_pair):
    target_dir, draft_dir = tokenized_pair
    plan = plan_repository(RepoSpec.from_build(torch_bundle(tmp_path / "b", target_dir, draft_dir), "torch"))
    rel = "tensorrt_llm/config.pbtxt"
    foreign = plan[rel].text.replace('name: "num_draft_tokens"', 'name: "num_draft_token"')
    assert contract_problems({**plan, rel: RepoFile(text=foreign)}, DEFAULT_TARGET, flavour="torch")
    wrong = plan[rel].text.replace('name: "num_draft_tokens" data_type: TYPE_INT32',
                                   'name: "num_draft_tokens" data_type: TYPE_INT64')
    assert contract_problems({**plan, rel: RepoFile(text=wrong)}, DEFAULT_TARGET, flavour="torch")
    assert contract_problems(plan, DEFAULT_TARGET) != []  # the extensions are not NVIDIA's


def test_a_parameter_the_target_does_not_read_is_refused():
    with pytest.raises(ConfigError, match=r"tensorrt_llm parameters=\['lookahead_window_size'\].*0.18.0"):
        contract.check_parameters(load_target("0.18.0"), "tensorrt_llm", ["gpt_model_path", "lookahead_window_size"])
    contract.check_parameters(load_target("0.19.0"), "tensorrt_llm_draft", ["lookahead_window_size"])
    with pytest.raises(ConfigError, match="tokenizer_dir"):
        contract.check_parameters(load_target("0.19.0"), "tensorrt_llm_bls", ["tokenizer_dir"])
