"""docs/benchmarks.md sections from sweep records: rows, medians over rounds, lossless checks and the columns the
docs show (synthetic records; no model runs)."""

from __future__ import annotations

from pathlib import Path

from benchlib import benchmarks
from benchlib.benchmarks import Comparison, Measured
from trtspec.contracts.metrics import AcceptanceStats
from trtspec.sweep.runner import SweepSummary

DOCS = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"


def _stats(drafts: int = 0, drafted: int = 0, accepted: int = 0, forwards: int = 10, emitted: int = 10) -> dict:
    return AcceptanceStats(num_drafts=drafts, num_draft_tokens=drafted, num_accepted_tokens=accepted,
                           num_target_forwards=forwards, num_emitted_tokens=emitted, target_time_s=0.9,
                           overhead_time_s=0.1).to_dict()


def _rec(case, repeat: int, tokens_per_s: float, digest: str = "plain", **metrics) -> dict:
    params = {**case.params(), **({"repeat": repeat} if repeat else {})}
    return {"kind": "case", "status": "ok", "params": params,
            "metrics": {"tokens_per_s": tokens_per_s, "output_sha256": digest, "stats": _stats(), **metrics}}


def _measured(records) -> Measured:
    return Measured(records, SweepSummary(total=len(records), skipped=0), results=None)


def _docs_columns(title_start: str) -> list[str]:
    lines = DOCS.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"## {title_start}"))
    header = next(line for line in lines[start:] if line.startswith("| "))
    return [c.strip() for c in header.strip("|").split("|")]


def test_engine_section_medians_lossless_check_and_comparison_rows():
    spec = benchmarks.engine_spec(model="tiny", draft="tiny-draft", ks=[2], num_prompts=2, prompt_tokens=32,
                                  max_new_tokens=8, max_ngram=3, repeats=3, threads=1)
    cases = spec.cases()
    assert [(c.method, c.k) for c in cases[:3]] == [("none", 0), ("draft_target", 2), ("ngram", 2)]
    rates = {"none": [10, 30, 20], "draft_target": [40, 20, 30], "ngram": [15, 15, 15]}
    records = [_rec(c, c.repeat, rates[c.method][c.repeat],
                    digest="other" if c.method == "ngram" and c.repeat == 2 else "plain",
                    stats=_stats(drafts=4, drafted=8, accepted=6) if c.k else _stats()) for c in cases]
    section = benchmarks.engine_section(spec, _measured(records),
                                        [Comparison("transformers: greedy", [25.0, 35.0], ["plain", "plain"])],
                                        ["a comparison note"])
    assert section.columns == _docs_columns("Reference engine vs transformers")
    assert section.rows[0][:5] == ["engine: target only (k=0)", "20.0", "1.00x", "-", "-"]
    assert section.rows[1][:5] == ["engine: draft_target k=2", "30.0", "1.50x", "2.50", "0.75"]
    assert section.rows[1][-1] == "yes" and section.rows[2][-1] == "NO"  # one ngram round differed
    assert section.rows[3] == ["transformers: greedy", "30.0", "1.50x", "-", "-", "-", "-", "yes"]
    assert "a comparison note" in section.notes and any("transformers: greedy at 30.0" in n for n in section.notes)


