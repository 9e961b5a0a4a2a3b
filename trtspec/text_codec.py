"""Text <-> token ids as the Hugging Face fast tokenizer makes them, without importing transformers when it can.

The reference engine's tokenizer, and the helper the tokenizing Python models of a rendered repository import
(`trtspec deploy` copies this file next to their model.py, so it stays self-contained: no trtspec import, and it also
runs in NVIDIA's TensorRT-LLM container). A directory with a `tokenizer.json` is served by the `tokenizers` library
directly: it starts in a fraction of a second, while importing transformers takes seconds. It encodes and decodes as
the Hugging Face fast tokenizer does (`PreTrainedTokenizerFast` calls the same library); a tokenizer_config that asks
for `clean_up_tokenization_spaces`, or a directory without tokenizer.json, goes through transformers' AutoTokenizer.
Anything else (`apply_chat_template`, `chat_template`, ...) is the Hugging Face tokenizer's, loaded on first use.
`request_text` is the one reading of a request's text element (bytes that must be UTF-8), for every served model that
takes text: the preprocessing model and the torch flavour's llmapi model.
"""

import json
from pathlib import Path


def request_text(value, name):
    """The text of one element of a request's STRING tensor `name`: bytes read as UTF-8, anything else as str.
    ValueError naming the tensor, the first byte that is not UTF-8 and its offset (never the text itself)."""
    if not isinstance(value, bytes):
        return str(value)
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{name} is not UTF-8 text (byte 0x{value[exc.start]:02x} at offset {exc.start}): "
                         "send the text UTF-8 encoded") from None


def _token_text(value):
    return value.get("content") if isinstance(value, dict) else value


class TextCodec:
    def __init__(self, tokenizer_dir):
        path = Path(tokenizer_dir)
        config_file = path / "tokenizer_config.json"
        config = json.loads(config_file.read_text(encoding="utf-8")) if config_file.is_file() else {}
        special_file = path / "special_tokens_map.json"
        special = json.loads(special_file.read_text(encoding="utf-8")) if special_file.is_file() else {}
        self._path = path
        self._fast = None
        self._hf = None
        if (path / "tokenizer.json").is_file() and not config.get("clean_up_tokenization_spaces", False):
            from tokenizers import Tokenizer

            self._fast = Tokenizer.from_file(str(path / "tokenizer.json"))
            eos = _token_text(config.get("eos_token") or special.get("eos_token"))
            pad = _token_text(config.get("pad_token") or special.get("pad_token"))
            self.eos_token_id = None if eos is None else self._fast.token_to_id(eos)
            self.pad_token_id = None if pad is None else self._fast.token_to_id(pad)
            self.clean_up_tokenization_spaces = False
        else:
            from transformers import AutoTokenizer

            self._hf = AutoTokenizer.from_pretrained(path)
            self.eos_token_id = self._hf.eos_token_id
            self.pad_token_id = self._hf.pad_token_id
            # decode cleans up tokenization spaces (" 's" -> "'s"): a streamed detokenizer decodes whole outputs then
            self.clean_up_tokenization_spaces = bool(getattr(self._hf, "clean_up_tokenization_spaces", False))

    @property
    def vocab_size(self):
        """Entries of the vocabulary, added tokens included (the width of an embedding-bias row)."""
        if self._fast is not None:
            return self._fast.get_vocab_size(with_added_tokens=True)
        return len(self._hf)

    def vocab_tokens(self):
        """The text of every vocabulary entry, added tokens included."""
        if self._fast is not None:
            return list(self._fast.get_vocab(with_added_tokens=True))
        return list(self._hf.get_vocab())

    def encode(self, text, add_special_tokens=True):
        if self._fast is not None:
            return list(self._fast.encode(text, add_special_tokens=add_special_tokens).ids)
        return list(self._hf.encode(text, add_special_tokens=add_special_tokens))

    def decode(self, token_ids, skip_special_tokens=True):
        ids = [int(t) for t in token_ids]
        if self._fast is not None:
            return self._fast.decode(ids, skip_special_tokens=skip_special_tokens)
        return self._hf.decode(ids, skip_special_tokens=skip_special_tokens)

    def __getattr__(self, name):
        """Every other attribute of the Hugging Face tokenizer of the same directory (loaded once, on first use)."""
        if name.startswith("__") or name in ("_path", "_fast", "_hf"):
            raise AttributeError(name)
        if self._hf is None:
            from transformers import AutoTokenizer

            self._hf = AutoTokenizer.from_pretrained(self._path)
        return getattr(self._hf, name)
