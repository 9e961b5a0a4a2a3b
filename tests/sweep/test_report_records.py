"""`trtspec report` on records it cannot use: every numeric field is checked once (trtspec/sweep/record_fields.py) and
a bad one is one line naming the file, the line, the field and the value (exit 2), before anything divides by it or
sizes a table by it; a torn last line (a sweep killed mid-write) is skipped with a warning naming it; the winners
table's runner-up is another variant. (Arbitrary records: tests/sweep/test_properties.py.)"""

from __future__ import annotations

import json
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli_checks import assert_clean_failure, run_cli
from tests.sweep.fakes import FakeSweepBackend
from trtspec.errors import ConfigError, UsageError
from trtspec.sweep.analysis import load_results
from trtspec.sweep.grid import SweepSpec
from trtspec.sweep.record_fields import MAX_BATCH_SIZE, MAX_K
from trtspec.sweep.runner import run_sweep

SMALL = {"model": "fake-target", "drafts": ["fake-draft"], "via": "triton", "url": "x:1",
         "methods": ["draft_target", "ngram"], "k": [0, 1, 2, 3], "temperatures": [0], "suites": ["code"],
         "concurrency": [1, 4], "num_prompts": 2, "calibration_batch_sizes": [1, 4]}


def sweep_lines(tmp_path_factory, **spec) -> list[dict]:
    out = tmp_path_factory.mktemp("results") / "results.jsonl"
    run_sweep(SweepSpec.build(**{**SMALL, **spec}), out, backend=FakeSweepBackend(), show_progress=False)
    return [json.loads(line) for line in out.read_text().splitlines()]


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> list[dict]:
    return sweep_lines(tmp_path_factory)


def write(path: Path, records: list[dict], tail: str = "") -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail)
    return path


def edited(records: list[dict], where, field: str, value) -> tuple[list[dict], int]:
    """A deep copy of `records` with `field` (dotted) set to `value` in every record `where` picks, and the line of
    the first one."""
    out = json.loads(json.dumps(records))
    first = 0
    for i, rec in enumerate(out):
        if not where(rec):
            continue
        *parents, last = field.split(".")
        node = rec
        for name in parents:
            node = node[name]
        node[last] = value
        first = first or i + 1
    assert first, field
    return out, first


def report(tmp_path: Path, results: Path, *extra: str) -> tuple[int, str, str]:
    return run_cli(["report", str(results), "--out", str(tmp_path / "rep"), "--no-plots", *extra], limit=60)


def case(method: str | None = None, k: int | None = None, concurrency: int | None = None):
    def pick(rec: dict) -> bool:
        if rec["kind"] != "case":
            return False
        params = rec["params"]
        return ((method is None or params["method"] == method) and (k is None or params["k"] == k)
                and (concurrency is None or params["concurrency"] == concurrency))
    return pick


def calibration(rec: dict) -> bool:
    return rec["kind"] == "calibration"


# The cases first, through the CLI (each one a traceback, a wrong success or memory growing before the check).
@pytest.mark.parametrize("where, field, value, shown", [
    (case(concurrency=1), "params.concurrency", 0, "params.concurrency=0: must be an integer in 1..4096"),
    (case(), "metrics.wall_time_s", math.nan, "metrics.wall_time_s=nan: must be a finite number of seconds"),
    (case(), "metrics.wall_time_s", math.inf, "metrics.wall_time_s=inf: must be a finite number of seconds"),
    (case(), "metrics.wall_time_s", -1.0, "metrics.wall_time_s=-1.0: must be a finite number of seconds at least"),
    (case(), "metrics.wall_time_s", 0, "metrics.wall_time_s=0: must be a finite number of seconds at least 1e-09"),
    (case(method="none"), "metrics.output_tokens", -128, "metrics.output_tokens=-128: must be an integer in 0.."),
    (case(method="ngram"), "metrics.tokens_per_s", -1.0, "metrics.tokens_per_s=-1.0: must be a finite number at "),
    (calibration, "target_s.1.1", 0.0, "target_s.1.1=0.0: must be a finite number of seconds at least 1e-09"),
    (calibration, "draft_s.4", math.nan, "draft_s.4=nan: must be a finite number of seconds at least 0"),
])  # fmt: skip
def test_a_bad_number_is_one_line_naming_file_line_field_and_value(records, tmp_path, where, field, value, shown):
    bad, line = edited(records, where, field, value)
    results = write(tmp_path / "results.jsonl", bad)
    config = tmp_path / "build.yaml"
    code, out, err = report(tmp_path, results, "--write-config", str(config))
    assert_clean_failure(code, err, frozenset({2}))
    assert f"Error: {results}:{line}: {shown}" in err, err
    assert f"delete line {line}" in err  # the fix
    assert "x predicted" not in out and not config.exists() and not (tmp_path / "rep").exists()


