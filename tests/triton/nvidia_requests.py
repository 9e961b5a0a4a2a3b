"""Requests shaped like the ones NVIDIA's tensorrtllm_backend clients send (inflight_batcher_llm/client/*.py at
v0.19.0), written for these tests: the tensors, dtypes and [batch, 1] shapes those clients use, sent with plain
tritonclient over gRPC (a stream, as end_to_end_grpc_client.py always does, or a unary call) and HTTP.

`stream_responses` returns every response of one request (and its errors) until the final flag; `unary` returns
the one response of a unary call.
"""

from __future__ import annotations

import json
import queue
import threading
import urllib.error
import urllib.request
from typing import Any

import numpy as np

DTYPES = {np.dtype(np.int32): "INT32", np.dtype(np.float32): "FP32", np.dtype(np.bool_): "BOOL",
          np.dtype(np.uint64): "UINT64", np.dtype(np.int64): "INT64", np.dtype(object): "BYTES",
          np.dtype(np.float16): "FP16"}


def column(value: Any, dtype: Any) -> np.ndarray:
    """A [1, 1] tensor, as the clients send every scalar."""
    return np.array([[value]], dtype=dtype)


def text_request(prompt: str | list[str], max_tokens: int, **extra: np.ndarray) -> dict[str, np.ndarray]:
    """end_to_end_grpc_client.py's tensors for `ensemble`/`tensorrt_llm_bls`: text_input, max_tokens, stream,
    beam_width, temperature and exclude_input_in_output always; the rest as given. A list of prompts is one request
    with one row per prompt (its --batch-inputs)."""
    prompts = [prompt] if isinstance(prompt, str) else prompt
    rows = len(prompts)
    base = {"text_input": np.array([[p.encode()] for p in prompts], dtype=object),
            "max_tokens": np.full((rows, 1), max_tokens, dtype=np.int32),
            "stream": np.zeros((rows, 1), dtype=bool), "beam_width": np.ones((rows, 1), dtype=np.int32),
            "temperature": np.ones((rows, 1), dtype=np.float32),
            "exclude_input_in_output": np.zeros((rows, 1), dtype=bool)}
    return {**base, **{k: np.broadcast_to(v, (rows, *np.shape(v)[1:])).copy() if np.ndim(v) == 2 else v
                       for k, v in extra.items()}}


def token_request(ids: list[int], output_len: int, **extra: np.ndarray) -> dict[str, np.ndarray]:
    """inflight_batcher_llm_client.py's / e2e_grpc_speculative_decoding_client.py's tensors for `tensorrt_llm`."""
    return {"input_ids": np.array([ids], dtype=np.int32), "input_lengths": column(len(ids), np.int32),
            "request_output_len": column(output_len, np.int32), "beam_width": column(1, np.int32), **extra}


def _inputs(tensors: dict[str, np.ndarray]) -> list[Any]:
    import tritonclient.grpc as grpcclient

    out = []
    for name, array in tensors.items():
        array = np.asarray(array)
        tensor = grpcclient.InferInput(name, list(array.shape), DTYPES[array.dtype])
        tensor.set_data_from_numpy(array)
        out.append(tensor)
    return out


def stream_responses(url: str, model: str, tensors: dict[str, np.ndarray], outputs: list[str] | None = None,
                     request_id: str = "", timeout: float = 120) -> tuple[list[Any], list[str]]:
    """(results, error messages) of one request on a gRPC stream, until its final response (after an error, which
    carries no final flag: until the server has ended the stream)."""
    import tritonclient.grpc as grpcclient

    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    requested = None if outputs is None else [grpcclient.InferRequestedOutput(n) for n in outputs]
    client.async_stream_infer(model, _inputs(tensors), outputs=requested, request_id=request_id,
                              enable_empty_final_response=True)
    got, errors = [], []
    closing = None
    try:
        while True:
            item = results.get(timeout=timeout)
            if item is CLOSED:
                return got, errors
            result, error = item
            if error is not None:
                errors.append(str(error))
                if closing is None:  # an error carries no final flag: close the stream, which returns once the
                    closing = _close_then_mark(client, results)  # server has sent all it will; keep reading
                continue
            if result.get_response().outputs:
                got.append(result)
            if _final(result):
                return got, errors
    finally:
        if closing is None:
            client.stop_stream()
        else:
            closing.join(timeout)
        client.close()


CLOSED = object()  # put on a stream's queue once the stream has ended


def _close_then_mark(client: Any, results: queue.Queue) -> threading.Thread:
    """Close `client`'s stream in a thread (tritonclient's stop_stream blocks until the server ends it, after every
    response of its requests), then put CLOSED on `results`, behind anything the server sent."""
    def close() -> None:
        client.stop_stream()
        results.put(CLOSED)

    thread = threading.Thread(target=close, daemon=True)
    thread.start()
    return thread


def _final(result: Any) -> bool:
    if result is None:
        return False
    final = result.get_response().parameters.get("triton_final_response")
    return final is not None and final.bool_param


def unary(url: str, model: str, tensors: dict[str, np.ndarray], outputs: list[str] | None = None) -> Any:
    """The one response of a unary gRPC infer (raises tritonclient's InferenceServerException on an error)."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url)
    try:
        requested = None if outputs is None else [grpcclient.InferRequestedOutput(n) for n in outputs]
        return client.infer(model, _inputs(tensors), outputs=requested)
    finally:
        client.close()


def http_generate(http_url: str, model: str, body: dict, *, stream: bool = False) -> list[dict]:
    """POST to the generate (or generate_stream) endpoint; the JSON object(s) it answers, or, when it answers with
    an HTTP error, [{"error": body, "status": code}]."""
    path = "generate_stream" if stream else "generate"
    request = urllib.request.Request(f"{http_url}/v2/models/{model}/{path}", data=json.dumps(body).encode(),
                                     method="POST")
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            text = response.read().decode()
    except urllib.error.HTTPError as exc:
        return [{"error": exc.read().decode(), "status": exc.code}]
    if not stream:
        return [json.loads(text)]
    return [json.loads(line[len("data: "):]) for line in text.splitlines() if line.startswith("data: ")]
