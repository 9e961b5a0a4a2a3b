"""TritonClient's tensor level (`infer`, `responses`) against a real tritonserver.

The served models are the counting test double (tests/triton/doubles/counting_lm) with tensorrt_llm's tensor names:
`counting_target` decoupled (answers through a stream), `counting_draft` not, and `counting_slow` decoupled and
3 s slow, to check the client's timeout and that it cancels the request it gives up on. `refusing_*` answer every
request with a bad-input error (INVALID_ARG) and `failing_*` with an internal one, through a stream and unary, to
check which error the client raises.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from tests.servers import running
from tests.triton.helpers import counting_model
from trtspec.errors import RequestError, ServerError, UsageError
from trtspec.triton.client import GENERATE_MODELS, TritonClient, declared_name, model_form
from trtspec.triton.render import RepoFile, write_repository

DOUBLES = Path(__file__).parent / "doubles"
SLOW_S = 3.0
pytestmark = pytest.mark.triton


def _model(name: str, *, decoupled: bool, **params: object) -> dict[str, RepoFile]:
    return counting_model(name, decoupled=decoupled, **params)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    path = tmp_path_factory.mktemp("client")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def server(base):
    plan = {**_model("counting_target", decoupled=True, role="target"),
            **_model("counting_draft", decoupled=False, role="draft"),
            **_model("counting_new", decoupled=False, role="target", input_log=base / "inputs.log", version="1.2.1"),
            **_model("counting_slow", decoupled=True, role="target", delay_s=SLOW_S,
                     cancel_log=base / "cancelled.log")}
    for kind, code in (("refusing", "INVALID_ARG"), ("failing", "INTERNAL")):
        for policy in ("stream", "unary"):
            plan |= _model(f"{kind}_{policy}", decoupled=policy == "stream", error=f"{kind} it", error_code=code)
    with running(write_repository(plan, base / "repo")) as srv:
        yield srv


def following(token: int) -> int:
    return 3 + (token - 2) % 47  # the double's next token


def counting(last: int, n: int) -> list[int]:
    out = []
    for _ in range(n):
        last = following(last)
        out.append(last)
    return out


def request(ids: list[int], n: int, **extra: np.ndarray) -> dict[str, np.ndarray]:
    return {"input_ids": np.array([ids], dtype=np.int32),  # [1, prompt_len]
            "input_lengths": np.array([[len(ids)]], dtype=np.int32),
            "request_output_len": np.array([[n]], dtype=np.int32), **extra}


@pytest.mark.parametrize("model", ["counting_target", "counting_draft"])
def test_infer_returns_named_outputs_from_decoupled_and_unary_models(server, model):
    prompt = [3, 10, 20]
    with TritonClient(server.grpc_url, model=model) as client:
        assert client.is_decoupled(model) is (model == "counting_target")
        out = client.infer(model, request(prompt, 5), ["output_ids", "sequence_length"])
        assert set(out) == {"output_ids", "sequence_length"}
        assert out["output_ids"].shape == (1, 1, 8) and out["output_ids"].dtype == np.int32  # [batch, beam, seq]
        assert int(out["sequence_length"].reshape(-1)[0]) == 8
        if model == "counting_target":
            assert out["output_ids"].reshape(-1).tolist() == prompt + counting(20, 5)
        else:  # the draft double makes every third token wrong (+1), continuing from it
            assert out["output_ids"].reshape(-1).tolist()[3:5] == counting(20, 2)
            assert out["output_ids"][0, 0, 5] == following(out["output_ids"][0, 0, 4]) + 1
        # one output asked for: only that one comes back; no names: every output the model sends
        only = client.infer(model, request(prompt, 2, exclude_input_in_output=np.array([[True]])), ["output_ids"])
        assert list(only) == ["output_ids"] and only["output_ids"].reshape(-1).tolist() == counting(20, 2)
        every = client.infer(model, request(prompt, 2))
        assert set(every) == {"output_ids", "sequence_length"}


def test_target_verifies_draft_input_ids_through_the_stream(server):
    with TritonClient(server.grpc_url, model="counting_target") as client:
        good = counting(20, 2)
        draft = np.array([[*good, 0]], dtype=np.int32)  # [1, 3]: the third is wrong
        out = client.infer("counting_target", request([3, 10, 20], 4, draft_input_ids=draft),
                           ["output_ids", "sequence_length"])
    assert out["output_ids"].reshape(-1).tolist() == [3, 10, 20, *counting(20, 3)]  # 2 accepted + 1 target token


def test_errors_name_the_model_and_timeout_cancels_the_request(server, base):
    with TritonClient(server.grpc_url, model="counting_target", timeout_s=1.0) as client:
        start = time.monotonic()
        with pytest.raises(ServerError, match=r"counting_slow: no final response within timeout_s=1 s") as exc:
            client.infer("counting_slow", request([3], 2), ["output_ids"])
        assert time.monotonic() - start < SLOW_S  # the client gave up at its timeout, not when the server answered
        assert "timeout" in exc.value.hint
        # the server is told: the double finds the request cancelled once its sleep ends
        log = base / "cancelled.log"
        deadline = time.monotonic() + 3 * SLOW_S
        while not log.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert log.read_text().splitlines() == ["cancelled"]
        # and the client still works
        out = client.infer("counting_target", request([5], 3), ["output_ids"])
    assert out["output_ids"].reshape(-1).tolist() == [5, *counting(5, 3)]


@pytest.mark.parametrize("policy", ["stream", "unary"])
def test_a_refused_request_is_a_request_error_and_a_failed_one_a_server_error(server, policy):
    """The served model's error code decides: INVALID_ARG (bad input) -> RequestError (exit 2) with the server's
    message, anything else -> ServerError (exit 1); over a gRPC stream as over a unary call."""
    with TritonClient(server.grpc_url, model="counting_target") as client:
        with pytest.raises(RequestError, match=f"^refusing_{policy}: refusing it$") as exc:
            client.infer(f"refusing_{policy}", request([3], 2), ["output_ids"])
        assert exc.value.exit_code == 2 and "bad input" in exc.value.hint
        with pytest.raises(ServerError, match=f"^failing_{policy}: failing it$") as exc:
            client.infer(f"failing_{policy}", request([3], 2), ["output_ids"])
        assert exc.value.exit_code == 1
        assert client.infer("counting_target", request([5], 1), ["output_ids"])["output_ids"].size  # still serving


@pytest.mark.parametrize("model", ["counting_target", "counting_draft"])
def test_inputs_the_model_cannot_take_are_request_errors_naming_the_input(server, model):
    """Checked against the model's config before sending (a stream would carry Triton's refusal without a code)."""
    with TritonClient(server.grpc_url, model=model) as client:
        with pytest.raises(RequestError, match=f"{model}: required input.* input_lengths"):
            client.infer(model, {"input_ids": np.array([[3]], dtype=np.int32),
                                 "request_output_len": np.array([[2]], dtype=np.int32)}, ["output_ids"])
        with pytest.raises(RequestError, match=f"{model}: input 'input_ids' is numpy int64 \\(INT64\\); the model "
                                               "takes INT32"):
            client.infer(model, {**request([3], 2), "input_ids": np.array([[3]], dtype=np.int64)}, ["output_ids"])
        with pytest.raises(RequestError, match=f"{model}: 'nope' is not one of its inputs"):
            client.infer(model, {**request([3], 2), "nope": np.array([[1]], dtype=np.int32)}, ["output_ids"])
    if model == "counting_draft":  # a shape Triton refuses: INVALID_ARGUMENT on a unary call
        with TritonClient(server.grpc_url, model=model) as client, pytest.raises(RequestError, match="input_ids"):
            client.infer(model, {**request([3], 2), "input_ids": np.array([[[3]]], dtype=np.int32)}, ["output_ids"])


def test_unknown_model_and_unreachable_server_are_server_errors(server):
    with pytest.raises(ServerError, match="cannot read model 'nope'") as exc:
        TritonClient(server.grpc_url, model="nope")
    assert "loaded" in exc.value.hint
    with TritonClient(server.grpc_url, model="counting_draft") as client:
        assert client.ready("counting_draft") and not client.ready("nope")
    with pytest.raises(ServerError, match="no Triton server answers") as exc:
        TritonClient("127.0.0.1:1", model="counting_draft", timeout_s=1.0)
    assert "trtspec serve" in exc.value.hint


def test_the_generating_model_is_the_first_served_of_ensemble_bls_tensorrt_llm(server, monkeypatch):
    """Without a model named, generate() asks the ensemble, else the BLS, else tensorrt_llm (the only model of an
    llmapi repository); a server with none of them is a UsageError naming what it serves."""
    assert GENERATE_MODELS == ("ensemble", "tensorrt_llm_bls", "tensorrt_llm")
    with TritonClient(server.grpc_url, model=None) as client:
        served = client.served_models()
        assert {"counting_target", "counting_draft"} <= set(served) and "ensemble" not in served
        with pytest.raises(UsageError, match="has none of ensemble, tensorrt_llm_bls, tensorrt_llm ready") as err:
            client.generating_model()
        assert "counting_target" in str(err.value) and "--model" in err.value.hint
        for ready, picked in ((["tensorrt_llm", "tensorrt_llm_bls", "ensemble", "preprocessing"], "ensemble"),
                              (["postprocessing", "tensorrt_llm", "tensorrt_llm_bls"], "tensorrt_llm_bls"),
                              (["tensorrt_llm", "tensorrt_llm_draft"], "tensorrt_llm")):
            monkeypatch.setattr(client, "served_models", lambda ready=ready: ready)
            assert client.generating_model() == picked


def test_the_form_of_a_model_comes_from_its_inputs():
    assert model_form({"text_input", "max_tokens", "bad_words", "stream"}) == "text"  # ensemble, BLS
    assert model_form({"input_ids", "input_lengths", "request_output_len"}) == "tokens"  # inflight tensorrt_llm
    assert model_form({"text_input", "streaming", "sampling_param_max_tokens"}) == "llmapi"
    assert model_form({"QUERY", "REQUEST_OUTPUT_LEN"}) is None


def test_the_llmapi_models_whole_text_so_far_becomes_chunks_of_new_text():
    """Each llmapi response carries the whole text so far; a chunk holds what it adds, a character still in
    progress (U+FFFD at the end) held back, and the completion is the last whole text."""
    from trtspec.triton.client import Completion

    client = TritonClient.__new__(TritonClient)
    client.form = "llmapi"
    texts = ["ab", "ab\ufffd", "ab\u00e9", "ab\u00e9c"]
    chunks = list(client._chunks({"text_output": np.array([t.encode()], dtype=object)} for t in texts))
    assert [c.text for c in chunks] == ["ab", "", "\u00e9", "c"]
    assert Completion.from_chunks(chunks).text == "ab\u00e9c"
    client.form = "text"  # the inflight text models send each response's new text
    chunks = list(client._chunks({"text_output": np.array([[t.encode()]], dtype=object)} for t in ("ab", "c")))
    assert Completion.from_chunks(chunks).text == "abc"


def test_declared_name_picks_the_spelling_the_model_declares():
    assert declared_name("seed", {"random_seed", "x"}) == "random_seed"
    assert declared_name("random_seed", {"seed"}) == "seed"
    assert declared_name("min_tokens", {"min_length"}) == "min_length"
    assert declared_name("seed", {"seed", "random_seed"}) == "seed"  # both declared: as given
    assert declared_name("seed", {"x"}) == "seed" and declared_name("top_k", {"runtime_top_k"}) == "top_k"


def test_renamed_inputs_are_sent_under_the_served_models_spelling(server, base):
    """0.19.0's random_seed/min_length reach a model that declares 1.2.1's seed/min_tokens, and the reverse."""
    log = base / "inputs.log"
    with TritonClient(server.grpc_url, model="counting_target") as client:
        extra = {"random_seed": np.array([[5]], dtype=np.uint64), "min_length": np.array([[1]], dtype=np.int32)}
        client.infer("counting_new", request([3], 2, **extra), ["output_ids"])
        assert json.loads(log.read_text().splitlines()[-1]).items() >= {"seed": 5, "min_tokens": 1}.items()
        out = client.infer("counting_target", request([3], 2, seed=np.array([[5]], dtype=np.uint64)), ["output_ids"])
    assert out["output_ids"].reshape(-1).tolist() == [3, *counting(3, 2)]  # without respelling Triton refuses `seed`


def test_a_stream_that_ended_is_closed_without_a_cancel(server, monkeypatch):
    """tritonserver 2.51 can crash (SIGSEGV) on a cancellation racing the completion of a stream's last response
    (reproduced under load with the CLI's refused requests; server#8078): the client cancels only what did not end."""
    import tritonclient.grpc as grpcclient

    stops: list[bool] = []  # what the client asked for (close() also calls stop_stream(), without an argument)
    original = grpcclient.InferenceServerClient.stop_stream

    def stop_stream(self, cancel_requests=None):
        if cancel_requests is not None:
            stops.append(cancel_requests)
        original(self, bool(cancel_requests))

    monkeypatch.setattr(grpcclient.InferenceServerClient, "stop_stream", stop_stream)
    with TritonClient(server.grpc_url, model="counting_target", timeout_s=30) as client:
        client.infer("counting_target", request([5], 3), ["output_ids"])  # the final response came
        with pytest.raises(RequestError):
            client.infer("refusing_stream", request([5], 3), ["output_ids"])  # the error ended the stream
    with TritonClient(server.grpc_url, model="counting_slow", timeout_s=0.5) as client:
        with pytest.raises(ServerError, match="no final response"):
            client.infer("counting_slow", request([5], 3), ["output_ids"])  # still running: cancelled
    assert stops == [False, False, True]


def test_the_stdlib_models_tag_bad_input_as_trtspec_does():
    """model_repo's stdlib-only models repeat trtspec.errors.BAD_INPUT_TAG: every copy is the one definition."""
    from trtspec.errors import BAD_INPUT_TAG

    root = Path(__file__).resolve().parents[2] / "model_repo"
    for model in ("preprocessing", "postprocessing", "tensorrt_llm_bls"):
        text = (root / model / "1" / "model.py").read_text()
        assert f"BAD_INPUT_TAG = {BAD_INPUT_TAG!r}".replace("'", '"') in text, model


def test_streams_do_not_ask_for_triton_grpc_error_mode(server, monkeypatch):
    """That mode ends a stream from inside the error's completion, which races and crashes tritonserver 2.51 under
    load (reproduced with the CLI's refused requests): the client must not ask for it, and still exits 2."""
    import tritonclient.grpc as grpcclient

    headers: list[object] = []
    original = grpcclient.InferenceServerClient.start_stream

    def start_stream(self, callback, stream_timeout=None, headers_=None, **kwargs):
        headers.append(kwargs.get("headers") or headers_)
        return original(self, callback, stream_timeout, **kwargs)

    monkeypatch.setattr(grpcclient.InferenceServerClient, "start_stream", start_stream)
    with TritonClient(server.grpc_url, model="refusing_stream", timeout_s=30) as client:
        with pytest.raises(RequestError, match="refusing_stream: refusing it$"):  # the tag is read, not shown
            client.infer("refusing_stream", request([5], 3), ["output_ids"])
    assert headers and all("triton_grpc_error" not in (h or {}) for h in headers)
