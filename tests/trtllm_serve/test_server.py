"""`trtspec serve --trtllm-serve` as a user runs it, with the embedded pair (draft_target), on CPU: one server for the
module, started through the CLI (supervised child), stopped by SIGTERM in the last test (or by the fixture when a test
fails first).

NVIDIA's `openai` client against completions and chat, streamed and not: the greedy text equals the in-process
target's own (SpecEngine.generate, plain decoding); a stop string ends the text before it. `/metrics` drains (a second
GET has only the iterations since the first), keeps at most --iter-stats-max-iterations (the newest), and its summed
numDraftTokens / numAcceptedTokens / numRequestsWithDraftTokens equal the increments of `/trtspec/metrics`'
counters over the same traffic. Bad requests (n=2, a negative max_tokens, invalid JSON, a model that is not a string)
get 400 naming the field while the server keeps serving, and any model name is served and answered back (as
trtllm-serve does); a client that goes away mid-stream cancels its request; SIGTERM ends `trtspec serve` with no
process left.
"""

from __future__ import annotations

import json
import signal
import socket
import time
import urllib.request
from collections.abc import Iterator

import pytest

from tests.processes import alive, descendants
from tests.tiers import starts_processes
from tests.trtllm_serve.serving import Served, serving

MAX_ITERATIONS = 8  # --iter-stats-max-iterations: small, so one long request overflows it
MAX_TOKENS = 24
PROMPTS = ["def fib(n):", "import os", "for i in range(3):"]


@pytest.fixture(scope="module")
@starts_processes
def server() -> Iterator[Served]:
    with serving("--iter-stats-max-iterations", str(MAX_ITERATIONS)) as served:
        yield served


@pytest.fixture(scope="module")
def client(server):
    from openai import OpenAI

    return OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def greedy():
    """The target's own greedy text: the reference engine in this process, plain decoding."""
    import torch

    from trtspec.spec.engine import SpecEngine
    from trtspec.spec.params import SamplingParams, SpecParams

    torch.set_num_threads(1)
    engine = SpecEngine.from_pretrained("tiny")
    outputs = engine.generate([engine.encode(p) for p in PROMPTS], SamplingParams(temperature=0.0,
                              max_new_tokens=MAX_TOKENS), SpecParams(method="none"))
    return {p: o for p, o in zip(PROMPTS, outputs, strict=True)} | {"engine": engine}


def test_completions_and_chat_streamed_or_not_equal_the_targets_greedy_text(client, greedy):
    for prompt in PROMPTS:
        want = greedy[prompt].text
        done = client.completions.create(model="tiny", prompt=prompt, max_tokens=MAX_TOKENS, temperature=0)
        assert done.choices[0].text == want and done.choices[0].finish_reason in ("length", "stop")
        assert done.usage.prompt_tokens == len(greedy[prompt].prompt_token_ids)
        assert done.usage.completion_tokens == len(greedy[prompt].token_ids)
    prompt = PROMPTS[0]
    chunks = list(client.completions.create(model="tiny", prompt=prompt, max_tokens=MAX_TOKENS, temperature=0,
                                            stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == greedy[prompt].text
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == len(greedy[prompt].token_ids)
    chat = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": prompt}],
                                          max_tokens=MAX_TOKENS, temperature=0)
    assert chat.choices[0].message.content == greedy[prompt].text and chat.choices[0].message.role == "assistant"
    stream = list(client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": prompt}],
                                                 max_completion_tokens=MAX_TOKENS, temperature=0, stream=True))
    assert stream[0].choices[0].delta.role == "assistant" and stream[-1].choices[0].finish_reason is not None
    assert "".join(c.choices[0].delta.content or "" for c in stream) == greedy[prompt].text
    assert all(c.usage is None for c in stream)  # no stream_options: no usage chunk


def test_a_stop_string_ends_the_text_before_it(client, greedy):
    engine, out = greedy["engine"], greedy[PROMPTS[1]]
    words = [engine.decode([t]) for t in out.token_ids]
    pick = next((i for i, w in enumerate(words) if i >= 3 and w.strip() and engine.tokenizer.encode(
        w, add_special_tokens=False) == [out.token_ids[i]]), None)
    if pick is None:
        pytest.skip("no generated token round-trips through the tokenizer on its own")
    stop = words[pick]
    want = out.text[: out.text.index(stop)]
    for stream in (False, True):
        reply = client.completions.create(model="tiny", prompt=PROMPTS[1], max_tokens=MAX_TOKENS, temperature=0,
                                          stop=[stop], stream=stream)
        chunks = list(reply) if stream else [reply]
        assert "".join(c.choices[0].text for c in chunks) == want
        assert chunks[-1].choices[0].finish_reason == "stop"


