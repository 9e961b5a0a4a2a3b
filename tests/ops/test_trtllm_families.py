"""TensorRT-LLM's MetricsCollector families (a Dynamo 1.6.1 TensorRT-LLM worker's /metrics with --publish-metrics):
read as the trtspec series they mean, per-position counters turned into drafts and rejections, NVIDIA's own lines
(tests/data/nvidia_stack_metrics_examples.json) parsed, the names checked against the facts file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trtspec.ops.scrape import TRTLLM_FAMILIES, ModelId, parse
from trtspec.ops.window import increments

DATA = Path(__file__).parents[1] / "data" / "nvidia_stack_metrics_examples.json"
EXAMPLES = {e["id"]: e for e in json.loads(DATA.read_text())["examples"]}
FACTS = json.loads((Path(__file__).parents[2] / "trtspec" / "targets" / "serving-observability.json").read_text())


def test_the_families_read_are_the_ones_the_facts_name():
    published = " ".join(f["name"] for f in FACTS["forms"]["dynamo_trtllm"]["acceptance"]["engine_metric_families"]
                         ["families"])
    for family in TRTLLM_FAMILIES:
        if family.startswith("trtllm_spec_decode_"):
            assert family in published, family


def test_dynamo_test_vector_line_is_a_draft_token_total_without_a_draft_count():
    sample = parse(EXAMPLES["dynamo_test_spec_decode_counter_line"]["payload"], when=1.0)
    counters = sample.models[ModelId("test")]
    assert counters.counters == {"num_draft_tokens": 4.0}
    assert "acceptance rate only" in counters.note


def test_dynamo_docs_worker_page_gives_requests_and_latency():
    sample = parse(EXAMPLES["dynamo_trtllm_worker_metrics_doc"]["payload"], when=1.0)
    counters = sample.models[ModelId("Qwen/Qwen3-0.6B")]
    assert counters.requests == {"stop": 150.0, "length": 5.0}
    assert counters.histograms["request_latency_seconds"].sum == pytest.approx(45.2)


def page(drafted: list[int], accepted: list[int], tokens: int, accepted_total: int) -> str:
    lines = ["# TYPE trtllm_spec_decode_num_draft_tokens_total counter",
             f'trtllm_spec_decode_num_draft_tokens_total{{model_name="m"}} {tokens}',
             "# TYPE trtllm_spec_decode_num_accepted_tokens_total counter",
             f'trtllm_spec_decode_num_accepted_tokens_total{{model_name="m"}} {accepted_total}',
             "# TYPE trtllm_spec_decode_drafted_tokens_total counter"]
    lines += [f'trtllm_spec_decode_drafted_tokens_total{{model_name="m",token_position="{i}"}} {n}'
              for i, n in enumerate(drafted)]
    lines += ["# TYPE trtllm_spec_decode_accepted_tokens_total counter"]
    lines += [f'trtllm_spec_decode_accepted_tokens_total{{model_name="m",token_position="{i}"}} {n}'
              for i, n in enumerate(accepted)]
    return "\n".join(lines) + "\n"


def test_per_position_counters_become_drafts_and_rejections():
    old = parse(page([10, 10, 10], [8, 5, 3], 33, 17), when=1.0).models[ModelId("m")]
    new = parse(page([30, 30, 30], [20, 12, 9], 99, 50), when=2.0).models[ModelId("m")]  # totals run ahead
    assert new.counters["num_drafts"] == 30
    assert (new.counters["num_draft_tokens"], new.counters["num_accepted_tokens"]) == (90, 41)  # the requests' own
    assert new.per_pos["num_rejections_per_pos"] == [10, 8, 3]  # reached 30, 20, 12; accepted 20, 12, 9
    w = increments(ModelId("m"), new, old, 1.0)
    assert w.num_drafts == 20 and not w.per_pos_estimated
    assert w.mean_acceptance_length == pytest.approx(1 + 25 / 20)
    assert w.conditional_per_pos == pytest.approx([12 / 20, 7 / 12, 6 / 7])
