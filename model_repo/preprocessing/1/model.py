"""Triton Python model `preprocessing`: text -> token ids with the deployment's Hugging Face tokenizer.

Self-contained (numpy, and tokenizers/transformers through text_codec.py) so it also runs in NVIDIA's TensorRT-LLM
container without trtspec. Tensors and formats are tensorrtllm_backend's (v0.19.0 all_models/inflight_batcher_llm/
preprocessing): QUERY [batch, 1] -> INPUT_ID [batch, max_len] right-padded with the pad id, REQUEST_INPUT_LEN
[batch, 1]; BAD_WORDS_DICT/STOP_WORDS_DICT [batch, words] -> BAD_WORDS_IDS/STOP_WORDS_IDS [batch, 2, len] (row 0 the
concatenated token ids of a batch row's words, row 1 the end offset of each word, padded with -1; no words:
[batch, 2, 0]); EMBEDDING_BIAS_WORDS/WEIGHTS [batch, words] -> EMBEDDING_BIAS [batch, vocab] (each word's tokens get
its weight; none: [batch, 0]); END_ID/PAD_ID default to the tokenizer's end and pad tokens (pad: end when it has
none). Bad requests (an empty prompt, text that is not UTF-8, a non-positive output length, words and weights that
do not pair up) get a Triton error response with code INVALID_ARG (gRPC INVALID_ARGUMENT, HTTP 400); an over-long
prompt is refused by the engine model behind it, which knows its max_input_len. Other failures stay INTERNAL.

Work per request is bounded before anything is tokenized: a QUERY row longer than `max_query_bytes` UTF-8 bytes is
refused unread (a prompt of N bytes has at least N / (longest token in bytes) tokens, so past
max_input_len x longest token x NORMALIZER_SLACK bytes it cannot fit), and so is a word list (BAD_WORDS_DICT,
STOP_WORDS_DICT, EMBEDDING_BIAS_WORDS) with more than MAX_WORDS words or more than `max_query_bytes` bytes in a row.
max_input_len is read once at initialize from the sibling `tensorrt_llm` model of the repository: its
`max_input_len` parameter (trtspec's torch flavour), else the `build_config.max_input_len` of the engine's config.json
under its `gpt_model_path` (TensorRT-LLM engines); DEFAULT_MAX_INPUT_LEN when neither is there.
"""

import json
import re
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils
from text_codec import TextCodec, request_text

BAD_INPUT_TAG = "[INVALID_ARG]"  # trtspec.errors.BAD_INPUT_TAG (this file is stdlib-only; a test checks the copy)

DEFAULT_MAX_INPUT_LEN = 8192  # prompt tokens assumed when the engine model's max_input_len cannot be read
NORMALIZER_SLACK = 4  # input bytes per token-text byte a normalizer may drop or fold (NFKC, stripped spaces)
MAX_WORDS = 1024  # words per batch row in BAD_WORDS_DICT / STOP_WORDS_DICT / EMBEDDING_BIAS_WORDS


def _pbtxt_parameter(text, key):
    match = re.search(r'key:\s*"' + re.escape(key) + r'"\s*value:\s*\{\s*string_value:\s*"([^"]*)"', text)
    return match.group(1) if match else None


def _max_input_len(args):
    """The engine model's max_input_len (see the module docstring), or DEFAULT_MAX_INPUT_LEN."""
    try:
        config = Path(args["model_repository"]).resolve().parent / "tensorrt_llm" / "config.pbtxt"
        text = config.read_text(encoding="utf-8")
        value = _pbtxt_parameter(text, "max_input_len")
        if value is None:
            engine = _pbtxt_parameter(text, "gpt_model_path")
            build = json.loads((Path(engine) / "config.json").read_text(encoding="utf-8"))["build_config"]
            value = build["max_input_len"]
        return max(1, int(value))
    except (KeyError, OSError, TypeError, ValueError):
        return DEFAULT_MAX_INPUT_LEN


def _parameters(args):
    config = json.loads(args["model_config"])
    return {key: value["string_value"] for key, value in config.get("parameters", {}).items()}


def _nbytes(value):
    return len(value) if isinstance(value, bytes) else len(str(value).encode("utf-8"))


