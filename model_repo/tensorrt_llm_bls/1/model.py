"""Triton Python model `tensorrt_llm_bls`: text in, text out through BLS calls, as tensorrtllm_backend's BLS.

Text goes through the repository's `preprocessing` model (token ids, word lists, embedding bias, end and pad ids),
then `tensorrt_llm_model_name`, then `postprocessing`; this model has no tokenizer of its own. The request's inputs
are forwarded to the engine model under its names (top_k -> runtime_top_k, top_p -> runtime_top_p, length_penalty ->
len_penalty, stream -> streaming, the rest unchanged); each engine response becomes one response here with
`text_output` (1-D, one string per beam) and the engine's other outputs that this model declares (log probs,
batch_index, sequence_index, perf metrics). Batch > 1, num_return_sequences > 1 and streaming give several responses,
so they need this model decoupled (`trtspec deploy --decoupled`); without it they are refused.

With `tensorrt_llm_draft_model_name` set and num_draft_tokens k > 0, the request runs draft-target speculation:
each iteration asks the draft model for up to k tokens and the target verifies them in one pass (`draft_input_ids`,
request_output_len = k + 1), keeping the accepted prefix plus one token of its own; it stops at max_tokens, when the
target makes no progress or returns exactly the draft (end_id reached), or at a stop word (the loop of
tensorrtllm_backend's BLS and e2e_grpc_speculative_decoding_client.py). Batch 1, no streaming, no log probs; the
acceptance outputs (when declared and asked for with return_perf_metrics) count every iteration, and so does
`num_drafts` (the iterations that verified a draft) where this model's config declares it: no release's BLS does, and
trtspec's sweep reads it when present. It is this loop's own count, never asked of the engine models.

Metrics: on the TensorRT-LLM flavour `trtspec deploy` puts `trtspec_series.py` (trtspec.contracts.series) next to this
file, and this model then publishes trtspec's speculation series (Triton custom metrics, labelled with this model's
name): for its own draft-target loop every count but target forwards (drafts, draft tokens, accepted and rejected
per position, emitted tokens; a verifying call may run more than one forward), for requests the engine speculates
itself the totals of the engine's perf outputs (draft and accepted tokens, emitted tokens; drafts only where the
engine reports them), plus request latency. The torch flavour's engine models publish the series themselves, so
there the file is absent and this model publishes none.

Errors keep their Triton code: a bad request (its own checks, or a model it calls refusing it with INVALID_ARG) is
answered INVALID_ARG (gRPC INVALID_ARGUMENT, HTTP 400), a failure of a model it calls keeps that model's code, and a
failed call itself is INTERNAL.

Names follow this model's own config.pbtxt, which trtspec renders for one TensorRT-LLM release: `random_seed`/`seed`
and `min_length`/`min_tokens` are spelled per release, alike in a release's BLS and tensorrt_llm. Self-contained:
numpy only, so it also runs in NVIDIA's TensorRT-LLM container.
"""

import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils

try:  # rendered next to this file on the TensorRT-LLM flavour only (see the module docstring)
    import trtspec_series
except ImportError:
    trtspec_series = None

BAD_INPUT_TAG = "[INVALID_ARG]"  # trtspec.errors.BAD_INPUT_TAG (this file is stdlib-only; a test checks the copy)
PREPROCESSING, POSTPROCESSING = "preprocessing", "postprocessing"
# BLS input -> preprocessing input
TO_PREPROCESSING = {"text_input": "QUERY", "max_tokens": "REQUEST_OUTPUT_LEN", "bad_words": "BAD_WORDS_DICT",
                    "stop_words": "STOP_WORDS_DICT", "embedding_bias_words": "EMBEDDING_BIAS_WORDS",
                    "embedding_bias_weights": "EMBEDDING_BIAS_WEIGHTS", "end_id": "END_ID", "pad_id": "PAD_ID"}
# preprocessing output -> engine input
FROM_PREPROCESSING = {"INPUT_ID": "input_ids", "REQUEST_INPUT_LEN": "input_lengths",
                      "REQUEST_OUTPUT_LEN": "request_output_len", "BAD_WORDS_IDS": "bad_words_list",
                      "STOP_WORDS_IDS": "stop_words_list", "EMBEDDING_BIAS": "embedding_bias",
                      "OUT_END_ID": "end_id", "OUT_PAD_ID": "pad_id"}
