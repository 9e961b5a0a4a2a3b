"""Triton Python model `postprocessing`: token ids -> text with the deployment's Hugging Face tokenizer.

Self-contained (numpy, and tokenizers/transformers through text_codec.py). Input `TOKENS_BATCH` is
[batch, beam, len] and `SEQUENCE_LENGTH` [batch, beam]; each row is decoded up to its length. `OUTPUT` is 1-D,
[batch * beam] UTF-8 strings, as tensorrtllm_backend's postprocessing returns it (NVIDIA's clients read
`text_output[0]`). When streaming, each response carries only the new tokens, so `OUTPUT` is their text (a delta).
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils
from text_codec import TextCodec


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {key: value["string_value"] for key, value in config.get("parameters", {}).items()}
        self.tokenizer = TextCodec(params["tokenizer_dir"])
        self.skip_special_tokens = params.get("skip_special_tokens", "true").lower() == "true"

    def execute(self, requests):
        responses = []
        for request in requests:
            tokens = pb_utils.get_input_tensor_by_name(request, "TOKENS_BATCH").as_numpy()  # [batch, beam, len]
            lengths = pb_utils.get_input_tensor_by_name(request, "SEQUENCE_LENGTH").as_numpy()  # [batch, beam]
            if tokens.ndim == 2:  # [batch, len]: a model that does not emit the beam axis
                tokens = tokens[:, None, :]
            lengths = lengths.reshape(tokens.shape[0], tokens.shape[1])
            texts = [self.tokenizer.decode(tokens[b, k, : lengths[b, k]].tolist(),
                                           skip_special_tokens=self.skip_special_tokens).encode("utf-8")
                     for b in range(tokens.shape[0]) for k in range(tokens.shape[1])]
            output = np.array(texts, dtype=object)  # [batch * beam] bytes
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT", output)]))
        return responses
