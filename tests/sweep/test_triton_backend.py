"""The sweep via triton without a server: TensorRT-LLM draft-target through a BLS test double, the torch flavour's
perf metrics through an engine-model test double, and the refusals before any work."""

from __future__ import annotations

import numpy as np
import pytest

from tests.sweep.fakes import FakeBLSClient
from trtspec.errors import ConfigError, ServerError
from trtspec.sweep.backend_triton import TritonBackend
from trtspec.sweep.grid import SweepSpec
from trtspec.sweep.prompts import PromptSuite
from trtspec.triton.client import TritonClient


class CharTokenizer:  # test double: the real backend loads the target's tokenizer.json
    eos_token_id = 1

    def encode(self, text, add_special_tokens=True):
        return [0] * add_special_tokens + [ord(c) % 50 for c in text]


def _bls_spec(**fields):
    return SweepSpec.build(model="fake", via="triton", url="fake:1", flavour="tensorrtllm", methods=["draft_target"],
                           drafts=["fake-draft"], k=[0, 3], suites=["code"], num_prompts=2, concurrency=[2],
                           max_new_tokens=6, **fields)


def _run(spec, client, tmp_path):
    backend = TritonBackend(client=client, tokenizer=CharTokenizer())
    backend.preflight(spec)
    suite = PromptSuite("s", tmp_path, ("abc def", "xyz"), "0")
    return [backend.run_case(case, suite, spec) for case in spec.cases()]


def test_tensorrtllm_draft_target_runs_in_the_bls_and_sums_its_totals(tmp_path):
    client = FakeBLSClient(per_request=(4, 11, 6))  # a BLS that declares no num_drafts (as every release's)
    plain, drafted = _run(_bls_spec(), client, tmp_path)
    # output tokens: the tokenizer's encoding of text_output, no special tokens (12 characters per request)
    assert plain["output_tokens"] == drafted["output_tokens"] == 24
    assert plain["stats"]["source"] == "plain" and plain["stats"]["num_draft_tokens"] == 0
    stats = drafted["stats"]
    assert stats["source"] == "bls" and (stats["num_draft_tokens"], stats["num_accepted_tokens"]) == (22, 12)
    assert stats["acceptance_rate"] == pytest.approx(12 / 22)
    # no num_drafts output: drafts estimated as draft tokens / k, and the record says so
    assert stats["num_drafts_estimated"] and stats["num_drafts"] == round(22 / 3)
    assert stats["mean_acceptance_length"] == pytest.approx(1 + 12 / (22 / 3))
    # the baseline goes through the BLS too, without drafting; the draft-target case asks for the acceptance outputs
    (base_in, base_out), (base_in2, _), (spec_in, spec_out), _ = client.calls
    assert "num_draft_tokens" not in base_in and "return_perf_metrics" not in base_in and base_out == ["text_output"]
    assert spec_in["num_draft_tokens"][0, 0] == 3 and spec_in["num_draft_tokens"].dtype == np.int32
    assert spec_in["return_perf_metrics"][0, 0] and spec_in["exclude_input_in_output"][0, 0]
    assert spec_out == ["text_output", "acceptance_rate", "total_accepted_draft_tokens", "total_draft_tokens"]
    # text in, under the BLS's names and dtypes; sampling over the whole distribution, request i with seed + i
    assert spec_in["text_input"].dtype == object and spec_in["text_input"].shape == (1, 1)
    assert {spec_in["text_input"][0, 0], base_in2["text_input"][0, 0]} <= {b"abc def", b"xyz"}
    assert spec_in["max_tokens"].dtype == np.int32 and spec_in["max_tokens"][0, 0] == 6
    assert (spec_in["top_k"][0, 0], spec_in["top_p"][0, 0], spec_in["temperature"][0, 0]) == (0, 1.0, 0.0)
    assert spec_in["seed"].dtype == np.uint64 and spec_in["top_p"].dtype == np.float32


def test_num_drafts_is_exact_where_the_bls_declares_it(tmp_path):
    client = FakeBLSClient(per_request=(4, 11, 6), declares_num_drafts=True)
    _, drafted = _run(_bls_spec(), client, tmp_path)
    stats = drafted["stats"]
    assert client.calls[-1][1][-1] == "num_drafts"
    assert not stats["num_drafts_estimated"] and stats["num_drafts"] == 8
    assert stats["mean_acceptance_length"] == pytest.approx(1 + 12 / 8)


def test_a_bls_that_cannot_serve_draft_target_is_refused_before_work():
    spec = _bls_spec()
    with pytest.raises(ServerError, match="declares no return_perf_metrics, acceptance_rate.*0.18.0") as exc:
        TritonBackend(client=FakeBLSClient(acceptance=False), tokenizer=CharTokenizer()).preflight(spec)
    assert "--trtllm-version" in exc.value.hint
    with pytest.raises(ServerError, match="has no draft model"):
        TritonBackend(client=FakeBLSClient(draft_model=None), tokenizer=CharTokenizer()).preflight(spec)
    with pytest.raises(ServerError, match="'my_bls' is not ready") as exc:
        TritonBackend(client=FakeBLSClient(), tokenizer=CharTokenizer()).preflight(_bls_spec(bls_model_name="my_bls"))
    assert "bls_model_name" in exc.value.hint
    client = FakeBLSClient(name="my_bls")
    TritonBackend(client=client, tokenizer=CharTokenizer()).preflight(_bls_spec(bls_model_name="my_bls"))


def test_a_spec_naming_the_draft_model_gets_the_fix():
    with pytest.raises(ConfigError, match="draft_model_name='tensorrt_llm_draft': is no longer a sweep field") as exc:
        _bls_spec(draft_model_name="tensorrt_llm_draft")
    assert "bls_model_name" in exc.value.hint and "\n" not in str(exc.value)


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

    def model_config(self, model):
        return {"parameters": {"method": {"string_value": "ngram"}, "max_k": {"string_value": "8"}}}

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
    assert not stats["num_drafts_estimated"]
    sent = client.inputs[0]
    assert sent["return_perf_metrics"][0, 0] and sent["num_draft_tokens"][0, 0] == 4
    # TensorRT-LLM's reading: unset top-k/top-p would be greedy at any temperature, so the sweep states them
    assert (sent["runtime_top_k"][0, 0], sent["runtime_top_p"][0, 0]) == (0, 1.0) and sent["exclude_input_in_output"]


def test_served_method_mismatch_is_refused_before_work():
    spec = SweepSpec.build(model="fake", via="triton", url="fake:1", methods=["draft_target"], drafts=["d"],
                           k=[0, 2], suites=["code"], num_prompts=1)
    with pytest.raises(ConfigError, match="serves method 'ngram'"):
        TritonBackend(client=PerfMetricsClient(), tokenizer=object()).preflight(spec)