def _spec_sums(rows: list[dict]) -> dict[str, int]:
    keys = ("numDraftTokens", "numAcceptedTokens", "numRequestsWithDraftTokens")
    return {k: sum(int((r.get("specDecodingStats") or {}).get(k, 0)) for r in rows) for k in keys}


def test_metrics_drain_and_add_up_to_the_prometheus_counters(server, client):
    server.iterations()  # drain what earlier tests left
    assert server.iterations() == []  # nothing ran since: a second GET has nothing
    before, rows = server.counters(), []
    for prompt in PROMPTS:  # each request runs fewer steps than the bound; a GET after each never drops one
        client.completions.create(model="tiny", prompt=prompt, max_tokens=MAX_ITERATIONS - 2, temperature=0)
        got = server.iterations()
        assert got and all(r["iter"] > max((x["iter"] for x in rows), default=-1) for r in got)  # only new ones
        rows += got
    after = server.counters()
    sums = _spec_sums(rows)
    assert sums["numDraftTokens"] > 0
    assert sums == {"numDraftTokens": after["num_draft_tokens"] - before["num_draft_tokens"],
                    "numAcceptedTokens": after["num_accepted_tokens"] - before["num_accepted_tokens"],
                    "numRequestsWithDraftTokens": after["num_drafts"] - before["num_drafts"]}


def test_metrics_keep_the_newest_iterations_up_to_the_bound(server, client):
    server.iterations()
    client.completions.create(model="tiny", prompt=PROMPTS[2], max_tokens=8 * MAX_ITERATIONS, temperature=0,
                              extra_body={"ignore_eos": True})  # at most k + 1 = 5 tokens a step: > 8 steps
    rows = server.iterations()
    numbers = [r["iter"] for r in rows]
    assert len(rows) == MAX_ITERATIONS and numbers == list(range(numbers[0], numbers[0] + MAX_ITERATIONS))
    client.completions.create(model="tiny", prompt=PROMPTS[2], max_tokens=2, temperature=0)
    assert min(r["iter"] for r in server.iterations()) > numbers[-1]


def test_bad_requests_get_400_naming_the_field_and_the_server_keeps_serving(server, client):
    import openai

    cases = [({"n": 2}, "n"), ({"max_tokens": -1}, "max_tokens")]
    for extra, field in cases:
        body = {"model": "tiny", "prompt": "def f():", **extra}
        with pytest.raises(openai.BadRequestError) as info:
            client.completions.create(**body)
        assert info.value.status_code == 400 and info.value.body["param"] == field, info.value.body
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model="tiny", prompt="def f():", extra_body={"model": 7})
    assert info.value.body["param"] == "model"
    other = client.completions.create(model="gpt-4", prompt="def f():", max_tokens=2)  # trtllm-serve answers any name
    assert other.model == "gpt-4" and other.usage.completion_tokens == 2
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "x"}], n=2)
    assert info.value.body["param"] == "n"
    request = urllib.request.Request(server.url + "/v1/completions", data=b'{"model": "tiny", "prompt": ',
                                     headers={"Content-Type": "application/json"}, method="POST")
    with pytest.raises(urllib.error.HTTPError) as http:
        urllib.request.urlopen(request, timeout=30)
    error = json.loads(http.value.read())
    assert http.value.code == 400 and error["param"] == "body" and "not valid JSON" in error["message"]
    assert client.completions.create(model="tiny", prompt="x", max_tokens=2).choices[0].finish_reason
    assert json.loads(server.get("/v1/models"))["data"][0]["id"] == "tiny"
    assert json.loads(server.get("/version"))["version"] == "1.2.1"


def test_a_client_that_goes_away_cancels_its_request(server):
    before = server.counters().get("requests:abort", 0)
    host, port = server.url.removeprefix("http://").split(":")
    body = json.dumps({"model": "tiny", "prompt": "def f():", "max_tokens": 400, "stream": True,
                       "ignore_eos": True, "temperature": 0}).encode()
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        received = b""
        while b"data: " not in received:  # streaming has begun
            chunk = sock.recv(65536)
            assert chunk, received
            received += chunk
    deadline = time.monotonic() + 20
    while server.counters().get("requests:abort", 0) == before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert server.counters().get("requests:abort", 0) == before + 1


def test_sigterm_stops_serve_and_leaves_no_process(server):
    below = descendants(server.proc.pid)
    assert len(below) == 2  # the supervisor and the server
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(timeout=30) == 0
    assert "trtllm-serve stopped." in server.proc.stdout.read()
    deadline = time.monotonic() + 10
    while any(alive(p) for p in below) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(p) for p in below)
