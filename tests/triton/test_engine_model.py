"""The trtspec_engine model's request parsing and metrics, without a server (fake pb_utils)."""

from __future__ import annotations

import numpy as np
import pytest

from trtspec.errors import RequestError
from trtspec.triton.engine_model import SpecMetrics, parse_request
from trtspec.triton.engine_params import EngineParams

PARAMS = EngineParams(target="tiny", method="draft_target", max_k=6, default_k=3, max_input_len=8, max_output_len=16)
VOCAB = 64


def tensors(**values):
    base = {"input_ids": np.array([[5, 6, 7]], dtype=np.int32), "input_lengths": np.array([3], dtype=np.int32),
            "request_output_len": np.array([4], dtype=np.int32)}
    base.update({k: (None if v is None else np.asarray(v)) for k, v in values.items()})
    return base.get


def test_parse_request_defaults_and_values():
    request = parse_request(tensors(), PARAMS, VOCAB)
    assert request.prompt_ids == [5, 6, 7] and request.spec.k == 3 and request.sampling.max_new_tokens == 4
    assert request.sampling.temperature == 0.0 and not request.streaming and request.exclude_input_in_output
    request = parse_request(tensors(input_lengths=[2], num_draft_tokens=[5], temperature=[0.7], runtime_top_k=[4],
                                    runtime_top_p=[0.9], random_seed=[11], end_id=[1], streaming=[True]), PARAMS, VOCAB)
    assert request.prompt_ids == [5, 6] and request.spec.k == 5 and request.streaming
    assert (request.sampling.temperature, request.sampling.top_k, request.sampling.seed) == (pytest.approx(0.7), 4, 11)
    assert request.sampling.top_p == pytest.approx(0.9) and request.sampling.stop_token_ids == (1,)


@pytest.mark.parametrize("values, message", [
    ({"input_ids": None}, "input_ids is required"),
    ({"input_ids": [[5, 6], [7, 8]]}, "batch size 2"),
    ({"input_lengths": [0]}, "empty prompt"),
    ({"input_lengths": [9]}, "exceeds the 3 tokens"),
    ({"input_ids": [list(range(9))], "input_lengths": [9]}, "more than max_input_len=8"),
    ({"input_ids": [[5, 64]], "input_lengths": [2]}, "token id 64 is outside the vocabulary [0, 64)"),
    ({"request_output_len": [17]}, "request_output_len=17 must be in [1, max_output_len=16]"),
    ({"runtime_top_k": [-1]}, "top_k=-1: must be >= 0"),
    ({"num_draft_tokens": [7]}, "num_draft_tokens (k)=7: must be in [0, 6]"),
    ({"temperature": [1.0, 2.0]}, "temperature must hold one value"),
])  # fmt: skip
def test_parse_request_refuses_with_a_clear_message(values, message):
    with pytest.raises(RequestError) as info:
        parse_request(tensors(**values), PARAMS, VOCAB)
    assert message in str(info.value)


class FakeMetric:
    def __init__(self, labels):
        self.labels, self.value = labels, 0.0

    def increment(self, value):
        self.value += value

    def set(self, value):
        self.value = value


class FakeFamily:
    COUNTER, GAUGE = "counter", "gauge"
    created: dict = {}

    def __init__(self, name, description, kind):
        self.name, self.kind, self.metrics = name, kind, []
        FakeFamily.created[name] = self

    def Metric(self, labels):  # noqa: N802 - pb_utils' spelling
        metric = FakeMetric(labels)
        self.metrics.append(metric)
        return metric


class FakePb:
    MetricFamily = FakeFamily


def test_metrics_accumulate_requests_and_positions():
    from trtspec.spec.metrics import AcceptanceStats

    metrics = SpecMetrics(FakePb, {"model": "m"})
    first, second = AcceptanceStats(), AcceptanceStats()
    first.observe(3, 2)
    first.observe(3, 0)
    second.observe(2, 2)
    metrics.finished("length", first)
    metrics.finished("stop", second)
    metrics.finished("abort")
    family = FakeFamily.created
    assert family["trtspec_spec_decode_num_drafts"].metrics[0].value == 3
    assert family["trtspec_spec_decode_num_draft_tokens"].metrics[0].value == 8
    assert family["trtspec_spec_decode_num_accepted_tokens"].metrics[0].value == 4
    per_pos = {m.labels["position"]: m.value for m in family["trtspec_spec_decode_num_accepted_tokens_per_pos"].metrics}
    assert per_pos == {"0": 2, "1": 2, "2": 0}  # k=3 drafts have a third position, never accepted here
    assert family["trtspec_spec_decode_mean_acceptance_length"].metrics[0].value == pytest.approx(1 + 4 / 3)
    assert family["trtspec_spec_decode_mean_acceptance_length"].kind == "gauge"
    requests = {m.labels["finish_reason"]: m.value for m in family["trtspec_spec_decode_requests"].metrics}
    assert requests == {"length": 1, "stop": 1, "abort": 1}
