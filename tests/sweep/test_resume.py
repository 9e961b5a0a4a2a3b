"""Results file durability and resume: torn lines, interrupted sweeps, killed processes, error records."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.sweep.fakes import FakeSweepBackend
from trtspec.errors import UsageError
from trtspec.sweep.grid import SweepSpec
from trtspec.sweep.records import ResultsFile, read_records, upgrade
from trtspec.sweep.runner import run_sweep

ROOT = Path(__file__).resolve().parents[2]


def _spec(**kw) -> SweepSpec:
    # via triton with a dummy url: validation needs no local models; the fake backend does the work
    base = {"model": "fake-target", "drafts": ["fake-draft"], "via": "triton", "url": "fake:1",
            "methods": ["draft_target", "ngram"], "k": [0, 1, 2, 3], "suites": ["code"], "num_prompts": 2,
            "calibration_batch_sizes": [1, 4]}
    return SweepSpec.build(**{**base, **kw})


def _case_ids(path: Path) -> list[str]:
    return [r["id"] for r in read_records(path) if r["kind"] == "case"]


def test_records_roundtrip_and_torn_tail(tmp_path):
    path = tmp_path / "r.jsonl"
    with ResultsFile(path) as rf:
        assert rf.open_for_append() == []
        rf.append({"kind": "case", "id": "a", "x": 1})
        rf.append({"kind": "case", "id": "b", "x": 2})
    with open(path, "a") as fh:
        fh.write('{"kind": "case", "id": "c", "x"')  # a write cut by a kill
    assert [r["id"] for r in read_records(path)] == ["a", "b"]
    with ResultsFile(path) as rf:
        assert [r["id"] for r in rf.open_for_append()] == ["a", "b"]
        rf.append({"kind": "case", "id": "c", "x": 3})
    lines = path.read_text().splitlines()
    assert len(lines) == 3 and all(json.loads(line)["schema"] == 1 for line in lines)


def test_corrupt_middle_line_is_an_error(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"kind": "case", "id": "a"}\nGARBAGE\n{"kind": "case", "id": "b"}\n')
    with pytest.raises(UsageError, match=":2: not a JSON record"):
        read_records(path)
    path.write_bytes(b"\x00\xffgarbage\n\x00\n")  # binary garbage (json.loads would guess UTF-16 and fail)
    with pytest.raises(UsageError, match=":1: not a JSON record"):
        read_records(path)
    path.write_text('[1, 2]\n{"kind": "case", "id": "a"}\n')
    with pytest.raises(UsageError, match=":1: a JSON value without the record fields"):
        read_records(path)


def test_interrupted_sweep_resumes_missing_cases_only(tmp_path):
    out = tmp_path / "results.jsonl"
    spec = _spec()
    total = len(spec.cases())
    with pytest.raises(KeyboardInterrupt):
        run_sweep(spec, out, backend=FakeSweepBackend(interrupt_after=3), show_progress=False)
    assert len(_case_ids(out)) == 3
    second = FakeSweepBackend()
    summary = run_sweep(spec, out, backend=second, show_progress=False)
    assert summary.skipped == 3 and summary.ran == total - 3
    assert len(second.ran) == total - 3 and second.calibrated == []  # calibration was already recorded
    ids = _case_ids(out)
    assert len(ids) == total == len(set(ids)) and set(ids) == {c.case_id for c in spec.cases()}
    # a third run does nothing
    assert run_sweep(spec, out, backend=FakeSweepBackend(), show_progress=False).ran == 0
    assert len(_case_ids(out)) == total


class _SlicingBackend(FakeSweepBackend):
    """Logs calibrations (with their repeats) and cases in order; slice i's target costs are the synthetic ones x
    scales[i] (a machine whose speed drifts between slices)."""

    def __init__(self, scales, **kw) -> None:
        super().__init__(**kw)
        self.log: list = []
        self.scales = iter(scales)

    def calibrate(self, spec, model_set):
        fields = super().calibrate(spec, model_set)
        self.log.append(("calibrate", spec.calibration_repeats))
        scale = next(self.scales)
        fields["target_s"] = {b: {n: t * scale for n, t in by_n.items()} for b, by_n in fields["target_s"].items()}
        return fields

    def run_case(self, case, suite, spec):
        metrics = super().run_case(case, suite, spec)
        self.log.append("case")
        return metrics


def test_calibration_slices_spread_over_the_cases_resume_and_merge_to_medians(tmp_path):
    from tests.sweep.fakes import synthetic_costs
    from trtspec.sweep.analysis import load_results
    from trtspec.sweep.runner import calibration_slices

    out = tmp_path / "results.jsonl"
    spec = _spec(calibration_slices=3, calibration_repeats=7)
    assert len(spec.cases()) == 7 and calibration_slices(spec, 7) == {0: [0], 2: [1], 5: [2]}
    assert calibration_slices(_spec(calibration_slices=4), 2) == {0: [0, 1], 1: [2], 2: [3]}  # more slices than cases
    with pytest.raises(KeyboardInterrupt):
        run_sweep(spec, out, backend=_SlicingBackend([1.0, 3.0], interrupt_after=4), show_progress=False)
    first = [r for r in read_records(out) if r["kind"] in ("case", "calibration")]
    assert [r["kind"][:5] for r in first] == ["calib", "case", "case", "calib", "case", "case"]
    calibs = [r for r in first if r["kind"] == "calibration"]
    assert [(r["slice"], r["slices"]) for r in calibs] == [(0, 3), (1, 3)] and calibs[1]["of"] == calibs[0]["id"]
    second = _SlicingBackend([2.0])
    run_sweep(spec, out, backend=second, show_progress=False)  # resumes: 3 cases, the last slice before the third
    assert second.log == ["case", "case", ("calibrate", 2), "case"]  # 7 // 3 repeats per slice
    assert run_sweep(spec, out, backend=_SlicingBackend([]), show_progress=False).ran == 0  # nothing left
    calibrations = load_results(out).calibrations
    assert len(calibrations) == 1
    merged = calibrations[calibs[0]["id"]]
    assert merged["slices_merged"] == 3 and merged["batch_sizes"] == [1, 4]
    for b in (1, 4):  # the median of the slices' x1, x3, x2: x2
        expected = synthetic_costs(b).target_s
        assert all(abs(merged["target_s"][str(b)][str(n)] - 2 * expected[n]) < 1e-12 for n in (1, 2, 3, 4))
    one = tmp_path / "one.jsonl"
    run_sweep(_spec(), one, backend=FakeSweepBackend(), show_progress=False)  # one slice: the record as before
    (calibration,) = [r for r in read_records(one) if r["kind"] == "calibration"]
    assert "slice" not in calibration and "of" not in calibration and calibration["id"] == calibs[0]["id"]


def test_error_records_do_not_stop_the_sweep_and_can_be_retried(tmp_path):
    out = tmp_path / "results.jsonl"
    spec = _spec()
    summary = run_sweep(spec, out, backend=FakeSweepBackend(fail_methods=["ngram"]), show_progress=False)
    errors = [r for r in read_records(out) if r.get("status") == "error"]
    assert summary.errors == 3 == len(errors) and summary.ran == len(spec.cases()) - 3
    assert errors[0]["error"]["type"] == "RuntimeError" and "synthetic failure" in errors[0]["error"]["message"]
    assert run_sweep(spec, out, backend=FakeSweepBackend(), show_progress=False).ran == 0
    retry = run_sweep(spec, out, backend=FakeSweepBackend(), show_progress=False, retry_errors=True)
    assert retry.ran == 3


def test_every_record_carries_sampling_prompts_and_template(tmp_path):
    out = tmp_path / "results.jsonl"
    run_sweep(_spec(k=[0, 1], methods=["ngram"]), out, backend=FakeSweepBackend(), show_progress=False)
    case = next(r for r in read_records(out) if r["kind"] == "case")
    assert case["chat_template"] is None and case["sampling"]["temperature"] == 0.0
    assert case["prompts"]["suite"] == "code" and case["prompts"]["num_prompts"] == 2
    assert case["spec"] == {"method": "none", "k": 0, "draft": None, "medusa": None, "tree": None}
    calib = next(r for r in read_records(out) if r["kind"] == "calibration")
    assert set(calib["target_s"]) == {"1", "4"}


def test_cases_reuse_prompts_round_robin_and_calibration_can_be_off(tmp_path):
    out = tmp_path / "results.jsonl"
    backend = FakeSweepBackend()
    run_sweep(_spec(k=[0, 1], methods=["ngram"], concurrency=[1, 4], num_requests=3, waves=2, calibrate=False), out,
              backend=backend, show_progress=False)
    assert not backend.calibrated and not [r for r in read_records(out) if r["kind"] == "calibration"]
    cases = [r for r in read_records(out) if r["kind"] == "case"]
    # max(3, 2 x concurrency) requests over the suite's 2 prompts, reused round-robin
    assert {r["params"]["concurrency"]: r["metrics"]["num_requests"] for r in cases} == {1: 3, 4: 8}
    assert {r["params"]["concurrency"]: r["prompts"]["num_prompts"] for r in cases} == {1: 3, 4: 8}


KILLABLE = textwrap.dedent("""
    import sys
    from tests.sweep.fakes import FakeSweepBackend
    from tests.sweep.test_resume import _spec
    from trtspec.sweep.runner import run_sweep
    run_sweep(_spec(), sys.argv[1], backend=FakeSweepBackend(delay_s=0.15), show_progress=False)
