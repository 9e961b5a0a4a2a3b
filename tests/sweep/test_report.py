"""Report: Markdown tables, PNG plots, recommendation and --write-config from a small synthetic results file."""

from __future__ import annotations

import pytest
import yaml
from click.testing import CliRunner

from tests.sweep.fakes import FakeSweepBackend
from trtspec.cli.main import cli
from trtspec.sweep.analysis import load_results
from trtspec.sweep.grid import SweepSpec
from trtspec.sweep.report import markdown_table, render_report
from trtspec.sweep.runner import run_sweep


def _results(tmp_path, noise=0.0, **kw):
    spec = SweepSpec.build(**{"model": "fake-target", "drafts": ["fake-draft"], "via": "triton", "url": "x:1",
                              "methods": ["draft_target", "ngram"], "k": list(range(0, 6)), "temperatures": [0, 1],
                              "suites": ["code", "grounded"], "concurrency": [1, 4], "num_prompts": 2,
                              "calibration_batch_sizes": [1, 4, 16], **kw})
    out = tmp_path / "results.jsonl"
    run_sweep(spec, out, backend=FakeSweepBackend(noise=noise, fail_methods=[]), show_progress=False)
    return out


def test_analysis_predicts_synthetic_machine_exactly(tmp_path):
    results = load_results(_results(tmp_path))
    spec_rows = [r for r in results.rows if r.k > 0]
    assert spec_rows and all(r.within_tolerance for r in spec_rows)
    assert max(abs(r.error) for r in spec_rows) < 0.02
    dt = next(r for r in spec_rows if r.method == "draft_target" and r.k == 3 and r.params["temperature"] == 0)
    assert dt.tokens_per_step == sum(0.7 ** i for i in range(4))


@pytest.mark.slow
def test_report_renders_markdown_plots_and_recommendation(tmp_path):
    made = render_report(_results(tmp_path, noise=0.3), tmp_path / "rep", price_per_hour=2.0)
    text = made.markdown.read_text()
    for needle in ("## Results", "## Cost model check", "## Recommendation", "projection", "Where the model misses",
                   "$ per 1M tokens", "![Predicted vs measured speedup](predicted_vs_measured.png)",
                   "## Speculation schedule", "### draft_target:fake-draft, T=0", "### ngram, T=1",
                   "![Schedule, T=1](schedule_T1.png)"):
        assert needle in text, needle
    assert set(made.plots) == {"acceptance_per_position", "acceptance_length_vs_k", "throughput_vs_k",
                               "speedup_vs_concurrency", "predicted_vs_measured", "schedule_T0", "schedule_T1"}
    assert {(s.variant, s.temperature, s.max_batch_size) for s in made.schedules} == {
        (v, t, 16) for v in ("draft_target:fake-draft", "ngram") for t in (0.0, 1.0)}  # the largest calibrated
    for path in made.plots.values():
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
    recs = made.recommendations
    assert {r.batch_size for r in recs} == {1, 4, 16} and {r.temperature for r in recs} == {0.0, 1.0}
    at1 = next(r for r in recs if r.batch_size == 1 and r.temperature == 0)
    assert at1.method == "draft_target" and at1.k > 0 and at1.speedup > 1
    assert at1.cost_per_million < at1.baseline_cost_per_million


