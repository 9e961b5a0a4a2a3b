"""A real tritonserver (CPU) serving the torch-flavour repository deployed with `--decoupled`: the reference engine
behind NVIDIA's tensorrt_llm tensors, asked the way NVIDIA's clients ask (tests/triton/nvidia_requests.py).

The standard deployment's server (tests/triton/conftest.py `standard_server`, shared with test_server_hardening).
Over gRPC streams: greedy output equals the in-process engine (prompt included unless
exclude_input_in_output), streaming is incremental, a batch of prompts comes back with batch_index, num_return_sequences
with sequence_index and TensorRT-LLM's per-sequence seeds, log-prob and perf outputs have NVIDIA's shapes, stop and bad
words act, stop requests cancel, refused features and bad tensors are errors naming the input while the server keeps
serving, the Prometheus metrics move, and `trtspec generate --url` and the HTTP generate_stream endpoint answer. The
repository is deployed from the torch bundle of the embedded pair (build_configs/tiny-torch.yaml).
"""

from __future__ import annotations

import re
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tests.triton.helpers import STANDARD_BATCH, STANDARD_ENGINE
from tests.triton.nvidia_requests import column, http_generate, stream_responses, text_request, token_request
from trtspec.triton.client import TritonClient

pytestmark = pytest.mark.triton
K = STANDARD_ENGINE["default_k"]
MAX_K = STANDARD_ENGINE["max_k"]
MAX_TOKENS = 12
MAX_BATCH = STANDARD_BATCH
MAX_OUTPUT = STANDARD_ENGINE["max_output_len"]
PROMPTS = ["def add(a, b):", "import os", "for i in range(3):", "x = 1 + 2", "print(x)", "class a:", "y = (1, 2)",
           "return x"]
PERF = {"kv_cache_alloc_new_blocks": np.int32, "kv_cache_reused_blocks": np.int32,
        "kv_cache_alloc_total_blocks": np.int32, "arrival_time_ns": np.int64, "first_scheduled_time_ns": np.int64,
        "first_token_time_ns": np.int64, "last_token_time_ns": np.int64, "acceptance_rate": np.float32,
        "total_accepted_draft_tokens": np.int32, "total_draft_tokens": np.int32}


@pytest.fixture(scope="module")
def server(standard_server):
    return standard_server


@pytest.fixture(scope="module")
def engine():
    from trtspec.spec.engine import SpecEngine

    return SpecEngine.from_pretrained(target="tiny", draft="tiny-draft", max_k=MAX_K)


def greedy(engine, prompts: list[str], n: int = MAX_TOKENS) -> list[list[int]]:
    """The in-process engine's greedy tokens as TensorRT-LLM returns them: the tokenizer's end token ends a request
    and is not part of the output."""
    from trtspec.spec.params import SpecParams, trtllm_sampling_params

    eos = engine.tokenizer.eos_token_id
    outs = engine.generate(prompts, sampling=trtllm_sampling_params(max_new_tokens=n, end_id=eos),
                           spec=SpecParams(method="draft_target", k=K))
    return [o.token_ids[:-1] if o.token_ids and o.token_ids[-1] == eos else o.token_ids for o in outs]


@pytest.fixture(scope="module")
def want(engine) -> dict[str, list[int]]:
    return dict(zip(PROMPTS, greedy(engine, PROMPTS), strict=True))


def text(result) -> str:
    out = result.as_numpy("text_output")
    assert out.ndim == 1, f"text_output must be 1-D as NVIDIA's postprocessing makes it, got {out.shape}"
    return out[0].decode()


def test_end_to_end_client_request_gets_the_prompt_and_greedy_continuation(server, engine, want):
    """What end_to_end_grpc_client.py sends at temperature 0, asking only for text_output."""
    prompt = PROMPTS[0]
    results, errors = stream_responses(server.grpc_url, "ensemble", text_request(
        prompt, MAX_TOKENS, temperature=column(0.0, np.float32)), ["text_output"])
    assert not errors and len(results) == 1
    assert text(results[0]) == engine.decode(engine.encode(prompt) + want[prompt])  # prompt included by default
    results, _ = stream_responses(server.grpc_url, "ensemble", text_request(
        prompt, MAX_TOKENS, exclude_input_in_output=column(True, bool)), ["text_output"])
    assert text(results[0]) == engine.decode(want[prompt])
    # the BLS answers the same request the same way
    results, errors = stream_responses(server.grpc_url, "tensorrt_llm_bls", text_request(prompt, MAX_TOKENS),
                                       ["text_output"])
    assert not errors and text(results[0]) == engine.decode(engine.encode(prompt) + want[prompt])