class TritonPythonModel:
    def initialize(self, args):
        params = _parameters(args)
        self.tokenizer = TextCodec(params["tokenizer_dir"])
        self.add_special_tokens = params.get("add_special_tokens", "true").lower() == "true"
        eos = self.tokenizer.eos_token_id
        self.end_id = -1 if eos is None else int(eos)
        pad = self.tokenizer.pad_token_id
        self.pad_id = self.end_id if pad is None else int(pad)
        longest = max((len(t.encode("utf-8")) for t in self.tokenizer.vocab_tokens()), default=1)
        self.max_input_len = _max_input_len(args)
        self.max_query_bytes = self.max_input_len * max(1, longest) * NORMALIZER_SLACK

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                responses.append(self._tokenize(request))
            except ValueError as exc:  # bad input (UnicodeDecodeError included): INVALID_ARG
                error = pb_utils.TritonError(f"preprocessing: {exc} {BAD_INPUT_TAG}", pb_utils.TritonError.INVALID_ARG)
                responses.append(pb_utils.InferenceResponse(error=error))
        return responses

    def _tokenize(self, request):
        queries = self._input(request, "QUERY")  # [batch, 1] bytes
        output_len = self._input(request, "REQUEST_OUTPUT_LEN")  # [batch, 1]
        batch = queries.shape[0]
        for row in queries.reshape(batch, -1):
            if _nbytes(row[0]) > self.max_query_bytes:
                raise ValueError(f"QUERY has {_nbytes(row[0])} bytes, more than a prompt of max_input_len "
                                 f"{self.max_input_len} tokens can have ({self.max_query_bytes} bytes): shorten it")
        for name in ("BAD_WORDS_DICT", "STOP_WORDS_DICT", "EMBEDDING_BIAS_WORDS"):
            self._check_words(name, self._input(request, name), batch)
        ids = []
        for row in queries.reshape(batch, -1):
            text = request_text(row[0], "QUERY")
            if not text.strip():
                raise ValueError("empty prompt: text_input must contain text")
            ids.append(self.tokenizer.encode(text, add_special_tokens=self.add_special_tokens))
        if np.any(output_len < 1):
            raise ValueError(f"max_tokens must be >= 1, got {output_len.reshape(-1).tolist()}")
        width = max(len(t) for t in ids)
        input_ids = np.full((batch, width), self.pad_id, dtype=np.int32)  # [batch, max_len], right-padded
        for i, tokens in enumerate(ids):
            input_ids[i, : len(tokens)] = tokens
        lengths = np.array([[len(t)] for t in ids], dtype=np.int32)  # [batch, 1]
        return pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("INPUT_ID", input_ids),
            pb_utils.Tensor("REQUEST_INPUT_LEN", lengths),
            pb_utils.Tensor("BAD_WORDS_IDS", self._word_list(self._input(request, "BAD_WORDS_DICT"), batch, "BAD_WORDS_DICT")),
            pb_utils.Tensor("STOP_WORDS_IDS", self._word_list(self._input(request, "STOP_WORDS_DICT"), batch, "STOP_WORDS_DICT")),
            pb_utils.Tensor("EMBEDDING_BIAS", self._embedding_bias(request, batch)),
            pb_utils.Tensor("REQUEST_OUTPUT_LEN", output_len.astype(np.int32).reshape(batch, 1)),
            pb_utils.Tensor("OUT_END_ID", self._id(request, "END_ID", self.end_id, batch)),
            pb_utils.Tensor("OUT_PAD_ID", self._id(request, "PAD_ID", self.pad_id, batch)),
        ])

    def _check_words(self, name, words, batch):
        if words is None:
            return
        for row in words.reshape(batch, -1):
            if len(row) > MAX_WORDS:
                raise ValueError(f"{name} has {len(row)} words in a row, more than {MAX_WORDS}")
            size = sum(_nbytes(w) for w in row)
            if size > self.max_query_bytes:
                raise ValueError(f"{name} has {size} bytes in a row, more than {self.max_query_bytes}")

    @staticmethod
    def _input(request, name):
        tensor = pb_utils.get_input_tensor_by_name(request, name)
        return None if tensor is None else tensor.as_numpy()

    def _word_list(self, words, batch, name):
        """[batch, words] strings -> [batch, 2, len] int32: token ids and end offsets per row (-1 padded)."""
        if words is None:
            return np.empty((batch, 2, 0), dtype=np.int32)
        rows = []
        for row in words.reshape(batch, -1):
            flat, offsets = [], []
            for word in row:
                tokens = self.tokenizer.encode(request_text(word, name), add_special_tokens=False)
                if tokens:  # an empty word has no tokens and is skipped
                    flat += tokens
                    offsets.append(len(flat))
            rows.append((flat, offsets))
        width = max(1, *(len(flat) for flat, _ in rows))
        out = np.zeros((batch, 2, width), dtype=np.int32)
        out[:, 1, :] = -1
        for i, (flat, offsets) in enumerate(rows):
            out[i, 0, : len(flat)] = flat
            out[i, 1, : len(offsets)] = offsets
        return out

    def _embedding_bias(self, request, batch):
        """[batch, vocab] float32 from EMBEDDING_BIAS_WORDS/WEIGHTS, or [batch, 0] when the request has none."""
        words, weights = self._input(request, "EMBEDDING_BIAS_WORDS"), self._input(request, "EMBEDDING_BIAS_WEIGHTS")
        if words is None and weights is None:
            return np.empty((batch, 0), dtype=np.float32)
        if words is None or weights is None or words.reshape(batch, -1).shape != weights.reshape(batch, -1).shape:
            raise ValueError("embedding_bias_words and embedding_bias_weights must be sent together, one weight per "
                             "word")
        bias = np.zeros((batch, self.tokenizer.vocab_size), dtype=np.float32)
        for i, (row_words, row_weights) in enumerate(zip(words.reshape(batch, -1), weights.reshape(batch, -1))):
            for word, weight in zip(row_words, row_weights):
                for token in self.tokenizer.encode(request_text(word, "EMBEDDING_BIAS_WORDS"), add_special_tokens=False):
                    bias[i, token] += float(weight)
        return bias

    def _id(self, request, name, default, batch):
        value = self._input(request, name)
        if value is None:
            return np.full((batch, 1), default, dtype=np.int32)
        return value.astype(np.int32).reshape(batch, 1)
