"""A real tritonserver (CPU) serving the torch-flavour repository as `trtspec deploy` renders it by default (not
decoupled, NVIDIA's quick-start setting): unary gRPC infer and the HTTP generate endpoint, asked the way NVIDIA's
clients and quick start ask (tests/triton/nvidia_requests.py).

One server per module. The client-side speculative loop of e2e_grpc_speculative_decoding_client.py (preprocessing ->
tensorrt_llm_draft -> tensorrt_llm verifying draft_input_ids -> postprocessing, all unary) returns the target's own
greedy output; inflight_batcher_llm_client.py's token request returns the prompt and the greedy continuation with
perf outputs; the HTTP generate quick start answers on the ensemble and the BLS; what needs several responses
(streaming, batch > 1, num_return_sequences > 1) is refused naming the decoupled mode, and the server keeps serving;
unary requests sent together are served together (each arrives before any has its last token).
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.servers import running
from tests.triton.nvidia_requests import column, http_generate, text_request, token_request, unary
from trtspec.errors import UsageError
from trtspec.triton.client import TritonClient
from trtspec.triton.render import write_repository
from trtspec.triton.repo import RepoSpec, plan_repository

pytestmark = pytest.mark.triton
K = 4
MAX_TOKENS = 16
PROMPTS = ["def add(a, b):", "import os", "for i in range(3):"]


@pytest.fixture(scope="module")
def server(torch_bundle):
    # not decoupled: the default
    spec = RepoSpec.from_build(torch_bundle, "torch", engine={"max_input_len": 64, "max_output_len": 64})
    assert not spec.decoupled
    repo = write_repository(plan_repository(spec), torch_bundle.parent / "repo")
    with running(repo) as srv:
        yield srv


@pytest.fixture(scope="module")
def target():
    """The target alone, plain decoding: the output speculation must reproduce."""
    from trtspec.spec.engine import SpecEngine

    return SpecEngine.from_pretrained(target="tiny")


def target_greedy(engine, prompt: str, n: int = MAX_TOKENS) -> list[int]:
    """The target's greedy tokens as TensorRT-LLM returns them (the end token ends the request, unreported)."""
    from trtspec.spec.params import SpecParams, trtllm_sampling_params

    eos = engine.tokenizer.eos_token_id
    (out,) = engine.generate([prompt], sampling=trtllm_sampling_params(max_new_tokens=n, end_id=eos),
                             spec=SpecParams(method="none", k=0))
    return out.token_ids[:-1] if out.token_ids and out.token_ids[-1] == eos else out.token_ids


def test_ensemble_unary_infer_asking_only_for_text_output(server, target):
    prompt = PROMPTS[0]
    result = unary(server.grpc_url, "ensemble", text_request(prompt, MAX_TOKENS), ["text_output"])
    out = result.as_numpy("text_output")
    assert out.shape == (1,)  # 1-D, as NVIDIA's postprocessing returns it
    assert out[0].decode() == target.decode(target.encode(prompt) + target_greedy(target, prompt))


def test_speculative_client_loop_returns_the_targets_greedy_output(server, target):
    """e2e_grpc_speculative_decoding_client.py: tokenize, then per step the draft model proposes k tokens and the
    target verifies them (draft_input_ids, request_output_len = k + 1), then detokenize; all unary calls."""
    prompt = PROMPTS[1]
    pre = unary(server.grpc_url, "preprocessing", {"QUERY": np.array([[prompt.encode()]], dtype=object),
                                                  "REQUEST_OUTPUT_LEN": column(MAX_TOKENS, np.int32)})
    prompt_ids = np.squeeze(pre.as_numpy("INPUT_ID").astype(np.int32), axis=0)
    bad, stop = pre.as_numpy("BAD_WORDS_IDS"), pre.as_numpy("STOP_WORDS_IDS")
    assert bad.shape == stop.shape == (1, 2, 0)  # no words: NVIDIA's empty word list
    end_id, pad_id = pre.as_numpy("OUT_END_ID")[0][0], pre.as_numpy("OUT_PAD_ID")[0][0]
    common = {"bad_words_list": bad, "stop_words_list": stop, "temperature": column(1.0, np.float32),
              "end_id": column(end_id, np.int32), "pad_id": column(pad_id, np.int32)}  # unset top-k/p: greedy
    ids, drafted, steps = prompt_ids, 0, 0
    while True:
        n = min(K, len(prompt_ids) + MAX_TOKENS - len(ids) - 1)
        draft_out = None
        if n > 0:
            out = unary(server.grpc_url, "tensorrt_llm_draft", token_request(ids.tolist(), n, **common))
            draft_out = out.as_numpy("output_ids")[0, 0]
            draft = draft_out[len(ids): out.as_numpy("sequence_length")[0, 0]]
        extra = {"draft_input_ids": np.array([draft], dtype=np.int32)} if n > 0 else {}
        out = unary(server.grpc_url, "tensorrt_llm", token_request(ids.tolist(), len(draft) + 1 if n > 0 else 1,
                                                                    **common, **extra))
        last, ids = ids, out.as_numpy("output_ids")[0, 0]
        drafted, steps = drafted + (len(draft) if n > 0 else 0), steps + 1
        if (len(ids) >= len(prompt_ids) + MAX_TOKENS or np.array_equal(last, ids)
                or (draft_out is not None and np.array_equal(draft_out, ids))):
            break
    want = target_greedy(target, prompt)
    assert ids.tolist() == prompt_ids.tolist() + want
    assert drafted > 0 and steps < len(want)  # it speculated, and accepted drafts saved target calls
    post = unary(server.grpc_url, "postprocessing", {"TOKENS_BATCH": ids.reshape(1, 1, -1).astype(np.int32),
                                                    "SEQUENCE_LENGTH": column(len(ids), np.int32)})
    assert post.as_numpy("OUTPUT")[0].decode() == target.decode(ids.tolist())