# BLS input -> engine input, forwarded when the request sends it
RENAMED = {"top_k": "runtime_top_k", "top_p": "runtime_top_p", "length_penalty": "len_penalty", "stream": "streaming"}
FORWARDED = ("beam_width", "top_k", "top_p", "temperature", "length_penalty", "repetition_penalty", "min_length",
             "min_tokens", "presence_penalty", "frequency_penalty", "random_seed", "seed", "return_log_probs",
             "return_context_logits", "return_generation_logits", "num_return_sequences", "stream",
             "prompt_embedding_table", "lora_task_id", "lora_weights", "lora_config", "exclude_input_in_output",
             "return_perf_metrics", "guided_decoding_guide_type", "guided_decoding_guide")
TENSOR_INPUTS = {"prompt_embedding_table", "lora_weights", "lora_config"}  # forwarded as they are, not as scalars
ACCEPTANCE = ("acceptance_rate", "total_accepted_draft_tokens", "total_draft_tokens")
# perf outputs of the engine (tensorrt_llm's return_perf_metrics) and the series their totals feed
PERF_OUTPUTS = ("kv_cache_alloc_new_blocks", "kv_cache_reused_blocks", "kv_cache_alloc_total_blocks",
                "arrival_time_ns", "first_scheduled_time_ns", "first_token_time_ns", "last_token_time_ns", *ACCEPTANCE,
                "num_drafts")
# outputs only this model's own draft-target loop sends; never asked of the engine (TensorRT-LLM's has none)
OWN_OUTPUTS = ("num_drafts",)
PERF_COUNTERS = {"total_draft_tokens": "num_draft_tokens", "total_accepted_draft_tokens": "num_accepted_tokens",
                 "num_drafts": "num_drafts"}
