"""Observability files: the Prometheus rules pass `promtool check rules`, and `promtool test rules` shows the drift
alert firing after acceptance drops and not before; every series they read is one trtspec.contracts.series defines; the
Grafana dashboard is valid JSON whose queries parse (checked by promtool as recording rules)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from trtspec.contracts import observability as rules
from trtspec.contracts.baseline import Baseline
from trtspec.contracts.series import SERIES
from trtspec.sweep.baseline import from_results

ROOT = Path(__file__).resolve().parents[2]
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (apt-get install prometheus)")
LABELS = 'model="tensorrt_llm",version="1",method="draft_target"'


@pytest.fixture(scope="module")
def baseline() -> Baseline:
    return from_results(ROOT / "docs" / "sweep" / "results.jsonl", method="draft_target", k=4, max_k=8,
                                 temperature=0.0, suites=["code"])


def _exprs(text: str) -> list[str]:
    return [r["expr"] for g in yaml.safe_load(text)["groups"] for r in g["rules"]]


def test_rules_read_only_defined_series(baseline):
    text = rules.prometheus_rules(baseline)
    known = {s.name for s in SERIES.values()}
    for expr in _exprs(text):
        for metric in re.findall(r"\b(trtspec_spec_decode_\w+?)(?:_bucket|_sum|_count)?\[", expr):
            assert metric in known, metric
    assert "TrtspecAcceptanceDrift" in text and "TrtspecSpeculationNotPaying" in text


def test_without_baseline_only_the_windows_are_rendered():
    groups = yaml.safe_load(rules.prometheus_rules(None))["groups"]
    assert [g["name"] for g in groups] == ["trtspec-windows"]
    assert "Speedup" not in rules.grafana_dashboard(None)


@needs_promtool
def test_promtool_checks_the_rules_and_the_dashboard_queries(tmp_path, baseline):
    path = tmp_path / "rules.yml"
    path.write_text(rules.prometheus_rules(baseline))
    proc = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    dashboard = json.loads(rules.grafana_dashboard(baseline))
    queries = [t["expr"].replace("$price_per_hour", "2.5").replace('"$model"', '".*"')
               for p in dashboard["panels"] for t in p["targets"]]
    as_rules = {"groups": [{"name": "grafana", "rules": [{"record": f"q:{i}", "expr": q}
                                                         for i, q in enumerate(queries)]}]}
    (tmp_path / "grafana.yml").write_text(yaml.safe_dump(as_rules))
    proc = subprocess.run([PROMTOOL, "check", "rules", str(tmp_path / "grafana.yml")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _series(rates: list[float], minutes: int, shifted: list[float], drafts_per_min: int = 1000) -> dict[str, str]:
    """promtool input series: per-position accepted/rejected counters growing at the given conditional acceptance
    for `minutes`, then at `shifted` for as long again (values in promtool's `a+bxn` expansion)."""
    def per_min(cond: list[float]) -> tuple[list[float], list[float]]:
        acc, rej, reach = [], [], float(drafts_per_min)
        for c in cond:
            acc.append(round(reach * c, 3))
            rej.append(round(reach * (1 - c), 3))
            reach = acc[-1]
        return acc, rej

    (acc0, rej0), (acc1, rej1) = per_min(rates), per_min(shifted)
    out = {}
    for name, before, after in (("num_accepted_tokens_per_pos", acc0, acc1), ("num_rejections_per_pos", rej0, rej1)):
        for i, (a, b) in enumerate(zip(before, after, strict=True)):
            out[f'trtspec_spec_decode_{name}{{{LABELS},position="{i}"}}'] = f"0+{a}x{minutes} {a * minutes}+{b}x{minutes}"
    return out


@needs_promtool
def test_promtool_drift_alert_fires_after_a_drop_and_not_before(tmp_path, baseline):
    """promtool's unit test: conditional acceptance at the baseline for 20 minutes, then 0.2 lower. The alert's
    expression, labels and `for` are as rendered; its annotations (texts holding $value) are left out of the copy
    under test, since promtool compares them verbatim."""
    tested = [i for i, p in enumerate(baseline.conditional_per_pos) if 0 < p < 1 and baseline.trials_per_pos[i] >= 20]
    steady = baseline.conditional_per_pos
    dropped = [max(p - 0.2, 0.05) for p in steady]
    data = yaml.safe_load(rules.prometheus_rules(baseline))
    for group in data["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(data))
    fired = [{"exp_labels": {"severity": "warning", "model": "tensorrt_llm", "version": "1", "position": str(i)}}
             for i in tested]
    test = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [{"series": s, "values": v} for s, v in _series(steady, 20, dropped).items()],
        "alert_rule_test": [
            {"eval_time": "19m", "alertname": "TrtspecAcceptanceDrift", "exp_alerts": []},  # steady: silent
            {"eval_time": "22m", "alertname": "TrtspecAcceptanceDrift", "exp_alerts": []},  # pending (for: 2m)
            {"eval_time": "32m", "alertname": "TrtspecAcceptanceDrift", "exp_alerts": fired},
        ],
    }]}
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test))
    proc = subprocess.run([PROMTOOL, "test", "rules", "test.yml"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
