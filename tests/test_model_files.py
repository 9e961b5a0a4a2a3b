"""Damaged model files are refused by name before anything loads them: truncated, empty or impossible-header
safetensors, a corrupt tokenizer.json; and the generate CLI refuses non-UTF-8 prompts and devices this machine
does not have. One-line errors, exit 2, no traceback."""

from __future__ import annotations

import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trtspec.cli.main import main
from trtspec.errors import ModelNotFoundError, UsageError
from trtspec.models import resolve_model


@pytest.fixture(scope="module")
def checkpoint(random_pair):
    return random_pair[0]


def copy(checkpoint, tmp_path):
    dest = tmp_path / "ckpt"
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(checkpoint, dest)
    return dest


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fraction=st.floats(0.0, 0.9999))
def test_any_truncation_is_refused(checkpoint, tmp_path, fraction):
    ckpt = copy(checkpoint, tmp_path)
    weights = ckpt / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: int(len(data) * fraction)])
    with pytest.raises(ModelNotFoundError, match="is not a complete safetensors file"):
        resolve_model(ckpt)


@pytest.mark.parametrize("content, detail", [
    (b"", "(0 bytes)"),
    (b"\x01\x00\x00\x00\x00\x00\x00\xff", "header of"),
    ((10).to_bytes(8, "little") + b"not json!!", "its header is not valid"),
    ((2).to_bytes(8, "little") + b"{}" + b"extra", "the file has 5"),
])  # fmt: skip
def test_impossible_safetensors(checkpoint, tmp_path, content, detail):
    ckpt = copy(checkpoint, tmp_path)
    (ckpt / "model.safetensors").write_bytes(content)
    with pytest.raises(ModelNotFoundError) as info:
        resolve_model(ckpt, field="target")
    assert str(info.value).startswith("target: ") and detail in str(info.value)


def test_intact_checkpoint_resolves(checkpoint):
    assert resolve_model(checkpoint) == checkpoint


def test_corrupt_tokenizer_json(checkpoint, tmp_path):
    ckpt = copy(checkpoint, tmp_path)
    (ckpt / "tokenizer.json").write_bytes(b'{"bad')
    with pytest.raises(ModelNotFoundError, match="tokenizer.json is not a valid tokenizer.json"):
        resolve_model(ckpt)


def run(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    return info.value.code, capsys.readouterr().err


@pytest.mark.parametrize("device, message", [
    ("bogus", "--device='bogus' is not a torch device"),
    ("meta", "--device='meta': the reference engine runs on cpu or cuda"),
    ("cuda:7", "--device='cuda:7': this machine has"),
])  # fmt: skip
def test_generate_refuses_devices_it_cannot_use(device, message, capsys):
    import torch

    if torch.cuda.device_count() > 7:
        pytest.skip("a machine with 8 GPUs has cuda:7")
    code, err = run(["generate", "--method", "ngram", "--device", device, "x"], capsys)
    assert code == 2 and message in err


def test_generate_refuses_a_prompt_that_is_not_utf8(capsys):
    code, err = run(["generate", "--method", "ngram", "\udcff\udcfe"], capsys)  # how non-UTF-8 argv bytes arrive
    assert code == 2 and "PROMPT is not valid UTF-8" in err
    assert issubclass(ModelNotFoundError, UsageError)


@pytest.mark.parametrize("content", [b"\xff\xfe{\x00}\x00", b"[1, 2]", b"{not json"])
def test_config_json_that_is_not_a_utf8_object(checkpoint, tmp_path, content):
    ckpt = copy(checkpoint, tmp_path)
    (ckpt / "config.json").write_bytes(content)
    with pytest.raises(ModelNotFoundError, match="config.json is not"):
        resolve_model(ckpt)