def test_inflight_client_token_request_with_perf_outputs(server, target):
    """inflight_batcher_llm_client.py without --streaming: top_k 1, top_p 0, end_id/pad_id from the tokenizer."""
    ids = target.encode(PROMPTS[2])
    eos = target.tokenizer.eos_token_id
    request = token_request(ids, MAX_TOKENS, temperature=column(1.0, np.float32), streaming=column(False, bool),
                            end_id=column(eos, np.int32), pad_id=column(eos, np.int32),
                            runtime_top_k=column(1, np.int32), runtime_top_p=column(0.0, np.float32),
                            return_perf_metrics=column(True, bool))
    result = unary(server.grpc_url, "tensorrt_llm", request)
    want = target_greedy(target, PROMPTS[2])
    assert result.as_numpy("output_ids")[0, 0].tolist() == ids + want  # the prompt first, as NVIDIA's default
    assert result.as_numpy("sequence_length").tolist() == [[len(ids) + len(want)]]
    assert result.as_numpy("total_draft_tokens")[0, 0] > 0 and result.as_numpy("arrival_time_ns")[0, 0] > 0
    excluded = unary(server.grpc_url, "tensorrt_llm", {**request, "exclude_input_in_output": column(True, bool)})
    assert excluded.as_numpy("output_ids")[0, 0].tolist() == want


def test_concurrent_unary_requests_are_served_together(server, target):
    """Unary requests sent together run in the engine loop's batch together (execute() hands them over and returns;
    each is answered through its response sender, as NVIDIA's llmapi model.py does): every one arrives before any has
    its last token, and each returns its own greedy output."""
    import threading

    n, requests = 48, [target.encode(p) for p in PROMPTS]
    results: list = [None] * len(requests)
    barrier = threading.Barrier(len(requests))

    def ask(i: int) -> None:
        barrier.wait()
        results[i] = unary(server.grpc_url, "tensorrt_llm", token_request(
            requests[i], n, exclude_input_in_output=column(True, bool), return_perf_metrics=column(True, bool)))

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(requests))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for prompt, result in zip(PROMPTS, results, strict=True):
        assert result.as_numpy("output_ids")[0, 0].tolist() == target_greedy(target, prompt, n)[:n]
    arrivals = [int(r.as_numpy("arrival_time_ns")[0, 0]) for r in results]
    last_tokens = [int(r.as_numpy("last_token_time_ns")[0, 0]) for r in results]
    assert max(arrivals) < min(last_tokens)  # one execute() at a time would start each after the one before ended


def test_http_generate_quick_start(server, target):
    """The quick start's curl body, on the ensemble and on the BLS."""
    body = {"text_input": "What is machine learning?", "max_tokens": 20, "bad_words": "", "stop_words": ""}
    want = target.decode(target.encode(body["text_input"]) + target_greedy(target, body["text_input"], 20))
    for model in ("ensemble", "tensorrt_llm_bls"):
        (answer,) = http_generate(server.http_url, model, body)
        assert answer["model_name"] == model and answer["text_output"] == want, answer


def test_bls_speculates_with_num_draft_tokens(server, target):
    with TritonClient(server.grpc_url, model="tensorrt_llm_bls") as client:
        spec = client.generate(PROMPTS[0], max_tokens=MAX_TOKENS, k=K)
        plain = client.generate(PROMPTS[0], max_tokens=MAX_TOKENS)
    assert spec.text == plain.text == target.decode(target_greedy(target, PROMPTS[0]))
    assert spec.total_draft_tokens > 0 and 0 < spec.total_accepted_draft_tokens <= spec.total_draft_tokens


@pytest.mark.parametrize("model, tensors, message", [
    ("ensemble", {"stream": column(True, bool)}, "streaming=true needs a decoupled model"),
    ("ensemble", {"num_return_sequences": column(2, np.int32)}, "num_return_sequences=2 needs a decoupled model"),
    ("tensorrt_llm_bls", {"stream": column(True, bool)}, "stream=true needs several responses"),
])  # fmt: skip
def test_several_responses_need_decoupled_mode(server, target, model, tensors, message):
    from tritonclient.utils import InferenceServerException

    with pytest.raises(InferenceServerException, match=message):
        unary(server.grpc_url, model, {**text_request(PROMPTS[0], 4), **tensors}, ["text_output"])
    with pytest.raises(InferenceServerException, match="batch size 2"):
        unary(server.grpc_url, model, text_request(PROMPTS[:2], 4), ["text_output"])
    # and it keeps serving
    assert unary(server.grpc_url, model, text_request(PROMPTS[0], 4), ["text_output"]).as_numpy("text_output")[0]


def test_trtspec_client_works_unary_and_says_streaming_needs_decoupled(server, target):
    with TritonClient(server.grpc_url, model="ensemble") as client:
        assert not client.decoupled
        out = client.generate(PROMPTS[0], max_tokens=MAX_TOKENS)
        with pytest.raises(UsageError, match="not decoupled"):
            next(client.stream(PROMPTS[0], max_tokens=4))
    assert out.text == target.decode(target_greedy(target, PROMPTS[0]))
    assert out.total_draft_tokens is not None  # the ensemble's perf outputs
