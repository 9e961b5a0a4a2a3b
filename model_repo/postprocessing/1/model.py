"""Triton Python model `postprocessing`: token ids -> text with the deployment's Hugging Face tokenizer.

Self-contained (numpy, and tokenizers/transformers through text_codec.py). Input `TOKENS_BATCH` is
[batch, beam, len] and `SEQUENCE_LENGTH` [batch, beam]; each row is decoded up to its length. `OUTPUT` is 1-D,
[batch * beam] UTF-8 strings, as tensorrtllm_backend's postprocessing returns it (NVIDIA's clients read
`text_output[0]`). When streaming, each response carries only the new tokens, so `OUTPUT` is their text (a delta).
A request whose tensors do not fit (lengths that do not pair with the rows, a length past the row or negative, a
negative token id) is answered alone with an INVALID_ARG error; the other requests of the batch go on.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils
from text_codec import TextCodec

BAD_INPUT_TAG = "[INVALID_ARG]"  # trtspec.errors.BAD_INPUT_TAG (this file is stdlib-only; a test checks the copy)


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {key: value["string_value"] for key, value in config.get("parameters", {}).items()}
        self.tokenizer = TextCodec(params["tokenizer_dir"])
        self.skip_special_tokens = params.get("skip_special_tokens", "true").lower() == "true"

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                output = self._decode(request)  # [batch * beam] bytes
            except ValueError as exc:  # bad input: INVALID_ARG
                error = pb_utils.TritonError(f"postprocessing: {exc} {BAD_INPUT_TAG}", pb_utils.TritonError.INVALID_ARG)
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT", output)]))
        return responses

    def _decode(self, request):
        tokens = pb_utils.get_input_tensor_by_name(request, "TOKENS_BATCH").as_numpy()  # [batch, beam, len]
        lengths = pb_utils.get_input_tensor_by_name(request, "SEQUENCE_LENGTH").as_numpy()  # [batch, beam]
        if tokens.ndim == 2:  # [batch, len]: a model that does not emit the beam axis
            tokens = tokens[:, None, :]
        if tokens.ndim != 3 or lengths.size != tokens.shape[0] * tokens.shape[1]:
            raise ValueError(f"SEQUENCE_LENGTH has shape {list(lengths.shape)}: it needs one length per row of "
                             f"TOKENS_BATCH {list(tokens.shape)} ([batch, beam, len])")
        lengths = lengths.reshape(tokens.shape[0], tokens.shape[1])
        if np.any(lengths < 0) or np.any(lengths > tokens.shape[2]):
            raise ValueError(f"SEQUENCE_LENGTH {lengths.reshape(-1).tolist()[:8]} must be in [0, {tokens.shape[2]}], "
                             "the length of the TOKENS_BATCH rows")
        used = [tokens[b, k, : lengths[b, k]] for b in range(tokens.shape[0]) for k in range(tokens.shape[1])]
        negative = [int(row[row < 0][0]) for row in used if np.any(row < 0)]
        if negative:  # ids past the vocabulary decode to nothing (as Hugging Face's decode); negative ones are wrong
            raise ValueError(f"TOKENS_BATCH: token id {negative[0]} is negative; token ids are >= 0")
        texts = [self.tokenizer.decode(row.tolist(), skip_special_tokens=self.skip_special_tokens).encode("utf-8")
                 for row in used]
        return np.array(texts, dtype=object)  # [batch * beam] bytes