def test_streaming_sends_the_generated_text_in_deltas(server, engine, want):
    prompt = PROMPTS[1]
    for model in ("ensemble", "tensorrt_llm_bls"):
        results, errors = stream_responses(server.grpc_url, model, text_request(
            prompt, MAX_TOKENS, stream=column(True, bool)), ["text_output"])
        assert not errors and len(results) >= 2, "a streamed request must arrive in several responses"
        assert "".join(text(r) for r in results) == engine.decode(want[prompt]), model  # no prompt when streaming
    results, _ = stream_responses(server.grpc_url, "tensorrt_llm", token_request(
        engine.encode(prompt), MAX_TOKENS, streaming=column(True, bool)), ["output_ids", "sequence_length"])
    assert all(r.as_numpy("output_ids").shape[:2] == (1, 1) for r in results)
    assert [t for r in results for t in r.as_numpy("output_ids")[0, 0][: r.as_numpy("sequence_length")[0, 0]]] \
        == want[prompt]
    assert all(r.as_numpy("sequence_length")[0, 0] <= K + 1 for r in results)  # one engine step each


@pytest.mark.parametrize("model", ["ensemble", "tensorrt_llm_bls"])
def test_batch_inputs_come_back_with_batch_index(server, engine, want, model):
    """--batch-inputs: one request with one row per prompt; a response per row, each with its batch_index."""
    prompts = PROMPTS[2:5]
    results, errors = stream_responses(server.grpc_url, model, text_request(
        prompts, MAX_TOKENS, exclude_input_in_output=np.ones((3, 1), dtype=bool)), ["text_output", "batch_index"])
    assert not errors and len(results) == 3
    by_row = {int(r.as_numpy("batch_index")[0, 0]): text(r) for r in results}
    assert all(r.as_numpy("batch_index").shape == (1, 1) for r in results)
    assert by_row == {i: engine.decode(want[p]) for i, p in enumerate(prompts)}


def test_num_return_sequences_come_back_with_sequence_index_and_tensorrt_llm_seeds(server, engine):
    """-n 2: one response per sequence with its sequence_index; sequence i is seeded with seed + i, as
    TensorRT-LLM seeds child requests, so it equals a single-sequence request with that seed."""
    ids = engine.encode(PROMPTS[5])
    sampling = {"runtime_top_k": column(8, np.int32), "temperature": column(1.5, np.float32)}

    def sample(n: int, seed: int) -> dict[int, list[int]]:
        results, errors = stream_responses(server.grpc_url, "tensorrt_llm", token_request(
            ids, MAX_TOKENS, num_return_sequences=column(n, np.int32), random_seed=column(seed, np.uint64),
            exclude_input_in_output=column(True, bool), **sampling), ["output_ids", "sequence_length",
                                                                      "sequence_index", "batch_index"])
        assert not errors and len(results) == n
        assert all(r.as_numpy("batch_index") is None for r in results)  # batch 1: no batch_index, as NVIDIA's
        index = (lambda r: int(r.as_numpy("sequence_index")[0, 0])) if n > 1 else (lambda r: 0)
        return {index(r): r.as_numpy("output_ids")[0, 0].tolist() for r in results}

    pair = sample(2, 41)
    assert set(pair) == {0, 1} and pair[0] != pair[1]
    assert sample(1, 42)[0] == pair[1] and sample(1, 41)[0] == pair[0]
    results, _ = stream_responses(server.grpc_url, "ensemble", text_request(
        PROMPTS[5], MAX_TOKENS, num_return_sequences=column(2, np.int32)), ["text_output", "sequence_index"])
    assert sorted(int(r.as_numpy("sequence_index")[0, 0]) for r in results) == [0, 1]


