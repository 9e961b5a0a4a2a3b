"""Triton Python model `tensorrt_llm_bls`: text in, text out, with draft-target speculation through BLS calls.

Text goes through the repository's `preprocessing` and `postprocessing` models (as in NVIDIA's BLS), so this model
has no tokenizer of its own. With `tensorrt_llm_draft_model_name` set and `num_draft_tokens` k > 0 in the request,
each iteration asks the draft engine for k tokens. The target engine then verifies them in one pass
(`draft_input_ids`, request_output_len = k + 1) and returns the accepted prefix plus one token of its own. Otherwise
the request goes straight to the target. Batch 1, and no streaming while speculating (as tensorrtllm_backend's BLS).

Names follow this model's own config.pbtxt, which trtspec renders for one TensorRT-LLM release. The sampling inputs
that the release declares are forwarded to the engine models under the same names. `random_seed`/`seed` and
`min_length`/`min_tokens` are spelled per release, and a release's BLS and tensorrt_llm use the same spelling. The
acceptance outputs are sent only when the config declares them (0.18.0 has none) and the request sets
return_perf_metrics. They cover the whole generation (every target call). Without draft tokens they are the target
engine's own (a Medusa, EAGLE or lookahead engine reports its acceptance). Self-contained: numpy only.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils

PREPROCESSING, POSTPROCESSING = "preprocessing", "postprocessing"
PERF_OUTPUTS = ("acceptance_rate", "total_accepted_draft_tokens", "total_draft_tokens")
# BLS input -> (engine-model input, dtype, default sent when the request leaves it out; None = not sent)
SAMPLING = {
    "temperature": ("temperature", np.float32, 0.0),
    "top_k": ("runtime_top_k", np.int32, 0),
    "top_p": ("runtime_top_p", np.float32, 1.0),
    "random_seed": ("random_seed", np.uint64, None),  # up to TensorRT-LLM 0.19.0
    "seed": ("seed", np.uint64, None),  # later releases
    "min_length": ("min_length", np.int32, None),  # up to TensorRT-LLM 0.19.0
    "min_tokens": ("min_tokens", np.int32, None),  # later releases
}


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {key: value["string_value"] for key, value in config.get("parameters", {}).items()}
        self.target_model = params.get("tensorrt_llm_model_name") or "tensorrt_llm"
        self.draft_model = params.get("tensorrt_llm_draft_model_name") or None
        declared_inputs = {tensor["name"] for tensor in config.get("input", [])}
        declared_outputs = {tensor["name"] for tensor in config.get("output", [])}
        self.sampling = {name: spec for name, spec in SAMPLING.items() if name in declared_inputs}
        self.perf_outputs = [name for name in PERF_OUTPUTS if name in declared_outputs]

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                responses.append(self._run(request))
            except (ValueError, pb_utils.TritonModelException) as exc:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"tensorrt_llm_bls: {exc}")))
        return responses

    def _run(self, request):
        def tensor(name):
            found = pb_utils.get_input_tensor_by_name(request, name)
            return None if found is None else found.as_numpy()

        def scalar(name, default):
            array = tensor(name)
            return default if array is None else array.reshape(-1)[0].item()

        text = tensor("text_input").reshape(-1)
        if text.size != 1:
            raise ValueError("batch size > 1 is not supported; send one prompt per request")
        max_tokens = int(scalar("max_tokens", 0))
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        k = int(scalar("num_draft_tokens", 0))
        if k > 0 and self.draft_model is None:
            raise ValueError("num_draft_tokens > 0 but this deployment has no draft model")
        if k > 0 and bool(scalar("stream", False)):
            raise ValueError("streaming is not supported with draft-target speculation; set stream=false")
        if bool(scalar("use_draft_logits", False)):
            raise ValueError("use_draft_logits=true is not supported: this BLS verifies draft tokens without the "
                             "draft logits; send false or leave it out")
        prompt_ids, end_id, pad_id = self._tokenize(text[0], max_tokens, tensor("end_id"), tensor("pad_id"))
        sampling = {"end_id": np.array([[end_id]], dtype=np.int32), "pad_id": np.array([[pad_id]], dtype=np.int32)}
        for name, (engine_name, dtype, default) in self.sampling.items():
            value = scalar(name, default)
            if value is not None:
                sampling[engine_name] = np.array([[value]], dtype=dtype)
        perf = bool(scalar("return_perf_metrics", False)) and bool(self.perf_outputs)
        if k > 0:
            tokens, counters = self._speculate(prompt_ids, max_tokens, k, sampling, end_id)
        else:
            tokens, counters = self._call(self.target_model, prompt_ids, max_tokens, sampling, perf=perf)
        outputs = [pb_utils.Tensor("text_output", np.array([[self._detokenize(tokens)]], dtype=object))]
        if perf:
            drafted, accepted = counters.get("total_draft_tokens", 0), counters.get("total_accepted_draft_tokens", 0)
            rate = counters.get("acceptance_rate", accepted / drafted if drafted else 0.0)
            values = {"acceptance_rate": np.array([[rate]], dtype=np.float32),
                      "total_accepted_draft_tokens": np.array([[accepted]], dtype=np.int32),
                      "total_draft_tokens": np.array([[drafted]], dtype=np.int32)}
            outputs += [pb_utils.Tensor(name, values[name]) for name in self.perf_outputs]
        return pb_utils.InferenceResponse(output_tensors=outputs)

    def _speculate(self, prompt_ids, max_tokens, k, sampling, end_id):
        """Draft k, verify with the target, keep what it returns; repeat until max_tokens or end_id."""
        current = list(prompt_ids)
        limit = len(prompt_ids) + max_tokens
        accepted = drafted = 0
        while len(current) < limit:
            budget = min(k, limit - len(current) - 1)
            draft = self._call(self.draft_model, current, budget, sampling)[0] if budget > 0 else []
            new = self._call(self.target_model, current, len(draft) + 1, sampling, draft_ids=draft)[0]
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
        rate = accepted / drafted if drafted else 0.0
        return generated, {"acceptance_rate": rate, "total_accepted_draft_tokens": accepted,
                           "total_draft_tokens": drafted}

    def _call(self, model, input_ids, output_len, sampling, draft_ids=None, perf=False):
        """One engine request: (the generated tokens after the input, the acceptance counters it reported)."""
        inputs = {
            "input_ids": np.array([input_ids], dtype=np.int32),  # [1, len]
            "input_lengths": np.array([[len(input_ids)]], dtype=np.int32),
            "request_output_len": np.array([[output_len]], dtype=np.int32),
            "exclude_input_in_output": np.array([[True]], dtype=np.bool_),
            **sampling,
        }
        if draft_ids:
            inputs["draft_input_ids"] = np.array([draft_ids], dtype=np.int32)  # [1, k]
        wanted = ["output_ids", "sequence_length"]
        if perf:
            inputs["return_perf_metrics"] = np.array([[True]], dtype=np.bool_)
            wanted += list(PERF_OUTPUTS)
        request = pb_utils.InferenceRequest(
            model_name=model, requested_output_names=wanted,
            inputs=[pb_utils.Tensor(name, value) for name, value in inputs.items()])
        tokens, counters = [], {}
        # decoupled=True works for decoupled (streaming-capable) and plain models alike; responses are joined
        for response in request.exec(decoupled=True):
            if response.has_error():
                raise ValueError(f"{model}: {response.error().message()}")
            ids = pb_utils.get_output_tensor_by_name(response, "output_ids")
            if ids is None:  # the empty final-flag response of a decoupled model
                continue
            length = int(pb_utils.get_output_tensor_by_name(response, "sequence_length").as_numpy().reshape(-1)[0])
            tokens += [int(t) for t in ids.as_numpy().reshape(-1)[:length]]  # [1, beam, len] -> this response's
            for name in PERF_OUTPUTS if perf else ():
                found = pb_utils.get_output_tensor_by_name(response, name)
                if found is not None:
                    counters[name] = found.as_numpy().reshape(-1)[0].item()
        return tokens, counters

    def _tokenize(self, text, max_tokens, end_id, pad_id):
        """(prompt token ids, end_id, pad_id) from the preprocessing model (its defaults: the tokenizer's)."""
        inputs = [pb_utils.Tensor("QUERY", np.array([[text]], dtype=object)),
                  pb_utils.Tensor("REQUEST_OUTPUT_LEN", np.array([[max_tokens]], dtype=np.int32))]
        for name, value in (("END_ID", end_id), ("PAD_ID", pad_id)):
            if value is not None:
                inputs.append(pb_utils.Tensor(name, value.astype(np.int32).reshape(1, 1)))
        out = _exec(PREPROCESSING, inputs, ["INPUT_ID", "REQUEST_INPUT_LEN", "OUT_END_ID", "OUT_PAD_ID"])
        length = int(out["REQUEST_INPUT_LEN"].reshape(-1)[0])
        ids = [int(t) for t in out["INPUT_ID"].reshape(-1)[:length]]
        return ids, int(out["OUT_END_ID"].reshape(-1)[0]), int(out["OUT_PAD_ID"].reshape(-1)[0])

    def _detokenize(self, tokens):
        """The text of `tokens` (bytes) from the postprocessing model."""
        if not tokens:
            return b""
        out = _exec(POSTPROCESSING, [
            pb_utils.Tensor("TOKENS_BATCH", np.array(tokens, dtype=np.int32).reshape(1, 1, -1)),  # [batch, beam, len]
            pb_utils.Tensor("SEQUENCE_LENGTH", np.array([[len(tokens)]], dtype=np.int32))], ["OUTPUT"])
        raw = out["OUTPUT"].reshape(-1)[0]
        return raw if isinstance(raw, bytes) else str(raw).encode("utf-8")


def _exec(model, inputs, names):
    """One request to a non-decoupled model of this repository; its outputs `names` as arrays."""
    response = pb_utils.InferenceRequest(model_name=model, requested_output_names=names, inputs=inputs).exec()
    if response.has_error():
        raise ValueError(response.error().message())  # the model's message names it (`preprocessing: ...`)
    return {name: pb_utils.get_output_tensor_by_name(response, name).as_numpy() for name in names}
