"""Property tests of `trtspec sweep` over sweep specs (YAML), spec files and command-line flags (hypothesis, seeded).

For every generated input: no traceback (any exception but SystemExit fails the test), no hang (each run has a time
limit), no wrong success, and every failure is one `Error:` line (plus at most one `Hint:` line) with exit code 2.
Most examples stop at `--dry-run` (the spec is validated and its cases listed, nothing runs); a few small specs run
for real on the in-process engine (tiny budgets, no calibration), where a spec the validation accepted must run
every case (exit 0, an ok record per case), never fail them all at run time (exit 1).
"""

from __future__ import annotations

import functools
import json
import math
import re
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import event, given, settings
from hypothesis import strategies as st

from tests.cli_checks import INT32_MAX, SETTINGS, SPECIAL_FLOATS, VALUES, assert_clean_failure, run_cli

UINT64_MAX = 2**64 - 1
BAD_INPUT = frozenset({2})
# A spec that runs fast: 2 cases (the k = 0 baseline and ngram k = 2), one prompt, three tokens, no calibration.
BASE = {"methods": ["ngram"], "k": [0, 2], "num_prompts": 1, "max_new_tokens": 3, "calibrate": False}
FIELDS = ["model", "methods", "k", "drafts", "medusa", "trees", "temperatures", "suites", "concurrency",
          "max_new_tokens", "num_prompts", "seed", "num_requests", "waves", "prompt_tokens", "adaptive", "lookahead",
          "max_ngram", "calibrate", "repeats", "shuffle", "max_draft_len", "via", "backend", "url", "flavour", "model_name",
          "bls_model_name", "timeout_s", "calibration_batch_sizes", "calibration_repeats", "calibration_slices",
          "chat_template", "threads", "device", "dtype", "stagger_start"]
COUNTS = st.integers(-2, 4) | st.sampled_from([INT32_MAX, INT32_MAX + 1, 2**64, 10**400, 1.0, 2.5, math.inf])
# Plausible values per field (valid or nearly so), beside the arbitrary VALUES every field also gets.
PLAUSIBLE = {
    "model": st.sampled_from(["tiny", "tiny-draft", "tiny-medusa", "nonexistent", "/etc", "/dev/null"]),
    "methods": st.lists(st.sampled_from(["none", "ngram", "draft_target", "lookahead", "medusa", "eagle", "bogus"]),
                        max_size=3),
    "k": st.lists(st.integers(-2, 12) | st.sampled_from([INT32_MAX + 1, 2**64]), max_size=4),
    "drafts": st.lists(st.sampled_from(["tiny-draft", "tiny", "nonexistent"]), max_size=2),
    "temperatures": st.lists(st.floats(-1, 2) | SPECIAL_FLOATS, max_size=3),
    "suites": st.lists(st.sampled_from(["code", "prose", "grounded", "missing.jsonl", "/dev/null", ""]), max_size=2),
    "concurrency": st.lists(st.integers(-1, 3) | st.sampled_from([INT32_MAX + 1, 10**12]), max_size=2),
    "seed": st.sampled_from([0, 1, -1, UINT64_MAX, UINT64_MAX + 1, 2**80]),
    "lookahead": st.lists(st.sampled_from(["4,4,4", "2,3,2", "0,0,0", "4,4", "a,b,c", "-1,2,2", "99999,9,9"]),
                          max_size=2),
    "device": st.sampled_from(["cpu", "cuda", "meta", "bogus", "cuda:7"]),
    "dtype": st.sampled_from(["float32", "float16", "bfloat16", "int8", "bogus"]),
    "via": st.sampled_from(["engine", "triton", "onnx"]),
    "url": st.sampled_from(["localhost:8001", "localhost:99999", "", "http://x"]),
    **{field: COUNTS for field in ("max_new_tokens", "num_prompts", "repeats", "calibration_repeats", "prompt_tokens",
                                   "max_ngram", "waves", "num_requests", "threads", "max_draft_len",
                                   "calibration_slices")},
    "calibration_batch_sizes": st.lists(COUNTS, max_size=3),
}


@st.composite
def spec_documents(draw: st.DrawFn) -> dict:
    """A sweep spec: BASE with a few fields (known or unknown) set to plausible or arbitrary values."""
    doc = dict(BASE)
    for _ in range(draw(st.integers(0, 3))):
        if draw(st.integers(0, 9)) == 0:
            doc[draw(st.text(min_size=1, max_size=10))] = draw(VALUES)
            continue
        field = draw(st.sampled_from(FIELDS))
        plausible = field in PLAUSIBLE and draw(st.integers(0, 3)) > 0  # 3 in 4: a value near the valid ones
        doc[field] = draw(PLAUSIBLE[field] if plausible else VALUES)
    return doc