def test_log_probs_have_nvidias_shapes(server, engine):
    ids = engine.encode(PROMPTS[6])
    sampled = {"runtime_top_k": column(0, np.int32), "runtime_top_p": column(1.0, np.float32),
               "random_seed": column(3, np.uint64), "return_log_probs": column(True, bool)}
    results, errors = stream_responses(server.grpc_url, "tensorrt_llm", token_request(
        ids, MAX_TOKENS, **sampled), ["output_ids", "sequence_length", "cum_log_probs", "output_log_probs"])
    assert not errors and len(results) == 1
    (result,) = results
    generated = int(result.as_numpy("sequence_length")[0, 0]) - len(ids)  # the prompt is in output_ids
    log_probs, cumulative = result.as_numpy("output_log_probs"), result.as_numpy("cum_log_probs")
    assert log_probs.shape == (1, 1, generated) and cumulative.shape == (1, 1)  # [batch, beam, len], [batch, beam]
    assert np.all(log_probs <= 0) and cumulative[0, 0] == pytest.approx(log_probs.sum(), rel=1e-4)
    # streamed: each response carries its own tokens' log-probs and the running sum
    results, _ = stream_responses(server.grpc_url, "tensorrt_llm", token_request(
        ids, MAX_TOKENS, streaming=column(True, bool), **sampled), ["output_ids", "cum_log_probs", "output_log_probs"])
    assert all(r.as_numpy("output_log_probs").shape[2] == r.as_numpy("output_ids").shape[2] for r in results)
    streamed = np.concatenate([r.as_numpy("output_log_probs")[0, 0] for r in results])
    np.testing.assert_allclose(streamed, log_probs[0, 0], rtol=1e-4)
    assert results[-1].as_numpy("cum_log_probs")[0, 0] == pytest.approx(cumulative[0, 0], rel=1e-4)
    # through the ensemble, as end_to_end_grpc_client.py --return-log-probs asks
    results, errors = stream_responses(server.grpc_url, "ensemble", text_request(
        PROMPTS[6], MAX_TOKENS, return_log_probs=column(True, bool)), ["text_output", "cum_log_probs",
                                                                       "output_log_probs"])
    assert not errors and results[0].as_numpy("output_log_probs").shape[:2] == (1, 1)


def test_perf_outputs_on_every_response(server, engine):
    """--return-perf-metrics with --streaming: every response has all ten outputs, [1, 1] each; the last has the
    request's acceptance counters; the timestamps are ordered."""
    results, errors = stream_responses(server.grpc_url, "ensemble", text_request(
        PROMPTS[7], MAX_TOKENS, stream=column(True, bool), return_perf_metrics=column(True, bool)),
        ["text_output", *PERF])
    assert not errors and len(results) >= 2
    for result in results:
        for name, dtype in PERF.items():
            value = result.as_numpy(name)
            assert value is not None and value.shape == (1, 1) and value.dtype == dtype, name
    last = {name: results[-1].as_numpy(name)[0, 0] for name in PERF}
    assert last["total_draft_tokens"] > 0 and 0 <= last["total_accepted_draft_tokens"] <= last["total_draft_tokens"]
    assert last["acceptance_rate"] == pytest.approx(last["total_accepted_draft_tokens"] / last["total_draft_tokens"])
    assert 0 < last["arrival_time_ns"] <= last["first_scheduled_time_ns"] <= last["first_token_time_ns"] \
        <= last["last_token_time_ns"]
    assert last["kv_cache_alloc_total_blocks"] == 0  # documented: the reference engine has no KV blocks


