"""Torch-path bundles: built by `trtspec build --backend torch`, read back by load_bundle (and the engine)."""

from __future__ import annotations

import json

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
    assert info.method == "draft_target" and info.max_draft_len == 3 and info.medusa is None
    assert info.target == out / "target" and info.draft == out / "draft"
    assert (info.target / "model.safetensors").read_bytes() == (target / "model.safetensors").read_bytes()
    assert info.manifest["backend"] == "torch" and info.manifest["derived"]["max_draft_len"] == 3
    assert {s["status"] for s in info.manifest["steps"]} == {"done"}
    try:
        from trtspec.spec.engine import SpecEngine
    except ImportError:
        return  # the reference engine lands separately; the loader contract is what is tested here
    engine = SpecEngine.from_pretrained(target=str(info.target), draft=str(info.draft), max_k=info.max_draft_len)
    assert engine.max_k == 3


def test_medusa_bundle_records_tree(random_pair, tmp_path):
    heads = make_medusa_heads(tmp_path / "heads", num_heads=2)
    config = write_config(tmp_path / "c.yaml", target=str(random_pair[0]), method="medusa", backend="torch",
                          medusa={"heads": str(heads), "choices": [[0], [1], [0, 0]]},
                          engine={"max_input_len": 64, "max_seq_len": 128}, output=str(tmp_path / "b"))
    main(["build", str(config)])
    info = load_bundle(tmp_path / "b")
    assert info.choices == [[0], [1], [0, 0]] and info.max_draft_len == 3
    assert (info.medusa / "medusa_lm_head.safetensors").is_file()
    assert info.manifest["derived"]["choices"]["triton"] == "{0}, {1}, {0, 0}"


def test_load_bundle_refuses_non_bundles(tmp_path):
    with pytest.raises(ModelNotFoundError, match="trtspec-bundle.json is missing"):
        load_bundle(tmp_path)
    (tmp_path / "trtspec-bundle.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(ModelNotFoundError, match="expected trtspec-bundle/1"):
        load_bundle(tmp_path)