# inputs of the speculative loop's engine calls, besides the token ids and lengths
LOOP_INPUTS = ("temperature", "top_k", "top_p", "random_seed", "seed", "repetition_penalty", "presence_penalty",
               "frequency_penalty")


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {key: value["string_value"] for key, value in config.get("parameters", {}).items()}
        self.target_model = params.get("tensorrt_llm_model_name") or "tensorrt_llm"
        self.draft_model = params.get("tensorrt_llm_draft_model_name") or None
        self.decoupled = bool(config.get("model_transaction_policy", {}).get("decoupled", False))
        self.inputs = {tensor["name"] for tensor in config.get("input", [])}
        self.outputs = [tensor["name"] for tensor in config.get("output", []) if tensor["name"] != "text_output"]
        self.engine_outputs = [name for name in self.outputs if name not in OWN_OUTPUTS]  # asked of the engine
        self.series = None
        if trtspec_series is not None:
            labels = {"model": args.get("model_name", "tensorrt_llm_bls"), "version": str(args.get("model_version", 1)),
                      "method": "draft_target" if self.draft_model else "engine"}
            self.series = trtspec_series.TritonSeries(pb_utils, labels)

    def finalize(self):
        if self.series is not None:
            self.series.close()

    def execute(self, requests):
        responses = []
        for request in requests:
            sender = request.get_response_sender() if self.decoupled else None
            started, reason = time.monotonic(), "abort"
            error = None
            try:
                answers = list(self._run(request)) if sender is None else self._run(request)
                for answer in answers:
                    if sender is not None:
                        sender.send(answer)
                    else:
                        responses.append(answer)
                reason = "length"
            except (ValueError, CallError, pb_utils.TritonModelException) as exc:
                code = (exc.code if isinstance(exc, CallError) else pb_utils.TritonError.INVALID_ARG
                        if isinstance(exc, ValueError) else pb_utils.TritonError.INTERNAL)
                message = f"tensorrt_llm_bls: {exc}"
                if code == pb_utils.TritonError.INVALID_ARG and not message.endswith(BAD_INPUT_TAG):
                    message = f"{message} {BAD_INPUT_TAG}"
                error = pb_utils.InferenceResponse(output_tensors=[],
                                                   error=pb_utils.TritonError(message, code))
            # An error is the request's final response and nothing follows it: a gRPC stream in triton_grpc_error
            # mode is closed by the error, and tritonserver 2.51 crashes on a later send to it.
            if sender is None:
                if error is not None:
                    responses.append(error)
            elif error is not None:
                sender.send(error, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            else:
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            if self.series is not None:
                self.series.finished(reason)
                self.series.observe("request_latency_seconds", time.monotonic() - started)
        return None if self.decoupled else responses

    def _run(self, request):
        """The responses of one request (a generator: streamed responses go out as they arrive)."""
        values = {}
        for name in self.inputs:
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            if tensor is not None:
                values[name] = tensor.as_numpy()

        def scalar(name, default):
            array = values.get(name)
            return default if array is None or array.size == 0 else array.reshape(-1)[0].item()

        batch = values["text_input"].shape[0]
        if int(scalar("max_tokens", 0)) < 1:
            raise ValueError(f"max_tokens must be >= 1, got {scalar('max_tokens', 0)}")
        k = int(scalar("num_draft_tokens", 0))
        stream, n = bool(scalar("stream", False)), int(scalar("num_return_sequences", 1))
        if bool(scalar("use_draft_logits", False)):
            raise ValueError("use_draft_logits=true is not supported: this BLS verifies draft tokens without the "
                             "draft logits; send false or leave it out")
        if k > 0:
            if self.draft_model is None:
                raise ValueError("num_draft_tokens > 0 but this deployment has no draft model "
                                 "(tensorrt_llm_draft_model_name is not set)")
            for what, bad in (("streaming", stream), ("batch size > 1", batch > 1), ("num_return_sequences > 1", n > 1),
                              ("return_log_probs", bool(scalar("return_log_probs", False)))):
                if bad:
                    raise ValueError(f"{what} is not supported with draft-target speculation (num_draft_tokens > 0)")
            yield self._speculate(values, scalar, k)
            return
        if not self.decoupled:
            for what, bad in (("stream=true", stream), (f"batch size {batch}", batch > 1),
                              (f"num_return_sequences={n}", n > 1)):
                if bad:
                    raise ValueError(f"{what} needs several responses, so this model must be decoupled (deploy with "
                                     "`trtspec deploy --decoupled`)")
        engine = self._preprocess(values, batch)
        for name in FORWARDED:
            if name in values:
                value = values[name]
                engine[RENAMED.get(name, name)] = value if name in TENSOR_INPUTS else value.reshape(batch, -1)
        asked_perf = bool(scalar("return_perf_metrics", False))
        counting = self.series is not None and "return_perf_metrics" in self.inputs
        if counting:  # the engine's perf outputs feed the series; the caller gets them only when it asked
            engine["return_perf_metrics"] = np.ones((batch, 1), dtype=np.bool_)
        totals, emitted = {}, 0
        prompt_len = engine["input_lengths"].reshape(-1)
        exclude = bool(scalar("exclude_input_in_output", False))
        for response in _exec_stream(self.target_model, engine, ["output_ids", "sequence_length",
                                                                 *self.engine_outputs]):
            if "output_ids" not in response:
                continue  # an engine response without tokens (a decoupled model's bare final flag)
            row = int(response["batch_index"].reshape(-1)[0]) if "batch_index" in response else 0
            length = int(response["sequence_length"].reshape(-1)[0])
            emitted += length if stream or exclude else length - int(prompt_len[min(row, len(prompt_len) - 1)])
            if counting:
                key = (row, int(response["sequence_index"].reshape(-1)[0]) if "sequence_index" in response else 0)
                _keep_totals(totals, key, response)
            texts = self._detokenize(response["output_ids"], response["sequence_length"])
            tensors = [pb_utils.Tensor("text_output", texts)]
            tensors += [pb_utils.Tensor(name, response[name]) for name in self.outputs if name in response
                        and (asked_perf or name not in PERF_OUTPUTS)]
            yield pb_utils.InferenceResponse(output_tensors=tensors)
        if self.series is not None:
            counts = {name: sum(t.get(key, 0) for t in totals.values()) for key, name in PERF_COUNTERS.items()}
            self.series.add({**counts, "num_emitted_tokens": emitted})

    def _preprocess(self, values, batch):
        """Engine inputs (token ids, word lists, bias, ids, lengths) from the preprocessing model."""
        inputs = [pb_utils.Tensor(pre, values[name] if name not in ("max_tokens", "end_id", "pad_id")
                                  else values[name].astype(np.int32).reshape(batch, 1))
                  for name, pre in TO_PREPROCESSING.items() if name in values]
        return {FROM_PREPROCESSING[name]: value
                for name, value in _exec(PREPROCESSING, inputs, list(FROM_PREPROCESSING)).items()}

    def _speculate(self, values, scalar, k):
        """Draft up to k, verify with the target, keep what it returns; repeat (see the module docstring)."""
        engine = self._preprocess(values, 1)
        prompt = [int(t) for t in engine["input_ids"][0, : int(engine["input_lengths"].reshape(-1)[0])]]
        stop_words = _words(engine["stop_words_list"])
        common = {name: engine[name] for name in ("end_id", "pad_id", "stop_words_list", "bad_words_list",
                                                  "embedding_bias")}
        for name in LOOP_INPUTS:
            if name in values:
                common[RENAMED.get(name, name)] = values[name].reshape(1, -1)
        limit = len(prompt) + int(scalar("max_tokens", 0))
        current, accepted, drafted, last = list(prompt), 0, 0, {}
        drafts, accepted_per_pos, rejections_per_pos = 0, [0] * k, [0] * k
        while len(current) < limit:
            budget = min(k, limit - len(current) - 1)
            draft = self._generate(self.draft_model, current, budget, common)[0] if budget > 0 else []
            new, last = self._generate(self.target_model, current, len(draft) + 1, common, draft_ids=draft)
            kept = _leading_matches(draft, new)  # the engine may go on past a rejection: compare, not count
            drafted += len(draft)
            accepted += kept
            if draft:
                drafts += 1
                for pos in range(kept):
                    accepted_per_pos[pos] += 1
                if kept < len(draft):
                    rejections_per_pos[kept] += 1
            if not new or new == draft:  # no progress, or the target stopped (end_id) right after the draft
                current += new
                break
            current += new
            if any(current[-len(word):] == list(word) for word in stop_words):
                break
        current = current[:limit]
        if self.series is not None:
            self.series.add({"num_drafts": drafts, "num_draft_tokens": drafted, "num_accepted_tokens": accepted,
                             "num_emitted_tokens": len(current) - len(prompt)},
                            {"num_accepted_tokens_per_pos": accepted_per_pos,
                             "num_rejections_per_pos": rejections_per_pos})
        shown = current[len(prompt):] if bool(scalar("exclude_input_in_output", False)) else current
        tokens = np.array(shown, dtype=np.int32).reshape(1, 1, -1)
        tensors = [pb_utils.Tensor("text_output", self._detokenize(tokens, np.array([[len(shown)]], np.int32)))]
        if bool(scalar("return_perf_metrics", False)):
            counters = {"acceptance_rate": np.array([[accepted / drafted if drafted else 0.0]], dtype=np.float32),
                        "total_accepted_draft_tokens": np.array([[accepted]], dtype=np.int32),
                        "total_draft_tokens": np.array([[drafted]], dtype=np.int32),
                        "num_drafts": np.array([[drafts]], dtype=np.int32)}  # sent where the config declares it
            perf = {**{name: last[name] for name in self.outputs if name in last}, **counters}
            tensors += [pb_utils.Tensor(name, perf[name]) for name in self.outputs if name in perf]
        return pb_utils.InferenceResponse(output_tensors=tensors)

    def _generate(self, model, input_ids, output_len, common, draft_ids=None):
        """One engine request for batch 1, not streamed: (the tokens after `input_ids`, the last response's outputs)."""
        inputs = {**common, "input_ids": np.array([input_ids], dtype=np.int32),
                  "input_lengths": np.array([[len(input_ids)]], dtype=np.int32),
                  "request_output_len": np.array([[output_len]], dtype=np.int32),
                  "exclude_input_in_output": np.array([[True]], dtype=np.bool_)}
        if "return_perf_metrics" in self.inputs:  # the release has it (0.18.0 has none): so has its tensorrt_llm
            inputs["return_perf_metrics"] = np.array([[True]], dtype=np.bool_)
        if draft_ids:
            inputs["draft_input_ids"] = np.array([draft_ids], dtype=np.int32)  # [1, k]
        tokens, last = [], {}
        for response in _exec_stream(model, inputs, ["output_ids", "sequence_length", *self.engine_outputs]):
            if "output_ids" in response:
                length = int(response["sequence_length"].reshape(-1)[0])
                tokens += [int(t) for t in response["output_ids"].reshape(-1)[:length]]  # [1, beam, len]
                last = response
        return tokens, last

    def _detokenize(self, tokens, lengths):
        """text_output, 1-D: the text of each beam of `tokens` [1, beam, len] from the postprocessing model."""
        out = _exec(POSTPROCESSING, [pb_utils.Tensor("TOKENS_BATCH", tokens.astype(np.int32)),
                                     pb_utils.Tensor("SEQUENCE_LENGTH", lengths.astype(np.int32))], ["OUTPUT"])
        return out["OUTPUT"].reshape(-1).astype(object)


def _leading_matches(draft, tokens):
    """Draft tokens the target kept: the leading ones its own tokens repeat (a rejected position gets the target's
    recovered token, never the draft's, so the first difference is the first rejection)."""
    kept = 0
    for proposed, verified in zip(draft, tokens):
        if proposed != verified:
            break
        kept += 1
    return kept


def _keep_totals(totals, key, response):
    """Remember the acceptance totals of one (batch row, sequence): each response carries its request's totals so
    far (0 until the final one on the torch flavour), so the largest seen is the request's."""
    seen = totals.setdefault(key, {})
    for name in PERF_COUNTERS:
        if name in response:
            seen[name] = max(seen.get(name, 0), int(response[name].reshape(-1)[0]))


class CallError(Exception):
    """A model this one called answered with an error: its message and its Triton error code."""

    def __init__(self, message, code):
        super().__init__(message)
        self.code = code


def _raise_error(model, response):
    """Raise the error of `model`'s response as a CallError with the same code (bad input stays INVALID_ARG)."""
    error = response.error()
    message = error.message()
    # a tagged message is bad input whatever code arrived (2.51's Python backend drops the code of a BLS response)
    code = pb_utils.TritonError.INVALID_ARG if message.endswith(BAD_INPUT_TAG) else error.code()
    raise CallError(message if message.startswith(f"{model}: ") else f"{model}: {message}", code)


def _words(word_list):
    """Token sequences of batch row 0 of a [batch, 2, len] word-list tensor (ids, end offsets padded with -1)."""
    if word_list.ndim != 3 or word_list.shape[2] == 0:
        return []
    ids, words, start = word_list[0, 0].tolist(), [], 0
    for end in word_list[0, 1].tolist():
        if end < 0:
            break
        words.append(ids[start:end])
        start = end
    return words


def _exec(model, inputs, names):
    """One request to a non-decoupled model of this repository; its outputs `names` as arrays."""
    response = pb_utils.InferenceRequest(model_name=model, requested_output_names=names, inputs=inputs).exec()
    if response.has_error():
        _raise_error(model, response)
    return {name: pb_utils.get_output_tensor_by_name(response, name).as_numpy() for name in names}


def _exec_stream(model, inputs, names):
    """One request to an engine model, decoupled or not: yields each response's outputs (name -> array)."""
    request = pb_utils.InferenceRequest(model_name=model, requested_output_names=names,
                                        inputs=[pb_utils.Tensor(name, value) for name, value in inputs.items()])
    for response in request.exec(decoupled=True):  # works for both policies; responses arrive as they are sent
        if response.has_error():
            _raise_error(model, response)
        found = {name: pb_utils.get_output_tensor_by_name(response, name) for name in names}
        yield {name: tensor.as_numpy() for name, tensor in found.items() if tensor is not None}
