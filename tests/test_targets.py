"""trtspec.targets: the per-release facts load, carry sources, and the checks built on them behave."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import resources

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trtspec import methods
from trtspec.errors import ConfigError
from trtspec.targets import (
    DEFAULT_TARGET,
    FEATURES,
    SUPPORTED_TARGETS,
    checkpoint_tensor_names,
    diff_against_target,
    diff_build_argv,
    diff_checkpoint,
    diff_convert_argv,
    diff_llm_api,
    load_target,
    lookahead_max_draft_len,
    nearest_target,
    pbtxt_names,
    require_feature,
)

CONTAINERS = {"0.18.0": "25.03", "0.19.0": "25.05", "1.2.1": "26.04"}


def raw(version: str) -> dict:
    return json.loads(resources.files("trtspec.targets").joinpath(f"trtllm-{version}.json").read_text())


# --- data files ------------------------------------------------------------------------------------------------------


def test_data_files_are_exactly_the_supported_targets():
    # every trtllm-*.json is a supported release (other facts files, e.g. eagle3-facts.json, sit beside them)
    files = sorted(p.name for p in resources.files("trtspec.targets").iterdir()
                   if p.name.startswith("trtllm-") and p.name.endswith(".json"))
    assert files == sorted(f"trtllm-{v}.json" for v in SUPPORTED_TARGETS)


@pytest.mark.parametrize("version", SUPPORTED_TARGETS)
def test_target_loads_and_validates(version):
    target = load_target(version)
    assert target.version == version
    assert set(target.models) == {"preprocessing", "postprocessing", "ensemble", "tensorrt_llm", "tensorrt_llm_bls"}
    assert set(target.features) == set(FEATURES)
    assert target.image == f"nvcr.io/nvidia/tritonserver:{CONTAINERS[version]}-trtllm-python-py3"
    assert target.default == (version == DEFAULT_TARGET)
    assert {"medusa", "eagle", "lookahead", "redrafter", "top_k_top_p"} <= set(target.decoding_modes)
    assert target.model("tensorrt_llm").required_inputs == {"input_lengths", "request_output_len"}
    assert target.model("tensorrt_llm_draft") is target.model("tensorrt_llm")


def test_exactly_one_default_and_it_is_default_target():
    assert [v for v in SUPPORTED_TARGETS if raw(v)["default"]] == [DEFAULT_TARGET]
    assert load_target() is load_target(DEFAULT_TARGET)


def _check_source(source: dict, where: str) -> None:
    assert isinstance(source, dict), f"{where}: no source"
    assert source.get("repo"), f"{where}: source without repo"
    assert source.get("path"), f"{where}: source without path"
    assert any(source.get(k) for k in ("tag", "commit", "via", "branch")), f"{where}: source without tag/commit/via"


@pytest.mark.parametrize("version", SUPPORTED_TARGETS)
def test_every_section_has_a_source(version):
    data = raw(version)
    _check_source(data["templates"], "templates")
    for section in ("container", "trtllm_build", "examples", "lookahead", "triton"):
        _check_source(data[section]["source"], section)
    _check_source(data["trtllm_build"]["plugin_flags"]["source"], "trtllm_build.plugin_flags")
    _check_source(data["trtllm_build"]["max_draft_len"]["source"], "trtllm_build.max_draft_len")
    for name, part in data["checkpoint"].items():
        _check_source(part["source"], f"checkpoint.{name}")
    _check_source(data["checkpoint"]["medusa"]["tensors"]["source"], "checkpoint.medusa.tensors")
    _check_source(data["examples"]["convert_checkpoint_args"]["source"], "examples.convert_checkpoint_args")
    _check_source(data["checkpoint"]["common_keys"]["read_source"], "checkpoint.common_keys.read_source")
    _check_source(data["checkpoint"]["medusa"]["read_keys_source"], "checkpoint.medusa.read_keys_source")
    # LLM-API facts live in pytorch-workflow.json (tests/test_pytorch_workflow_facts.py checks their sources); a
    # release's own file may only say why it has none
    assert "llm_api" not in data or (not data["llm_api"]["verified"] and data["llm_api"]["source"]["note"])
    _check_source(data["triton"]["backend"]["source"], "triton.backend")
    _check_source(data["triton"]["tensorrt_llm_draft"]["source"], "triton.tensorrt_llm_draft")
    for name, model in data["triton"]["models"].items():
        _check_source(model["source"], f"triton.models.{name}")


# --- the facts that motivated the targets -----------------------------------------------------------------------------


@pytest.mark.parametrize("version", SUPPORTED_TARGETS)
def test_request_names_match_the_templates_and_the_backend(version):
    target = load_target(version)
    trt = target.model("tensorrt_llm")
    seed, min_tokens = target.request_names["seed"], target.request_names["min_tokens"]
    assert trt.input(seed) is not None and trt.input(min_tokens) is not None
    assert {seed, min_tokens} <= target.backend_reads
    other = {"seed": "random_seed", "min_tokens": "min_length", "random_seed": "seed", "min_length": "min_tokens"}
    assert trt.input(other[seed]) is None and trt.input(other[min_tokens]) is None
    assert target.has("seed_min_tokens_names") == (seed == "seed")
    assert target.model("ensemble").input(seed) is not None


@pytest.mark.parametrize("version", SUPPORTED_TARGETS)
def test_features_agree_with_the_extracted_names(version):
    target = load_target(version)
    trt = target.model("tensorrt_llm")
    lookahead = ("lookahead_window_size", "lookahead_ngram_size", "lookahead_verification_set_size")
    assert target.has("per_request_lookahead") == all(
        trt.input(n) is not None and trt.input(n).read_by_backend for n in lookahead)
    assert target.has("server_lookahead_params") == all(
        n in trt.parameters and n in target.backend_parameters for n in lookahead)
    acceptance = ("acceptance_rate", "total_accepted_draft_tokens", "total_draft_tokens")
    assert target.has("acceptance_outputs") == all(trt.output(n) is not None for n in acceptance)
    assert target.has("acceptance_outputs") == all(target.model("ensemble").output(n) is not None for n in acceptance)
    assert target.has("return_perf_metrics_input") == (trt.input("return_perf_metrics") is not None)
    assert {"medusa_choices", "eagle_choices", "decoding_mode"} <= set(trt.parameters) & target.backend_parameters
    assert target.has("speculative_decoding_fast_logits") == ("speculative_decoding_fast_logits" in trt.parameters)
    bls = target.model("tensorrt_llm_bls")
    assert target.has("bls_draft_target") == (bls.input("num_draft_tokens") is not None
                                               and "tensorrt_llm_draft_model_name" in bls.parameters)


def test_known_differences_between_releases():
    t18, t19, t121 = (load_target(v) for v in SUPPORTED_TARGETS)
    assert t18.model("tensorrt_llm").input("return_kv_cache_reuse_stats") is not None
    assert t18.model("tensorrt_llm").output("arrival_time_ns") is None
    assert t19.model("tensorrt_llm").output("arrival_time_ns") is not None
    # the backend reads runtime_top_k_min: the template's runtime_top_p_min is never read (all three targets)
    for target in (t18, t19, t121):
        assert target.model("tensorrt_llm").input("runtime_top_p_min").read_by_backend is False
    assert t18.examples["dirs"]["llama"] == t19.examples["dirs"]["llama"] == "examples/llama"
    assert t121.examples["dirs"]["llama"] == "examples/models/core/llama"
    assert t121.llm_api.draft_model_field == "speculative_model"
    assert t121.llm_api.fields_of("Eagle")["speculative_model_dir"].name == "speculative_model"  # the alias
    assert "Eagle3" not in t121.llm_api.decoding_types and "Eagle3" in t121.llm_api.invalid_decoding_types
    assert not t18.llm_api.verified and not t19.llm_api.verified
    for target in (t18, t19, t121):
        assert "bias" in target.checkpoint["llama"]["not_read"]
        assert {"attn_bias", "mlp_bias", "rotary_base", "rotary_scaling"} <= set(target.checkpoint["llama"]["keys"])
        assert target.trtllm_build["choices"]["--speculative_decoding_mode"] == [
            "draft_tokens_external", "lookahead_decoding", "medusa", "explicit_draft_tokens", "eagle"]


# --- lookahead ------------------------------------------------------------------------------------------------------


def _data_formula(expr: str, w: int, n: int, g: int) -> int:
    return eval(expr, {"__builtins__": {}}, {"W": w, "N": n, "G": g})  # noqa: S307 - our own data expression


@pytest.mark.parametrize("version", SUPPORTED_TARGETS)
def test_lookahead_formula_on_a_grid(version):
    facts = load_target(version).lookahead
    for w in range(1, 9):
        for n in range(1, 9):
            for g in range(0, 9):
                legal = not (n == 1 and (w != 1 or g != 0))
                if not legal:
                    with pytest.raises(ConfigError):
                        lookahead_max_draft_len(w, n, g)
                    continue
                value = lookahead_max_draft_len(w, n, g)
                assert value == _data_formula(facts["max_draft_len"], w, n, g)
                assert value == methods.lookahead_max_draft_len(w, n, g)
    for w, n, g, expected in facts["examples"]:
        assert lookahead_max_draft_len(w, n, g) == expected


@settings(max_examples=300, deadline=None)
@given(w=st.integers(-2, 64), n=st.integers(-2, 64), g=st.integers(-2, 64))
def test_lookahead_formula_is_the_data_files_expression(w, n, g):
    """For any (W, N, G): trtspec's one definition (methods re-exports it) equals every target's data-file
    expression where TensorRT-LLM's isLegal holds, and is refused (ConfigError) where it does not."""
    legal = w >= 1 and n >= 1 and g >= 0 and not (n == 1 and (w != 1 or g != 0))
    assert methods.lookahead_max_draft_len is lookahead_max_draft_len
    if not legal:
        with pytest.raises(ConfigError):
            lookahead_max_draft_len(w, n, g)
        return
    value = lookahead_max_draft_len(w, n, g)
    for version in SUPPORTED_TARGETS:
        assert value == _data_formula(load_target(version).lookahead["max_draft_len"], w, n, g)
    assert value >= 0 and (value == 0) == (n == 1 or (n == 2 and w == 1 and g == 0))


