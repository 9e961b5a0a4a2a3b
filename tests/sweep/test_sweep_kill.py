"""A real `trtspec sweep` (in-process engine on the embedded tiny pair) killed with SIGKILL at seeded points and run
again ends with the records of an uninterrupted run: the same ids, each case and calibration once, every line whole, and the same case
contents apart from timings.

Every run here times each calibration point once (--calibration-repeats 1, not the default 5) and warms each decoding
path up with WARMUP (2) tokens per request, not the product's WARMUP_TOKENS (16): no timing is compared, the calibration
record is still written once, between the sweep record and the cases, and every path is still warmed up (the same
closed loop of 4 requests) before its first case, in the killed run, the rerun and the uninterrupted one alike.

The seeded kill points: once the sweep record is written (during calibration), and once two cases are (during the
third)."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import time
from multiprocessing.process import BaseProcess
from pathlib import Path

import pytest

from tests import forked
from tests.cli_checks import run_cli

pytestmark = pytest.mark.process  # forked children (tests/forked.py)
ROOT = Path(__file__).resolve().parents[2]
ARGS = ["sweep", "--model", "tiny", "--draft", "tiny-draft", "--method", "draft_target", "--k", "0-3", "--suite",
        "code", "--num-prompts", "2", "--max-new-tokens", "8", "--calibration-batch-sizes", "1", "--threads", "1",
        "--calibration-repeats", "1", "--no-progress"]
WARMUP = 2
# `python -m trtspec`, each path's warm-up WARMUP tokens a request
CHILD = f"import trtspec.sweep.backend_engine as b; b.WARMUP_TOKENS = {WARMUP}; from trtspec.cli.main import main; main()"
TIMING = re.compile(r"(_s$|per_s|per_cpu_s|overhead_share|time|elapsed|date|host|_at$)")


def _sweep(out: Path) -> BaseProcess:
    """The sweep in a process of its own (tests/forked.py: forked with torch already imported)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return forked.start(CHILD, [*ARGS, "--out", str(out)], cwd=ROOT, env=env, stderr=out.with_suffix(".err"))


def _sweep_to_the_end(out: Path) -> None:
    """The same sweep in this process (only the run that is killed needs a process of its own)."""
    import trtspec.sweep.backend_engine

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(trtspec.sweep.backend_engine, "WARMUP_TOKENS", WARMUP)
        code, _, err = run_cli([*ARGS, "--out", str(out)], limit=300)
    assert code == 0, err


def _strip(value):
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if not TIMING.search(k)}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]  # a torn line fails here


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("whole") / "r.jsonl"
    _sweep_to_the_end(out)
    return _records(out)


# of the 6 records: seed 2 kills once 1 is written (during calibration), seed 9 once 4 are (during the third case: the
# rerun must skip the two done cases and the calibration). Seeds 1 and 3, run before, both drew 2 (during the first
# case: the calibration done, no case), a point seed 9's covers and which no mutation of the resume's case skipping
# fails.
@pytest.mark.parametrize("seed", [2, 9])
def test_sweep_killed_and_rerun_equals_an_uninterrupted_run(tmp_path, uninterrupted, seed):
    out = tmp_path / "r.jsonl"
    lines = random.Random(seed).randint(1, len(uninterrupted) - 1)  # kill once this many records are written
    proc = _sweep(out)
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and proc.exitcode is None and (
                not out.exists() or out.read_text().count("\n") < lines):
            time.sleep(0.005)
        proc.kill()  # SIGKILL
    finally:
        proc.join(timeout=30)
    assert proc.exitcode == -signal.SIGKILL, "the sweep must be killed before it ends"
    _sweep_to_the_end(out)  # the rerun
    got = _records(out)
    # a `sweep` record starts each run that has work left (its started_at): the rerun may add one; cases and
    # calibrations are written once each
    ids = [r["id"] for r in got if r["kind"] != "sweep"]
    assert len(ids) == len(set(ids)) and set(ids) == {r["id"] for r in uninterrupted if r["kind"] != "sweep"}
    assert {r["id"] for r in got if r["kind"] == "sweep"} == {r["id"] for r in uninterrupted if r["kind"] == "sweep"}
    want = {r["id"]: _strip(r) for r in uninterrupted if r["kind"] == "case"}
    assert {r["id"]: _strip(r) for r in got if r["kind"] == "case"} == want
