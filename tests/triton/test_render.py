"""Strict rendering, RepoSpec from manifests, refusals, and ModelConfig validation of every rendered config."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.triton.helpers import torch_bundle, trt_manifest, write_manifest
from trtspec import choices
from trtspec.errors import ConfigError, UsageError
from trtspec.triton.render import (
    Block,
    pbtxt_parameters,
    placeholders,
    render_template,
    template_root,
    validate_model_config,
    write_repository,
)
from trtspec.triton.repo import RepoSpec, plan_repository


def test_render_fills_every_placeholder():
    assert render_template('name: "${n}" max_batch_size: ${b}', {"n": "m", "b": 4}) == 'name: "m" max_batch_size: 4'


@pytest.mark.parametrize("values, problem", [
    ({"n": "m"}, "placeholders have no value"),
    ({"n": "m", "b": 1, "extra": 2}, "values have no placeholder"),
])  # fmt: skip
def test_render_refuses_missing_and_unknown_keys(values, problem):
    with pytest.raises(ConfigError, match=problem):
        render_template('name: "${n}" max_batch_size: ${b}', values)


@pytest.mark.parametrize("value", ["${b}", 'a"b', "a\nb", [1, 2], None])
def test_render_refuses_values_that_could_break_the_output(value):
    with pytest.raises(ConfigError):
        render_template('name: "${n}"', {"n": value})


def test_render_refuses_stray_dollar_in_template():
    with pytest.raises(ConfigError, match="not a"):
        render_template("x: $y ${n}", {"n": 1})


def test_parameters_block_escapes_and_omits_unset():
    block = pbtxt_parameters({"a": 'q"uote\\', "b": None, "c": True, "medusa_choices": choices.to_triton([[0], [0, 1]])})
    config = validate_model_config(f'name: "m"\n{block}')
    assert set(config.parameters) == {"a", "c", "medusa_choices"}
    assert config.parameters["a"].string_value == 'q"uote\\'
    assert config.parameters["c"].string_value == "true"
    assert config.parameters["medusa_choices"].string_value == "{0}, {0, 1}"
    with pytest.raises(ConfigError):
        pbtxt_parameters({"x": "${y}"})


def test_templates_have_only_known_placeholders():
    root = template_root()
    found = {p.parent.name: placeholders(p.read_text()) for p in root.glob("*/config.pbtxt.tmpl")}
    assert set(found) == {"ensemble", "preprocessing", "postprocessing", "tensorrt_llm", "tensorrt_llm_bls", "llmapi"}
    assert found["llmapi"] == {"model_name", "batching", "inputs", "outputs", "instance_group", "parameters"}
    assert found["tensorrt_llm"] == {"model_name", "backend", "triton_max_batch_size", "decoupled",
                                     "max_queue_delay_microseconds", "max_queue_size", "inputs", "outputs",
                                     "parameters"}
    assert found["ensemble"] == {"triton_max_batch_size", "inputs", "outputs", "steps"}
    # the declarations are generated from the target's facts: no template spells a tensor name of its own
    for name in ("ensemble", "preprocessing", "postprocessing", "tensorrt_llm", "tensorrt_llm_bls", "llmapi"):
        text = (root / name / "config.pbtxt.tmpl").read_text()
        assert {"inputs", "outputs"} <= found[name] and "data_type" not in text, name


def test_invalid_model_config_is_reported():
    with pytest.raises(ConfigError, match="ModelConfig"):
        validate_model_config("max_batch_size: $x")


# -- manifests -> RepoSpec -> repository ---------------------------------------------------------------------------

EAGLE_TREE = [[0], [0, 0], [0, 0, 0], [1], [1, 0], [2]]
TRT_BUILDS = {
    "none": {},
    "draft_target": {"max_draft_len": 8, "draft": True},
    "ngram": {"max_draft_len": 4},
    "medusa": {"max_draft_len": 63, "heads": 4, "tree": choices.MC_SIM_7B_63},
    "eagle": {"max_draft_len": 6, "heads": 3, "tree": EAGLE_TREE},
    "lookahead": {"max_draft_len": 23, "lookahead": (4, 4, 4)},
    "redrafter": {"tp": 2},
}


def trt_build(tmp_path: Path, method: str, target: Path, **change) -> Path:
    return write_manifest(tmp_path / f"build-{method}",
                          trt_manifest(method, target, **{**TRT_BUILDS[method], **change}))


@pytest.mark.parametrize("method", sorted(TRT_BUILDS))
def test_trtllm_repository_renders_and_parses(tmp_path, tokenized_pair, method):
    spec = RepoSpec.from_build(trt_build(tmp_path, method, tokenized_pair[0]), "tensorrtllm",
                               decoupled=method == "draft_target")
    plan = plan_repository(spec)
    configs = {rel: validate_model_config(f.text, source=rel) for rel, f in plan.items() if rel.endswith(".pbtxt")}
    assert not any("${" in f.text for f in plan.values() if f.text)
    target = configs["tensorrt_llm/config.pbtxt"]
    params = {k: v.string_value for k, v in target.parameters.items()}
    assert params["gpt_model_path"] == str((tmp_path / f"build-{method}" / "engines/target").resolve())
    assert params["gpt_model_type"] == "inflight_fused_batching" and params["max_beam_width"] == "1"
    assert params["max_tokens_in_paged_kv_cache"] == "2048" and "kv_cache_free_gpu_mem_fraction" not in params
    assert target.backend == "tensorrtllm" and target.max_batch_size == 4
    # NVIDIA's decoupled_mode, off unless asked for, for tensorrt_llm(_draft) and the BLS alike
    decoupled = method == "draft_target"
    assert target.model_transaction_policy.decoupled == decoupled
    assert configs["tensorrt_llm_bls/config.pbtxt"].model_transaction_policy.decoupled == decoupled
    assert "exclude_input_in_output" not in params  # NVIDIA's default: the prompt is part of the output
    ensemble = configs["ensemble/config.pbtxt"]
    assert [s.model_name for s in ensemble.ensemble_scheduling.step] == ["preprocessing", "tensorrt_llm",
                                                                          "postprocessing"]
    if method == "draft_target":
        draft = configs["tensorrt_llm_draft/config.pbtxt"]
        assert draft.name == "tensorrt_llm_draft" and "decoding_mode" not in draft.parameters
        assert "decoding_mode" not in target.parameters  # DTM: leave it to TensorRT-LLM
        assert params["enable_kv_cache_reuse"] == "true"
        bls = configs["tensorrt_llm_bls/config.pbtxt"]
        assert bls.parameters["tensorrt_llm_draft_model_name"].string_value == "tensorrt_llm_draft"
        assert draft.model_transaction_policy.decoupled
    else:
        assert "tensorrt_llm_draft/config.pbtxt" not in configs
        assert "tensorrt_llm_draft_model_name" not in configs["tensorrt_llm_bls/config.pbtxt"].parameters
    if method == "medusa":
        assert params["decoding_mode"] == "medusa"
        assert params["medusa_choices"] == choices.to_triton(choices.MC_SIM_7B_63)
    if method == "eagle":
        assert params["decoding_mode"] == "eagle" and params["eagle_choices"] == choices.to_triton(EAGLE_TREE)
    if method == "lookahead":
        assert (params["decoding_mode"], params["lookahead_window_size"], params["lookahead_ngram_size"],
                params["lookahead_verification_set_size"]) == ("lookahead", "4", "4", "4")
    record = json.loads(plan["trtspec-repo.json"].text)
    assert record["world_size"] == (2 if method == "redrafter" else 1)


def test_torch_repository_renders(tmp_path, tokenized_pair):
    target, draft = tokenized_pair
    build = torch_bundle(tmp_path / "bundle", target, draft, k=3)
    spec = RepoSpec.from_build(build, "torch", engine={"max_k": 6})
    plan = plan_repository(spec)
    engines = {name: validate_model_config(plan[f"{name}/config.pbtxt"].text)
               for name in ("tensorrt_llm", "tensorrt_llm_draft")}
    params = {name: {k: v.string_value for k, v in c.parameters.items()} for name, c in engines.items()}
    assert all(c.backend == "python" and not c.model_transaction_policy.decoupled for c in engines.values())
    assert params["tensorrt_llm"].items() >= {
        "method": "draft_target", "target": str(build / "target"), "draft": str(build / "draft"), "max_k": "6",
        "default_k": "3", "exclude_input_in_output": "false"}.items()
    # the draft model alone, plain decoding: what NVIDIA's client-side speculation asks it for
    assert params["tensorrt_llm_draft"].items() >= {"method": "none", "target": str(build / "draft"),
                                                    "default_k": "0"}.items()
    assert "draft" not in params["tensorrt_llm_draft"]
    for name in engines:
        assert plan[f"{name}/1/model.py"].copy_from.name == "engine_shim.py"
    bls = validate_model_config(plan["tensorrt_llm_bls/config.pbtxt"].text)
    assert bls.parameters["tensorrt_llm_draft_model_name"].string_value == "tensorrt_llm_draft"
    ensemble = validate_model_config(plan["ensemble/config.pbtxt"].text)
    assert "num_draft_tokens" not in [i.name for i in ensemble.input]  # the ensemble is NVIDIA's, extensions stay
    assert [s.model_name for s in ensemble.ensemble_scheduling.step] == ["preprocessing", "tensorrt_llm",
                                                                          "postprocessing"]
    decoupled = plan_repository(RepoSpec.from_build(build, "torch", decoupled=True, engine={"max_k": 6}))
    for name in ("tensorrt_llm", "tensorrt_llm_draft", "tensorrt_llm_bls"):
        assert validate_model_config(decoupled[f"{name}/config.pbtxt"].text).model_transaction_policy.decoupled
    plain = plan_repository(RepoSpec.from_build(torch_bundle(tmp_path / "plain", target, None, method="ngram"),
                                                "torch"))
    assert "tensorrt_llm_draft/config.pbtxt" not in plain
    assert json.loads(plain["trtspec-repo.json"].text)["models"] == [
        "preprocessing", "postprocessing", "ensemble", "tensorrt_llm", "tensorrt_llm_bls"]
    with pytest.raises(ConfigError, match="must be in"):
        RepoSpec.from_build(build, "torch", engine={"default_k": 7, "max_k": 6})


def _engine_config(build: Path, role: str, **build_config) -> None:
    """Write `engines/<role>/config.json` as trtllm-build does (the built engine wins over the plan)."""
    path = build / "engines" / role
    path.mkdir(parents=True, exist_ok=True)
    vocab = build_config.pop("vocab_size", 4096)
    (path / "config.json").write_text(json.dumps({"build_config": build_config, "pretrained_config": {
        "vocab_size": vocab, "mapping": {"tp_size": 1, "pp_size": 1}}}))


@pytest.mark.parametrize("method, change, overrides, reason", [
    ("draft_target", {"max_draft_len": 0}, {}, "not built for draft tokens"),
    ("draft_target", {"draft": False}, {}, "needs a draft engine"),
    ("draft_target", {}, {"default_k": 9}, r"default_k=9: must be in \[0, max_k=8\]"),  # max_k: the engine's
    ("lookahead", {}, {"lookahead": (7, 7, 7)}, "needs max_draft_len=83 but the target engine has 23"),
    ("medusa", {"tree": [[0], [0, 0], [0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0, 0]]}, {}, "depth 5"),
])  # fmt: skip
def test_mismatched_builds_are_refused(tmp_path, tokenized_pair, method, change, overrides, reason):
    build = trt_build(tmp_path, method, tokenized_pair[0], **change)
    with pytest.raises((UsageError, ConfigError), match=reason):
        RepoSpec.from_build(build, "tensorrtllm", engine=overrides)


def test_built_engines_are_checked_against_the_deployment(tmp_path, tokenized_pair):
    build = trt_build(tmp_path, "lookahead", tokenized_pair[0])
    _engine_config(build, "target", max_draft_len=20)  # built with other (W, N, G) than the manifest says
    with pytest.raises(UsageError, match=r"needs max_draft_len=23 but the target engine has 20 \(built for"):
        RepoSpec.from_build(build, "tensorrtllm")
    build = trt_build(tmp_path, "draft_target", tokenized_pair[0])
    _engine_config(build, "target", max_draft_len=8)
    _engine_config(build, "draft", vocab_size=32000)
    with pytest.raises(UsageError, match="vocab_size 32000 != target's 4096"):
        RepoSpec.from_build(build, "tensorrtllm")
    _engine_config(build, "target", max_draft_len=0)  # a plain engine where the plan promised draft tokens
    with pytest.raises(UsageError, match="not built for draft tokens"):
        RepoSpec.from_build(build, "tensorrtllm")


def test_backend_mismatch_is_refused(tmp_path, tokenized_pair):
    with pytest.raises(UsageError, match="was built for backend 'tensorrtllm'"):
        RepoSpec.from_build(trt_build(tmp_path, "medusa", tokenized_pair[0]), "torch")


def test_build_without_manifest_is_refused(tmp_path):
    with pytest.raises(UsageError, match="no trtspec-manifest.json"):
        RepoSpec.from_build(tmp_path, "torch")


def test_write_repository_is_atomic_and_needs_force(tmp_path, tokenized_pair):
    spec = RepoSpec.from_build(trt_build(tmp_path, "none", tokenized_pair[0]), "tensorrtllm")
    out = write_repository(plan_repository(spec), tmp_path / "repo")
    assert (out / "tensorrt_llm/config.pbtxt").is_file() and (out / "preprocessing/1/model.py").is_file()
    with pytest.raises(UsageError, match="already exists"):
        write_repository(plan_repository(spec), out)
    (out / "stale").write_text("x")
    write_repository(plan_repository(spec), out, force=True)
    assert not (out / "stale").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".repo")] == []  # no temp dirs left behind


def test_block_values_are_allowed_multiline():
    assert render_template("${b}", {"b": Block("a\nb")}) == "a\nb"


def test_rendering_does_not_import_torch_or_tritonclient():
    code = ("import sys, trtspec.triton.render, trtspec.triton.repo, trtspec.triton.server, trtspec.triton.client; "
            "assert 'torch' not in sys.modules and 'tritonclient' not in sys.modules, 'heavy import'")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