""")


def test_killed_process_resumes_without_duplicates_or_torn_records(tmp_path):
    out = tmp_path / "results.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", KILLABLE, str(out)], cwd=ROOT, env=env)
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and (not out.exists() or len(_case_ids(out)) < 3):
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    done_before = _case_ids(out)
    total = len(_spec().cases())
    assert 3 <= len(done_before) < total, "the sweep must be killed midway"
    backend = FakeSweepBackend()
    run_sweep(_spec(), out, backend=backend, show_progress=False)
    assert not set(backend.ran) & set(done_before)  # only the missing cases ran
    ids = _case_ids(out)
    assert len(ids) == len(set(ids)) == total
    for line in out.read_text().splitlines():
        json.loads(line)  # no torn line left behind


def _as_written_before_via(path: Path) -> None:
    """Rewrite a results file with the key names it had before `backend` (engine | triton) became `via`."""
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for rec in records:
        if rec["kind"] == "case":
            rec["backend"] = rec.pop("via_info")
            rec["params"]["backend"] = rec["params"].pop("via")
        elif rec["kind"] == "sweep":
            rec["backend_info"] = rec.pop("via_info")
            rec["spec"]["backend"] = rec["spec"].pop("via")
            rec["spec"].pop("timeout_s")  # a field added with `via`
    path.write_text("".join(json.dumps(rec) + "\n" for rec in records))


def test_results_written_with_backend_keys_load_and_resume(tmp_path):
    out = tmp_path / "results.jsonl"
    spec = _spec(k=[0, 2], methods=["ngram"])
    run_sweep(spec, out, backend=FakeSweepBackend(), show_progress=False)
    _as_written_before_via(out)
    assert '"backend": "triton"' in out.read_text() and '"via"' not in out.read_text()
    cases = [r for r in read_records(out) if r["kind"] == "case"]
    assert [r["params"]["via"] for r in cases] == ["triton", "triton"] and "backend" not in cases[0]["params"]
    assert cases[0]["via_info"]["name"] == "fake" and "backend" not in cases[0]
    sweep = next(r for r in read_records(out) if r["kind"] == "sweep")
    assert sweep["spec"]["via"] == "triton" and sweep["via_info"]["name"] == "fake"
    # the case ids did not change with the rename: nothing to rerun
    assert run_sweep(spec, out, backend=FakeSweepBackend(), show_progress=False).ran == 0


def test_shipped_results_from_before_via_still_load_and_resume():
    """docs/sweep/results.jsonl was written when the field was `backend`; its spec and case ids still match."""
    path = ROOT / "docs" / "sweep" / "results.jsonl"
    raw = json.loads(path.read_text().splitlines()[0])
    assert raw["kind"] == "sweep" and raw["spec"]["backend"] == "engine"  # the old name, on disk
    assert raw["spec"]["draft_model_name"] == "tensorrt_llm_draft"  # a field the sweep no longer has
    spec = SweepSpec.build(**upgrade(raw)["spec"])  # read as read_records reads it: `via`, without the retired field
    assert spec.via == "engine"
    recorded = {r["id"] for r in read_records(path) if r["kind"] == "case"}
    assert {c.case_id for c in spec.cases()} == recorded and len(recorded) == 136
    from trtspec.sweep.analysis import load_results

    results = load_results(path)
    assert results.timing == "cpu"  # read from via_info (was `backend`): every case ran on the CPU
    assert all(r.measured_speedup for r in results.rows)  # baselines matched on params `via`
    assert {r.params["via"] for r in results.rows} == {"engine"}
    assert {s["via_info"]["name"] for s in results.sweeps} == {"engine"}
