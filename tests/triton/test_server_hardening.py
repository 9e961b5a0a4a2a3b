"""A real tritonserver (CPU) serving the torch-flavour repository of the embedded pair, asked with hostile requests:
an over-long prompt or word list is refused before it is tokenized (fast, naming QUERY / the word input and the
limit), non-finite sampling values are refused naming the input, and the server keeps serving good requests.

Error codes end to end: a request the served models refuse is Triton's INVALID_ARG, so `trtspec generate --url`
exits 2 with the server's message on one line (unary or streamed, through the ensemble, the engine model or the
BLS's own checks), NVIDIA's clients still read the message (a plain gRPC stream; HTTP 400), and a model that fails
(`tensorrt_llm_failing`, the counting double answering every request with an INTERNAL error) makes it exit 1."""

from __future__ import annotations

import queue
import time

import numpy as np
import pytest

from tests.cli_checks import assert_clean_failure, run_cli
from tests.triton.helpers import STANDARD_ENGINE
from tests.triton.nvidia_requests import http_generate, stream_responses, text_request

pytestmark = pytest.mark.triton
MAX_INPUT = STANDARD_ENGINE["max_input_len"]
MAX_K = STANDARD_ENGINE["max_k"]
TOO_LONG = "request_output_len=1000 must be in [1, max_output_len={}]".format(STANDARD_ENGINE["max_output_len"])


@pytest.fixture(scope="module")
def server(standard_server):
    """The standard deployment's server (tests/triton/conftest.py), with `tensorrt_llm_failing` beside its models."""
    return standard_server


def good(server) -> None:
    results, errors = stream_responses(server.grpc_url, "ensemble", text_request("def add(a, b):", 4),
                                       ["text_output"], timeout=60)
    assert server.alive() and not errors and results


def first_error(server, tensors) -> tuple[str, float]:
    """The first error of a streamed ensemble request, and the seconds it took to come."""
    import tritonclient.grpc as grpcclient

    from tests.triton.nvidia_requests import _inputs

    got: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: got.put(error))
    try:
        start = time.monotonic()
        client.async_stream_infer("ensemble", _inputs(tensors))
        error = got.get(timeout=60)
        return str(error), time.monotonic() - start
    finally:
        client.stop_stream()
        client.close()


def outcome(server, tensors, model="tensorrt_llm") -> tuple[list[np.ndarray], str | None]:
    """(output_ids of each response, None) until the final response, or ([...], the first error) at once; a
    request without either within 60 s fails the test (queue.Empty)."""
    import tritonclient.grpc as grpcclient

    from tests.triton.nvidia_requests import _final, _inputs

    got: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: got.put((result, error)))
    outputs: list[np.ndarray] = []
    try:
        client.async_stream_infer(model, _inputs(tensors), enable_empty_final_response=True)
        while True:
            result, error = got.get(timeout=60)
            if error is not None:
                return outputs, str(error)
            if result.get_response().outputs:
                outputs.append(result.as_numpy("output_ids"))
            if _final(result):
                return outputs, None
    finally:
        client.stop_stream()
        client.close()


def test_megabyte_prompt_is_refused_before_tokenizing_and_the_server_keeps_serving(server):
    good(server)  # warm
    error, elapsed = first_error(server, text_request("a " * 500_000, 4))
    assert "QUERY has 1000000 bytes" in error and f"max_input_len {MAX_INPUT}" in error, error
    assert elapsed < 2.0, elapsed  # tokenizing it took ~0.6 s of CPU per request before the bound; now no tokenizing
    good(server)


@pytest.mark.parametrize("name", ["bad_words", "stop_words"])
def test_huge_word_lists_are_refused(server, name):
    many = np.array([[b"x"] * 2000], dtype=object)
    _, errors = stream_responses(server.grpc_url, "ensemble", text_request("x = 1", 4, **{name: many}),
                                 ["text_output"], timeout=60)
    assert errors and "WORDS_DICT has 2000 words in a row, more than 1024" in errors[0], errors
    long = np.array([[b"y" * 1_000_000]], dtype=object)
    _, errors = stream_responses(server.grpc_url, "ensemble", text_request("x = 1", 4, **{name: long}),
                                 ["text_output"], timeout=60)
    assert errors and "WORDS_DICT has 1000000 bytes in a row" in errors[0], errors
    good(server)


