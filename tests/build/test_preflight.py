"""Every preflight failure names the field (or both models and numbers) and the fix."""

from __future__ import annotations

import json

import pytest

from tests.build.helpers import copy_model, make_medusa_heads, plan_of, spec_of
from trtspec.build.preflight import run_preflight
from trtspec.errors import ConfigError, IncompatibleModelsError, ModelNotFoundError


def dtm(random_pair, **extra):
    target, draft = random_pair
    return {"target": str(target), "draft": str(draft), "method": "draft_target", "max_draft_len": 4,
            "engine": {"max_input_len": 64, "max_seq_len": 128, **extra.pop("engine", {})}, **extra}


def test_vocab_mismatch_names_both_sizes(random_pair, tmp_path):
    target, draft = random_pair
    other = copy_model(draft, tmp_path / "draft", vocab_size=128)
    with pytest.raises(IncompatibleModelsError) as err:
        run_preflight(spec_of(**{**dtm(random_pair), "draft": str(other)}))
    assert "64" in err.value.message and "128" in err.value.message and err.value.hint


def test_padded_logits_width_differs_with_asymmetric_tp(random_pair):
    with pytest.raises(IncompatibleModelsError) as err:
        run_preflight(spec_of(**dtm(random_pair, engine={"tp_size": 3, "draft_tp_size": 1})))
    assert "padded logits width" in err.value.message and "66" in err.value.message and "64" in err.value.message
    assert "TP size" in err.value.hint


def test_special_token_ids_must_match(random_pair, tmp_path):
    target, draft = random_pair
    other = copy_model(draft, tmp_path / "draft")
    gen = json.loads((other / "generation_config.json").read_text())
    (other / "generation_config.json").write_text(json.dumps({**gen, "eos_token_id": 7}))
    with pytest.raises(IncompatibleModelsError) as err:
        run_preflight(spec_of(**{**dtm(random_pair), "draft": str(other)}))
    assert "eos_token_id" in err.value.message and "7" in err.value.message and "1" in err.value.message


def test_eagle_refuses_non_llama_target(random_pair, tmp_path):
    target, _ = random_pair
    qwen = copy_model(target, tmp_path / "qwen", architectures=["Qwen2ForCausalLM"])
    (tmp_path / "eagle").mkdir()
    with pytest.raises(ConfigError) as err:
        run_preflight(spec_of(target=str(qwen), method="eagle", eagle={"model": str(tmp_path / "eagle")},
                              engine={"max_input_len": 64, "max_seq_len": 128}))
    assert err.value.field == "target" and "Qwen2ForCausalLM" in err.value.message
    assert "LlamaForCausalLM" in err.value.message


def medusa_spec(random_pair, heads, **medusa):
    return {"target": str(random_pair[0]), "method": "medusa", "medusa": {"heads": str(heads), **medusa},
            "engine": {"max_input_len": 64, "max_seq_len": 128}}


@pytest.mark.parametrize("layout", ["fastdecoding", "modelopt"])
def test_medusa_heads_layouts_are_read(random_pair, tmp_path, layout):
    heads = make_medusa_heads(tmp_path / "heads", layout=layout, num_heads=3, config_heads=2)
    resolved = run_preflight(spec_of(**medusa_spec(random_pair, heads)))
    assert resolved.medusa.layout == layout and resolved.medusa.num_heads == 3  # counted from tensors, not config
    assert max(len(p) for p in resolved.choices) == 3 and resolved.max_draft_len == len(resolved.choices)


def test_medusa_tree_deeper_than_heads(random_pair, tmp_path):
    heads = make_medusa_heads(tmp_path / "heads", num_heads=2)
    with pytest.raises(ConfigError) as err:
        run_preflight(spec_of(**medusa_spec(random_pair, heads, choices="mc_sim_7b_63")))
    assert err.value.field == "medusa.choices" and "depth 4" in err.value.message and "2 heads" in err.value.message


def test_medusa_tree_larger_than_max_draft_len(random_pair, tmp_path):
    heads = make_medusa_heads(tmp_path / "heads", num_heads=2)
    spec = {**medusa_spec(random_pair, heads, choices=[[0], [1], [0, 0], [0, 1]]), "max_draft_len": 3}
    with pytest.raises(ConfigError) as err:
        run_preflight(spec_of(**spec))
    assert err.value.field == "medusa.choices" and "max_draft_len=3" in err.value.message


