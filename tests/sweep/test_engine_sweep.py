"""The sweep via engine end to end on the random pair: calibration + cases + report, and greedy determinism."""

from __future__ import annotations

import pytest

from trtspec.sweep.grid import SweepSpec
from trtspec.sweep.records import read_records
from trtspec.sweep.report import render_report
from trtspec.sweep.runner import run_sweep

pytest.importorskip("trtspec.spec.engine", reason="needs the reference engine (branch engine)")


def test_engine_backend_tiny_sweep(random_pair, tmp_path):
    target, draft = random_pair
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "abcabcabcabc abc"}\n{"prompt": "the cat the cat the"}\n')
    spec = SweepSpec.build(model=str(target), drafts=[str(draft)], methods=["draft_target", "ngram"], k=[0, 2],
                           temperatures=[0.0, 1.0], suites=[str(prompts)], concurrency=[1, 2], max_new_tokens=8,
                           num_prompts=2, max_draft_len=3, calibration_batch_sizes=[1, 2], threads=1)
    out = tmp_path / "results.jsonl"
    summary = run_sweep(spec, out, show_progress=False)
    assert summary.errors == 0, summary.error_messages
    records = read_records(out)
    cases = [r for r in records if r["kind"] == "case"]
    assert len(cases) == len(spec.cases()) == 2 * 2 * 3
    calib = [r for r in records if r["kind"] == "calibration"]
    assert len(calib) == 1 and set(calib[0]["target_s"]) == {"1", "2"}
    assert set(calib[0]["target_s"]["1"]) == {"1", "2", "3", "4"} and calib[0]["draft_s"]["1"] > 0
    for rec in cases:
        m = rec["metrics"]
        assert m["output_tokens"] == 2 * 8 and m["tokens_per_s"] > 0 and m["num_steps"] > 0
        stats = m["stats"]
        if rec["params"]["k"] == 0:
            assert stats["num_drafts"] == 0 and stats["num_target_forwards"] == 16
        else:
            assert stats["num_drafts"] > 0 and stats["num_draft_tokens"] <= 2 * stats["num_drafts"]
            assert len(stats["num_accepted_tokens_per_pos"]) <= 2
    # greedy acceptance does not depend on concurrency (batching is exact)
    greedy = {(r["params"]["method"], r["params"]["concurrency"]): r["metrics"]["stats"]["num_accepted_tokens"]
              for r in cases if r["params"]["temperature"] == 0 and r["params"]["k"] == 2}
    assert greedy[("draft_target", 1)] == greedy[("draft_target", 2)]
    assert greedy[("ngram", 1)] == greedy[("ngram", 2)]
    made = render_report(out, tmp_path / "report", plots=False)
    assert "## Cost model check" in made.markdown.read_text()
    assert all(r.prediction is not None for r in made.results.rows)
