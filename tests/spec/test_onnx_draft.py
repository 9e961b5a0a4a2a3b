"""draft_runtime onnx (trtspec.spec.onnx_draft): greedy speculation with the draft in ONNX Runtime equals the
target's greedy decoding and drafts exactly what the torch runner drafts; the runner matches the torch runner on
ragged rows; a file that is not its checkpoint's export, or a missing onnxruntime, is a ConfigError (exit 2)."""

from __future__ import annotations

import sys

import pytest
import torch

from tests.spec.conftest import hf_greedy
from trtspec.contracts.engine import EngineConfig
from trtspec.errors import ConfigError
from trtspec.spec import onnx_draft
from trtspec.spec.engine import SpecEngine
from trtspec.spec.model import LlamaModel
from trtspec.spec.params import SamplingParams, SpecParams

pytest.importorskip("onnxruntime")

PROMPTS = [[5, 9, 3, 7, 5, 9, 3, 2, 11], [4], [17, 30, 2, 8, 41, 8, 41, 8, 63, 12, 30, 2, 8]]


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory, monkeypatch):
    """Exports go to a per-session temporary cache, never the user's."""
    monkeypatch.setenv("TRTSPEC_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "trtspec-cache"))


@pytest.fixture(scope="module")
def draft(near_draft):
    return LlamaModel.from_pretrained(near_draft)


@pytest.fixture
def exported(near_draft, draft, tmp_path):
    digest = onnx_draft.checkpoint_digest(near_draft)
    return onnx_draft.export_draft(draft, tmp_path / "draft.onnx", digest=digest), digest


def test_onnx_draft_greedy_equals_transformers_and_drafts_what_the_torch_runner_drafts(random_pair, near_draft,
                                                                                       hf_target):
    reference = [hf_greedy(hf_target, p, 32) for p in PROMPTS]
    cases = [(k, i) for k in range(1, 9) for i in range(len(PROMPTS))]  # every k in one continuous batch (ragged)
    prompts, specs = [PROMPTS[i] for _, i in cases], [SpecParams("draft_target", k) for k, _ in cases]
    outs = {}
    for runtime in ("torch", "onnx"):
        config = EngineConfig(target=str(random_pair[0]), draft=str(near_draft), method="draft_target",
                              draft_runtime=runtime)
        engine = SpecEngine.from_config(config)
        assert isinstance(engine.proposers["draft_model"].model, onnx_draft.OnnxDraftModel) == (runtime == "onnx")
        outs[runtime] = engine.generate(prompts, SamplingParams(max_new_tokens=32), specs)
    for (k, i), out in zip(cases, outs["onnx"], strict=True):
        assert out.token_ids == reference[i], (k, i)  # lossless: verification is the torch target's
    # acceptance unchanged: the same draft tokens accepted at every position of every request
    accepted = {r: [(o.stats.num_draft_tokens, o.stats.num_accepted_tokens_per_pos) for o in outs[r]] for r in outs}
    assert accepted["onnx"] == accepted["torch"]
    assert sum(o.stats.num_accepted_tokens for o in outs["onnx"]) > 0


def test_runner_matches_the_torch_runner_on_ragged_rows(near_draft, draft):
    runner = onnx_draft.load_onnx_draft(near_draft, draft)
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(0, draft.config.vocab_size, (3, 9), generator=gen)  # [3, 9]
    logits = {}
    for name, model in (("torch", draft), ("onnx", runner)):
        cache, slots = model.new_cache(num_slots=4), torch.tensor([2, 0, 1])
        first = model(ids[:, :6], cache, slots, num_tokens=torch.tensor([6, 2, 4])).logits  # [3, 6, vocab]
        second = model(ids[:, 6:], cache, slots, num_tokens=torch.tensor([1, 3, 2])).logits  # [3, 3, vocab]
        assert [cache.length(s) for s in (2, 0, 1)] == [7, 5, 6]
        logits[name] = [first[0, :6], first[1, :2], first[2, :4], second[0, :1], second[1, :3], second[2, :2]]
    for got, expected in zip(logits["onnx"], logits["torch"], strict=True):
        assert (got - expected).abs().max() < 1e-4
        assert torch.equal(got.argmax(-1), expected.argmax(-1))


def test_load_exports_once_into_the_cache_and_reports_its_checks(near_draft, draft):
    digest = onnx_draft.checkpoint_digest(near_draft)
    path = onnx_draft.default_path(near_draft, digest)
    onnx_draft.load_onnx_draft(near_draft, draft)
    assert path.is_file()
    mtime = path.stat().st_mtime_ns
    check = onnx_draft.check_draft_onnx(path, draft, digest=digest)
    onnx_draft.load_onnx_draft(near_draft, draft)
    assert path.stat().st_mtime_ns == mtime  # reused, not re-exported
    assert check.opset == onnx_draft.OPSET and check.vocab_size == draft.config.vocab_size
    assert check.max_logit_difference < 1e-4 and check.argmax_agreement == 1.0


def test_refuses_a_file_from_another_checkpoint_or_not_onnx(draft, exported, tmp_path):
    path, digest = exported
    with pytest.raises(ConfigError, match="another checkpoint") as err:
        onnx_draft.check_draft_onnx(path, draft, digest="0" * 64)
    assert str(path) in str(err.value) and err.value.exit_code == 2 and "delete" in err.value.hint
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a model")
    with pytest.raises(ConfigError, match="not a readable ONNX model"):
        onnx_draft.check_draft_onnx(junk, draft, digest=digest)


def test_refuses_a_file_whose_shapes_or_logits_do_not_match(random_pair, near_draft, exported):
    path, digest = exported
    other = LlamaModel.from_pretrained(random_pair[1])  # 1 layer x 16 wide (the file: 2 layers x 48)
    with pytest.raises(ConfigError, match="not a 1-layer draft's") as err:
        onnx_draft.check_draft_onnx(path, other, digest=digest)
    assert str(path) in str(err.value)
    changed = LlamaModel.from_pretrained(near_draft)  # the same checkpoint, its weights changed after the export
    with torch.no_grad():
        changed.lm_head.weight.add_(0.5)
    with pytest.raises(ConfigError, match="logits .* away from the torch runner"):
        onnx_draft.check_draft_onnx(path, changed, digest=digest)


def test_missing_onnxruntime_is_a_config_error_not_a_fallback(random_pair, near_draft, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import fails as if not installed
    config = EngineConfig(target=str(random_pair[0]), draft=str(near_draft), method="draft_target",
                          draft_runtime="onnx")
    with pytest.raises(ConfigError, match="onnxruntime") as err:
        SpecEngine.from_config(config)
    assert err.value.exit_code == 2 and "draft_runtime torch" in err.value.hint


def test_engine_config_field_checks_and_round_trips():
    config = EngineConfig(target="tiny", draft="tiny-draft", method="draft_target", draft_runtime="onnx")
    assert config.to_parameters()["draft_runtime"] == "onnx"
    assert EngineConfig.from_parameters(config.to_parameters()) == config == EngineConfig.from_dict(config.to_dict())
    plain = EngineConfig(target="tiny", draft="tiny-draft", method="draft_target")
    assert plain.draft_runtime == "torch"  # the default is not written: existing artefacts stay byte-identical
    assert "draft_runtime" not in plain.to_dict() and "draft_runtime" not in plain.to_parameters()
    with pytest.raises(ConfigError, match="draft_runtime.*not one of torch, onnx"):
        EngineConfig(target="tiny", draft_runtime="tensorrt")
    with pytest.raises(ConfigError, match="draft_runtime.*draft None"):
        EngineConfig(target="tiny", draft_runtime="onnx")
    with pytest.raises(ConfigError, match="draft_runtime.*dtype float16"):
        EngineConfig(target="tiny", draft="tiny-draft", dtype="float16", draft_runtime="onnx")
    with pytest.raises(ConfigError, match="parameter draft_runtime"):
        plain.with_parameters({"draft_runtime": "tvm"})