@pytest.mark.parametrize("bad", [(0, 3, 4), (4, 0, 4), (4, 3, -1), (2, 1, 0), (1, 1, 1)])
def test_lookahead_illegal(bad):
    with pytest.raises(ConfigError):
        lookahead_max_draft_len(*bad)


# --- refusals -------------------------------------------------------------------------------------------------------


def test_unsupported_version_is_refused_with_the_supported_ones():
    with pytest.raises(ConfigError) as err:
        load_target("0.20.0")
    assert err.value.field == "trtllm.version" and "0.20.0" in str(err.value)
    assert all(v in err.value.hint for v in SUPPORTED_TARGETS) and "nearest: 0.19.0" in err.value.hint


def test_nearest_target():
    assert nearest_target("0.17.0") == "0.18.0"
    assert nearest_target("0.21.0") == "0.19.0"
    assert nearest_target("1.0.0") == "1.2.1"
    assert nearest_target("0.19.0", ["0.18.0", "1.2.1"]) == "0.18.0"
    assert nearest_target("0.19.0", []) is None


def test_require_feature_names_target_feature_and_nearest():
    with pytest.raises(ConfigError) as err:
        require_feature("0.19.0", "eagle3_llmapi")
    assert "0.19.0" in str(err.value) and "eagle3_llmapi" in str(err.value) and "1.2.1" in err.value.hint
    with pytest.raises(ConfigError) as err:
        require_feature(load_target("0.18.0"), "per_request_lookahead")
    assert "0.18.0" in str(err.value) and "0.19.0" in err.value.hint
    with pytest.raises(ConfigError) as err:
        require_feature("1.2.1", "eagle3_decoding_type")
    assert "no supported target" in err.value.hint
    assert require_feature("0.19.0", "acceptance_outputs").version == "0.19.0"
    with pytest.raises(ConfigError):
        require_feature("0.19.0", "warp_drive")