@pytest.mark.process
def test_a_huge_k_is_refused_quickly_in_bounded_memory(tmp_path_factory, tmp_path):
    """k = 10^12 once sized the roofline projection's cost table (a model the projection can read: tiny); under a
    1 GiB address space the report exits 2 naming the line, in seconds."""
    lines = sweep_lines(tmp_path_factory, model="tiny", drafts=["tiny-draft"], methods=["draft_target"],
                        concurrency=[1])
    bad, line = edited(lines, case(k=2), "params.k", 10**12)
    results = write(tmp_path / "results.jsonl", bad)
    start = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "trtspec", "report", str(results), "--out", str(tmp_path / "rep"),
                          "--no-plots"], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"},
                         preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30)))
    assert run.returncode == 2, (run.stdout, run.stderr[-2000:])
    assert_clean_failure(run.returncode, run.stderr, frozenset({2}))
    assert f"{results}:{line}: params.k=1000000000000: must be an integer in 0..{MAX_K}" in run.stderr
    assert time.monotonic() - start < 30


# Every field the analysis reads, one bad value each (in-process: the loader is the one reader).
@pytest.mark.parametrize("where, field, value, problem", [
    (case(method="ngram"), "params.k", -1, "params.k=-1: must be an integer in 0..4096"),
    (case(method="ngram"), "params.k", 2.0, "params.k=2.0: must be an integer"),
    (case(method="ngram"), "params.k", True, "params.k=True: must be an integer"),
    (case(), "params.concurrency", MAX_BATCH_SIZE + 1, "params.concurrency=4097: must be an integer in 1..4096"),
    (case(), "params.concurrency", "4", "params.concurrency='4': must be an integer"),
    (case(), "params.temperature", math.nan, "params.temperature=nan: must be a finite number at least 0"),
    (case(), "params.temperature", -0.5, "params.temperature=-0.5: must be a finite number at least 0"),
    (case(), "params.temperature", 10**400, "params.temperature=<an integer of 1329 bits>: must be a finite number"),
    (case(), "params.max_new_tokens", 0, "params.max_new_tokens=0: must be an integer in 1..2147483647"),
    (case(), "params.method", "warp", "params.method='warp': is not a method trtspec knows"),
    (case(), "params.suite", ["code"], "params.suite=['code']: must be a string"),
    (case(), "params.draft", 3, "params.draft=3: must be a string or null"),
    (case(), "params.draft_runtime", "tvm", "params.draft_runtime='tvm': must be onnx"),  # torch is never written
    (case(), "metrics.cpu_time_s", -2, "metrics.cpu_time_s=-2: must be a finite number of seconds"),
    (case(), "metrics.wall_time_s", 1e300, "metrics.wall_time_s=1e+300: must be a finite number of seconds at least "
                                           "1e-09 and at most 1e+09"),
    (case(), "metrics.wall_time_s", "1.5", "metrics.wall_time_s='1.5': must be a finite number of seconds"),
    (case(), "metrics.num_requests", 0, "metrics.num_requests=0: must be an integer in 1.."),
    (case(), "metrics.num_steps", -3, "metrics.num_steps=-3: must be an integer in 0.."),
    (case(), "metrics.stats", None, "metrics.stats=None: must be an object"),
    (case(method="ngram"), "metrics.stats.num_drafts", 2**60, "metrics.stats.num_drafts=1152921504606846976: must be "
                                                              "an integer in 0..9007199254740992"),
    (case(method="ngram"), "metrics.stats.num_target_forwards", -1, "metrics.stats.num_target_forwards=-1"),
    (case(method="ngram"), "metrics.stats.mean_acceptance_length", math.inf,
     "metrics.stats.mean_acceptance_length=inf: must be a finite number at least 0 and at most 4097"),
    (case(method="ngram"), "metrics.stats.acceptance_rate", 1.5, "metrics.stats.acceptance_rate=1.5"),
    (case(method="ngram"), "metrics.stats.overhead_time_s", -0.1, "metrics.stats.overhead_time_s=-0.1"),
    (case(method="ngram"), "metrics.stats.num_accepted_tokens_per_pos", [3, -1],
     "metrics.stats.num_accepted_tokens_per_pos[1]=-1: must be an integer in 0.."),
    (case(method="ngram"), "metrics.stats.num_accepted_tokens_per_pos", {"0": 3},
     "metrics.stats.num_accepted_tokens_per_pos={'0': 3}: must be a list"),
    (case(method="ngram"), "metrics.per_request_counts", [[1, 2, 3, 4]],
     "metrics.per_request_counts[0]=[1, 2, 3, 4]: must be a list of 5 numbers"),
    (case(method="ngram"), "metrics.per_request_counts", [[1, 2, 3, 4, math.nan]],
     "metrics.per_request_counts[0][4]=nan: must be an integer in 0.."),
    (case(method="ngram"), "metrics.per_request_mean_acceptance_length", [1.5, -1.0],
     "metrics.per_request_mean_acceptance_length[1]=-1.0: must be a finite number at least 0"),
    (case(method="ngram"), "metrics.admission_trace", [[2, 1]], "metrics.admission_trace[0]=[2, 1]: must be a list "
                                                                "of 3 numbers"),
    (case(), "status", "skipped", "status='skipped': must be ok or error"),
    (case(), "via_info", [], "via_info=[]: must be an object or null"),
    (calibration, "target_s", {}, "target_s={}: must hold at least one batch size"),
    (calibration, "target_s.4", {}, "target_s.4={}: must be an object of tokens per sequence: seconds"),
    (calibration, "target_s.04", {"1": 0.01}, "target_s.04='04': a key of a batch size: an integer in 1..4096"),
    (calibration, "target_s.1.0", 0.01, "target_s.1.0='0': a key of tokens per sequence: an integer in 1..4097"),
    (calibration, "target_s.100000", {"1": 0.01}, "target_s.100000='100000': a key of a batch size"),
    (calibration, "target_s.1.2", -0.01, "target_s.1.2=-0.01: must be a finite number of seconds at least 1e-09"),
    (calibration, "draft_s", [0.1], "draft_s=[0.1]: must be an object of batch size: seconds"),
    (calibration, "overhead_s", {"1": math.inf}, "overhead_s.1=inf: must be a finite number of seconds"),
    (calibration, "proposer_s", {"ngram": {"1": -1}}, "proposer_s.ngram.1=-1: must be a finite number of seconds"),
    (calibration, "model", None, "model=None: must be a string"),
    (calibration, "of", 7, "of=7: must be a string or null"),
    (calibration, "draft_runtime", "torch", "draft_runtime='torch': must be onnx"),
    (lambda rec: rec["kind"] == "sweep", "spec", "x", "spec='x': must be an object"),
])  # fmt: skip
def test_every_field_read_is_checked(records, tmp_path, where, field, value, problem):
    bad, line = edited(records, where, field, value)
    results = write(tmp_path / "results.jsonl", bad)
    with pytest.raises(ConfigError) as info:
        load_results(results)
    assert str(info.value).startswith(f"{results}:{line}: {problem}"), str(info.value)
    assert "\n" not in str(info.value)