def test_cli_sweep_dry_run_and_report(tmp_path):
    out = _results(tmp_path)
    runner = CliRunner()
    res = runner.invoke(cli, ["report", str(out), "--out", str(tmp_path / "r"), "--no-plots",
                              "--write-config", str(tmp_path / "b.yaml")], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "wrote" in res.output and (tmp_path / "r" / "report.md").exists()
    written = yaml.safe_load((tmp_path / "b.yaml").read_text())  # a new config: the sweep's target, TensorRT-LLM 1.2.1
    assert written["target"] == "fake-target" and written["method"] == "draft_target"
    assert written["llm_api"]["draft_len_schedule"][1] == written["max_draft_len"]
    res = runner.invoke(cli, ["sweep", "--out", str(out), "--dry-run", "--via", "triton", "--url", "x:1",
                              "--model", "fake-target", "--draft", "fake-draft", "--k", "0-5", "--temperature", "0,1",
                              "--suite", "code,grounded", "--concurrency", "1,4", "--num-prompts", "2"],
                        catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "already in" in res.output and " todo " not in res.output


def test_write_config_through_a_link_a_read_only_file_and_a_fifo(tmp_path):
    """--write-config replaces the file a symbolic link points to (the link stays), keeps a read-only file's mode, and
    refuses a FIFO in one line, exit 2, without blocking on it."""
    import os

    from tests.cli_checks import assert_clean_failure, run_cli

    out = _results(tmp_path)
    real = tmp_path / "configs" / "build.yaml"
    real.parent.mkdir()
    real.write_text("target: fake-target\nmethod: none\n")
    real.chmod(0o444)
    link = tmp_path / "build.yaml"
    link.symlink_to(real)
    code, _, err = run_cli(["report", str(out), "--out", str(tmp_path / "r"), "--no-plots", "--write-config",
                            str(link)])
    assert code == 0, err
    assert link.is_symlink() and yaml.safe_load(real.read_text())["method"] == "draft_target"
    assert real.stat().st_mode & 0o777 == 0o444
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    code, _, err = run_cli(["report", str(out), "--out", str(tmp_path / "r"), "--no-plots", "--write-config",
                            str(fifo)], limit=20)
    assert_clean_failure(code, err, frozenset({2}))
    assert str(fifo) in err and "FIFO" in err and fifo.is_fifo()


def test_cli_bad_input_exits_2(tmp_path):
    import pytest

    from trtspec.cli.main import main

    with pytest.raises(SystemExit) as exc:
        main(["sweep", "--out", str(tmp_path / "x.jsonl"), "--method", "warp", "--dry-run"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        main(["report", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "r")])
    assert exc.value.code == 2


def test_repeats_are_merged_with_median_timing(tmp_path):
    results = load_results(_results(tmp_path, repeats=3, concurrency=[1], temperatures=[0], suites=["code"]))
    assert len(results.rows) == 11 and all(r.repeats == 3 for r in results.rows)


def test_adaptive_rows_are_their_own_variant_and_baselines_share_the_closed_loop(tmp_path):
    from trtspec.sweep.analysis import recommend

    out = tmp_path / "results.jsonl"
    common = {"model": "tiny", "drafts": ["tiny-draft"], "methods": ["draft_target"], "k": [0, 1, 2],
              "suites": ["code"], "num_prompts": 2, "calibration_batch_sizes": [1, 4]}
    run_sweep(SweepSpec.build(**common), out, backend=FakeSweepBackend(), show_progress=False)
    run_sweep(SweepSpec.build(**common, adaptive=[2], num_requests=3), out, backend=FakeSweepBackend(),
              show_progress=False)
    results = load_results(out)
    assert sorted((r.variant, r.k, r.num_requests) for r in results.rows if r.k) == [
        ("draft_target:tiny-draft", 1, 2), ("draft_target:tiny-draft", 1, 3), ("draft_target:tiny-draft", 2, 2),
        ("draft_target:tiny-draft", 2, 3), ("draft_target:tiny-draft adaptive", 2, 3)]
    for row in results.rows:  # 2 requests per case in the first sweep, 3 in the second: each its own baseline
        assert results.baseline_of(row).num_requests == row.num_requests
    recs = recommend(results)
    assert recs and all("adaptive" not in r.variant for r in recs)  # a recommendation is a fixed k


@pytest.mark.parametrize("numeric, align", [(False, "|---|---|"), (True, "|---|---:|")])
def test_markdown_table(numeric, align):
    assert markdown_table(["a", "b"], [[1, "x"]], numeric=numeric) == ["| a | b |", align, "| 1 | x |", ""]
