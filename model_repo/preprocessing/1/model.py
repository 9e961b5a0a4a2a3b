"""Triton Python model `preprocessing`: text -> token ids with the deployment's Hugging Face tokenizer.

Self-contained (numpy, and tokenizers/transformers through text_codec.py) so it also runs in NVIDIA's TensorRT-LLM
container without trtspec. Tensors and formats are tensorrtllm_backend's (v0.19.0 all_models/inflight_batcher_llm/
preprocessing): QUERY [batch, 1] -> INPUT_ID [batch, max_len] right-padded with the pad id, REQUEST_INPUT_LEN
[batch, 1]; BAD_WORDS_DICT/STOP_WORDS_DICT [batch, words] -> BAD_WORDS_IDS/STOP_WORDS_IDS [batch, 2, len] (row 0 the
concatenated token ids of a batch row's words, row 1 the end offset of each word, padded with -1; no words:
[batch, 2, 0]); EMBEDDING_BIAS_WORDS/WEIGHTS [batch, words] -> EMBEDDING_BIAS [batch, vocab] (each word's tokens get
its weight; none: [batch, 0]); END_ID/PAD_ID default to the tokenizer's end and pad tokens (pad: end when it has
none). Bad requests (an empty prompt, a non-positive output length, words and weights that do not pair up) get a
Triton error response; an over-long prompt is refused by the engine model behind it, which knows its max_input_len.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils
from text_codec import TextCodec


def _parameters(args):
    config = json.loads(args["model_config"])
    return {key: value["string_value"] for key, value in config.get("parameters", {}).items()}


def _text(value):
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


class TritonPythonModel:
    def initialize(self, args):
        params = _parameters(args)
        self.tokenizer = TextCodec(params["tokenizer_dir"])
        self.add_special_tokens = params.get("add_special_tokens", "true").lower() == "true"
        eos = self.tokenizer.eos_token_id
        self.end_id = -1 if eos is None else int(eos)
        pad = self.tokenizer.pad_token_id
        self.pad_id = self.end_id if pad is None else int(pad)

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                responses.append(self._tokenize(request))
            except ValueError as exc:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"preprocessing: {exc}")))
        return responses

    def _tokenize(self, request):
        queries = self._input(request, "QUERY")  # [batch, 1] bytes
        output_len = self._input(request, "REQUEST_OUTPUT_LEN")  # [batch, 1]
        batch = queries.shape[0]
        ids = []
        for row in queries.reshape(batch, -1):
            text = _text(row[0])
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
            pb_utils.Tensor("BAD_WORDS_IDS", self._word_list(self._input(request, "BAD_WORDS_DICT"), batch)),
            pb_utils.Tensor("STOP_WORDS_IDS", self._word_list(self._input(request, "STOP_WORDS_DICT"), batch)),
            pb_utils.Tensor("EMBEDDING_BIAS", self._embedding_bias(request, batch)),
            pb_utils.Tensor("REQUEST_OUTPUT_LEN", output_len.astype(np.int32).reshape(batch, 1)),
            pb_utils.Tensor("OUT_END_ID", self._id(request, "END_ID", self.end_id, batch)),
            pb_utils.Tensor("OUT_PAD_ID", self._id(request, "PAD_ID", self.pad_id, batch)),
        ])

    @staticmethod
    def _input(request, name):
        tensor = pb_utils.get_input_tensor_by_name(request, name)
        return None if tensor is None else tensor.as_numpy()

    def _word_list(self, words, batch):
        """[batch, words] strings -> [batch, 2, len] int32: token ids and end offsets per row (-1 padded)."""
        if words is None:
            return np.empty((batch, 2, 0), dtype=np.int32)
        rows = []
        for row in words.reshape(batch, -1):
            flat, offsets = [], []
            for word in row:
                tokens = self.tokenizer.encode(_text(word), add_special_tokens=False)
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
                for token in self.tokenizer.encode(_text(word), add_special_tokens=False):
                    bias[i, token] += float(weight)
        return bias

    def _id(self, request, name, default, batch):
        value = self._input(request, name)
        if value is None:
            return np.full((batch, 1), default, dtype=np.int32)
        return value.astype(np.int32).reshape(batch, 1)
