"""scripts/bench.py writes each section under its own heading and replaces it in place on re-runs."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("bench", ROOT / "scripts" / "bench.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench"] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def test_write_section_appends_then_replaces(tmp_path):
    bench = _bench()
    out = tmp_path / "benchmarks.md"
    a = bench.Section(title="A", columns=["x", "y"], rows=[["1", "2"]], notes=["first"])
    b = bench.Section(title="B", columns=["x"], rows=[["3"]])
    bench.write_section(out, a, "python scripts/bench.py --section a")
    bench.write_section(out, b, "python scripts/bench.py --section b")
    a.rows, a.notes = [["5", "6"]], ["second"]
    bench.write_section(out, a, "python scripts/bench.py --section a")
    text = out.read_text()
    assert text.count("## A") == 1 and text.count("## B") == 1 and text.index("## A") < text.index("## B")
    assert "| 5 | 6 |" in text and "| 1 | 2 |" not in text and "- second" in text
    assert "Command: `python scripts/bench.py --section a`" in text
    assert "- second\n\n## B" in text  # a replaced section keeps the blank line before the next heading
    assert set(bench.SECTIONS) >= {"engine"}


def _case_record(case, rate: float, digest: str = "plain", **metrics) -> dict:
    stats = {"num_drafts": 4, "num_draft_tokens": 8, "num_accepted_tokens": 4, "num_target_forwards": 10}
    return {"kind": "case", "status": "ok", "params": case.params(),
            "metrics": {"tokens_per_s": rate, "tokens_per_cpu_s": rate, "output_sha256": digest, "stats": stats,
                        "latencies_s": [0.1, 0.2], "num_requests": 2, "requests_drafted": 2, **metrics}}


def test_schedule_section_is_registered_and_judges_each_load_by_paired_rounds():
    """The schedule section's sweeps build from the script's defaults; its verdict pairs the schedule with the best
    of no speculation and fixed k round by round, per concurrency and for the ramp; the gate's verdict needs the
    gate closed within its window and gated / plain >= 0.97 per round."""
    from benchlib import benchmarks_schedule as bs
    from benchlib.benchmarks import Measured
    from trtspec.contracts.schedule import SpecSchedule
    from trtspec.sweep.grid import schedule_text

    bench = _bench()
    assert bench.SECTIONS["schedule"] is bench.bench_schedule
    run = bs.ScheduleBench(concurrency=(1, 4), ramp=(1, 4, 1), fixed_ks=(1, 2), repeats=3, gate_repeats=2)
    schedule = SpecSchedule(draft_len=((1, 3), (4, 1)), max_concurrency=8, acceptance_window=4,
                            acceptance_length_threshold=0.4)
    assert {m for m in run.recommendation_spec().methods} == {"draft_target", "ngram"}
    assert run.recommendation_spec().stagger_start and run.comparison_spec(schedule).stagger_start  # no lockstep
    text = schedule_text(schedule)
    cases = run.comparison_spec(schedule).cases()
    assert {bs.row_name(c.params(), text)[1] for c in cases} == {
        "no speculation", "fixed k=1", "fixed k=2", "adaptive k<=8", "recommended schedule", bs.GATE_OFF}
    assert bs.ungated(schedule) == SpecSchedule(draft_len=((1, 3), (4, 1)), max_concurrency=8)
    # rates per round: fixed k=2 is best everywhere; the schedule keeps up at c=1 and on the ramp, not at c=4
    rate = {"no speculation": 100.0, "fixed k=1": 110.0, "fixed k=2": 120.0, "adaptive k<=8": 115.0,
            bs.GATE_OFF: 108.0}
    records = []
    for case in cases:
        name, load = bs.row_name(case.params(), text)[1], bs._load(case.params())
        base = 119.0 if load != "c=4" else 100.0
        wobble = 1 + 0.2 * case.repeat  # the machine's speed drifts between rounds; pairing cancels it
        gate = {"gate": {"closed_after": 4, "window_mean": 1.25}} if case.schedule == text and load == "c=4" else {}
        records.append(_case_record(case, rate.get(name, base) * wobble, **gate))
    rows, verdicts = bs.comparison_rows(Measured(records, None, None), "cpu", text)
    assert [v.load for v in verdicts] == ["c=1", "c=4", "ramp 1,4,1"]
    assert [v.best for v in verdicts] == ["fixed k=2"] * 3 and [v.passed for v in verdicts] == [True, False, True]
    assert abs(verdicts[0].paired - 119 / 120) < 1e-9 and abs(verdicts[0].adaptive_paired - 115 / 120) < 1e-9
    assert [round(x, 9) for x in verdicts[0].ungated_per_round] == [0.9] * 3 and "gate off / best = 0.90" in verdicts[0].line()
    assert verdicts[1].gate == "the gate closed in 3 of 3 rounds after 4 finished requests (median), window mean " \
        "1.25 at the end (median)" and verdicts[0].gate == ""
    assert [r[-1] for r in rows if r[0] == "recommended schedule"] == ["PASS", "FAIL", "PASS"]
    # a threshold of 1.5 accepted draft tokens per iteration is out of reach of k = 1 (at most 1), not of k = 3
    assert bs.unreachable_gate(SpecSchedule(draft_len=((1, 3), (4, 1), (8, 0)), acceptance_window=8,
                                            acceptance_length_threshold=1.5)) == [1]
    assert bs.unreachable_gate(schedule) == [] and bs.unreachable_gate(bs.ungated(schedule)) == []
    assert bs.gate_concurrency(schedule, 3, 4, (1, 4)) == 4
    assert bs.gate_concurrency(SpecSchedule(draft_len=((1, 3), (2, 0))), 3, 4, (1, 4)) == 1
    gate_cases = run.gate_spec(schedule, 4).cases()
    assert {c.schedule for c in gate_cases} == {None, text, schedule_text(bs.permanent(schedule))}  # probes priced
    assert {c.schedule for c in run.gate_spec(bs.permanent(schedule), 4).cases()} == {
        None, schedule_text(bs.permanent(schedule))}  # a permanent gate: no second gated cell
    gate_records = [_case_record(c, 100.0 if c.method == "none" else rate_, gate={"closed_after": closed})
                    for c in gate_cases for rate_, closed in [(98.0 if c.repeat else 96.0, 4 + c.repeat)]]
    _, gate = bs.gate_result(Measured(gate_records, None, None), "ngram", schedule, "cpu")
    assert gate.closed_after == [4, 5] and not gate.closed_in_window and not gate.passed  # round 1: too late
    assert abs(gate.paired - 0.97) < 1e-9 and gate.acceptance == 2.0  # no finish trace: the whole cell
    # judged from the close on: the gated run is slow for its first 4 finished requests (the window), then as fast as
    # plain; the whole cell's ratio shows the window, the verdict's does not
    plain_trace = [[10 * i, 0.1 * i] for i in range(1, 21)]  # 100 tokens per CPU second throughout
    gated_trace = [[10 * i, 0.2 * i if i <= 4 else 0.8 + 0.1 * (i - 4)] for i in range(1, 21)]
    # without probes the same gate runs 25% faster after its close (it closes at 4 as well): the probes' cost is 0.8
    permanent_trace = [[10 * i, 0.2 * i if i <= 4 else 0.8 + 0.08 * (i - 4)] for i in range(1, 21)]
    traced = [_case_record(c, 100.0 if c.method == "none" else 200 / 2.4,
                           finish_trace_cpu_s=(plain_trace if c.method == "none" else gated_trace if c.schedule == text
                                               else permanent_trace),
                           gate={"closed_after": 4, "probes": 1 if c.schedule == text else 0}) for c in gate_cases]
    rows, gate = bs.gate_result(Measured(traced, None, None), "ngram", schedule, "cpu")
    assert gate.closed_in_window and gate.passed and gate.probes == [1, 1]
    assert [round(x, 9) for x in gate.probe_cost] == [0.8, 0.8] and "with / without probes = 0.80" in gate.line()
    assert [r[0] for r in rows] == ["no speculation", "ngram schedule + gate",
                                    "ngram schedule + gate, no probes (TensorRT-LLM's)"]
    assert [r[-1] for r in rows] == ["", "PASS", ""]
    assert [round(x, 9) for x in gate.after_close] == [1.0, 1.0] and round(gate.whole, 6) == round(200 / 240, 6)
    assert bs.rate_after({"finish_trace_cpu_s": plain_trace, "tokens_per_cpu_s": 7.0}, None) == 7.0  # no close: whole
    assert "from the close on, gated / plain = 1.00" in gate.line() and "whole cell" in gate.line()


def test_the_schedule_is_judged_against_the_one_chosen_per_batch_size_alone():
    """Issue 40: over the ramp the recommended schedule must keep up with the best fixed k and not fall below the
    schedule chosen per batch size alone (paired per round; identical schedules are one row)."""
    from benchlib import benchmarks_schedule as bs

    _bench()
    rounds = {"no speculation": {0: 100.0, 1: 110.0}, "fixed k=3": {0: 120.0, 1: 132.0}}
    keeps = bs.load_verdict("ramp 1,4,1", {**rounds, "recommended schedule": {0: 119.0, 1: 131.0},
                                           bs.PER_BATCH: {0: 118.0, 1: 130.0}})
    assert keeps.passed and keeps.per_batch_per_round == [119.0 / 118.0, 131.0 / 130.0]
    below = bs.load_verdict("ramp 1,4,1", {**rounds, "recommended schedule": {0: 119.0, 1: 131.0},
                                           bs.PER_BATCH: {0: 125.0, 1: 138.0}})
    assert not below.passed and "schedule / schedule chosen per batch size alone = 0.95" in below.line()
    assert bs.ramp_profile((1, 2, 4, 2, 1)) == {1: 2.0, 2: 4.0, 4: 4.0}
    assert bs.row_name({"method": "draft_target", "k": 3, "schedule": "b"}, "a", "b")[1] == bs.PER_BATCH
