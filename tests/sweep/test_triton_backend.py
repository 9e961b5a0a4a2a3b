"""The sweep via triton without a server: the client-side draft-target loop against a client test double."""

from __future__ import annotations

import numpy as np
import pytest

from tests.sweep.fakes import FakeTritonClient, toy_draft_next, toy_target_next
from trtspec.errors import ConfigError, ServerError
from trtspec.sweep.backend_triton import TritonBackend, draft_target_loop
from trtspec.sweep.grid import SweepSpec
from trtspec.sweep.prompts import PromptSuite
from trtspec.triton.client import TritonClient


def _greedy(fn, prompt, n):
    seq = list(prompt)
    for _ in range(n):
        seq.append(fn(seq))
    return seq[len(prompt):]


def _expected_counts(prompt, n, k):
    """Independent replay of draft-target with the toy models: accepted per step, by definition."""
    seq, accepted_per_step = list(prompt), []
    while len(seq) - len(prompt) < n:
        kk = min(k, len(prompt) + n - len(seq) - 1)
        if kk <= 0:
            seq.append(toy_target_next(seq))
            continue
        draft = _greedy(toy_draft_next, seq, kk)
        acc = 0
        for tok in draft:
            if toy_target_next(seq) != tok:
                break
            seq.append(tok)
            acc += 1
        seq.append(toy_target_next(seq))
        accepted_per_step.append((kk, acc))
    return seq[len(prompt):], accepted_per_step


@pytest.mark.parametrize("k", [1, 3, 5])
def test_draft_target_loop_counts_every_step(k):
    client = FakeTritonClient()
    prompt = [3, 14, 15, 9, 2]
    out, counts = draft_target_loop(client, draft_model="tensorrt_llm_draft", target_model="tensorrt_llm",
                                    prompt_ids=prompt, max_new_tokens=20, k=k, temperature=0.0, end_id=1, pad_id=0)
    expected_ids, steps = _expected_counts(prompt, 20, k)
    assert out == _greedy(toy_target_next, prompt, 20) == expected_ids  # lossless: the target's greedy output
    assert counts.num_drafts == len(steps)
    assert counts.num_draft_tokens == sum(kk for kk, _ in steps)
    assert counts.num_accepted_tokens == sum(a for _, a in steps) > 0
    assert counts.num_accepted_tokens < counts.num_draft_tokens  # the toy draft disagrees sometimes
    assert counts.num_accepted_tokens_per_pos[0] == sum(a >= 1 for _, a in steps)
    assert sum(counts.accepted_length_histogram) == counts.num_drafts
    assert counts.num_emitted_tokens == 20
    # the wire format follows tensorrt_llm's tensor names, with batch and beam dimensions
    model, inputs = next(c for c in client.calls if "draft_input_ids" in c[1])
    assert model == "tensorrt_llm" and inputs["draft_input_ids"].dtype == np.int32
    assert inputs["request_output_len"][0, 0] == inputs["draft_input_ids"].shape[1] + 1
    assert {"input_ids", "input_lengths", "end_id", "pad_id", "temperature", "beam_width"} <= set(inputs)


def test_backend_runs_a_case_through_the_loop(tmp_path):
    spec = SweepSpec.build(model="fake", via="triton", url="fake:1", flavour="tensorrtllm",
                           methods=["draft_target"], drafts=["fake-draft"], k=[0, 3], suites=["code"], num_prompts=2,
                           concurrency=[2],
                           max_new_tokens=12)

    class ByteTokenizer:  # test double: the real backend loads the target's tokenizer.json
        def encode(self, text):
            return [b % 50 for b in text.encode()][:16]

    backend = TritonBackend(client=FakeTritonClient(), tokenizer=ByteTokenizer())
    backend.preflight(spec)
    case = spec.cases()[1]
    metrics = backend.run_case(case, PromptSuite("s", tmp_path, ("abc def", "xyz"), "0"), spec)
    assert metrics["stats"]["source"] == "client_loop" and metrics["output_tokens"] == 24
    assert 0 < metrics["stats"]["acceptance_rate"] < 1


def test_unreachable_server_is_a_clear_error():
    with pytest.raises(ServerError, match="no Triton server answers") as exc:
        TritonClient("127.0.0.1:1", model="tensorrt_llm", timeout_s=1.0)
    assert "trtspec serve" in exc.value.hint
    with pytest.raises(ConfigError, match="timeout_s=0"):  # refused before any connection
        TritonClient("127.0.0.1:1", timeout_s=0)


class PerfMetricsClient:
    """Test double of the torch flavour's `tensorrt_llm` model: echoes fixed perf metrics."""

    def __init__(self):
        self.inputs = []

    def ready(self, model):
        return model == "tensorrt_llm"

    def infer(self, model, inputs, outputs):
        self.inputs.append(inputs)
        n = int(inputs["request_output_len"][0, 0])
        seq = inputs["input_ids"][0].tolist() + [7] * n
        k = int(inputs["num_draft_tokens"][0, 0])
        seq = seq[len(inputs["input_ids"][0]):]  # exclude_input_in_output
        return {"output_ids": np.array([[seq]], dtype=np.int32), "sequence_length": np.array([[len(seq)]]),
                "acceptance_rate": np.array([[0.5]], dtype=np.float32),
                "total_accepted_draft_tokens": np.array([[3 * k // 2]], dtype=np.int32),
                "total_draft_tokens": np.array([[3 * k]], dtype=np.int32),
                "num_drafts": np.array([[4]], dtype=np.int32)}

    def model_parameters(self, model):
        return {"method": "ngram", "max_k": "8"}

    def close(self):
        pass


def test_torch_flavour_reads_perf_metrics(tmp_path):
    spec = SweepSpec.build(model="fake", via="triton", url="fake:1", methods=["ngram"], k=[0, 4],
                           suites=["code"], num_prompts=2, max_new_tokens=5)

    class ByteTokenizer:
        def encode(self, text):
            return [1, 2, 3]

    client = PerfMetricsClient()
    backend = TritonBackend(client=client, tokenizer=ByteTokenizer())
    backend.preflight(spec)
    metrics = backend.run_case(spec.cases()[1], PromptSuite("s", tmp_path, ("a", "b"), "0"), spec)
    stats = metrics["stats"]
    assert stats["source"] == "perf_metrics" and metrics["output_tokens"] == 10
    assert stats["num_draft_tokens"] == 24 and stats["num_accepted_tokens"] == 12
    assert stats["num_drafts"] == 8 and stats["mean_acceptance_length"] == 2.5  # 1 + 12 / 8, from num_drafts
    sent = client.inputs[0]
    assert sent["return_perf_metrics"][0, 0] and sent["num_draft_tokens"][0, 0] == 4
    # TensorRT-LLM's reading: unset top-k/top-p would be greedy at any temperature, so the sweep states them
    assert (sent["runtime_top_k"][0, 0], sent["runtime_top_p"][0, 0]) == (0, 1.0) and sent["exclude_input_in_output"]


def test_served_method_mismatch_is_refused_before_work():
    spec = SweepSpec.build(model="fake", via="triton", url="fake:1", methods=["draft_target"], drafts=["d"],
                           k=[0, 2], suites=["code"], num_prompts=1)
    with pytest.raises(ConfigError, match="serves method 'ngram'"):
        TritonBackend(client=PerfMetricsClient(), tokenizer=object()).preflight(spec)