def _numbers_in_range(doc: dict) -> bool:
    """The oracle of a spec the validation may accept: its numbers are in their documented ranges (checked where the
    YAML holds them as numbers; other types are the validation's to refuse)."""
    def ints(value: object) -> list[int]:
        values = value if isinstance(value, list) else [value]
        return [v for v in values if isinstance(v, int) and not isinstance(v, bool)]

    temps = doc.get("temperatures", [])
    numbers = [t for t in (temps if isinstance(temps, list) else [temps])
               if isinstance(t, (int, float)) and not isinstance(t, bool)]
    if any(not (math.isfinite(t) and t >= 0) for t in numbers):
        return False
    if any(not 0 <= s <= UINT64_MAX for s in ints(doc.get("seed"))):
        return False
    counts = ("concurrency", "max_new_tokens", "num_prompts", "num_requests", "prompt_tokens", "max_ngram", "repeats",
              "calibration_batch_sizes", "calibration_repeats", "calibration_slices", "threads")
    return all(1 <= v <= INT32_MAX for field in counts for v in ints(doc.get(field)))


def _write(tmp_path_factory, data: bytes) -> tuple[Path, Path]:
    work = tmp_path_factory.mktemp("sweep")
    (work / "spec.yaml").write_bytes(data)
    return work / "spec.yaml", work / "results.jsonl"


def _dump(doc: dict) -> bytes:
    return yaml.safe_dump(doc, allow_unicode=True).encode("utf-8")


def _dry_run(argv: list[str]) -> tuple[int, str, str]:
    code, out, err = run_cli([*argv, "--dry-run"], limit=30)
    event(f"exit {code}")
    if code == 0:
        assert out.rstrip().splitlines()[-1].split()[0].isdigit(), out[-300:]  # "N cases, M already in OUT"
    else:
        assert_clean_failure(code, err, BAD_INPUT)
    return code, out, err


@settings(SETTINGS, max_examples=200)
@given(doc=spec_documents())
def test_any_sweep_spec_lists_its_cases_or_is_a_one_line_error(doc, tmp_path_factory):
    spec, results = _write(tmp_path_factory, _dump(doc))
    code, _, _ = _dry_run(["sweep", str(spec), "--out", str(results)])
    if code == 0:
        assert _numbers_in_range(doc), doc  # no wrong success
    assert not results.exists()  # a dry run writes nothing


@settings(SETTINGS, max_examples=60)
@given(data=st.one_of(
    st.binary(max_size=300),
    st.builds(lambda doc, enc: _dump(doc).decode().encode(enc, errors="replace"), spec_documents(),
              st.sampled_from(["utf-16", "utf-32", "latin-1", "utf-8-sig"])),
    st.builds(lambda depth, open_, close: b"k: " + open_ * depth + close * depth,
              st.integers(1, 30000), st.sampled_from([b"[", b"{a: "]), st.sampled_from([b"]", b"}"])),
    st.builds(lambda n: b"a: &a [x, x, x, x, x, x, x, x, x, x]\n" + b"".join(
        b"%c: &%c [*%c, *%c, *%c, *%c, *%c, *%c, *%c, *%c, *%c, *%c]\n" % ((98 + i, 98 + i) + (97 + i,) * 10)
        for i in range(n)), st.integers(1, 8)),  # a "billion laughs": aliases expanding 10^(n+1) times
))  # fmt: skip
def test_any_file_as_a_sweep_spec_lists_its_cases_or_is_a_one_line_error(data, tmp_path_factory):
    spec, results = _write(tmp_path_factory, data)
    _dry_run(["sweep", str(spec), "--out", str(results)])


LIST_FLAGS = {"--method": ["ngram", "draft_target,ngram", "", ",", "bogus", "ngram,,none"],
              "--k": ["0-8", "1,2", "0-99999999999", "-5-3", "3-1", "1,,2", "x", "2147483648", "0-2147483647"],
              "--temperature": ["0", "0,1", "nan", "-1", "1e400", "0,", "inf"],
              "--suite": ["code", "code,prose", "missing.jsonl", "/dev/null", "code,"],
              "--concurrency": ["1", "1,2", "0", "-1", "99999999999", "1-100000000"],
              "--calibration-batch-sizes": ["1", "1,4,16", "0", "1-9999999999"],
              "--draft": ["tiny-draft", "nonexistent", ""]}
NUMBER_FLAGS = ["--max-new-tokens", "--num-prompts", "--seed", "--repeats", "--max-draft-len", "--timeout",
                "--threads", "--calibration-slices"]


