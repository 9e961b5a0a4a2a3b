"""Torch-path bundles: built by `trtspec build --backend torch`, read back by load_bundle (and the engine)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.build.helpers import make_medusa_heads, write_config
from trtspec.build.bundle import load_bundle
from trtspec.cli.main import main
from trtspec.errors import ModelNotFoundError


def test_draft_target_bundle_builds_and_loads(random_pair, tmp_path):
    target, draft = random_pair
    config = write_config(tmp_path / "c.yaml", target=str(target), draft=str(draft), method="draft_target", k=3,
                          engine={"dtype": "float32", "max_input_len": 64, "max_seq_len": 128})
    out = tmp_path / "bundle"
    main(["build", str(config), "--backend", "torch", "--out", str(out)])
    info = load_bundle(out)
    engine = info.engine
    assert engine.method == "draft_target" and (engine.max_k, engine.default_k) == (3, 3) and engine.medusa is None
    assert engine.target == str(out / "target") and engine.draft == str(out / "draft")
    assert engine.max_input_len == 64 and engine.max_output_len == 64 and engine.dtype == "float32"
    assert (out / "target" / "model.safetensors").read_bytes() == (target / "model.safetensors").read_bytes()
    assert info.manifest["engine"]["target"] == "target"  # the manifest embeds it too (checkpoints relative)
    assert info.manifest["backend"] == "torch" and info.manifest["derived"]["max_draft_len"] == 3
    assert {s["status"] for s in info.manifest["steps"]} == {"done"}
    from trtspec.spec.engine import SpecEngine

    assert SpecEngine.from_config(engine).max_k == 3


def test_medusa_bundle_records_tree(random_pair, tmp_path):
    heads = make_medusa_heads(tmp_path / "heads", num_heads=2)
    config = write_config(tmp_path / "c.yaml", target=str(random_pair[0]), method="medusa", backend="torch",
                          medusa={"heads": str(heads), "choices": [[0], [1], [0, 0]]},
                          engine={"max_input_len": 64, "max_seq_len": 128}, output=str(tmp_path / "b"))
    main(["build", str(config)])
    info = load_bundle(tmp_path / "b")
    assert info.engine.medusa_tree.choices == ((0,), (1,), (0, 0)) and info.engine.max_k == 3
    assert (Path(info.engine.medusa) / "medusa_lm_head.safetensors").is_file()
    assert info.manifest["derived"]["choices"]["triton"] == "{0}, {1}, {0, 0}"


def test_load_bundle_refuses_non_bundles(tmp_path):
    with pytest.raises(ModelNotFoundError, match="trtspec-bundle.json is missing"):
        load_bundle(tmp_path)
    (tmp_path / "trtspec-bundle.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(ModelNotFoundError, match="expected trtspec-bundle/2"):
        load_bundle(tmp_path)


def test_a_format_1_bundle_is_read_as_the_same_engine_configuration(random_pair, tmp_path):
    """Bundles written before the engine configuration (loose keys) still deploy."""
    from tests.triton.helpers import torch_bundle
    from trtspec.contracts.engine import EngineConfig

    bundle = torch_bundle(tmp_path / "b", random_pair[0], random_pair[1], k=3)
    (tmp_path / "b" / "trtspec-bundle.json").write_text(json.dumps({
        "format": "trtspec-bundle/1", "method": "draft_target", "max_draft_len": 3, "target": "target",
        "draft": "draft", "medusa": None, "choices": None, "lookahead": None, "dtype": "float32",
        "max_batch_size": 8, "max_seq_len": 512}))
    assert load_bundle(bundle).engine == EngineConfig(
        target=str(bundle / "target"), draft=str(bundle / "draft"), method="draft_target", max_k=3, default_k=3,
        max_input_len=256, max_output_len=256)
