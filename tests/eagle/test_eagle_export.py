"""The exported EAGLE-3 drafter: the HF layout vLLM / SGLang load (checked against trtspec/targets/eagle3-facts.json),
the training report and resumable checkpoint, and drafters that do not fit the target refused with both values."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from trtspec.errors import ConfigError, IncompatibleModelsError
from trtspec.spec.eagle_model import load_drafter
from trtspec.spec.model import LlamaModel
from trtspec.training.eagle import EagleRecipe, check_taps, default_taps, train_eagle

FACTS = json.loads((Path(__file__).resolve().parents[2] / "trtspec/targets/eagle3-facts.json").read_text())["facts"]


def test_hf_layout_matches_what_vllm_and_sglang_read(trained_eagle, eagle_target):
    out, report = trained_eagle
    config = json.loads((out / "config.json").read_text())
    target = json.loads((eagle_target / "config.json").read_text())
    assert config["architectures"][0] in FACTS["vllm_architectures"]["value"]
    taps = report["recipe"]["taps"]
    assert taps == list(default_taps(4)) == [1, 2, 3]
    assert config["eagle_aux_hidden_state_layer_ids"] == taps  # vLLM: the input of layer i
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [t - 1 for t in taps]  # SGLang: output of i
    assert config["eagle_config"]["use_aux_hidden_state"] is True
    assert config.get("rope_scaling", {}).get("rope_type", "default") == "default"
    assert config["num_hidden_layers"] == 1 and config["vocab_size"] == target["vocab_size"]
    assert config["eos_token_id"] == target["eos_token_id"]
    with safe_open(out / "model.safetensors", "pt") as f:
        shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
        dtypes = {f.get_slice(k).get_dtype() for k in f.keys()}
    assert dtypes == {"F16"}
    required = {"layers.0.self_attn.q_proj", "layers.0.self_attn.k_proj", "layers.0.self_attn.v_proj",
                "layers.0.self_attn.o_proj", "layers.0.mlp.gate_proj", "layers.0.mlp.up_proj", "layers.0.mlp.down_proj",
                "layers.0.hidden_norm", "layers.0.input_layernorm", "layers.0.post_attention_layernorm", "norm", "fc",
                "lm_head"}
    assert {k.removesuffix(".weight") for k in shapes} == required
    hidden = target["hidden_size"]
    assert shapes["fc.weight"] == (hidden, 3 * hidden)  # vLLM: fc reads 3 x target_hidden_size
    assert shapes["layers.0.self_attn.q_proj.weight"][1] == 2 * hidden  # cat(embeds, hidden)
    assert shapes["lm_head.weight"] == (config["draft_vocab_size"], hidden)
    with safe_open(out / "model.safetensors", "pt") as f:  # frozen at 1: vLLM's function equals the trained one
        assert torch.equal(f.get_tensor("layers.0.input_layernorm.weight"), torch.ones(hidden, dtype=torch.float16))


def test_report_and_card(trained_eagle):
    out, report = trained_eagle
    assert len(report["accuracy"]) == report["recipe"]["ttt_steps"] == 3
    assert report["trainer"].startswith("NVIDIA ModelOpt")
    assert (out / "README.md").read_text().startswith("# EAGLE-3 drafter")
    assert not (out / ".trtspec-train").exists()  # the checkpoint is removed once the export is written


@pytest.mark.slow
def test_interrupted_training_resumes_to_the_same_drafter(eagle_target, tmp_path):
    recipe = dict(steps=4, batch_size=2, num_prompts=4, gen_len=8, num_corpus_windows=0, eval_prompts=2,
                  checkpoint_every=1)
    whole = train_eagle(eagle_target, tmp_path / "whole", EagleRecipe(**recipe))
    assert train_eagle(eagle_target, tmp_path / "cut", EagleRecipe(**recipe, stop_after=2)) is None
    state = tmp_path / "cut" / ".trtspec-train" / "state.pt"
    assert torch.load(state, weights_only=False)["step"] == 2
    resumed = train_eagle(eagle_target, tmp_path / "cut", EagleRecipe(**recipe))
    assert resumed["final_loss"] == pytest.approx(whole["final_loss"], rel=1e-5)
    with safe_open(tmp_path / "whole" / "model.safetensors", "pt") as a, \
            safe_open(tmp_path / "cut" / "model.safetensors", "pt") as b:
        for k in a.keys():
            assert torch.allclose(a.get_tensor(k).float(), b.get_tensor(k).float(), atol=2e-3), k


def _edited(src: Path, dst: Path, **changes) -> Path:
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    config.update(changes)
    (dst / "config.json").write_text(json.dumps(config))
    return dst


@pytest.mark.parametrize("changes, fragment", [
    ({"vocab_size": 4096}, "vocab_size 4096 differs from the target's vocab_size 64"),
    ({"target_hidden_size": 384}, "hidden size 384, the target's hidden_size is 48"),
    ({"eagle_aux_hidden_state_layer_ids": [1, 3, 5]}, "[1, 3, 5]: the drafter reads layers the target does not have "
                                                      "(target num_hidden_layers=4"),
])
def test_drafter_that_does_not_fit_the_target_is_refused_with_both_values(trained_eagle, eagle_target, tmp_path,
                                                                          changes, fragment):
    target = LlamaModel.from_pretrained(eagle_target)
    bad = _edited(trained_eagle[0], tmp_path / "bad", **changes)
    with pytest.raises(IncompatibleModelsError, match=fragment.replace("[", r"\[").replace("(", r"\(")):
        load_drafter(bad, target.config, target.embed_tokens)


def test_bad_taps_and_tree_options_are_refused(eagle_target, trained_eagle):
    from trtspec.contracts.engine import EagleTree, ProposerOptions
    from trtspec.spec.engine import SpecEngine
    from trtspec.spec.params import SpecParams

    with pytest.raises(ConfigError, match=r"taps=\[0, 1, 1\]: must be three distinct target layers in \[1, 4\)"):
        check_taps((0, 1, 1), 4)
    with pytest.raises(ConfigError, match=r"eagle_topk=0: must be an integer in \[1, 64\]"):
        EagleTree(topk=0)
    with pytest.raises(ConfigError, match="eagle_choices"):  # rank 64 of a 64-token draft vocabulary
        SpecEngine.from_pretrained(eagle_target, eagle=trained_eagle[0],
                                   options=ProposerOptions(eagle_tree=EagleTree(choices=((0,), (64,)))))
    engine = SpecEngine.from_pretrained(eagle_target, eagle=trained_eagle[0], max_k=8)
    with pytest.raises(ConfigError, match="k=9"):  # a node budget above the engine's limit names it
        engine.add_request([1, 2, 3], spec=SpecParams("eagle3", 9))
    plain = SpecEngine.from_pretrained(eagle_target)
    with pytest.raises(ConfigError, match=r"needs an EAGLE-3 drafter \(eagle=...\)"):
        plain.add_request([1, 2, 3], spec=SpecParams("eagle3", 4))


def test_recipe_command_round_trips_through_the_cli(monkeypatch, tmp_path):
    """The model card's reproduce line is a `trtspec train eagle` command that builds the same recipe."""
    import shlex

    from click.testing import CliRunner

    import trtspec.training.eagle as eagle_training
    from trtspec.cli.main import cli
    from trtspec.training.eagle import recipe_command

    recipe = EagleRecipe(taps=(1, 2, 3), draft_vocab_size=32, steps=7, batch_size=3, lr=1e-3, num_prompts=5,
                         gen_len=12, num_corpus_windows=0, ttt_steps=2, seed=4)
    seen = []
    monkeypatch.setattr(eagle_training, "train_eagle", lambda path, out, r, **kw: seen.append(r) or None)
    argv = shlex.split(recipe_command("tiny", recipe, str(tmp_path / "out")))
    assert argv[:3] == ["trtspec", "train", "eagle"]
    CliRunner().invoke(cli, argv[1:])
    assert seen == [recipe]