@st.composite
def sweep_argv(draw: st.DrawFn) -> list[str]:
    argv = ["--num-prompts", "1", "--max-new-tokens", "3"]
    for _ in range(draw(st.integers(1, 4))):
        if draw(st.booleans()):
            flag = draw(st.sampled_from(sorted(LIST_FLAGS)))
            argv += [flag, draw(st.sampled_from(LIST_FLAGS[flag]) | st.text(max_size=12))]
        else:
            flag = draw(st.sampled_from(NUMBER_FLAGS))
            argv += [flag, str(draw(st.integers(-(2**70), 2**70) | st.sampled_from([0, 1, 1025, INT32_MAX + 1])
                                    | st.floats(allow_nan=True, allow_infinity=True)))]
    return argv


@settings(SETTINGS, max_examples=120)
@given(flags=sweep_argv())
def test_any_sweep_command_line_lists_its_cases_or_is_a_one_line_error(flags, tmp_path_factory):
    results = tmp_path_factory.mktemp("sweep") / "results.jsonl"
    _dry_run(["sweep", "--out", str(results), *flags])
    assert not results.exists()


@st.composite
def runnable_specs(draw: st.DrawFn) -> dict:
    """Small specs (at most 3 cases of 3 tokens) with hostile values where they cost nothing to run."""
    method = draw(st.sampled_from(["ngram", "draft_target", "lookahead", "medusa"]))
    doc = {**BASE, "methods": [method], "k": draw(st.lists(st.integers(-1, 9), min_size=1, max_size=2)),
           "temperatures": [draw(st.sampled_from([0.0, 0.0, 0.8, -0.5, math.nan]))],
           "seed": draw(st.sampled_from([0, 7, UINT64_MAX, UINT64_MAX + 1, -1]))}
    extra = draw(st.sampled_from(["none", "prompt_tokens", "max_ngram", "adaptive", "lookahead", "drafts", "device"]))
    if extra == "prompt_tokens":
        doc["prompt_tokens"] = draw(st.sampled_from([1, 3, 0, INT32_MAX]))
    elif extra == "max_ngram":
        doc["max_ngram"] = draw(st.sampled_from([1, 2, 0, 10**9]))
    elif extra == "adaptive":
        doc["adaptive"] = [draw(st.sampled_from([1, 2, 0, 99]))]
    elif extra == "lookahead":
        doc["lookahead"] = [draw(st.sampled_from(["2,2,2", "1,1,1", "0,2,2", "64,64,64"]))]
    elif extra == "drafts":
        doc["drafts"] = [draw(st.sampled_from(["tiny-draft", "tiny", "nonexistent"]))]
    elif extra == "device":
        doc["device"] = draw(st.sampled_from(["cpu", "cuda", "meta", "bogus"]))
    return doc


@settings(SETTINGS, max_examples=8)
@given(doc=runnable_specs())
def test_a_small_sweep_spec_runs_every_case_or_is_refused_before_running(doc, tmp_path_factory):
    spec, results = _write(tmp_path_factory, _dump(doc))
    code, out, err = run_cli(["sweep", str(spec), "--out", str(results), "--no-progress"], limit=300)
    event(f"exit {code}")
    if code == 0:
        records = [json.loads(line) for line in results.read_text().splitlines()]
        cases = [r for r in records if r["kind"] == "case"]
        assert cases and all(r["status"] == "ok" for r in cases), (doc, records)
        assert f"{len(cases)} cases run" in out, out
    else:
        assert code == 2, (doc, code, out, err)  # exit 1 would be a spec accepted, then failing at run time
        assert_clean_failure(code, err, BAD_INPUT)
        assert not results.exists()  # refused before the first case


def test_a_key_with_a_newline_is_named_on_one_line():
    """Found by the spec property above: an unknown key read from YAML can hold a line break."""
    from trtspec.errors import ConfigError
    from trtspec.sweep.grid import SweepSpec

    try:
        SweepSpec.build(**{**BASE, "bad\nkey": None})
    except ConfigError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("'bad\\nkey'=None: Extra inputs are not permitted")
    else:
        raise AssertionError("an unknown key was accepted")


# `trtspec report` over records: a sweep's results with fields replaced by arbitrary JSON values (numbers at and past
# their ranges, NaN, infinities, huge integers, strings, lists, objects), removed, arbitrary records added and the
# file cut anywhere. Every run is a report (no NaN or infinite speedup in it; a torn last line warned about) or one
# documented error line, exit 2 (trtspec/sweep/record_fields.py checks each field the report reads).
REPORT_SPEC = {"model": "fake-target", "drafts": ["fake-draft"], "via": "triton", "url": "x:1",
               "methods": ["draft_target", "ngram"], "k": [0, 1, 2], "temperatures": [0, 1], "suites": ["code"],
               "concurrency": [1, 2], "num_prompts": 1, "calibration_batch_sizes": [1, 2]}
