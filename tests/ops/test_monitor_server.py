"""The operations loop against a real tritonserver (CPU) serving the embedded pair, deployed the way a user does it:
baseline sweep (`trtspec sweep` library, engine) -> `trtspec deploy --baseline` -> serve -> traffic -> monitor.

- Drift: steady traffic at concurrency 8 from the baseline's prompts raises no alarm (the baseline swept concurrency
  4; greedy acceptance does not depend on the batch); traffic shifted to the `grounded` suite (lower acceptance:
  docs/sweep) is flagged within 60 s. (CI-sized: 6 s steady; the 10-minute false-alarm measurement is
  scripts/drift_demo.py, reported in docs/operations.md.) No request fails.
- `trtspec monitor --once --json` reads the same server.
- The BLS publishes the same series on the TensorRT-LLM flavour: with `trtspec_series.py` beside it (as that flavour
  renders it), its draft-target loop's counts equal what the engine model counted for the same requests.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.servers import running
from trtspec.contracts.baseline import load_baseline
from trtspec.contracts.series import __file__ as SERIES_SOURCE
from trtspec.ops.scrape import ModelId, scraper
from trtspec.triton.repo import SERIES_MODULE

pytestmark = pytest.mark.triton
ROOT = Path(__file__).resolve().parents[2]
K, CONCURRENCY, MAX_TOKENS, PROMPT_TOKENS, NUM_PROMPTS = 4, 4, 32, 64, 8
STEADY_S, SHIFT_LIMIT_S = 6.0, 60.0


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    from click.testing import CliRunner

    from trtspec.build.execute import execute
    from trtspec.build.plan import plan_build
    from trtspec.build.preflight import run_preflight
    from trtspec.cli.main import cli
    from trtspec.config import load_build_spec
    from trtspec.sweep.grid import SweepSpec
    from trtspec.sweep.runner import run_sweep

    base = tmp_path_factory.mktemp("ops")
    bundle = base / "bundle"
    spec = load_build_spec(ROOT / "build_configs" / "tiny-torch.yaml", overrides={"output": str(bundle)})
    resolved = run_preflight(spec)
    execute(plan_build(resolved), resolved, bundle, quiet=True)
    results = base / "baseline.jsonl"
    run_sweep(SweepSpec.build(model="tiny", methods=["draft_target"], drafts=["tiny-draft"], k=[0, K],
                              temperatures=[0.0], suites=["code"], concurrency=[CONCURRENCY], num_prompts=NUM_PROMPTS,
                              max_new_tokens=MAX_TOKENS, prompt_tokens=PROMPT_TOKENS,
                              calibration_batch_sizes=[1, CONCURRENCY], calibration_repeats=1,
                              max_draft_len=K),
              results, show_progress=False)
    out = base / "repo"
    result = CliRunner().invoke(cli, ["deploy", "--backend", "torch", "--build", str(bundle), "--out", str(out),
                                      "--k", str(K), "--baseline", str(results)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "Baseline: draft_target k=4" in result.output
    shutil.copyfile(SERIES_SOURCE, out / "tensorrt_llm_bls" / "1" / SERIES_MODULE)  # as the tensorrtllm flavour
    return out


@pytest.fixture(scope="module")
def server(repo):

    with running(repo) as srv:
        yield srv


def _prompts(name: str, n: int | None = None) -> list[str]:
    from trtspec.sweep.prompts import load_suite

    return list(load_suite(name, n).prompts)


def test_repository_names_its_baseline_and_observability_files(repo):
    record = json.loads((repo / "trtspec-repo.json").read_text())
    assert record["baseline"] == "trtspec-baseline.json"
    assert (repo / record["observability"]["prometheus_rules"]).is_file()
    assert json.loads((repo / record["observability"]["grafana_dashboard"]).read_text())["panels"]
    baseline = load_baseline(repo)
    assert baseline.k == K and baseline.suites == ["code"] and len(baseline.accepted_per_pos) == K


def test_shift_is_flagged_within_60s_and_steady_traffic_is_not(server, repo):
    from trtspec.ops.monitor import Monitor
    from trtspec.ops.recommend import MIN_DRAFTS
    from trtspec.sweep.loadgen import run_phases

    monitor = Monitor(60.0, load_baseline(repo), models={"tensorrt_llm"})

    def drifted(tick) -> bool:
        return bool(tick.report and tick.report.drift and tick.report.drift.drifted)

    ticks, counts = run_phases(server.grpc_url, scraper(server.metrics_url), monitor,
                               [("steady", _prompts("code", NUM_PROMPTS), STEADY_S),
                                ("shifted", _prompts("grounded"), SHIFT_LIMIT_S)],
                               concurrency=2 * CONCURRENCY, max_tokens=MAX_TOKENS, prompt_tokens=PROMPT_TOKENS,
                               stop_when=drifted)
    steady = [t for t in ticks if t.phase == "steady"]
    assert steady and not any(drifted(t) for t in steady), [t.report.drift for t in steady[-1:]]
    assert steady[-1].report.num_drafts >= MIN_DRAFTS  # the steady window saw enough traffic for a verdict
    shift_t = next(t.t for t in ticks if t.phase == "shifted")
    alarm = next((t for t in ticks if drifted(t)), None)
    assert alarm is not None, ticks[-1].report.drift
    assert alarm.t - shift_t <= SHIFT_LIMIT_S
    assert counts.failed == 0 and counts.ok > 0, counts.errors
    rec = alarm.report.recommendation
    assert rec is not None and rec.current_k == K and rec.message


def test_monitor_cli_once_json(server, repo):
    proc = subprocess.run([sys.executable, "-m", "trtspec", "monitor", "--metrics", server.metrics_url, "--repo",
                           str(repo), "--once", "--window", "2s", "--interval", "1s", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    reports = {r["model"]: r for r in json.loads(proc.stdout)}
    assert reports["tensorrt_llm/1"]["k"] == K and reports["tensorrt_llm/1"]["method"] == "draft_target"


def test_bls_publishes_the_same_series_as_the_engine(server):
    from trtspec.triton.client import TritonClient

    scrape = scraper(server.metrics_url)
    before = scrape()
    with TritonClient(server.grpc_url, model="tensorrt_llm_bls") as client:
        for prompt in ("def add(a, b):", "for i in range(3):"):
            client.generate(prompt, max_tokens=24, k=3)
    after = scrape()
    from trtspec.ops.window import increments

    def delta(model: str, method: str):
        key = ModelId(model, "1", method)
        return increments(key, after.models[key], before.models.get(key), 1.0)

    bls, engine = delta("tensorrt_llm_bls", "draft_target"), delta("tensorrt_llm", "draft_target")
    assert bls.num_drafts > 0
    for key in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
        assert bls.count(key) == engine.count(key), key  # two observation points, one count
    assert bls.accepted_per_pos[:3] == engine.accepted_per_pos[:3]
    assert bls.rejections_per_pos[:3] == engine.rejections_per_pos[:3]
    assert 0 < bls.count("num_emitted_tokens") <= 48 and bls.requests == {"length": 2}
    assert bls.histograms["request_latency_seconds"].count == 2


def test_apply_seam_changes_k_live(server, repo):
    """`--apply`'s control interface for Triton (trtspec.triton.control.TritonControl) sets a recommendation's k on
    the running server, and the k gauge the monitor reads follows the reload."""
    from types import SimpleNamespace

    from trtspec.ops.monitor import Monitor
    from trtspec.ops.recommend import Recommendation
    from trtspec.triton.client import TritonClient
    from trtspec.triton.control import TritonControl

    rec = Recommendation("tensorrt_llm/1", "reduce_k", K, 2, 1.1, 0.9, 1.2, None, 4.0, False, "reduce k 4 -> 2")
    report = SimpleNamespace(model="tensorrt_llm/1", recommendation=rec, schedule=None,
                             drift=SimpleNamespace(drifted=True))
    (line,) = Monitor(60.0).apply([report], TritonControl(server.grpc_url))
    assert "k 4 -> 2" in line
    with TritonClient(server.grpc_url, model="tensorrt_llm") as client:
        assert client.model_parameters("tensorrt_llm")["default_k"] == "2"
    assert scraper(server.metrics_url)().models[ModelId("tensorrt_llm", "1", "draft_target")].k == 2