def test_stop_and_bad_words(server, engine, want):
    """stop_words end the output with the word; bad_words keep it out. A word is matched as the tokens it encodes
    to on its own (TensorRT-LLM's word lists), so the test picks one that is a single token of the greedy output."""
    prompt = PROMPTS[0]
    ids = want[prompt]
    j = next(j for j in range(2, len(ids)) if ids[j] not in ids[:j]
             and engine.tokenizer.encode(engine.decode(ids[j:j + 1]), add_special_tokens=False) == ids[j:j + 1])
    word = engine.decode(ids[j:j + 1])
    results, errors = stream_responses(server.grpc_url, "ensemble", text_request(
        prompt, MAX_TOKENS, stop_words=np.array([[b"zzzz", word.encode()]], dtype=object),
        exclude_input_in_output=column(True, bool)), ["text_output"])
    assert not errors and text(results[0]) == engine.decode(ids[: j + 1])  # the stop word stays in the output
    results, errors = stream_responses(server.grpc_url, "ensemble", text_request(
        prompt, MAX_TOKENS, bad_words=np.array([[word.encode()]], dtype=object),
        exclude_input_in_output=column(True, bool)), ["text_output"])
    assert not errors and text(results[0]).startswith(engine.decode(ids[:j]))
    assert engine.tokenizer.encode(text(results[0]), add_special_tokens=False)[j] != ids[j]
    # the same at the token level, as e2e_grpc_speculative_decoding_client.py sends the word lists
    stop_list = np.array([[[ids[j - 1], ids[j]], [2, -1]]], dtype=np.int32)  # one two-token word
    results, errors = stream_responses(server.grpc_url, "tensorrt_llm", token_request(
        engine.encode(prompt), MAX_TOKENS, stop_words_list=stop_list, exclude_input_in_output=column(True, bool)),
        ["output_ids"])
    assert not errors and results[0].as_numpy("output_ids")[0, 0].tolist() == ids[: j + 1]


def test_stop_request_cancels_the_request_with_that_id(server, engine):
    """inflight_batcher_llm_client.py --stop-after-ms: a request with stop=true and the same request id."""
    import queue

    import tritonclient.grpc as grpcclient

    from tests.triton.nvidia_requests import _inputs

    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    client.async_stream_infer("tensorrt_llm", _inputs(token_request(
        engine.encode(PROMPTS[1]), MAX_OUTPUT, streaming=column(True, bool))), request_id="77",
        enable_empty_final_response=True)
    first, error = results.get(timeout=60)  # it runs
    assert error is None
    stop = {"input_ids": np.zeros((1, 1), np.int32), "input_lengths": column(0, np.int32),
            "request_output_len": column(0, np.int32), "stop": column(True, bool)}
    _, stop_errors = stream_responses(server.grpc_url, "tensorrt_llm", stop, request_id="77")
    assert not stop_errors
    generated = first.as_numpy("output_ids").shape[2]
    while True:  # the cancelled request ends normally, early: TensorRT-LLM's executor answers cancelRequest so
        result, error = results.get(timeout=60)
        assert error is None, error
        if result.as_numpy("output_ids") is not None:
            generated += result.as_numpy("output_ids").shape[2]
        if result.get_response().parameters["triton_final_response"].bool_param:
            break
    client.stop_stream()
    assert generated < MAX_OUTPUT


@pytest.mark.parametrize("case, model, tensors, message", [
    ("beam search", "ensemble", {"beam_width": column(2, np.int32)}, "beam_width=2"),
    ("LoRA", "ensemble", {"lora_task_id": column(1, np.uint64)}, "lora_task_id: LoRA is not supported"),
    ("guided decoding", "ensemble", {"guided_decoding_guide_type": np.array([[b"json"]], dtype=object)},
     "guided_decoding_guide_type: guided decoding is not supported"),
    ("prompt table", "ensemble", {"prompt_embedding_table": np.zeros((1, 1, 4), np.float16)},
     "prompt_embedding_table: prompt tables"),
    ("generation logits", "ensemble", {"return_generation_logits": column(True, bool)},
     "return_generation_logits=true"),
    ("unknown input", "ensemble", {"no_such_input": column(1, np.int32)}, "no_such_input"),
    ("wrong dtype", "ensemble", {"max_tokens": column(4.0, np.float32)}, "max_tokens"),
    ("max_tokens above the limit", "ensemble", {"max_tokens": column(MAX_OUTPUT + 1, np.int32)},
     f"request_output_len={MAX_OUTPUT + 1} must be in [1, max_output_len={MAX_OUTPUT}]"),
    ("k above max_k", "tensorrt_llm", {"num_draft_tokens": column(MAX_K + 1, np.int32)},
     f"num_draft_tokens (k)={MAX_K + 1}: must be in [0, {MAX_K}]"),
    ("draft longer than max_k", "tensorrt_llm", {"draft_input_ids": np.ones((1, MAX_K + 1), np.int32)},
     f"draft_input_ids has {MAX_K + 1} tokens, more than this model's max_k={MAX_K}"),
    ("token out of vocab", "tensorrt_llm", {"input_ids": np.array([[3, 10**6]], np.int32)},
     "input_ids: token id 1000000 is outside the vocabulary"),
])  # fmt: skip
def test_refused_features_and_bad_tensors_are_errors_naming_the_input(server, engine, case, model, tensors, message):
    if model == "ensemble":
        request = {**text_request(PROMPTS[0], 4), **tensors}
    else:
        request = {**token_request(engine.encode(PROMPTS[0]), 4), **tensors}
        request["input_lengths"] = column(request["input_ids"].shape[1], np.int32)
    results, errors = stream_responses(server.grpc_url, model, request, ["text_output"] if model == "ensemble"
                                       else ["output_ids"])
    assert errors and message in errors[0], f"{case}: {errors}"