# --- diff helpers ---------------------------------------------------------------------------------------------------


def test_diff_against_target_synthetic():
    diffs = diff_against_target({
        "tensorrt_llm": {"inputs": {"input_ids": "TYPE_INT32", "input_lengths": "TYPE_INT32", "seed": "TYPE_UINT64",
                                    "draft_logits": "TYPE_FP16", "temperature": "TYPE_INT32",
                                    "runtime_top_p_min": "TYPE_FP32"},
                         "outputs": ["output_ids", "num_drafts"], "parameters": ["gpt_model_path", "bogus_key"]},
        "tensorrt_llm_draft": {"inputs": ["input_lengths", "request_output_len"], "outputs": ["output_ids"]},
        "ensemble": {"inputs": ["text_input", "max_tokens", "random_seed"], "outputs": ["text_output"]},
        "trtspec_engine": {"inputs": ["input_ids"]},
    }, "0.19.0")
    trt = diffs["tensorrt_llm"]
    assert trt.unknown_inputs == ["seed"] and trt.missing_required == ["request_output_len"]
    assert trt.dtype_mismatches == ["input temperature: TYPE_INT32 != TYPE_FP32"]  # draft_logits is ${logits_datatype}
    assert trt.not_read_inputs == ["runtime_top_p_min"]
    assert trt.unknown_outputs == ["num_drafts"] and trt.unknown_parameters == ["bogus_key"] and not trt.ok
    assert diffs["tensorrt_llm_draft"].ok and diffs["ensemble"].ok
    assert diffs["trtspec_engine"].unknown_model


