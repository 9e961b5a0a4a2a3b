"""Executing plans here: real HF -> TensorRT-LLM conversion, pending engine steps, exit codes, re-runs, atomicity."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from safetensors import safe_open
from safetensors.numpy import load_file

from tests.build.helpers import ENGINE_TARGET, make_medusa_heads, pinned, write_config
from trtspec.build.convert import trtllm_config
from trtspec.build.execute import execute
from trtspec.build.plan import BuildPlan, Step
from trtspec.build.preflight import run_preflight
from trtspec.cli.main import main
from trtspec.config import parse_build_spec
from trtspec.errors import BuildError
from trtspec.targets import diff_llm_api, load_target

CONFIG_KEYS = {"architecture", "dtype", "logits_dtype", "vocab_size", "max_position_embeddings", "hidden_size",
               "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "hidden_act", "intermediate_size",
               "norm_epsilon", "position_embedding_type", "rotary_base", "mapping", "quantization"}


def run_build(*args: str) -> int:
    try:
        main(["build", *map(str, args)])
    except SystemExit as exc:
        return int(exc.code)
    return 0


@pytest.fixture()
def pair_config(random_pair, tmp_path):
    target, draft = random_pair
    return write_config(tmp_path / "dtm.yaml", target=str(target), draft=str(draft), method="draft_target",
                        max_draft_len=4, engine={"dtype": "float32", "max_input_len": 64, "max_seq_len": 128})


def check_llama_checkpoint(ckpt: Path, hf_dir: Path) -> None:
    """config keys, tensor names and shapes per trtllm-specdec.md 1.1; weights equal the HF ones (fp32)."""
    config = json.loads((ckpt / "config.json").read_text())
    hf = json.loads((hf_dir / "config.json").read_text())
    assert CONFIG_KEYS <= set(config), CONFIG_KEYS - set(config)
    assert config["mapping"] == {"world_size": 1, "tp_size": 1, "pp_size": 1} and config["logits_dtype"] == "float32"
    assert config["vocab_size"] == hf["vocab_size"] and config["num_key_value_heads"] == hf["num_key_value_heads"]
    trt = load_file(str(ckpt / "rank0.safetensors"))
    src = load_file(str(hf_dir / "model.safetensors"))
    hidden, head = hf["hidden_size"], hf["head_dim"]
    qkv_rows = (hf["num_attention_heads"] + 2 * hf["num_key_value_heads"]) * head
    expected = {"transformer.vocab_embedding.weight": (hf["vocab_size"], hidden), "transformer.ln_f.weight": (hidden,),
                "lm_head.weight": (hf["vocab_size"], hidden)}
    for i in range(hf["num_hidden_layers"]):
        p = f"transformer.layers.{i}."
        expected.update({p + "attention.qkv.weight": (qkv_rows, hidden),
                         p + "attention.dense.weight": (hidden, hf["num_attention_heads"] * head),
                         p + "mlp.fc.weight": (hf["intermediate_size"], hidden),
                         p + "mlp.gate.weight": (hf["intermediate_size"], hidden),
                         p + "mlp.proj.weight": (hidden, hf["intermediate_size"]),
                         p + "input_layernorm.weight": (hidden,), p + "post_layernorm.weight": (hidden,)})
    assert {k: tuple(v.shape) for k, v in trt.items() if not k.startswith("medusa_heads.")} == expected
    assert (trt["transformer.layers.0.mlp.fc.weight"] == src["model.layers.0.mlp.gate_proj.weight"]).all()
    assert (trt["transformer.layers.0.mlp.gate.weight"] == src["model.layers.0.mlp.up_proj.weight"]).all()
    k_rows = slice(hf["num_attention_heads"] * head, (hf["num_attention_heads"] + hf["num_key_value_heads"]) * head)
    last = hf["num_hidden_layers"] - 1
    qkv = trt[f"transformer.layers.{last}.attention.qkv.weight"]
    assert (qkv[k_rows] == src[f"model.layers.{last}.self_attn.k_proj.weight"]).all()


def test_only_convert_converts_both_and_reports_engines_pending(pair_config, random_pair, tmp_path, capsys):
    out = tmp_path / "out"
    assert run_build(pair_config, "--only", "convert", "--out", out) == 0
    check_llama_checkpoint(out / "checkpoints" / "target", random_pair[0])
    check_llama_checkpoint(out / "checkpoints" / "draft", random_pair[1])
    manifest = json.loads((out / "trtspec-manifest.json").read_text())
    steps = {s["id"]: s for s in manifest["steps"]}
    assert steps["convert-target"]["status"] == "done" and steps["convert-target"]["runner"] == "trtspec"
    assert steps["convert-target"]["outputs"]["checkpoints/target"] and steps["convert-target"]["inputs"]
    assert steps["engine-target"]["status"] == "pending"
    pending = {p["id"]: p for p in manifest["pending"]}
    assert pending["engine-target"]["command"].startswith(f"cd {out} && trtllm-build --checkpoint_dir checkpoints/target")
    assert "--speculative_decoding_mode draft_tokens_external --max_draft_len 4" in pending["engine-target"]["command"]
    assert pending["engine-draft"]["container"] == load_target(ENGINE_TARGET).image
    assert manifest["derived"]["max_draft_len"] == 4 and manifest["versions"]["target_tensorrt_llm"] == ENGINE_TARGET
    assert manifest["versions"]["container"] == load_target(ENGINE_TARGET).image
    # 0.19.0's LLM-API facts are unverified: no options file, a note that says why
    assert not (out / "llm-api").exists() and manifest["llm_api"] is None
    assert any("LLM-API options are not verified" in n for n in manifest["notes"])
    assert "pending engine-target" in capsys.readouterr().out


def test_llm_api_file_is_written_for_a_verified_target(random_pair, tmp_path):
    """The engine workflow at 1.2.1 writes the LLM-API file beside the engines (the PyTorch workflow:
    tests/build/test_pytorch_workflow.py)."""
    import yaml

    target, draft = random_pair
    config = write_config(tmp_path / "c.yaml", target=str(target), draft=str(draft), method="draft_target",
                          max_draft_len=4, engine={"dtype": "float32", "max_input_len": 64, "max_seq_len": 128},
                          trtllm={"version": "1.2.1"}, workflow="engine")
    out = tmp_path / "out"
    assert run_build(config, "--only", "convert", "--out", out) == 0
    options = yaml.safe_load((out / "llm-api" / "extra_llm_api_options.yaml").read_text())
    assert diff_llm_api(options, "1.2.1") == [] and options["speculative_config"]["speculative_model"] == str(draft)
    manifest = json.loads((out / "trtspec-manifest.json").read_text())
    assert manifest["versions"]["container"] == load_target("1.2.1").image
    assert manifest["pending"][0]["container"] == load_target("1.2.1").image


def test_full_build_without_tensorrt_llm_exits_3_and_skips_unchanged(pair_config, random_pair, tmp_path, capsys):
    out = tmp_path / "out"
    assert run_build(pair_config, "--out", out) == 3
    err = capsys.readouterr().err
    assert "needs TensorRT-LLM" in err and "engine-target" in err and "Hint:" in err
    first = json.loads((out / "trtspec-manifest.json").read_text())
    assert {s["id"]: s["status"] for s in first["steps"]} == {
        "convert-target": "done", "convert-draft": "done", "engine-target": "pending", "engine-draft": "pending"}
    # re-run: unchanged inputs -> conversion skipped
    spec = parse_build_spec({**json.loads(json.dumps(first["config"]))})
    result = execute(*_plan(spec), out, only="convert", quiet=True)
    assert set(result.skipped) >= {"convert-target", "convert-draft"} and "convert-target" not in result.done


def _plan(spec):
    from trtspec.build.plan import plan_build

    resolved = run_preflight(spec)
    return plan_build(resolved), resolved


def test_changed_input_reconverts(random_pair, tmp_path):
    target = shutil.copytree(random_pair[0], tmp_path / "target")
    spec = parse_build_spec(pinned({"target": str(target), "method": "none", "engine": {"max_input_len": 8, "max_seq_len": 16},
                                    "output": str(tmp_path / "out")}))
    out = tmp_path / "out"
    assert execute(*_plan(spec), out, only="convert", quiet=True).done[0] == "convert-target"
    assert "convert-target" in execute(*_plan(spec), out, only="convert", quiet=True).skipped
    cfg = json.loads((target / "config.json").read_text())
    (target / "config.json").write_text(json.dumps({**cfg, "rms_norm_eps": 1e-5}))
    again = execute(*_plan(spec), out, only="convert", quiet=True)
    assert "convert-target" in again.done
    assert json.loads((out / "checkpoints/target/config.json").read_text())["norm_epsilon"] == 1e-5


def test_failed_step_leaves_output_dir_unchanged(random_pair, tmp_path):
    out = tmp_path / "out"
    spec = parse_build_spec(pinned({"target": str(random_pair[0]), "method": "none",
                                    "engine": {"max_input_len": 8, "max_seq_len": 16}}))
    resolved = run_preflight(spec)
    execute(BuildPlan("tensorrtllm", "none", ()), resolved, out, quiet=True)  # an earlier build output
    (out / "keep.txt").write_text("before")
    plan = BuildPlan("tensorrtllm", "none", (
        Step("write-a", "files", "write", "a file", content="x", outputs=("a.txt",)),
        Step("boom", "convert", "command", "fails", argv=("python3", "-c", "import sys; print('no'); sys.exit(4)"),
             outputs=("b",)),
    ))
    with pytest.raises(BuildError, match="exit code 4"):
        execute(plan, resolved, out, quiet=True)
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt", "logs", "trtspec-manifest.json"]
    assert (out / "keep.txt").read_text() == "before"
    report = json.loads((tmp_path / "out.trtspec-failed.json").read_text())
    assert {s["id"]: s["status"] for s in report["steps"]} == {"write-a": "done", "boom": "failed"}
    assert "no" in (tmp_path / "out.trtspec-failed.log").read_text()
    assert not list(tmp_path.glob(".out.trtspec-tmp-*"))


@pytest.mark.parametrize("layout", ["fastdecoding", "modelopt"])
def test_medusa_conversion_here(random_pair, tmp_path, layout):
    heads = make_medusa_heads(tmp_path / "heads", layout=layout, num_heads=3)
    spec = parse_build_spec(pinned({"target": str(random_pair[0]), "method": "medusa", "medusa": {"heads": str(heads)},
                                    "engine": {"dtype": "float32", "max_input_len": 8, "max_seq_len": 16}}))
    out = tmp_path / "out"
    execute(*_plan(spec), out, only="convert", quiet=True)
    ckpt = out / "checkpoints" / "target"
    config = json.loads((ckpt / "config.json").read_text())
    assert config["architecture"] == "MedusaForCausalLM" and config["num_medusa_heads"] == 3
    assert config["num_medusa_layers"] == 1 and config["max_draft_len"] == 61  # mc_sim_7b_63 minus its 2 depth-4 nodes (as ModelOpt 3-head)
    check_llama_checkpoint(ckpt, random_pair[0])
    with safe_open(str(ckpt / "rank0.safetensors"), "np") as fh:
        names = set(fh.keys())
        assert fh.get_slice("medusa_heads.2.lm_head.weight").get_shape() == [64, 48]
        assert fh.get_slice("medusa_heads.0.medusa_layers.0.linear.weight").get_shape() == [48, 48]
    assert {f"medusa_heads.{h}.medusa_layers.0.linear.bias" for h in range(3)} <= names


def test_config_keeps_rope_theta_and_llama3_scaling():
    hf = {"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 1, "vocab_size": 10,
          "intermediate_size": 128, "rope_parameters": {"rope_theta": 500000.0, "rope_type": "llama3", "factor": 8.0,
                                                        "original_max_position_embeddings": 8192}}
    config = trtllm_config(hf, "bfloat16")
    assert config["rotary_base"] == 500000.0
    assert config["rotary_scaling"] == {"type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}


def test_only_engines_needs_converted_checkpoints(pair_config, tmp_path, capsys):
    assert run_build(pair_config, "--only", "engines", "--out", tmp_path / "fresh") == 2
    assert "--only convert" in capsys.readouterr().err and not (tmp_path / "fresh").exists()


def test_tied_embeddings_get_their_own_lm_head(tmp_path):
    from tests.conftest import make_random_llama

    tied = make_random_llama(tmp_path / "tied", hidden=16, layers=1, heads=2, tie=True)
    spec = parse_build_spec(pinned({"target": str(tied), "method": "none", "engine": {"dtype": "float32",
                                    "max_input_len": 8, "max_seq_len": 16}}))
    execute(*_plan(spec), tmp_path / "out", only="convert", quiet=True)
    trt = load_file(str(tmp_path / "out/checkpoints/target/rank0.safetensors"))
    assert (trt["lm_head.weight"] == trt["transformer.vocab_embedding.weight"]).all()