def test_batch_above_the_limit_is_refused_and_the_server_keeps_serving(server, engine, want):
    prompts = [PROMPTS[0]] * (MAX_BATCH + 1)
    _, errors = stream_responses(server.grpc_url, "ensemble", text_request(prompts, 4), ["text_output"])
    assert errors and f"must be <= {MAX_BATCH}" in errors[0]
    results, errors = stream_responses(server.grpc_url, "ensemble", text_request(
        PROMPTS[0], MAX_TOKENS, exclude_input_in_output=column(True, bool)), ["text_output"])
    assert server.alive() and not errors and text(results[0]) == engine.decode(want[PROMPTS[0]])


def test_concurrent_clients_all_get_correct_results(server, engine, want):
    def ask(prompt):
        with TritonClient(server.grpc_url, model="ensemble") as client:
            return client.generate(prompt, max_tokens=MAX_TOKENS).text

    with ThreadPoolExecutor(max_workers=8) as pool:
        got = list(pool.map(ask, PROMPTS))
    assert got == [engine.decode(want[p]) for p in PROMPTS]


def _metrics(server) -> dict[str, float]:
    with urllib.request.urlopen(server.metrics_url, timeout=10) as response:
        body = response.read().decode()
    values: dict[str, float] = {}
    for line in body.splitlines():
        match = re.match(r'(trtspec_spec_decode_\w+)(\{[^}]*\})? ([0-9.e+-]+)$', line)
        if match and 'model="tensorrt_llm"' in (match.group(2) or ""):
            position = re.search(r'position="(\d+)"', match.group(2) or "")
            key = match.group(1) + (f"[{position.group(1)}]" if position else "")
            values[key] = float(match.group(3))
    return values


def test_metrics_endpoint_shows_acceptance_counters_moving(server, engine):
    before = _metrics(server)
    with TritonClient(server.grpc_url, model="tensorrt_llm") as client:
        out = client.generate(engine.encode(PROMPTS[2]), max_tokens=MAX_TOKENS, k=K)
    after = _metrics(server)
    drafts = after["trtspec_spec_decode_num_drafts"] - before.get("trtspec_spec_decode_num_drafts", 0)
    assert drafts == out.num_drafts > 0
    assert (after["trtspec_spec_decode_num_draft_tokens"] - before.get("trtspec_spec_decode_num_draft_tokens", 0)
            == out.total_draft_tokens)
    assert out.mean_acceptance_length == pytest.approx(1 + out.total_accepted_draft_tokens / out.num_drafts)
    total_drafts, accepted = after["trtspec_spec_decode_num_drafts"], after["trtspec_spec_decode_num_accepted_tokens"]
    assert after["trtspec_spec_decode_mean_acceptance_length"] == pytest.approx(1 + accepted / total_drafts)