@pytest.mark.parametrize("version", SUPPORTED_TARGETS)
def test_nvidias_own_names_conform(version):
    target = load_target(version)
    rendered = {}
    for name, model in target.models.items():
        read = [t.name for t in model.inputs if t.read_by_backend is not False]
        rendered[name] = {"inputs": {n: model.input(n).data_type for n in read},
                          "outputs": {t.name: t.data_type for t in model.outputs}, "parameters": list(model.parameters)}
    assert all(d.ok for d in diff_against_target(rendered, target).values())


def test_pbtxt_names():
    text = ('name: "m" backend: "python" max_batch_size: 1 input [ { name: "a" data_type: TYPE_INT32 dims: [ 1 ] } ] '
            'output [ { name: "b" data_type: TYPE_STRING dims: [ -1 ] } ] '
            'parameters: { key: "k" value: { string_value: "v" } }')
    assert pbtxt_names(text) == {"inputs": {"a": "TYPE_INT32"}, "outputs": {"b": "TYPE_STRING"}, "parameters": ["k"]}


def test_diff_build_argv():
    good = ["--checkpoint_dir", "c", "--speculative_decoding_mode", "lookahead_decoding", "--max_draft_len", "23",
            "--use_paged_context_fmha", "enable", "--logits_dtype", "float32", "--kv_cache_type", "paged"]
    assert diff_build_argv(good, "0.19.0") == []
    assert diff_build_argv(["trtllm-build", *good], "0.19.0") == []  # the program name is skipped
    bad = diff_build_argv(["--speculative_decoding_mode", "ngram", "--warp", "9"], "0.19.0")
    assert len(bad) == 3 and "ngram" in bad[0] and "--warp" in bad[1] and "--checkpoint_dir: required" in bad[2]
    no_len = diff_build_argv(["--checkpoint_dir", "c", "--speculative_decoding_mode", "lookahead_decoding"], "1.2.1")
    assert no_len == ["--max_draft_len: required with --speculative_decoding_mode lookahead_decoding"]
    assert diff_build_argv(["--checkpoint_dir", "c", "--speculative_decoding_mode", "medusa"], "1.2.1") == []


def test_diff_llm_api():
    good = {"speculative_config": {"decoding_type": "DraftTarget", "max_draft_len": 4, "speculative_model_dir": "d"},
            "kv_cache_config": {"enable_block_reuse": True, "free_gpu_memory_fraction": 0.5}}
    assert diff_llm_api(good, "1.2.1") == []  # the alias is read
    bad = list(map(str, diff_llm_api({"speculative_config": {"decoding_type": "Eagle3", "max_draft_len": 3,
                                                             "speculative_model": "d"}}, "1.2.1")))
    assert bad == ["speculative_config.decoding_type: 'Eagle3' is not a decoding type of TensorRT-LLM 1.2.1 (no "
                   "Eagle3DecodingConfig in 1.2.1 (added later on main, PR #10124)) (nearest decoding type: Eagle)"]
    assert diff_llm_api(good, "0.19.0") and "no verified" in str(diff_llm_api(good, "0.19.0")[0])
    missing = diff_llm_api({"speculative_config": {"decoding_type": "Eagle", "max_draft_len": 3}, "warp": 1}, "1.2.1")
    assert [p.key for p in missing] == ["warp", "speculative_config.speculative_model"]
    assert str(missing[1]) == "speculative_config.speculative_model: required by Eagle in TensorRT-LLM 1.2.1"


