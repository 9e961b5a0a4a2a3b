"""trtspec.text_codec.TextCodec (the reference engine's tokenizer, and the tokenizing Python models' helper) encodes
and decodes exactly as transformers' tokenizer of the same directory, without importing transformers on its fast path:
every embedded checkpoint, the shipped prompt suites and arbitrary text (hypothesis), with and without special
tokens; a tokenizer_config asking for clean_up_tokenization_spaces goes through transformers itself."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trtspec.models import resolve_model
from trtspec.text_codec import TextCodec

ASSETS = Path(__file__).resolve().parents[1] / "trtspec" / "assets" / "models"


@pytest.fixture(scope="module")
def pairs():
    from transformers import AutoTokenizer

    out = {path.name: (TextCodec(path), AutoTokenizer.from_pretrained(path))
           for path in sorted(ASSETS.iterdir()) if (path / "tokenizer.json").is_file()}
    assert {"tiny", "tiny-draft"} <= set(out)
    return out


def _same(codec, hf, text: str) -> None:
    for special in (True, False):
        ids = codec.encode(text, add_special_tokens=special)
        assert ids == list(hf.encode(text, add_special_tokens=special)), (text, special)
        for skip in (True, False):
            assert codec.decode(ids, skip_special_tokens=skip) == hf.decode(ids, skip_special_tokens=skip), (text, skip)


def test_fast_path_matches_transformers_on_the_shipped_suites(pairs):
    from trtspec.sweep.prompts import load_suite, shipped_suites

    texts = [p for name in shipped_suites() for p in load_suite(name).prompts]
    assert len(texts) > 20
    for codec, hf in pairs.values():
        assert codec._fast is not None and codec._hf is None  # served by `tokenizers`, transformers not loaded
        assert (codec.eos_token_id, codec.pad_token_id) == (hf.eos_token_id, hf.pad_token_id)
        assert codec.vocab_size == len(hf)
        for text in texts:
            _same(codec, hf, text)


@settings(max_examples=150, deadline=None)
@given(text=st.text(max_size=80))
def test_fast_path_matches_transformers_on_any_text(pairs, text):
    codec, hf = pairs["tiny"]
    _same(codec, hf, text)


def test_other_attributes_are_the_hugging_face_tokenizers(pairs):
    codec, hf = pairs["tiny"]
    assert codec.all_special_ids == hf.all_special_ids  # loaded on first use
    with pytest.raises(AttributeError):
        getattr(codec, "no_such_attribute")  # noqa: B009 - the lookup is what is tested


def test_clean_up_tokenization_spaces_goes_through_transformers(tmp_path):
    path = shutil.copytree(resolve_model("tiny", field="model"), tmp_path / "tiny")
    config = json.loads((path / "tokenizer_config.json").read_text())
    (path / "tokenizer_config.json").write_text(json.dumps({**config, "clean_up_tokenization_spaces": True}))
    codec = TextCodec(path)
    assert codec._fast is None and codec._hf is not None
    assert codec.decode(codec.encode("a , b .")) == codec._hf.decode(codec._hf.encode("a , b ."),
                                                                      skip_special_tokens=True)


@settings(max_examples=200, deadline=None)
@given(raw=st.binary(max_size=40))
def test_request_text_reads_utf8_and_names_the_input_and_the_first_bad_byte(raw):
    from trtspec.text_codec import request_text

    try:
        want = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        with pytest.raises(ValueError) as err:
            request_text(raw, "QUERY")
        assert str(err.value) == (f"QUERY is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}): "
                                  "send the text UTF-8 encoded")
    else:
        assert request_text(raw, "QUERY") == want
    assert request_text("caf\u00e9", "QUERY") == "caf\u00e9"