def test_batching_section_rows_per_concurrency_typical_run_and_verdict():
    spec = benchmarks.batching_spec(model="tiny", draft="tiny-draft", concurrency=[1, 4], fixed_ks=[2, 4],
                                    adaptive_max_k=8, max_new_tokens=8, prompt_tokens=32, min_requests=6, repeats=3,
                                    threads=1)
    assert spec.num_prompts == 8  # 2 x max(concurrency) prompts, reused round-robin up to max(4 x c, min_requests)
    assert {c.concurrency: c.num_requests for c in spec.cases()} == {1: 6, 4: 16}
    cases = spec.cases()  # rounds over the whole grid; in each, every concurrency's cases together, shuffled
    assert [(c.repeat, c.concurrency) for c in cases] == [(r, c) for r in range(3) for c in (1, 4) for _ in range(4)]
    assert [(c.k, c.adaptive) for c in cases[:4]] != [(c.k, c.adaptive) for c in cases[8:12]]
    records = []
    for c in spec.cases():
        rate = {0: 100.0, 1: 90.0, 2: 80.0}[c.repeat]  # the machine's speed, round by round
        if c.adaptive:  # at c=4 one slow adaptive cell (round 0): pairs 0.83, 1.00, 0.97
            rate *= 1.0 if c.concurrency == 1 else {0: 1.0, 1: 1.2, 2: 1.16}[c.repeat]
        else:
            rate *= {0: 1.0, 2: 1.2, 4: 1.1}[c.k]
        latencies = [0.1 * (c.repeat + 1)] * 5 + [0.9]
        records.append(_rec(c, c.repeat, rate, latencies_s=latencies, tokens_per_cpu_s=rate / 2,
                            stats=_stats(drafts=5, drafted=15, forwards=10) if c.k else _stats()))
    section = benchmarks.batching_section(spec, _measured(records), min_requests=6)
    assert section.columns == _docs_columns("Continuous batching")
    # rows in a fixed order whatever order the cells ran in
    assert [r[:2] for r in section.rows[:4]] == [["no speculation", "1"], ["fixed k=2 (draft_target)", "1"],
                                                 ["fixed k=4 (draft_target)", "1"], ["adaptive k<=8 (draft_target)", "1"]]
    # median 90 tokens/s, spread (100 - 80) / 90; the round nearest the median (round 1) gives the latencies
    assert section.rows[0][2:10] == ["90.0", "80-100", "22%", "45.0", "0.83", "200", "900", "0.00"]
    assert section.rows[1][6] == "1.00" and section.rows[1][-1] == "best"  # fixed k=2 is the best other row
    assert section.rows[3][-1] == "FAIL" and section.rows[7][-1] == "PASS"
    assert section.notes[0].startswith("Verdict (adaptive k >= 0.95 x the best")
    # c=1: the machine's speed (100, 90, 80) cancels in each round's ratio: 90 / 108 every round
    assert ("c=1: adaptive / best (fixed k=2) = 0.83, median of 3 paired rounds (90% interval 0.83-0.83, rounds "
            "0.83-0.83); ratio of medians 0.83 CPU, 0.83 wall: FAIL") in section.notes[0]
    # c=4: judged on the paired median (0.97), not on the ratio of medians (100 / 108 = 0.93)
    assert ("c=4: adaptive / best (fixed k=2) = 0.97, median of 3 paired rounds (90% interval 0.83-1.00, rounds "
            "0.83-1.00); ratio of medians 0.93 CPU, 0.93 wall: PASS") in section.notes[0]
    assert "judged on tokens per CPU second" in section.notes[0] and "FAIL." in section.notes[0]


def test_median_interval_is_seeded_and_brackets_the_median():
    values = [0.9, 1.1, 0.95, 1.0, 1.05, 0.97, 1.02, 0.99, 1.01, 0.93, 1.08]
    low, high = benchmarks.median_interval(values)
    assert low <= 1.0 <= high and (low, high) == benchmarks.median_interval(values)
    assert benchmarks.median_interval([2.0] * 5) == (2.0, 2.0)
    wide = benchmarks.median_interval(values, level=0.99)
    assert wide[0] <= low and wide[1] >= high


def test_lookahead_section_rows_per_suite_and_overall():
    spec = benchmarks.lookahead_spec(model="tiny", configs=["4,4,4", "7,5,7"], num_prompts=2, prompt_tokens=32,
                                     max_new_tokens=8, threads=1)
    cases = spec.cases()
    assert [(c.suite, c.lookahead, c.k) for c in cases[:3]] == [("code", None, 0), ("code", "4,4,4", 12),
                                                               ("code", "7,5,7", 28)]
    assert {c.concurrency for c in cases} == {2}  # each suite's prompts as one batch
    records = [_rec(c, 0, 50.0 if c.k else 100.0, num_requests=2,
                    digest="plain" if c.suite != "prose" or c.lookahead != "7,5,7" else "other",
                    stats=_stats(drafts=4, drafted=24, accepted=4) if c.k else _stats()) for c in cases]
    section = benchmarks.lookahead_section(spec, _measured(records))
    assert section.columns == _docs_columns("Lookahead decoding")
    assert section.rows[0] == ["W,N,G=4,4,4", "code", "2", "23", "2.00", "0.17", "1.00", "50.0", "100.0", "yes"]
    assert section.rows[3][:2] == ["W,N,G=7,5,7", "prose"] and section.rows[3][-1] == "NO"
    assert section.rows[-1][:5] == ["W,N,G=7,5,7", "all", "-", "55", "2.00"]
    assert len(section.rows) == 3 * 2 + 2