def _llama_config(**extra):
    return {"architecture": "LlamaForCausalLM", "dtype": "float16", "num_hidden_layers": 2, "hidden_size": 8,
            "num_attention_heads": 2, "vocab_size": 16, **extra}


def test_checkpoint_tensor_names_follow_the_bias_keys():
    plain = checkpoint_tensor_names(_llama_config(), "0.19.0")
    assert len(plain) == 3 + 2 * 7 and "transformer.layers.1.mlp.gate.weight" in plain
    biased = checkpoint_tensor_names(_llama_config(attn_bias=True, mlp_bias=True), "0.19.0")
    assert biased - plain == {f"transformer.layers.{i}.{n}.bias" for i in (0, 1)
                              for n in ("attention.qkv", "attention.dense", "mlp.fc", "mlp.gate", "mlp.proj")}
    medusa = checkpoint_tensor_names(_llama_config(architecture="MedusaForCausalLM", num_medusa_heads=2,
                                                   num_medusa_layers=1), "1.2.1")
    assert {"medusa_heads.1.medusa_layers.0.linear.bias", "medusa_heads.1.lm_head.weight"} <= medusa


def test_diff_checkpoint():
    config = _llama_config(attn_bias=True, bias=True, producer={"name": "x"}, share_embedding_table=False)
    names = checkpoint_tensor_names(_llama_config(), "0.19.0") | {"extra.weight"}
    problems = diff_checkpoint(config, {n: {"dtype": "F32" if n == "lm_head.weight" else "F16"} for n in names},
                               "0.19.0")
    assert "config.bias: is not read by TensorRT-LLM 0.19.0" in problems
    assert "config.share_embedding_table: is not read by TensorRT-LLM 0.19.0" in problems
    assert "config.producer: is not a key it reads by TensorRT-LLM 0.19.0" in problems
    assert "tensor transformer.layers.0.attention.qkv.bias: missing (TensorRT-LLM 0.19.0 requires it)" in problems
    assert "tensor extra.weight: not loaded by TensorRT-LLM 0.19.0" in problems
    assert "tensor lm_head.weight: dtype F32, config dtype float16 (F16)" in problems
    assert len(problems) == 3 + 4 + 1 + 1
    with pytest.raises(ConfigError):
        diff_checkpoint({"architecture": "GPT2LMHeadModel"}, [], "0.19.0")


def test_diff_convert_argv():
    root = "TensorRT-LLM/examples"
    llama = ["python3", f"{root}/llama/convert_checkpoint.py", "--model_dir", "m", "--output_dir", "o", "--tp_size", "2"]
    assert diff_convert_argv(llama, "0.19.0", root) == []
    assert "not a conversion script of TensorRT-LLM 1.2.1" in diff_convert_argv(llama, "1.2.1", root)[0]
    core = ["python3", f"{root}/models/core/llama/convert_checkpoint.py", "--model_dir", "m"]
    assert diff_convert_argv(core, "1.2.1", root) == [] and diff_convert_argv(core, "0.19.0", root)
    medusa = ["python3", f"{root}/medusa/convert_checkpoint.py", "--medusa_model_dir", "h", "--max_draft_len", "3"]
    assert diff_convert_argv(medusa, "1.2.1", root) == [
        f"--max_draft_len: not a flag of {root}/medusa/convert_checkpoint.py in TensorRT-LLM 1.2.1"]
    assert diff_convert_argv(["python3", f"{root}/quantization/quantize.py", "--qformat", "fp8"], "0.18.0", root) == []


def test_loader_is_torch_free():
    code = "import sys, trtspec.targets as t; t.load_target('1.2.1'); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
