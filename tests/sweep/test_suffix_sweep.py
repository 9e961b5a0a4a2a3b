"""Suffix decoding in sweeps: cold and warm cache cases (via engine), the cache reset per case so results do not
depend on grid order, validation, and the report saying where suffix wins and where it does not."""

from __future__ import annotations

import pytest

from tests.sweep import fakes
from tests.sweep.fakes import FakeSweepBackend
from trtspec.errors import ConfigError
from trtspec.sweep.analysis import load_results, recommend, winners
from trtspec.sweep.grid import SweepSpec
from trtspec.sweep.records import read_records
from trtspec.sweep.report import render_report
from trtspec.sweep.runner import run_sweep


@pytest.fixture
def kwargs(random_pair):
    return {"model": str(random_pair[0]), "suites": ["code"], "num_prompts": 2}


def test_suffix_cases_come_cold_and_warm(kwargs):
    cases = SweepSpec.build(**kwargs, methods=["ngram", "suffix"], k=[0, 4]).cases()
    assert [(c.method, c.suffix_cache) for c in cases] == [("none", None), ("ngram", None), ("suffix", "cold"),
                                                           ("suffix", "warm")]
    assert [c.label() for c in cases[2:]] == ["suffix/cold k=4 T=0 code c=1", "suffix/warm k=4 T=0 code c=1"]
    assert "suffix_cache" not in cases[1].params()  # older cases keep their ids
    only_warm = SweepSpec.build(**kwargs, methods=["suffix"], k=[0, 4], suffix_cache=["warm"], adaptive=[8]).cases()
    assert [(c.k, c.adaptive, c.suffix_cache) for c in only_warm[1:]] == [(4, False, "warm"), (8, True, "warm")]


@pytest.mark.parametrize(("override", "field", "match"), [
    ({"methods": ["ngram"], "suffix_cache": ["cold"]}, "suffix_cache", "need method suffix"),
    ({"methods": ["suffix"], "suffix_cache": []}, "suffix_cache", "must not be empty"),
    ({"methods": ["suffix"], "suffix_cache": ["hot"]}, "suffix_cache.0", "cold"),
    ({"methods": ["suffix"], "suffix_cache": ["cold"], "via": "triton", "url": "x:1"}, "suffix_cache",
     "in-process engine only"),
    ({"methods": ["suffix"], "via": "triton", "url": "x:1", "flavour": "tensorrtllm"}, "methods",
     "no TensorRT-LLM form"),
])
def test_bad_suffix_sweeps_are_refused(kwargs, override, field, match):
    with pytest.raises(ConfigError, match=match) as exc:
        SweepSpec.build(**{**kwargs, "k": [0, 4], **override})
    assert exc.value.field == field


def test_served_suffix_cases_use_the_servers_cache(kwargs):
    cases = SweepSpec.build(**kwargs, methods=["suffix"], k=[0, 4], via="triton", url="x:1").cases()
    assert [(c.method, c.suffix_cache) for c in cases] == [("none", None), ("suffix", None)]


def test_engine_sweep_cold_and_warm_are_lossless_and_order_independent(random_pair, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "abcabcabcabc abc"}\n{"prompt": "the cat the cat the"}\n'
                       '{"prompt": "abcabcabcabc abc"}\n')
    common = dict(model=str(random_pair[0]), methods=["suffix"], k=[0, 4], suites=[str(prompts)], num_prompts=3,
                  max_new_tokens=12, max_draft_len=4, threads=1, calibrate=False)
    out = tmp_path / "results.jsonl"
    summary = run_sweep(SweepSpec.build(**common, temperatures=[0.0, 1.0]), out, show_progress=False)
    assert summary.errors == 0, summary.error_messages
    cases = [r for r in read_records(out) if r["kind"] == "case"]
    by = {(r["params"]["temperature"], r["params"]["method"], r["params"].get("suffix_cache")): r for r in cases}
    plain = by[(0.0, "none", None)]["metrics"]["output_sha256"]
    cold, warm = by[(0.0, "suffix", "cold")]["metrics"], by[(0.0, "suffix", "warm")]["metrics"]
    assert cold["output_sha256"] == warm["output_sha256"] == plain  # greedy: lossless whatever the cache holds
    assert warm["stats"]["num_accepted_tokens"] > cold["stats"]["num_accepted_tokens"]
    assert warm["stats"]["num_target_forwards"] < cold["stats"]["num_target_forwards"]
    assert by[(0.0, "suffix", "cold")]["spec"]["suffix_cache"] == "cold"
    # the cold case after a warm one (another grid order) starts from the same empty cache
    again = tmp_path / "again.jsonl"
    run_sweep(SweepSpec.build(**common, suffix_cache=["warm", "cold"]), again, show_progress=False)
    cold_again = next(r for r in read_records(again) if r["kind"] == "case"
                      and r["params"].get("suffix_cache") == "cold")["metrics"]
    assert cold_again["stats"]["num_accepted_tokens"] == cold["stats"]["num_accepted_tokens"]