@pytest.mark.parametrize(("kwargs", "numbers"), [({"hidden": 32}, ("32", "48")), ({"vocab": 100}, ("100", "64"))])
def test_medusa_heads_must_match_target(random_pair, tmp_path, kwargs, numbers):
    heads = make_medusa_heads(tmp_path / "heads", **kwargs)
    with pytest.raises(IncompatibleModelsError) as err:
        run_preflight(spec_of(**medusa_spec(random_pair, heads)))
    assert all(n in err.value.message for n in numbers)


def test_medusa_heads_dir_without_weights(random_pair, tmp_path):
    (tmp_path / "heads").mkdir()
    (tmp_path / "heads" / "config.json").write_text(json.dumps({"medusa_num_heads": 2}))
    with pytest.raises(ConfigError) as err:
        run_preflight(spec_of(**medusa_spec(random_pair, tmp_path / "heads")))
    assert err.value.field == "medusa.heads" and "medusa_lm_head" in err.value.message


def test_lookahead_max_draft_len_must_match_formula(random_pair):
    spec = {"target": str(random_pair[0]), "method": "lookahead", "lookahead": [4, 4, 4], "max_draft_len": 16,
            "engine": {"max_input_len": 64, "max_seq_len": 128}}
    with pytest.raises(ConfigError) as err:
        run_preflight(spec_of(**spec))
    assert err.value.field == "max_draft_len" and "23" in err.value.message and "23" in err.value.hint
    del spec["max_draft_len"]
    assert run_preflight(spec_of(**spec)).max_draft_len == 23


@pytest.mark.parametrize("method", ["draft_target", "ngram"])
def test_paged_context_fmha_forced_for_external_drafts(random_pair, method):
    spec = dtm(random_pair, engine={"use_paged_context_fmha": False})
    if method == "ngram":
        spec.pop("draft")
    spec["method"] = method
    with pytest.raises(ConfigError) as err:
        run_preflight(spec_of(**spec))
    assert err.value.field == "engine.use_paged_context_fmha" and "KV-cache reuse" in err.value.message


def test_beam_width_must_be_one(random_pair):
    with pytest.raises(ConfigError) as err:
        run_preflight(spec_of(**dtm(random_pair, engine={"max_beam_width": 2})))
    assert err.value.field == "engine.max_beam_width" and err.value.hint == "set max_beam_width: 1"


def test_logits_dtype_must_be_float32(random_pair):
    with pytest.raises(ConfigError) as err:
        run_preflight(spec_of(**dtm(random_pair, engine={"logits_dtype": "float16"})))
    assert err.value.field == "engine.logits_dtype" and "float32" in err.value.hint


def test_max_seq_len_beyond_position_embeddings(random_pair):
    with pytest.raises(ConfigError) as err:
        run_preflight(spec_of(**dtm(random_pair, engine={"max_input_len": 64, "max_seq_len": 256})))
    assert err.value.field == "engine.max_seq_len" and "252" in err.value.hint  # 256 positions - k=4


def test_method_inputs_and_sections(random_pair):
    target, draft = random_pair
    with pytest.raises(ConfigError, match="needs a draft model") as err:
        run_preflight(spec_of(target=str(target), method="draft_target"))
    assert err.value.field == "draft"
    with pytest.raises(ConfigError, match="only used by draft-model methods"):
        run_preflight(spec_of(target=str(target), draft=str(draft), method="lookahead"))
    with pytest.raises(ConfigError, match="belongs to method lookahead") as err:
        run_preflight(spec_of(target=str(target), method="ngram", lookahead=[4, 4, 4]))
    assert err.value.field == "lookahead"
    with pytest.raises(ConfigError, match="no proposer in the torch reference engine"):
        run_preflight(spec_of(target=str(target), method="redrafter", backend="torch",
                              redrafter={"drafter": str(draft)}))


def test_missing_paths_refused_for_real_runs_but_unchecked_in_dry_run(tmp_path):
    fields = {"target": str(tmp_path / "nope"), "method": "ngram", "max_draft_len": 4}
    with pytest.raises(ModelNotFoundError) as err:
        run_preflight(spec_of(**fields))
    assert "nope" in err.value.message
    resolved, plan = plan_of(dry_run=True, **fields)
    assert any(c.status == "unchecked" and "nope" in c.detail for c in resolved.checks)
    assert [s.id for s in plan.steps][:2] == ["convert-target", "engine-target"]


