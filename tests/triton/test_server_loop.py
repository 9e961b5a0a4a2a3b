"""The one serving loop (spec.serving.EngineLoop) behind a real tritonserver: partial UTF-8 held back across streamed
responses, client cancellation reaching the engine, and drain on shutdown.

The model is a random Llama with a byte-fallback tokenizer: most of its vocabulary are single UTF-8 bytes of
multi-byte characters, so greedy output is full of characters that span several tokens, and with k = 0 every engine
step emits one token: without the hold-back, streamed text would show replacement characters.
"""

from __future__ import annotations

import queue
import re
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import make_random_llama
from tests.servers import running
from tests.triton.helpers import torch_bundle
from trtspec.triton.client import TritonClient
from trtspec.triton.render import write_repository
from trtspec.triton.repo import RepoSpec, plan_repository

pytestmark = pytest.mark.triton
LETTERS = "abcdefghijklmnopqrstuvwxyz"
BYTES = [0xC3, 0xE2, 0xE6, 0xF0, *range(0x80, 0x9F)]  # lead bytes of 2-, 3- and 4-byte characters, continuations
LONG = 3000  # tokens of the long requests (the model never emits EOS: its lm_head row is zero)


def byte_tokenizer(path: Path) -> Path:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(["<s>", "</s>", "<unk>", *LETTERS, *(f"<0x{b:02X}>" for b in BYTES)])}
    assert len(vocab) <= 64
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("[\\s\\S]"), behavior="isolated")
    tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Fuse()])
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                            unk_token="<unk>").save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import LlamaConfig

    path = make_random_llama(tmp_path_factory.mktemp("bytes") / "target", hidden=32, layers=1, heads=2, seed=10)
    config = LlamaConfig.from_pretrained(path)
    config.max_position_embeddings = LONG + 64
    config.save_pretrained(path)
    weights = load_file(path / "model.safetensors")
    weights["lm_head.weight"][1] = 0.0  # EOS (id 1) scores 0: never the argmax of this model's spread-out logits
    save_file({k: v.contiguous() for k, v in weights.items()}, path / "model.safetensors", metadata={"format": "pt"})
    byte_tokenizer(path)
    assert torch.is_tensor(weights["lm_head.weight"])
    return path


@pytest.fixture(scope="module")
def server(model, tmp_path_factory):
    bundle = torch_bundle(tmp_path_factory.mktemp("bundle") / "b", model, None, method="ngram", k=4)
    spec = RepoSpec.from_build(bundle, "torch", decoupled=True, engine={"max_k": 4, "default_k": 0, "max_input_len": 32, "max_output_len": LONG})
    repo = write_repository(plan_repository(spec), bundle.parent / "repo")
    with running(repo) as srv:
        yield srv


def test_streamed_text_never_splits_a_character(server):
    with TritonClient(server.grpc_url, model="ensemble") as client:
        whole = client.generate("abc", max_tokens=40)
        chunks = list(client.stream("abc", max_tokens=40))
    assert any(ord(c) > 0x7F and c != "\ufffd" for c in whole.text), "precondition: multi-byte characters"
    assert "".join(c.text for c in chunks) == whole.text
    with TritonClient(server.grpc_url, model="tensorrt_llm") as client:  # the same, as token ids
        ids = client.generate([0, 3, 4, 5], max_tokens=40).token_ids
        pieces = list(client.stream([0, 3, 4, 5], max_tokens=40))
    assert [t for c in pieces for t in c.token_ids] == ids
    assert any(len(c.token_ids) > 1 for c in pieces), "some responses held tokens back (k = 0: one token per step)"


def _requests_by_reason(server) -> dict[str, float]:
    with urllib.request.urlopen(server.metrics_url, timeout=10) as response:
        text = response.read().decode()
    return {m.group(1): float(m.group(2)) for m in
            re.finditer(r'trtspec_spec_decode_requests\{[^}]*finish_reason="(\w+)"[^}]*\} ([0-9.e+-]+)', text)}


def _stream(server, ids: list[int], max_tokens: int):
    """Start a streaming request on the engine model with tritonclient itself; returns (client, results queue)."""
    import tritonclient.grpc as grpcclient

    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    inputs = []
    for name, value in {"input_ids": np.array([ids], dtype=np.int32),
                        "input_lengths": np.array([[len(ids)]], dtype=np.int32),
                        "request_output_len": np.array([[max_tokens]], dtype=np.int32),
                        "streaming": np.array([[True]])}.items():
        tensor = grpcclient.InferInput(name, list(value.shape), "BOOL" if value.dtype == bool else "INT32")
        tensor.set_data_from_numpy(value)
        inputs.append(tensor)
    client.async_stream_infer("tensorrt_llm", inputs, enable_empty_final_response=True)
    return client, results


def _collect(results: queue.Queue, timeout: float = 120) -> list[int]:
    tokens: list[int] = []
    while True:
        result, error = results.get(timeout=timeout)
        assert error is None, error
        output = result.as_numpy("output_ids")
        if output is not None:
            tokens += output.reshape(-1).tolist()
        if result.get_response(as_json=True).get("parameters", {}).get("triton_final_response", {}).get("bool_param"):
            return tokens


def test_client_cancellation_aborts_the_request_in_the_engine(server):
    before = _requests_by_reason(server).get("abort", 0)
    client, results = _stream(server, [0, 3, 4, 5], LONG)
    result, error = results.get(timeout=60)
    assert error is None
    client.stop_stream(cancel_requests=True)  # the client goes away mid-generation
    for _ in range(100):
        if _requests_by_reason(server).get("abort", 0) == before + 1:
            break
        time.sleep(0.1)
    assert _requests_by_reason(server).get("abort", 0) == before + 1, "the engine aborted the cancelled request"
    with TritonClient(server.grpc_url, model="ensemble") as again:
        assert again.generate("abc", max_tokens=8).text  # and keeps serving


def test_shutdown_drains_running_requests(server):
    """SIGTERM while a request streams: Triton stops taking requests, the loop finishes the running one. The client
    closes its stream once the answer is complete (an open stream would hold tritonserver's shutdown)."""
    client, results = _stream(server, [0, 3, 4, 5], 400)
    first, error = results.get(timeout=60)
    assert error is None
    stopping = threading.Thread(target=server.stop)
    stopping.start()
    tokens = first.as_numpy("output_ids").reshape(-1).tolist() + _collect(results)
    client.stop_stream()
    stopping.join(timeout=60)
    assert len(tokens) == 400 and not server.alive()