@pytest.mark.parametrize("name, value, message", [
    ("temperature", np.inf, "temperature=inf must be a finite number >= 0"),
    ("temperature", np.nan, "temperature=nan must be a finite number >= 0"),
    ("runtime_top_p", np.inf, "runtime_top_p=inf must be a finite number"),
])  # fmt: skip
def test_non_finite_sampling_inputs_are_refused_naming_the_input(server, name, value, message):
    from tests.triton.nvidia_requests import column, token_request

    ensemble_name = {"runtime_top_p": "top_p"}.get(name, name)
    request = text_request("x = 1", 4, **{ensemble_name: column(value, np.float32)})
    error, _ = first_error(server, request)
    assert message in error, error
    _, errors = stream_responses(server.grpc_url, "tensorrt_llm", token_request([5, 6, 7], 4, **{
        name: column(value, np.float32)}), ["output_ids"], timeout=60)
    assert errors and message in errors[0], errors
    good(server)


NAMES = ("input_ids", "input_lengths", "request_output_len", "beam_width", "temperature", "runtime_top_k",
         "runtime_top_p", "num_draft_tokens", "end_id")


def _tensor_strategy():
    from hypothesis import strategies as st

    dtypes = st.sampled_from([np.int32, np.int64, np.float32, np.bool_])
    values = st.sampled_from([0, 1, 3, -1, 2**31 - 1, -(2**31), np.inf, np.nan, 1000])
    shapes = st.sampled_from([(1, 1), (1, 3), (2, 1), (1,), (1, 1, 1)])
    return st.fixed_dictionaries({}, optional={name: st.tuples(dtypes, values, shapes) for name in NAMES})


def _build(mutations) -> dict[str, np.ndarray]:
    from tests.triton.nvidia_requests import token_request

    request = token_request([5, 6, 7], 4)
    for name, (dtype, value, shape) in mutations.items():
        if name == "input_ids" and shape == (1, 3):
            request[name] = np.array([[5, 6, value if np.isfinite(value) else 0]]).astype(dtype)
            continue
        with np.errstate(invalid="ignore", over="ignore"):
            request[name] = np.full(shape, value if np.isfinite(value) or dtype == np.float32 else 0).astype(dtype)
    return request


def test_random_bad_tensor_requests_are_answered_or_refused_naming_an_input(server):
    """NVIDIA's tensorrt_llm inputs with random wrong dtypes, shapes and values: every request ends (no hang) with
    either output ids or an error naming one of the inputs, and the server stays live."""
    from hypothesis import HealthCheck, given, settings

    @settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(mutations=_tensor_strategy())
    def check(mutations):
        request = _build(mutations)
        outputs, error = outcome(server, request)
        if error is not None:
            assert any(name in error for name in request), (mutations, error)
        else:
            assert outputs and outputs[-1].size > 0, mutations

    check()
    good(server)


@pytest.mark.parametrize("flags, message", [
    (["--max-new-tokens", "1000"], TOO_LONG),  # ensemble
    (["--max-new-tokens", "1000", "--stream"], TOO_LONG),
    (["--model", "tensorrt_llm", "--max-new-tokens", "1000"], "request_output_len=1000 must be in [1, max_output_len"),
    (["--model", "tensorrt_llm", "--k", "9", "--max-new-tokens", "4"], "num_draft_tokens (k)=9"),  # past max_k 6
    (["--model", "tensorrt_llm_bls", "--stream", "--k", "2"], "streaming is not supported with draft-target"),
])  # fmt: skip
def test_generate_url_exits_2_with_the_servers_message_for_a_request_it_refuses(server, flags, message):
    code, out, err = run_cli(["generate", "--url", server.grpc_url, *flags, "def add(a, b):"], limit=120)
    assert code == 2, (code, out, err)
    assert_clean_failure(code, err, frozenset({2}))
    assert message in err and "bad input" in err, err
    good(server)


@pytest.mark.parametrize("stream", [False, True])
def test_generate_url_exits_1_when_the_model_fails(server, stream):
    argv = ["generate", "--url", server.grpc_url, "--model", "tensorrt_llm_failing", "--max-new-tokens", "4"]
    code, out, err = run_cli([*argv, *(["--stream"] if stream else []), "def add(a, b):"], limit=120)
    assert code == 1, (code, out, err)
    assert_clean_failure(code, err, frozenset({1}))
    assert "tensorrt_llm_failing: the engine failed" in err and "bad input" not in err, err
    good(server)


def test_nvidias_clients_still_read_the_message_of_a_refused_request(server):
    """end_to_end_grpc_client.py reads the error of a plain stream; the HTTP generate endpoint answers 400."""
    _, errors = stream_responses(server.grpc_url, "ensemble", text_request("x = 1", 1000), ["text_output"], timeout=60)
    assert errors and TOO_LONG in errors[0], errors
    (answer,) = http_generate(server.http_url, "ensemble", {"text_input": "x = 1", "max_tokens": 1000})
    assert answer["status"] == 400 and "request_output_len=1000" in answer["error"], answer
    good(server)
