import json

import pytest

from tests.conftest import make_random_llama
from trtspec.errors import IncompatibleModelsError, ModelNotFoundError
from trtspec.models import check_pair, resolve_model


def test_embedded_models_load_with_transformers_and_generate_text():
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    for name in ("tiny", "tiny-draft"):
        path = resolve_model(name)
        tok = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        ids = tok("def main(", return_tensors="pt")
        out = model.generate(**ids, max_new_tokens=12, do_sample=False, pad_token_id=tok.eos_token_id)
        text = tok.decode(out[0][ids["input_ids"].shape[1]:])
        assert out.shape[1] == ids["input_ids"].shape[1] + 12 and text.strip()


def test_embedded_pair_is_compatible():
    check_pair(resolve_model("tiny"), resolve_model("tiny-draft"))


def test_not_a_causal_lm(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["BertModel"]}))
    with pytest.raises(ModelNotFoundError, match="not a causal LM"):
        resolve_model(tmp_path)


def test_missing_weights(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    with pytest.raises(ModelNotFoundError, match="no weights"):
        resolve_model(tmp_path)


def test_vocab_mismatch_names_both_sizes(tmp_path):
    a = make_random_llama(tmp_path / "a", vocab=64)
    b = make_random_llama(tmp_path / "b", vocab=80)
    with pytest.raises(IncompatibleModelsError, match="64.*80"):
        check_pair(a, b)


EMBEDDED_BUDGET_MIB = 56  # all embedded models together (they ship in the wheel); ~47 MiB with tiny-eagle (2048-token head)


def test_embedded_models_fit_the_size_budget():
    from trtspec.models import EMBEDDED, EMBEDDED_MODELS

    sizes = {name: sum(f.stat().st_size for f in (EMBEDDED_MODELS / name).rglob("*") if f.is_file())
             for name in EMBEDDED}
    assert sum(sizes.values()) <= EMBEDDED_BUDGET_MIB * 2**20, sizes
    assert sizes["tiny-eagle"] <= 10 * 2**20  # one fp16 decoder layer + fc + lm_head for a 384-wide target


def test_embedded_eagle_drafter_resolves_and_fits_tiny():
    from trtspec.models import is_eagle_drafter, resolve_eagle
    from trtspec.spec.eagle_model import load_drafter
    from trtspec.spec.model import LlamaModel

    path = resolve_eagle("tiny-eagle")
    assert is_eagle_drafter(path)
    target = LlamaModel.from_pretrained(resolve_model("tiny"))
    drafter, taps = load_drafter("tiny-eagle", target.config, target.embed_tokens)
    assert taps == (1, 3, 5) and drafter.embed_tokens is target.embed_tokens


def test_load_tokenizer_is_what_autotokenizer_loads(tmp_path):
    """The embedded models' generic fast tokenizer is built directly (no AutoTokenizer config lookup) and is the same
    tokenizer AutoTokenizer returns; a directory naming another class goes through AutoTokenizer."""
    from transformers import AutoTokenizer

    from trtspec.models import embedded_path, load_tokenizer

    path = embedded_path("tiny")
    ours, auto = load_tokenizer(path), AutoTokenizer.from_pretrained(path)
    assert type(ours) is type(auto)
    text = "def add(a, b):\n    return a + b  # ünïcode"
    assert ours(text)["input_ids"] == auto(text)["input_ids"] and ours.decode(auto(text)["input_ids"]) == text
    assert (ours.bos_token_id, ours.eos_token_id, ours.pad_token_id) == (auto.bos_token_id, auto.eos_token_id,
                                                                          auto.pad_token_id)
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    assert ours.apply_chat_template(chat, tokenize=False) == auto.apply_chat_template(chat, tokenize=False)
    # a directory naming another class: AutoTokenizer decides, and load_tokenizer returns what it returns
    other = tmp_path / "other"
    other.mkdir()
    (other / "tokenizer.json").write_bytes((path / "tokenizer.json").read_bytes())
    config = json.loads((path / "tokenizer_config.json").read_text())
    (other / "tokenizer_config.json").write_text(json.dumps({**config, "tokenizer_class": "GPT2TokenizerFast"}))
    assert type(load_tokenizer(other)) is type(AutoTokenizer.from_pretrained(other))
    assert type(load_tokenizer(other)).__name__ == "GPT2Tokenizer"  # not the generic class: AutoTokenizer ran