NUMBERS = st.sampled_from([0, 1, -1, 2, 4096, 4097, 10**12, 2**53 + 1, 10**400, 0.5, -0.0, 1e-300, 1e300, 5e-324,
                           math.nan, math.inf, -math.inf])
RECORD_KEYS = ["params", "metrics", "status", "error", "via_info", "spec", "target_s", "draft_s", "overhead_s",
               "proposer_s", "model", "of", "label"]


@functools.cache
def sweep_records() -> tuple[str, ...]:
    """The records (JSON lines) of a small sweep on the synthetic machine: 2 variants, k 0-2, 2 temperatures and
    concurrencies, calibrated."""
    from tests.sweep.fakes import FakeSweepBackend
    from trtspec.sweep.grid import SweepSpec
    from trtspec.sweep.runner import run_sweep

    with tempfile.TemporaryDirectory() as work:
        out = Path(work) / "results.jsonl"
        run_sweep(SweepSpec.build(**REPORT_SPEC), out, backend=FakeSweepBackend(), show_progress=False)
        records = [json.loads(line) for line in out.read_text().splitlines()]
    for rec in records:  # the fields an engine sweep adds (backend_engine.py), for the edits to reach
        if rec["kind"] == "case":
            metrics, stats = rec["metrics"], rec["metrics"]["stats"]
            metrics.update(cpu_time_s=metrics["wall_time_s"] * 0.9, num_admission_steps=1, admission_trace=[[1, 1, 9]],
                           per_request_mean_acceptance_length=[stats["mean_acceptance_length"]],
                           per_request_counts=[[stats["num_drafts"], stats["num_draft_tokens"],
                                                stats["num_accepted_tokens"], 64, stats["num_target_forwards"]]])
        elif rec["kind"] == "calibration":
            rec.update(target_cpu_s=rec["target_s"], draft_cpu_s=rec["draft_s"], prompt_tokens=9,
                       overhead_s={"1": 0.001, "2": 0.0011}, target_prefill_s={"1": 0.02, "2": 0.03},
                       proposer_s={"ngram": {"1": 0.0003, "2": 0.0004}})
    return tuple(json.dumps(rec) for rec in records)


def _paths(value: object, prefix: tuple = ()) -> list[tuple]:
    """Every path into a JSON value (keys and list indices), its root first."""
    out = [prefix]
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        out += _paths(child, (*prefix, key))
    return out


@st.composite
def edited_results(draw: st.DrawFn) -> str:
    records = [json.loads(line) for line in sweep_records()]
    ids = [rec["id"] for rec in records]
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.integers(0, 7)) == 0:  # an arbitrary record of a kind the report reads
            rec = {"kind": draw(st.sampled_from(["case", "calibration", "sweep", "other"])),
                   "id": draw(st.sampled_from(ids) | st.text(max_size=6)),
                   **draw(st.dictionaries(st.sampled_from(RECORD_KEYS), VALUES, max_size=4))}
            records.insert(draw(st.integers(0, len(records))), rec)
            continue
        rec = draw(st.sampled_from(records))
        *parents, last = draw(st.sampled_from([p for p in _paths(rec) if p]))
        node = rec
        for key in parents:
            node = node[key]
        if isinstance(node, dict) and draw(st.integers(0, 5)) == 0:
            del node[last]
        else:
            node[last] = draw(NUMBERS | VALUES)
    text = "".join(json.dumps(r) + "\n" for r in records)
    if draw(st.integers(0, 9)) == 0:  # a sweep killed mid-write (or anything cut anywhere)
        text = text[:draw(st.integers(0, len(text)))]
    return text


@settings(SETTINGS, max_examples=250)
@given(text=edited_results())
@pytest.mark.slow
def test_any_results_file_reports_or_is_a_one_line_error(text, tmp_path_factory):
    work = tmp_path_factory.mktemp("report")
    (work / "results.jsonl").write_text(text)
    code, out, err = run_cli(["report", str(work / "results.jsonl"), "--out", str(work / "rep"), "--no-plots",
                              "--write-config", str(work / "build.yaml")], limit=30)
    event(f"exit {code}")
    if code != 0:
        assert_clean_failure(code, err, BAD_INPUT)
        return
    report = (work / "rep" / "report.md").read_text()
    assert not re.search(r"\b(nan|-?inf)x|_threshold -?(nan|inf)\b", out + report), out  # speedups, the gate
    assert ("warning: " in err) == bool(text.rsplit("\n", 1)[-1].strip()), err  # a torn last line, said
