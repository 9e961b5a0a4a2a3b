"""Triton Python model `preprocessing`: text -> token ids with the deployment's Hugging Face tokenizer.

Self-contained (numpy, and tokenizers/transformers through text_codec.py) so it also runs in NVIDIA's TensorRT-LLM
container without trtspec.
Bad requests (an empty prompt, a non-positive output length) get a Triton error response; an over-long prompt is
refused by the engine model behind it (tensorrt_llm or trtspec_engine), which knows its max_input_len.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils
from text_codec import TextCodec


def _parameters(args):
    config = json.loads(args["model_config"])
    return {key: value["string_value"] for key, value in config.get("parameters", {}).items()}


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
        queries = pb_utils.get_input_tensor_by_name(request, "QUERY").as_numpy()  # [batch, 1] bytes
        output_len = pb_utils.get_input_tensor_by_name(request, "REQUEST_OUTPUT_LEN").as_numpy()  # [batch, 1]
        batch = queries.shape[0]
        ids = []
        for row in queries.reshape(batch, -1):
            text = row[0].decode("utf-8") if isinstance(row[0], bytes) else str(row[0])
            if not text.strip():
                raise ValueError("empty prompt: text_input must contain text")
            tokens = self.tokenizer.encode(text, add_special_tokens=self.add_special_tokens)
            ids.append(tokens)
        if np.any(output_len < 1):
            raise ValueError(f"max_tokens must be >= 1, got {output_len.reshape(-1).tolist()}")
        width = max(len(t) for t in ids)
        input_ids = np.full((batch, width), self.pad_id, dtype=np.int32)  # [batch, max_len], right-padded
        for i, tokens in enumerate(ids):
            input_ids[i, : len(tokens)] = tokens
        lengths = np.array([[len(t)] for t in ids], dtype=np.int32)  # [batch, 1]
        end_id = self._optional(request, "END_ID", self.end_id, batch)
        pad_id = self._optional(request, "PAD_ID", self.pad_id, batch)
        return pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("INPUT_ID", input_ids),
            pb_utils.Tensor("REQUEST_INPUT_LEN", lengths),
            pb_utils.Tensor("REQUEST_OUTPUT_LEN", output_len.astype(np.int32).reshape(batch, 1)),
            pb_utils.Tensor("OUT_END_ID", end_id),
            pb_utils.Tensor("OUT_PAD_ID", pad_id),
        ])

    @staticmethod
    def _optional(request, name, default, batch):
        tensor = pb_utils.get_input_tensor_by_name(request, name)
        if tensor is None:
            return np.full((batch, 1), default, dtype=np.int32)
        return tensor.as_numpy().astype(np.int32).reshape(batch, 1)
