"""The sweep via engine end to end on the random pair: calibration + cases + report, and greedy determinism."""

from __future__ import annotations

import pytest

from trtspec.errors import ConfigError
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


def test_engine_backend_closed_loop_options(random_pair, tmp_path):
    """Adaptive k, lookahead variants, requests reused round-robin, prompts cut to their last tokens, no calibration:
    every case lossless at temperature 0, one latency per request."""
    target, draft = random_pair
    prompts = tmp_path / "p.jsonl"
    long = "abcabcabc the cat " * 20  # 360 bytes: longer than the random model's 256-token context
    prompts.write_text(f'{{"prompt": "{long}"}}\n{{"prompt": "the cat the cat the"}}\n')
    kwargs = dict(model=str(target), drafts=[str(draft)], methods=["draft_target", "lookahead"], k=[0, 2],
                  adaptive=[3], lookahead=["2,3,2", "2,3,1"], suites=[str(prompts)], concurrency=[1, 2],
                  num_prompts=2, num_requests=3, waves=2, max_new_tokens=6, max_draft_len=4, threads=1,
                  calibrate=False)
    with pytest.raises(ConfigError, match="context of 256 tokens") as exc:  # the whole long prompt does not fit
        run_sweep(SweepSpec.build(**kwargs), tmp_path / "too-long.jsonl", show_progress=False)
    assert exc.value.field == "max_new_tokens"  # the preflight's check, before any case
    spec = SweepSpec.build(**kwargs, prompt_tokens=16)
    out = tmp_path / "results.jsonl"
    summary = run_sweep(spec, out, show_progress=False)
    assert summary.errors == 0, summary.error_messages
    records = read_records(out)
    assert not [r for r in records if r["kind"] == "calibration"]
    cases = [r for r in records if r["kind"] == "case"]
    # per concurrency: plain; draft_target k=2 and adaptive k<=3; lookahead 2,3,2 the same; lookahead 2,3,1 with
    # both capped at its full trie of 1 x (3 - 1) = 2 nodes
    assert len(cases) == len(spec.cases()) == 2 * 7
    assert {(r["params"]["method"], r["params"]["k"], r["params"].get("adaptive", False), r["params"].get("lookahead"))
            for r in cases} == {("none", 0, False, None), ("draft_target", 2, False, None),
                                ("draft_target", 3, True, None), ("lookahead", 2, False, "2,3,2"),
                                ("lookahead", 3, True, "2,3,2"), ("lookahead", 2, False, "2,3,1"),
                                ("lookahead", 2, True, "2,3,1")}
    plain = {r["params"]["concurrency"]: r["metrics"]["output_sha256"] for r in cases if r["params"]["k"] == 0}
    for rec in cases:
        m, c = rec["metrics"], rec["params"]["concurrency"]
        assert m["num_requests"] == max(3, 2 * c) == len(m["latencies_s"]) and all(t > 0 for t in m["latencies_s"])
        assert m["output_tokens"] == 6 * m["num_requests"]
        assert m["output_sha256"] == plain[c], rec["label"]  # speculation is lossless at temperature 0
        if rec["params"]["k"] and not rec["params"].get("adaptive"):  # adaptive k may find that drafting does
            assert m["stats"]["num_drafts"] > 0  # not pay (random models accept almost nothing) and not draft


def test_lookahead_variants_get_their_own_engine(random_pair):
    from trtspec.sweep.backend_engine import EngineBackend

    spec = SweepSpec.build(model=str(random_pair[0]), drafts=[], methods=["ngram", "lookahead"], k=[0, 2],
                           lookahead=["2,3,2", "2,3,1"], suites=["code"], num_prompts=1, max_draft_len=4, max_ngram=2)
    backend = EngineBackend()
    try:
        engines = {(c.method, c.lookahead): backend._engine_of(spec, c) for c in spec.cases()}
        wng = {key[1]: (p.window, p.ngram, p.verification_set)
               for key, e in engines.items() if key[1] for p in [e.proposers["lookahead"]]}
        assert wng == {"2,3,2": (2, 3, 2), "2,3,1": (2, 3, 1)}
        assert engines[("ngram", None)] is engines[("none", None)]  # model-free methods reuse a loaded engine
        assert len({id(e) for e in engines.values()}) == 3
        assert engines[("ngram", None)].proposers["ngram"].max_ngram == 2  # engine options from the spec
    finally:
        backend.close()


