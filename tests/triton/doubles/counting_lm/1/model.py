"""Test double: next token = 3 + (previous - 2) % 47 (the character tokenizer's letters and digits, cycling).

As the target (parameter role=target) it verifies `draft_input_ids` greedily (keeps the longest prefix that
matches its own next tokens) and adds one token; as the draft (role=draft) it makes every third token wrong.
Like tensorrt_llm, output_ids and sequence_length include the prompt unless exclude_input_in_output is set.
Decoupled or not, as its config says. Parameters for client tests: delay_s (sleep before answering) and cancel_log
(a file that gets a line per request found cancelled after the sleep; that request gets no output); input_log (a
file that gets one JSON line per request: the names and values of the one-element inputs it received); error (a
message every request is answered with, as a Triton error of code error_code: a pb_utils.TritonError code name,
INTERNAL by default; an INVALID_ARG message carries trtspec.errors.BAD_INPUT_TAG, as trtspec's models do).
With return_perf_metrics set, the target reports its own acceptance counters for the draft it verified.
"""

import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


def following(token):
    return 3 + (token - 2) % 47


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {key: value.get("string_value", "") for key, value in config.get("parameters", {}).items()}
        self.role = params.get("role", "target")
        self.delay_s = float(params.get("delay_s") or 0)
        self.cancel_log = params.get("cancel_log")
        self.input_log = params.get("input_log")
        self.error = params.get("error")
        self.error_code = getattr(pb_utils.TritonError, params.get("error_code") or "INTERNAL")
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)

    def execute(self, requests):
        responses = []
        for request in requests:
            def get(name, request=request):
                tensor = pb_utils.get_input_tensor_by_name(request, name)
                return None if tensor is None else tensor.as_numpy()

            if self.delay_s:
                time.sleep(self.delay_s)
                sender = request.get_response_sender() if self.decoupled else None
                if sender is not None and sender.is_cancelled():
                    if self.cancel_log:
                        with open(self.cancel_log, "a") as log:
                            log.write("cancelled\n")
                    sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                    continue
            if self.error:
                bad_input = self.error_code == pb_utils.TritonError.INVALID_ARG  # tagged as trtspec's models do
                message = f"{self.error} [INVALID_ARG]" if bad_input else self.error
                response = pb_utils.InferenceResponse(error=pb_utils.TritonError(message, self.error_code))
                if self.decoupled:
                    request.get_response_sender().send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                else:
                    responses.append(response)
                continue
            if self.input_log:
                scalars = {t.name(): t.as_numpy().reshape(-1)[0].item() for t in request.inputs()
                           if t.as_numpy().size == 1}
                with open(self.input_log, "a") as log:
                    log.write(json.dumps(scalars) + "\n")
            length = int(get("input_lengths").reshape(-1)[0])
            ids = [int(t) for t in get("input_ids").reshape(-1)[:length]]
            wanted = int(get("request_output_len").reshape(-1)[0])
            draft = get("draft_input_ids")
            out, last, drafted, accepted = [], ids[-1], 0, 0
            if draft is not None and self.role == "target":
                drafted = draft.size
                for token in [int(t) for t in draft.reshape(-1)]:
                    if token != following(last) or len(out) >= wanted - 1:
                        break
                    out.append(token)
                    last = token
                accepted = len(out)
                out.append(following(last))
            else:
                for i in range(wanted):
                    token = following(last) + (1 if self.role == "draft" and i % 3 == 2 else 0)
                    out.append(token)
                    last = token
            exclude = get("exclude_input_in_output")
            if exclude is None or not bool(exclude.reshape(-1)[0]):
                out = ids + out
            tensors = [pb_utils.Tensor("output_ids", np.array(out, dtype=np.int32).reshape(1, 1, -1)),
                       pb_utils.Tensor("sequence_length", np.array([[len(out)]], dtype=np.int32))]
            perf = get("return_perf_metrics")
            if perf is not None and bool(perf.reshape(-1)[0]):
                tensors += [
                    pb_utils.Tensor("acceptance_rate", np.array([[accepted / drafted if drafted else 0.0]], np.float32)),
                    pb_utils.Tensor("total_accepted_draft_tokens", np.array([[accepted]], dtype=np.int32)),
                    pb_utils.Tensor("total_draft_tokens", np.array([[drafted]], dtype=np.int32))]
            response = pb_utils.InferenceResponse(output_tensors=tensors)
            if self.decoupled:  # as the tensorrt_llm model in a streaming-capable deployment
                request.get_response_sender().send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            else:
                responses.append(response)
        return None if self.decoupled else responses