def test_report_says_where_suffix_wins_and_where_not(tmp_path, monkeypatch):
    """Synthetic machine: suffix accepts a lot on `code` at T=0 (more with a warm cache), little on `prose` and at
    T=1; the report recommends it for the first and says why not for the others."""

    def alpha(method, suite, temperature, cache):
        if method == "suffix":
            base = 0.85 if suite == "code" else 0.3
            return (base if cache == "cold" else min(0.95, base + 0.1)) * (0.2 if temperature > 0 else 1.0)
        return {"ngram": 0.5, "none": 0.0}[method] * (0.5 if temperature > 0 else 1.0)

    class Backend(FakeSweepBackend):
        def run_case(self, case, suite, spec):
            key = f"{case.method}-{case.suite}-{case.temperature}-{case.suffix_cache}"
            monkeypatch.setitem(fakes.ALPHA, key, alpha(case.method, case.suite, case.temperature, case.suffix_cache))
            return fakes.synthetic_metrics(key, case.k, 0.0, case.concurrency, num_requests=len(suite.prompts),
                                           max_new_tokens=case.max_new_tokens)

    spec = SweepSpec.build(model="tiny", methods=["ngram", "suffix"], k=[0, 2, 4], temperatures=[0, 1],
                           suites=["code", "prose"], num_prompts=2, calibration_batch_sizes=[1])
    out = tmp_path / "results.jsonl"
    run_sweep(spec, out, backend=Backend(), show_progress=False)
    verdicts = {(w.suite, w.temperature): w.verdict for w in winners(load_results(out))}
    assert verdicts[("code", 0.0)] == "use suffix"
    assert verdicts[("prose", 0.0)] == "not suffix: ngram is faster"
    assert verdicts[("code", 1.0)] == verdicts[("prose", 1.0)] == "not suffix: ngram is faster"
    text = render_report(out, tmp_path / "report", plots=False).markdown.read_text()
    assert "## Where each method wins (measured)" in text
    assert "**Suffix decoding is recommended for:** code T=0 c=1." in text
    assert "prose T=0 c=1 (not suffix: ngram is faster)" in text and "temperature 1" in text
    assert all(r.variant != "suffix:warm" for r in recommend(load_results(out)))  # warm is traffic, not a setting


def test_bench_suffix_section_rows_goals_and_docs_columns():
    """docs/benchmarks.md's suffix section from synthetic sweep records: per-suite rows against each sweep's own
    plain run, warm caches kept out of the goals, the columns the docs show."""
    from benchlib import benchmarks
    from benchlib.benchmarks import Comparison
    from tests.sweep.test_benchmarks import _docs_columns, _measured, _rec, _stats

    def measured(spec, rates, cpu_rates, accepted):
        return _measured([_rec(c, 0, rates[(c.method, c.suffix_cache, c.adaptive)],
                               tokens_per_cpu_s=cpu_rates[(c.method, c.suffix_cache, c.adaptive)],
                               stats=_stats(drafts=4, drafted=8, accepted=accepted) if c.k else _stats())
                          for c in spec.cases()])

    sections = {}
    for suite in ("code", "repetitive"):
        specs = benchmarks.suffix_specs(model="tiny", draft="tiny-draft", suite=suite, num_prompts=2, prompt_tokens=64,
                                        max_new_tokens=8, suffix_k=16, fixed_k=4, ngram_k=5, adaptive_max_k=8,
                                        repeats=1, threads=1)
        assert [(c.method, c.k, c.adaptive, c.suffix_cache) for spec in specs for c in spec.cases()] == [
            ("none", 0, False, None), ("draft_target", 4, False, None), ("draft_target", 8, True, None),
            ("none", 0, False, None), ("ngram", 5, False, None),
            ("none", 0, False, None), ("suffix", 16, False, "cold"), ("suffix", 16, False, "warm")]
        rates = {("none", None, False): 10.0, ("draft_target", None, False): 15.0, ("draft_target", None, True): 16.0,
                 ("ngram", None, False): 14.0, ("suffix", "cold", False): 25.0, ("suffix", "warm", False): 60.0}
        cpu = {key: rate * 2 for key, rate in rates.items()}
        sections[suite] = [measured(spec, rates, cpu, 6) for spec in specs]
    lookup = Comparison("transformers: prompt lookup k=8", [12.0], ["plain"], [24.0])
    section = benchmarks.suffix_section(specs, sections, {"code": [lookup]})
    assert section.columns == _docs_columns("Suffix decoding")
    code = [row for row in section.rows if row[0] == "code"]
    assert code[0][:5] == ["code", "engine: plain (k=0)", "10.0", "1.00x", "1.00x"]
    assert code[4][:5] == ["code", "engine: suffix k=16 (cold cache)", "25.0", "2.50x", "2.50x"]
    assert code[5][1:4] == ["engine: suffix k=16 (warm cache)", "60.0", "6.00x"] and code[5][-1] == "yes"
    assert code[6] == ["code", "transformers: prompt lookup k=8", "12.0", "1.20x", "1.20x", "-", "-", "yes"]
    notes = "\n".join(section.notes)
    assert "Goal 1, best trtspec method (cold caches) >= 2.0x" in notes and "2.50x CPU time / 2.50x wall: met" in notes
    assert "engine: suffix k=16 (cold cache) vs transformers: prompt lookup k=8: 2.08x CPU time / 2.08x wall" in notes
