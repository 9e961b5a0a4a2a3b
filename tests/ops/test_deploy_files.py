"""What deploy renders for operations: the baseline and the observability files on both flavours, the series module
beside the BLS on the TensorRT-LLM flavour only (where the C++ backend publishes no acceptance series), and that module
runs on the standard library alone (NVIDIA's container has no trtspec)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tests.triton.helpers import torch_bundle, trt_manifest, write_manifest
from trtspec.contracts import observability as rules
from trtspec.contracts.baseline import BASELINE_FILE, Baseline
from trtspec.contracts.series import SERIES
from trtspec.sweep.baseline import from_results
from trtspec.triton.repo import SERIES_MODULE, RepoSpec, plan_repository

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def baseline() -> Baseline:
    return from_results(ROOT / "docs" / "sweep" / "results.jsonl", method="draft_target", k=4, max_k=8,
                                 temperature=0.0, suites=["code"])


def test_tensorrtllm_flavour_puts_the_series_beside_the_bls(tmp_path, tokenized_pair, baseline):
    build = write_manifest(tmp_path / "build", trt_manifest("draft_target", tokenized_pair[0], max_draft_len=4,
                                                            draft=True))
    spec = replace(RepoSpec.from_build(build, "tensorrtllm"), baseline=baseline)
    plan = plan_repository(spec)
    assert plan[f"tensorrt_llm_bls/1/{SERIES_MODULE}"].copy_from == Path(sys.modules["trtspec.contracts.series"].__file__)
    assert Baseline.model_validate_json(plan[BASELINE_FILE].text) == baseline
    record = json.loads(plan["trtspec-repo.json"].text)
    assert record["baseline"] == BASELINE_FILE
    assert plan[record["observability"]["prometheus_rules"]].text == rules.prometheus_rules(baseline)
    assert not any("/" in rel and rel.split("/")[0] == "observability" for rel in plan)  # Triton: dirs are models


def test_torch_flavour_engine_models_publish_so_the_bls_does_not(tmp_path, random_pair):
    bundle = torch_bundle(tmp_path / "bundle", *random_pair)
    plan = plan_repository(RepoSpec.from_build(bundle, "torch"))
    assert f"tensorrt_llm_bls/1/{SERIES_MODULE}" not in plan
    assert json.loads(plan["trtspec-repo.json"].text)["baseline"] is None
    assert BASELINE_FILE not in plan and rules.RULES_FILE in plan and rules.DASHBOARD_FILE in plan


def test_series_module_needs_only_the_standard_library(tmp_path):
    (tmp_path / SERIES_MODULE).write_bytes(Path(sys.modules["trtspec.contracts.series"].__file__).read_bytes())
    code = (f"import sys; sys.path.insert(0, {str(tmp_path)!r}); import trtspec_series as s; "
            "print(','.join(sorted(s.SERIES)))")
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True)  # no site-packages
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().split(",") == sorted(SERIES)
