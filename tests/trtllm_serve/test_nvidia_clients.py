"""NVIDIA's own documented trtllm-serve requests (TensorRT-LLM 1.2.1's examples/serve clients and the trtllm-serve
docs), sent verbatim to `trtspec serve --trtllm-serve` with the embedded pair (draft_target, k 4) on CPU.

The requests are facts with their sources in tests/data/trtllm_serve_nvidia_requests.json (no NVIDIA code here): the
curl scripts' bodies are POSTed byte for byte with their header, the OpenAI-client scripts' arguments go through the
`openai` package as the scripts call it (their api_key, their model name `TinyLlama-1.1B-Chat-v1.0`); only the
documented http://localhost:8000 is replaced by the test server's URL. Each answer has trtllm-serve's shape (the
request's model name answered back, as trtllm-serve's post-processors do), a greedy request (temperature 0) the
target's own greedy text computed in this process, and the docs' `GET /metrics` the iterations of that traffic.
docs/trtllm-serve.md ("NVIDIA's clients, unmodified") records the run of the unmodified scripts.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.tiers import starts_processes
from tests.trtllm_serve.serving import Served, serving

DATA = json.loads((Path(__file__).resolve().parents[1] / "data" / "trtllm_serve_nvidia_requests.json").read_text())
REQUESTS = {r["id"]: r for r in DATA["requests"]}
DOCUMENTED_MODEL = "TinyLlama-1.1B-Chat-v1.0"


@pytest.fixture(scope="module")
@starts_processes
def server() -> Iterator[Served]:
    with serving() as served:
        yield served


@pytest.fixture(scope="module")
def engine():
    """The reference engine in this process: the target's own greedy text (plain decoding)."""
    import torch

    from trtspec.spec.engine import SpecEngine

    torch.set_num_threads(1)
    return SpecEngine.from_pretrained("tiny")


def greedy(engine, prompt_ids: list[int], max_tokens: int):
    from trtspec.spec.params import SamplingParams, SpecParams

    (out,) = engine.generate([prompt_ids], SamplingParams(temperature=0.0, max_new_tokens=max_tokens),
                             SpecParams(method="none"))
    return out


def prompt_ids(engine, kind: str, body: dict) -> list[int]:
    """The prompt as the server tokenizes it: a completion's text, or chat messages rendered by trtspec/chat.py."""
    from trtspec.chat import chat_text

    text = body["prompt"] if kind == "completions" else chat_text(body["messages"], engine.tokenizer)
    return engine.encode(text)


def send(server: Served, request: dict) -> tuple[int, object]:
    """A curl request as the script sends it: its method, header and body bytes, to the server's URL."""
    data = None if request["body_text"] is None else request["body_text"].encode()
    http = urllib.request.Request(server.url + request["path"], data=data, headers=request["headers"],
                                  method=request["method"])
    try:
        with urllib.request.urlopen(http, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def check_shape(answer: dict, kind: str, max_tokens: int) -> None:
    """trtllm-serve's response: its object and id prefix, the request's model name, one choice, the usage."""
    obj, prefix = ("text_completion", "cmpl-") if kind == "completions" else ("chat.completion", "chatcmpl-")
    assert answer["object"] == obj and answer["id"].startswith(prefix) and isinstance(answer["created"], int)
    assert answer["model"] == DOCUMENTED_MODEL  # trtllm-serve answers with the request's model
    (choice,) = answer["choices"]
    assert choice["index"] == 0 and choice["finish_reason"] in ("length", "stop")
    if kind == "chat":
        assert choice["message"]["role"] == "assistant" and isinstance(choice["message"]["content"], str)
    else:
        assert isinstance(choice["text"], str)
    use = answer["usage"]
    assert 1 <= use["completion_tokens"] <= max_tokens and use["prompt_tokens"] > 0
    assert use["total_tokens"] == use["prompt_tokens"] + use["completion_tokens"]


@pytest.mark.parametrize("rid", ["curl_completion_client", "curl_chat_client"])
def test_the_curl_scripts_bodies_verbatim_answer_the_targets_greedy_text(server, engine, rid):
    request = REQUESTS[rid]
    body = json.loads(request["body_text"])
    assert body["temperature"] == 0 and request["greedy"] and body["model"] == DOCUMENTED_MODEL
    kind = "chat" if request["path"].endswith("/chat/completions") else "completions"
    status, answer = send(server, request)
    assert status == request["expect_status"] == 200, answer
    check_shape(answer, kind, body["max_tokens"])
    ids = prompt_ids(engine, kind, body)
    want = greedy(engine, ids, body["max_tokens"])
    choice = answer["choices"][0]
    assert (choice["message"]["content"] if kind == "chat" else choice["text"]) == want.text
    assert answer["usage"]["prompt_tokens"] == len(ids) and answer["usage"]["completion_tokens"] == len(want.token_ids)


def test_the_placeholder_version_of_the_chat_script_is_not_json_and_gets_400(server):
    request = REQUESTS["curl_chat_client_placeholder"]
    status, error = send(server, request)
    assert status == request["expect_status"] == 400
    assert error["object"] == "error" and error["param"] == "body" and error["code"] == 400


@pytest.mark.parametrize("rid", ["openai_completion_client", "openai_chat_client"])
def test_the_openai_client_scripts_calls_are_answered(server, rid):
    from openai import OpenAI

    request = REQUESTS[rid]
    client = OpenAI(base_url=server.url + request["base_path"], api_key=request["api_key"])  # as the script
    create = client.completions.create if request["call"] == "completions.create" else client.chat.completions.create
    response = create(**request["body"])  # sampled (temperature unset: 1.0), so the shape is what is checked
    kind = "completions" if request["call"] == "completions.create" else "chat"
    check_shape(response.model_dump(), kind, request["body"]["max_tokens"])


def test_the_docs_metrics_request_drains_the_iterations_of_that_traffic(server):
    send(server, REQUESTS["curl_completion_client"])
    status, rows = send(server, REQUESTS["docs_metrics"])
    assert status == 200 and rows, rows
    assert all({"iter", "iterLatencyMS", "numActiveRequests", "specDecodingStats"} <= set(row) for row in rows)
    assert sum(row["specDecodingStats"]["numDraftTokens"] for row in rows) > 0  # draft_target k=4 ran
    assert send(server, REQUESTS["docs_metrics"]) == (200, [])  # each GET drains them, as the docs say