def test_memory_estimate_sets_per_engine_kv_limits(random_pair):
    resolved = run_preflight(spec_of(**dtm(random_pair, gpu={"memory_gib": 4, "reserve_gib": 1})))
    target, draft = resolved.kv["target"], resolved.kv["draft"]
    assert target.max_tokens_in_paged_kv_cache == 8 * (128 + 4) == draft.max_tokens_in_paged_kv_cache
    # target KV per token: 2 (K, V) x 2 layers x 2 kv heads x 12 head dim x 2 bytes (float16)
    assert target.kv_bytes_per_token == 2 * 2 * 2 * 12 * 2
    assert 0 < draft.kv_cache_free_gpu_mem_fraction < 1 and target.source == "estimate"


def test_memory_estimate_refuses_too_small_gpu(random_pair):
    with pytest.raises(ConfigError) as err:
        run_preflight(spec_of(**dtm(random_pair, gpu={"memory_gib": 1, "reserve_gib": 1})))
    assert err.value.field == "gpu.memory_gib" and "quantize" in err.value.hint
    # weights fit, but the KV cache cannot hold one sequence
    with pytest.raises(ConfigError) as err:
        run_preflight(spec_of(**dtm(random_pair, gpu={"memory_gib": 0.0001, "reserve_gib": 0})))
    assert err.value.field == "engine.max_seq_len" and "less than one sequence" in err.value.message


@pytest.mark.parametrize(("engine", "field", "text"), [
    ({"max_batch_size": 513}, "engine.max_batch_size", "at most 512"),
    ({"pp_size": 2}, "engine.pp_size", "pipeline parallelism"),
])
def test_eagle_builder_limits(random_pair, tmp_path, engine, field, text):
    (tmp_path / "eagle").mkdir()
    with pytest.raises(ConfigError) as err:
        run_preflight(spec_of(target=str(random_pair[0]), method="eagle", eagle={"model": str(tmp_path / "eagle")},
                              engine={"max_input_len": 64, "max_seq_len": 128, **engine}))
    assert err.value.field == field and text in err.value.message


def test_quantized_engine_needs_half_precision(random_pair):
    with pytest.raises(ConfigError) as err:
        run_preflight(spec_of(target=str(random_pair[0]), engine={"quantization": "fp8", "dtype": "float32",
                                                                  "max_input_len": 8, "max_seq_len": 16}))
    assert err.value.field == "engine.quantization" and "float16" in err.value.hint


def test_modelopt_heads_need_single_rank(random_pair, tmp_path):
    heads = make_medusa_heads(tmp_path / "heads", layout="modelopt")
    spec = medusa_spec(random_pair, heads)
    spec["engine"]["tp_size"] = 2
    with pytest.raises(ConfigError) as err:
        run_preflight(spec_of(**spec))
    assert err.value.field == "medusa.heads" and "FasterDecoding" in err.value.hint


@pytest.mark.parametrize(("version", "method", "extra", "feature", "nearest"), [
    ("0.18.0", "lookahead", {"lookahead": [4, 4, 4]}, "server_lookahead_params", "0.19.0"),
    ("0.19.0", "eagle", {"eagle": {"model": "EAGLE3", "eagle3": True, "num_layers": 3}}, "eagle3_llmapi", "1.2.1"),
    ("0.18.0", "eagle", {"eagle": {"model": "EAGLE3", "eagle3": True, "num_layers": 3}}, "eagle3_llmapi", "1.2.1"),
])
def test_feature_the_target_lacks_names_target_feature_and_nearest(random_pair, tmp_path, version, method, extra,
                                                                   feature, nearest):
    if "eagle" in extra:
        (tmp_path / "EAGLE3").mkdir()
        extra = {"eagle": {**extra["eagle"], "model": str(tmp_path / "EAGLE3")}}
    spec = spec_of(target=str(random_pair[0]), method=method, trtllm={"version": version},
                   engine={"max_input_len": 64, "max_seq_len": 128}, **extra)
    with pytest.raises(ConfigError) as err:
        run_preflight(spec)
    message = str(err.value)
    assert err.value.field == "trtllm.version" and err.value.exit_code == 2 and "\n" not in message
    assert f"TensorRT-LLM {version} lacks {feature}" in message and f"method {method}" in message
    assert f"nearest target with it: {nearest}" in message and f"trtllm.version: {nearest}" in err.value.hint


def test_torch_backend_needs_no_target_feature(random_pair):
    spec = spec_of(target=str(random_pair[0]), method="lookahead", backend="torch", trtllm={"version": "0.18.0"},
                   lookahead=[4, 4, 4], engine={"max_input_len": 64, "max_seq_len": 128})
    assert run_preflight(spec).lookahead == (4, 4, 4)