def test_engine_backend_runs_schedules_and_ramps(random_pair, tmp_path):
    """A schedule case runs its schedule on the engine (a gate that cannot be met closes after its window of
    finished requests, then only probes draft; draft lengths follow the batch size), a ramp keeps each phase's
    concurrency in flight; every case lossless at temperature 0; other cases run without a schedule."""
    target, draft = random_pair
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "abcabcabc the cat"}\n{"prompt": "the cat the cat the"}\n')
    gate = "draft_len_schedule=1:2,2:1;acceptance_window=2;acceptance_length_threshold=3.5;gate_probe_every=3"
    spec = SweepSpec.build(model=str(target), drafts=[str(draft)], methods=["draft_target"], k=[0, 2],
                           schedules=[gate, "draft_len_schedule=1:2,2:0"], ramps=["1,2,1"], suites=[str(prompts)],
                           concurrency=[2], num_prompts=2, num_requests=8, max_new_tokens=5, max_draft_len=2,
                           threads=1, calibrate=False)
    out = tmp_path / "results.jsonl"
    summary = run_sweep(spec, out, show_progress=False)
    assert summary.errors == 0, summary.error_messages
    cases = {(r["params"].get("ramp"), r["params"].get("schedule"), r["params"]["k"]): r["metrics"]
             for r in read_records(out) if r["kind"] == "case"}
    assert len(cases) == 2 * 4
    for (ramp, schedule, _), m in cases.items():
        assert m["output_sha256"] == cases[(ramp, None, 0)]["output_sha256"]  # lossless whatever k does
        assert m["num_requests"] == (4 if ramp else 8) == len(m["latencies_s"])
        assert ("gate" in m) == (schedule == gate)  # no schedule, or no gate: nothing to report
        trace = m["finish_trace_cpu_s"]  # (tokens, cpu seconds) so far at each finished request
        assert len(trace) == m["num_requests"] and trace[-1][0] == m["output_tokens"]
        assert all(a[0] < b[0] and a[1] <= b[1] for a, b in zip(trace, trace[1:], strict=False))
    closed = cases[(None, gate, 2)]["gate"]
    # the window's mean can never reach 3.5 (at most k + 1 = 3 tokens per step): closed after 2 finished drafting
    # requests; then probes, one at a time
    assert closed["closes"] == 1 and closed["open"] is False and closed["closed_after"] == 2
    assert closed["probes"] >= 1 and cases[(None, gate, 2)]["requests_drafted"] < 8
    # "1:2,2:0" drafts only in steps with one running request: on the ramp 1,2,1 its first and last phase
    assert cases[(None, "draft_len_schedule=1:2,2:0", 2)]["stats"]["num_draft_tokens"] == 0  # c=2 throughout
    fixed, capped = cases[("1,2,1", None, 2)]["stats"], cases[("1,2,1", "draft_len_schedule=1:2,2:0", 2)]["stats"]
    assert 0 < capped["num_draft_tokens"] < fixed["num_draft_tokens"]


def test_a_staggered_closed_loop_admits_its_first_requests_one_per_step(random_pair):
    """Four requests of one length at concurrency 4: together, they are admitted in one step and replaced in
    lockstep (one admission step per wave); staggered, one per step, and they stay spread (four per wave)."""
    from trtspec.spec.engine import SpecEngine
    from trtspec.spec.params import SamplingParams, SpecParams
    from trtspec.sweep.backend_engine import closed_loop

    target, _ = random_pair
    engine = SpecEngine.from_pretrained(str(target), max_k=2)
    prompts = [[5, 6, 7, 8]] * 12
    samplings = [SamplingParams(max_new_tokens=6, seed=i, ignore_eos=True) for i in range(12)]
    spec = SpecParams(method="none", k=0)
    together = closed_loop(engine, prompts, samplings, spec, 4)
    spread = closed_loop(engine, prompts, samplings, spec, 4, stagger=True)
    assert [step[1] for step in together.admission_trace] == [4, 4, 4]  # rows admitted per admission step
    assert [step[1] for step in spread.admission_trace] == [1] * 12
    assert together.outputs == spread.outputs  # the same requests, the same tokens


def test_draft_runtime_onnx_sweeps_into_the_same_file_at_equal_acceptance(random_pair, tmp_path, monkeypatch):
    """A torch sweep, then the same with draft_runtime onnx into the same results file: the onnx run adds its own
    draft-model cases and calibration (the baseline is resumed), its greedy acceptance equals torch's, and the report
    shows both variants, each priced by its own calibration."""
    pytest.importorskip("onnxruntime", reason="draft_runtime onnx needs the optional extra trtspec[onnx]")
    pytest.importorskip("onnx", reason="draft_runtime onnx needs the optional extra trtspec[onnx]")
    monkeypatch.setenv("TRTSPEC_CACHE_DIR", str(tmp_path / "cache"))  # the draft's export, not the user's cache
    target, draft = random_pair
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "abcabcabcabc abc"}\n{"prompt": "the cat the cat the"}\n')
    kwargs = dict(model=str(target), drafts=[str(draft)], methods=["draft_target"], k=[0, 2], suites=[str(prompts)],
                  max_new_tokens=8, num_prompts=2, max_draft_len=2, calibration_batch_sizes=[1], threads=1)
    out = tmp_path / "results.jsonl"
    assert run_sweep(SweepSpec.build(**kwargs), out, show_progress=False).errors == 0
    summary = run_sweep(SweepSpec.build(**kwargs, draft_runtime="onnx"), out, show_progress=False)
    assert summary.errors == 0 and (summary.ran, summary.skipped) == (1, 1), summary.error_messages
    records = read_records(out)
    cases = {r["params"].get("draft_runtime", "torch"): r for r in records
             if r["kind"] == "case" and r["params"]["method"] == "draft_target"}
    assert set(cases) == {"torch", "onnx"} and "draft_runtime" not in cases["torch"]["params"]
    stats = {runtime: rec["metrics"]["stats"] for runtime, rec in cases.items()}
    assert stats["onnx"]["num_accepted_tokens_per_pos"] == stats["torch"]["num_accepted_tokens_per_pos"]
    assert cases["onnx"]["metrics"]["output_sha256"] == cases["torch"]["metrics"]["output_sha256"]
    calibrations = [r for r in records if r["kind"] == "calibration"]
    assert [c.get("draft_runtime") for c in calibrations] == [None, "onnx"]
    made = render_report(out, tmp_path / "report", plots=False)
    variants = {r.variant for r in made.results.rows if r.k}
    assert variants == {f"draft_target:{draft.name}", f"draft_target:{draft.name}@onnx"}
    assert all(r.prediction is not None for r in made.results.rows)
