"""Triton Python model `tensorrt_llm_bls`: text in, text out, with draft-target speculation through BLS calls.

With `tensorrt_llm_draft_model_name` set and `num_draft_tokens` k > 0 in the request, each iteration asks the draft
engine for k tokens, then the target engine verifies them in one pass (`draft_input_ids`, request_output_len = k + 1)
and returns the accepted prefix plus one token of its own. Otherwise the request goes to the target directly.
Batch 1 and non-streaming while speculating (as tensorrtllm_backend's BLS). Self-contained: numpy, and
tokenizers/transformers through text_codec.py.
Acceptance counters cover the whole generation (not only the last target call).
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils
from text_codec import TextCodec


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {key: value["string_value"] for key, value in config.get("parameters", {}).items()}
        self.target_model = params.get("tensorrt_llm_model_name", "tensorrt_llm")
        self.draft_model = params.get("tensorrt_llm_draft_model_name") or None
        self.tokenizer = TextCodec(params["tokenizer_dir"])
        eos = self.tokenizer.eos_token_id
        self.end_id = -1 if eos is None else int(eos)

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                responses.append(self._run(request))
            except (ValueError, pb_utils.TritonModelException) as exc:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"tensorrt_llm_bls: {exc}")))
        return responses

    def _run(self, request):
        def scalar(name, default):
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            return default if tensor is None else tensor.as_numpy().reshape(-1)[0].item()

        text = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy().reshape(-1)
        if text.size != 1:
            raise ValueError("batch size > 1 is not supported; send one prompt per request")
        prompt = text[0].decode("utf-8") if isinstance(text[0], bytes) else str(text[0])
        if not prompt.strip():
            raise ValueError("empty prompt: text_input must contain text")
        max_tokens = int(scalar("max_tokens", 0))
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        k = int(scalar("num_draft_tokens", 0))
        if k > 0 and self.draft_model is None:
            raise ValueError("num_draft_tokens > 0 but this deployment has no draft model")
        if k > 0 and bool(scalar("stream", False)):
            raise ValueError("streaming is not supported with draft-target speculation; set stream=false")
        sampling = {
            "temperature": np.array([[scalar("temperature", 0.0)]], dtype=np.float32),
            "runtime_top_k": np.array([[scalar("top_k", 0)]], dtype=np.int32),
            "runtime_top_p": np.array([[scalar("top_p", 1.0)]], dtype=np.float32),
            "end_id": np.array([[scalar("end_id", self.end_id)]], dtype=np.int32),
            "pad_id": np.array([[scalar("pad_id", self.end_id)]], dtype=np.int32),
        }
        seed = scalar("seed", None)
        if seed is not None:
            sampling["seed"] = np.array([[seed]], dtype=np.uint64)
        prompt_ids = self.tokenizer.encode(prompt)
        if k > 0:
            tokens, accepted, drafted = self._speculate(prompt_ids, max_tokens, k, sampling)
        else:
            tokens, accepted, drafted = self._call(self.target_model, prompt_ids, max_tokens, sampling), 0, 0
        rate = accepted / drafted if drafted else 0.0
        text_out = self.tokenizer.decode(tokens, skip_special_tokens=True).encode("utf-8")
        return pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("text_output", np.array([[text_out]], dtype=object)),
            pb_utils.Tensor("output_ids", np.array(tokens, dtype=np.int32).reshape(1, 1, -1)),
            pb_utils.Tensor("sequence_length", np.array([[len(tokens)]], dtype=np.int32)),
            pb_utils.Tensor("acceptance_rate", np.array([[rate]], dtype=np.float32)),
            pb_utils.Tensor("total_accepted_draft_tokens", np.array([[accepted]], dtype=np.int32)),
            pb_utils.Tensor("total_draft_tokens", np.array([[drafted]], dtype=np.int32)),
        ])

    def _speculate(self, prompt_ids, max_tokens, k, sampling):
        """Draft k, verify with the target, keep what it returns; repeat until max_tokens or end_id."""
        current = list(prompt_ids)
        limit = len(prompt_ids) + max_tokens
        end_id = int(sampling["end_id"].reshape(-1)[0])
        accepted = drafted = 0
        while len(current) < limit:
            budget = min(k, limit - len(current) - 1)
            draft = self._call(self.draft_model, current, budget, sampling) if budget > 0 else []
            new = self._call(self.target_model, current, len(draft) + 1, sampling, draft_ids=draft)
            if not new:
                break
            drafted += len(draft)
            accepted += min(len(new) - 1, len(draft))
            current += new
            if end_id in new:
                break
        generated = current[len(prompt_ids):limit]
        if end_id in generated:
            generated = generated[: generated.index(end_id)]
        return generated, accepted, drafted

    def _call(self, model, input_ids, output_len, sampling, draft_ids=None):
        """One BLS request; returns the generated tokens (after the input)."""
        inputs = {
            "input_ids": np.array([input_ids], dtype=np.int32),  # [1, len]
            "input_lengths": np.array([[len(input_ids)]], dtype=np.int32),
            "request_output_len": np.array([[output_len]], dtype=np.int32),
            "exclude_input_in_output": np.array([[True]], dtype=np.bool_),
            **sampling,
        }
        if draft_ids:
            inputs["draft_input_ids"] = np.array([draft_ids], dtype=np.int32)  # [1, k]
        request = pb_utils.InferenceRequest(
            model_name=model, requested_output_names=["output_ids", "sequence_length"],
            inputs=[pb_utils.Tensor(name, value) for name, value in inputs.items()])
        tokens = []
        # decoupled=True works for decoupled (streaming-capable) and plain models alike; responses are joined
        for response in request.exec(decoupled=True):
            if response.has_error():
                raise ValueError(f"{model}: {response.error().message()}")
            ids = pb_utils.get_output_tensor_by_name(response, "output_ids")
            if ids is None:  # the empty final-flag response of a decoupled model
                continue
            length = int(pb_utils.get_output_tensor_by_name(response, "sequence_length").as_numpy().reshape(-1)[0])
            tokens += [int(t) for t in ids.as_numpy().reshape(-1)[:length]]  # [1, beam, len] -> this response's
        return tokens