def test_a_missing_field_and_cpu_timing_without_cpu_seconds(records, tmp_path):
    bad, line = edited(records, case(method="none"), "params", {"k": 0})
    results = write(tmp_path / "results.jsonl", bad)
    with pytest.raises(UsageError, match=rf"results.jsonl:{line}: params.method is missing$"):
        load_results(results)
    results = write(tmp_path / "results.jsonl", records)  # a triton sweep: no CPU seconds
    first_case = next(i for i, rec in enumerate(records, start=1) if rec["kind"] == "case")
    with pytest.raises(UsageError, match=rf"results.jsonl:{first_case}: metrics.cpu_time_s is missing$"):
        load_results(results, timing="cpu")
    assert load_results(results).timing == "wall"  # auto: wall when CPU seconds are missing


def test_a_superseded_record_is_not_read(records, tmp_path):
    """Only the last record of each id is used (and checked): a resumed sweep's rerun replaces a bad one."""
    bad, _ = edited(records, case(method="ngram", k=2, concurrency=1), "metrics.wall_time_s", math.nan)
    rerun = [r for r in records if case(method="ngram", k=2, concurrency=1)(r)]
    results = write(tmp_path / "results.jsonl", bad + rerun)
    assert len(load_results(results).rows) == len([r for r in records if r["kind"] == "case"])