def test_http_generate_stream_and_generate(server, engine, want):
    prompt = PROMPTS[3]
    body = {"text_input": prompt, "max_tokens": MAX_TOKENS, "bad_words": "", "stop_words": ""}
    events = http_generate(server.http_url, "ensemble", {**body, "stream": True}, stream=True)
    assert len(events) >= 2 and "".join(e["text_output"] for e in events) == engine.decode(want[prompt])
    (answer,) = http_generate(server.http_url, "ensemble", body)
    assert answer["text_output"] == engine.decode(engine.encode(prompt) + want[prompt])


def test_generate_cli_talks_to_the_server(server, engine, want):
    import json

    from click.testing import CliRunner

    from trtspec.cli.main import cli

    generated = engine.decode(want[PROMPTS[3]])
    args = ["generate", "--url", server.grpc_url, "--max-new-tokens", str(MAX_TOKENS)]
    result = CliRunner().invoke(cli, [*args, "--stream", PROMPTS[3]], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert result.output.startswith(generated) and "model=ensemble (text form)" in result.output
    assert "acceptance rate" in result.output
    result = CliRunner().invoke(cli, [*args, "--json", PROMPTS[3]], catch_exceptions=False)
    record = json.loads(result.output)  # no --model: the ensemble, the first of those the server has
    assert (record["model"], record["form"], record["text"]) == ("ensemble", "text", generated)
    result = CliRunner().invoke(cli, [*args, "--json", "--model", "tensorrt_llm_bls", "--k", str(K), PROMPTS[3]],
                                catch_exceptions=False)
    record = json.loads(result.output)
    assert record["text"] == generated and record["total_draft_tokens"] > 0 and record["form"] == "text"
    # text to the engine model: tokenized and detokenized by the repository's pre/postprocessing, k per request
    result = CliRunner().invoke(cli, [*args, "--json", "--model", "tensorrt_llm", "--k", str(K), PROMPTS[3]],
                                catch_exceptions=False)
    record = json.loads(result.output)
    assert record["token_ids"] == want[PROMPTS[3]] and record["text"] == generated and record["num_drafts"] > 0
    assert record["form"] == "tokens"


def test_a_client_side_tap_feeds_the_monitor_the_servers_counts(server, tmp_path):
    """`trtspec generate --url ... --tap FILE` appends each request's perf outputs; `--metrics tap:FILE` reads them
    as the same counts the engine model's own series moved by (tensorrt_llm also answers num_drafts; the ensemble
    answers NVIDIA's outputs only, as text: its drafts are unknown, and the monitor says so)."""
    from click.testing import CliRunner

    from trtspec.cli.main import cli
    from trtspec.ops.scrape import ModelId, scraper
    from trtspec.ops.window import increments

    tap = tmp_path / "tap.jsonl"
    tap.touch()
    read, series = scraper(f"tap:{tap}"), scraper(server.metrics_url)
    engine = ModelId("tensorrt_llm", "1", "draft_target")
    samples = [(read(), series())]
    for model in (["--model", "tensorrt_llm", "--k", str(K)], ["--model", "ensemble"]):
        result = CliRunner().invoke(cli, ["generate", "--url", server.grpc_url, *model, "--max-new-tokens",
                                          str(MAX_TOKENS), "--tap", str(tap), PROMPTS[2]], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        samples.append((read(), series()))
    for (tap_before, before), (tap_after, after), name in zip(samples[:-1], samples[1:], ("tensorrt_llm", "ensemble"),
                                                                  strict=True):
        got = increments(ModelId(name), tap_after.models[ModelId(name)], tap_before.models.get(ModelId(name)), 1.0)
        moved = increments(engine, after.models[engine], before.models.get(engine), 1.0)
        rate_only = "" if name == "tensorrt_llm" else "rate_only_"  # a text answer: no token count on the client
        for key in ("num_draft_tokens", "num_accepted_tokens"):  # the request ran once on the engine model
            assert got.count(rate_only + key) == moved.count(key) > 0, (name, key)
        assert got.acceptance_rate == pytest.approx(moved.acceptance_rate)
        if name == "tensorrt_llm":
            assert got.num_drafts == moved.num_drafts and not got.note
        else:  # drafts unknown: the acceptance rate only, said so
            assert got.num_drafts == 0 and "acceptance rate only" in got.note