def test_dynamo_section_puts_1_and_2_workers_side_by_side():
    from benchlib import benchmarks

    spec = benchmarks.dynamo_spec(url="127.0.0.1:8000", model="tiny", k=4, concurrency=[1, 4], max_new_tokens=8,
                                  min_requests=6)
    assert spec.via == "openai" and spec.k == [0, 4] and spec.methods == ["draft_target"]

    def record(method, k, c, rate):
        stats = {"num_draft_tokens": 8 if k else 0, "mean_acceptance_length": 2.5}
        return {"params": {"method": method, "k": k, "concurrency": c},
                "metrics": {"tokens_per_s": rate, "latencies_s": [0.1, 0.3], "stats": stats}}

    runs = {w: benchmarks.Measured([record("none", 0, 4, 10.0 * w), record("draft_target", 4, 4, 15.0 * w)], None,
                                   None) for w in (1, 2)}
    section = benchmarks.dynamo_section(spec, runs, [["2 worker(s):", "c=4, 30.0 output tokens/s"]])
    assert [row[:4] for row in section.rows] == [["1", "no speculation", "4", "10.0"],
                                                 ["1", "draft_target k=4", "4", "15.0"],
                                                 ["2", "no speculation", "4", "20.0"],
                                                 ["2", "draft_target k=4", "4", "30.0"]]
    assert section.rows[1][-1] == "2.50" and section.rows[0][-1] == "-"
    assert "no speculation c=4: 2.00x; draft_target k=4 c=4: 2.00x" in section.notes[1]
    assert "aiperf" in section.notes[-1]


def test_sweep_section_rows_error_distribution_and_repeatability(tmp_path):
    from tests.sweep.fakes import FakeSweepBackend
    from trtspec.sweep.analysis import load_results
    from trtspec.sweep.records import read_records
    from trtspec.sweep.runner import run_sweep

    spec = benchmarks.sweep_spec(model="tiny", draft="tiny-draft", ks=[1, 2], num_prompts=2, max_new_tokens=16,
                                 repeats=2, threads=1)
    out = tmp_path / "results.jsonl"
    summary = run_sweep(spec, out, backend=FakeSweepBackend(noise=0.08), show_progress=False)
    records = [r for r in read_records(out) if r["kind"] == "case"]
    section = benchmarks.sweep_section(spec, Measured(records, summary, load_results(out)), (1.0, 2.5))
    assert section.columns == _docs_columns("Sweep + cost model")
    assert len(section.rows) == 8  # draft_target and ngram x k = 1, 2 x code, grounded
    assert section.rows[0][:2] == ["draft_target:tiny-draft code", "1"]
    assert all(row[4] == "0.0%" for row in section.rows)  # the synthetic machine repeats exactly
    notes = "\n".join(section.notes)
    assert "2 prompts x 16 new tokens = 32 tokens per round, 2 shuffled rounds (64 tokens per case)" in notes
    assert "Error distribution over 8 cases" in notes and "Measurement repeatability over 8 cases" in notes
    assert "load average 1.0 before and 2.5 after" in notes
    calibrations = [r for r in read_records(out) if r["kind"] == "calibration"]  # 4 slices, 4 repeats each
    assert spec.calibration_slices == 4 and spec.calibration_repeats == 16 and len(calibrations) == 4
    assert "4 slices spread over the rounds, the first before them, each the median of 4 interleaved repeats" in notes