@pytest.mark.parametrize("tail", ['{"kind": "case", "id": "abc", "sta', '{"kind": "case", "id": "abc"}'])
def test_a_torn_last_line_is_skipped_with_a_warning_naming_it(records, tmp_path, tail):
    """A sweep killed mid-write leaves a line without its newline; the sweep cuts it on resume (records.py) and the
    report skips it, saying so on stderr and in the report."""
    results = write(tmp_path / "results.jsonl", records, tail)
    code, out, err = report(tmp_path, results)
    assert code == 0, err
    torn = len(records) + 1
    assert f"warning: {results}:{torn}: skipped the last line: it has no newline at its end" in err
    assert f"{results}:{torn}: skipped the last line" in (tmp_path / "rep" / "report.md").read_text()
    code, out, err = report(tmp_path, write(tmp_path / "whole.jsonl", records))
    assert code == 0 and "warning" not in err


def test_a_torn_line_before_the_last_is_refused(records, tmp_path):
    results = tmp_path / "results.jsonl"
    results.write_text(json.dumps(records[0]) + "\n" + '{"kind": "case", "id": "abc", "sta\n'
                       + "".join(json.dumps(r) + "\n" for r in records[1:]))
    code, _, err = report(tmp_path, results)
    assert_clean_failure(code, err, frozenset({2}))
    assert f"{results}:2: not a JSON record" in err


def test_the_runner_up_is_another_variant_or_a_dash(tmp_path_factory, records, tmp_path):
    """Without suffix cases the winners table has a runner-up column: the fastest case of a variant other than the
    fastest's; "-" when only one variant ran."""
    code, _, err = report(tmp_path, write(tmp_path / "two.jsonl", records))
    assert code == 0, err
    table = _winners(tmp_path / "rep" / "report.md")
    assert table and all(len(row) == 5 for row in table)
    for _, _, _, fastest, runner_up in table:
        assert fastest.split()[0] != runner_up.split()[0], (fastest, runner_up)
    assert {row[3].split()[0] for row in table} | {row[4].split()[0] for row in table} == {
        "draft_target:fake-draft", "ngram"}
    one = sweep_lines(tmp_path_factory, methods=["ngram"])
    code, _, err = report(tmp_path, write(tmp_path / "one.jsonl", one))
    assert code == 0, err
    assert [row[4] for row in _winners(tmp_path / "rep" / "report.md")] == ["-", "-"]


def _winners(report_md: Path) -> list[list[str]]:
    text = report_md.read_text()
    section = text[text.index("## Where each method wins"):].split("\n\n")[1]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in section.splitlines()[2:]]
