"""Observability files rendered with a repository: Prometheus recording + alerting rules and a Grafana dashboard.

Recording rules give the monitor's windowed numbers to Prometheus (per model and version, over 1m and 5m): drafts/s,
mean accepted length, acceptance rate, acceptance per position (r_i and conditional c_i), effective tokens/s,
latency quantiles. With a baseline they also record its constants (c_i per position, plain-decoding tokens/s) and:
- `trtspec:acceptance_drift_z:5m`: a one-sided binomial z statistic per position, (c_hat - p0) / sqrt(p0 (1 - p0) / n)
  over 5 minutes of trials; alert `TrtspecAcceptanceDrift` when it is below -z with z the Bonferroni quantile
  (false-alarm rate `alpha` per evaluation across the m tested positions), held for 2 minutes. This is the fixed-
  window counterpart of the monitor's sequential CUSUM (trtspec.ops.drift).
- `trtspec:speedup_vs_plain:5m`: effective tokens/s over the baseline's plain decoding; alert
  `TrtspecSpeculationNotPaying` when it stays below 1 for 10 minutes.
Series names come from trtspec.contracts.series. Pure: returns text; `plan` maps relative paths to file text.
"""

from __future__ import annotations

import json
from statistics import NormalDist
from typing import Any

import yaml

from trtspec.contracts.baseline import Baseline
from trtspec.contracts.series import name

DEFAULT_ALPHA = 0.01  # false-alarm rate of the drift alert and of the monitor's CUSUM (trtspec.ops.drift)
RULES_FILE = "trtspec-prometheus-rules.yml"  # at the root: Triton takes every directory for a model
DASHBOARD_FILE = "trtspec-grafana-dashboard.json"
BY = "model, version"
MIN_TRIALS = 50  # per position over 5 minutes before the drift alert may fire
WINDOWS = ("1m", "5m")


def _rate(key: str, window: str, by: str = BY) -> str:
    return f"sum by ({by}) (rate({name(key)}[{window}]))"


def recording_rules(window: str) -> list[dict[str, str]]:
    """The windowed numbers over `window` (e.g. 1m): names are `trtspec:<what>:<window>`."""
    pos = f"{BY}, position"
    accepted, rejected = _rate("num_accepted_tokens_per_pos", window, pos), _rate("num_rejections_per_pos", window, pos)
    latency = f"sum by ({BY}, le) (rate({name('request_latency_seconds')}_bucket[{window}]))"
    return [
        {"record": f"trtspec:drafts_per_s:{window}", "expr": _rate("num_drafts", window)},
        {"record": f"trtspec:emitted_tokens_per_s:{window}", "expr": _rate("num_emitted_tokens", window)},
        {"record": f"trtspec:mean_acceptance_length:{window}",
         "expr": f"1 + {_rate('num_accepted_tokens', window)} / {_rate('num_drafts', window)}"},
        {"record": f"trtspec:acceptance_rate:{window}",
         "expr": f"{_rate('num_accepted_tokens', window)} / {_rate('num_draft_tokens', window)}"},
        {"record": f"trtspec:acceptance_per_pos:{window}",
         "expr": f"{accepted} / on({BY}) group_left {_rate('num_drafts', window)}"},
        {"record": f"trtspec:conditional_acceptance:{window}", "expr": f"{accepted} / ({accepted} + {rejected})"},
        {"record": f"trtspec:position_trials:{window}",
         "expr": f"sum by ({pos}) (increase({name('num_accepted_tokens_per_pos')}[{window}])) + "
                 f"sum by ({pos}) (increase({name('num_rejections_per_pos')}[{window}]))"},
        {"record": f"trtspec:request_latency_p95:{window}", "expr": f"histogram_quantile(0.95, {latency})"},
        {"record": f"trtspec:requests_in_flight:{window}",
         "expr": f"sum by ({BY}) (rate({name('request_latency_seconds')}_sum[{window}]))"},
    ]


def baseline_rules(baseline: Baseline, alpha: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(recording, alerting) rules that need the baseline: its constants, the drift z statistic, the speedup."""
    tested = [i for i, (p0, n) in enumerate(zip(baseline.conditional_per_pos, baseline.trials_per_pos, strict=True))
              if 0.0 < p0 < 1.0 and n >= 20]
    record: list[dict[str, Any]] = []
    for i in tested:
        p0 = baseline.conditional_per_pos[i]
        record.append({"record": "trtspec:baseline_conditional_acceptance", "expr": f"vector({p0:.6f})",
                       "labels": {"position": str(i)}})
        record.append({"record": "trtspec:baseline_conditional_variance", "expr": f"vector({p0 * (1 - p0):.6f})",
                       "labels": {"position": str(i)}})
    concurrency = max(baseline.plain_tokens_per_s)
    record.append({"record": "trtspec:baseline_plain_tokens_per_s",
                   "expr": f"vector({baseline.plain_tokens_per_s[concurrency]:.6f})",
                   "labels": {"concurrency": str(concurrency)}})
    record.append({"record": "trtspec:acceptance_drift_z:5m", "expr": (
        "(trtspec:conditional_acceptance:5m - on(position) group_left trtspec:baseline_conditional_acceptance) / "
        "sqrt(trtspec:baseline_conditional_variance / on(position) group_right trtspec:position_trials:5m)")})
    record.append({"record": "trtspec:speedup_vs_plain:5m",
                   "expr": "trtspec:emitted_tokens_per_s:5m / scalar(trtspec:baseline_plain_tokens_per_s)"})
    z = NormalDist().inv_cdf(1 - alpha / max(len(tested), 1))
    alerts = [
        {"alert": "TrtspecAcceptanceDrift", "for": "2m",
         "expr": f"trtspec:acceptance_drift_z:5m < -{z:.4f} and on({BY}, position) "
                 f"trtspec:position_trials:5m >= {MIN_TRIALS}",
         "labels": {"severity": "warning"},
         "annotations": {"summary": "Draft acceptance at position {{ $labels.position }} of {{ $labels.model }} "
                                    "dropped below the deploy-time baseline",
                         "description": f"One-sided binomial z = {{{{ $value | printf \"%.1f\" }}}} < -{z:.2f} "
                                        f"(Bonferroni over {len(tested)} positions, false-alarm rate {alpha:g} per "
                                        "evaluation). Run `trtspec monitor` for the recommended k; if even the best "
                                        "k no longer pays, retrain the draft."}},
        {"alert": "TrtspecSpeculationNotPaying", "for": "10m", "expr": "trtspec:speedup_vs_plain:5m < 1",
         "labels": {"severity": "warning"},
         "annotations": {"summary": "{{ $labels.model }} produces fewer tokens/s than plain decoding did at "
                                    f"deploy time (concurrency {concurrency})",
                         "description": "Effective tokens/s over the baseline's plain decoding = "
                                        "{{ $value | printf \"%.2f\" }}. Reduce k or stop speculating."}},
    ]
    return record, alerts


def prometheus_rules(baseline: Baseline | None, *, alpha: float = DEFAULT_ALPHA) -> str:
    """The rules file (Prometheus 2.x YAML)."""
    groups: list[dict[str, Any]] = [{"name": "trtspec-windows", "rules": [r for w in WINDOWS
                                                                            for r in recording_rules(w)]}]
    if baseline is not None:
        record, alerts = baseline_rules(baseline, alpha)
        groups.append({"name": "trtspec-baseline", "rules": record})
        groups.append({"name": "trtspec-alerts", "rules": alerts})
    header = "# Rendered by `trtspec deploy` (trtspec.contracts.observability); load with rule_files in prometheus.yml.\n"
    return header + yaml.safe_dump({"groups": groups}, sort_keys=False, width=200)


def _panel(panel_id: int, title: str, exprs: list[tuple[str, str]], y: int, x: int = 0, unit: str = "none") -> dict:
    return {"id": panel_id, "type": "timeseries", "title": title, "datasource": {"type": "prometheus",
                                                                                 "uid": "$datasource"},
            "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "targets": [{"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend}
                        for i, (expr, legend) in enumerate(exprs)]}


def grafana_dashboard(baseline: Baseline | None) -> str:
    """A Grafana dashboard (JSON model, schemaVersion 39) over the recording rules; `price_per_hour` is a variable."""
    sel = '{model=~"$model"}'
    panels = [
        _panel(1, "Mean accepted length (1m)", [(f"trtspec:mean_acceptance_length:1m{sel}", "{{model}}")], 0),
        _panel(2, "Acceptance rate (1m)", [(f"trtspec:acceptance_rate:1m{sel}", "{{model}}")], 0, 12, "percentunit"),
        _panel(3, "Acceptance per position (5m)", [(f"trtspec:acceptance_per_pos:5m{sel}",
                                                    "{{model}} pos {{position}}")], 8, 0, "percentunit"),
        _panel(4, "Effective tokens/s (1m)", [(f"trtspec:emitted_tokens_per_s:1m{sel}", "{{model}}")], 8, 12),
        _panel(5, "Cost per 1M output tokens ($)", [(f"$price_per_hour / (trtspec:emitted_tokens_per_s:5m{sel} * 3600) "
                                                     "* 1e6", "{{model}}")], 16, 0, "currencyUSD"),
        _panel(6, "Request latency p95 (1m)", [(f"trtspec:request_latency_p95:1m{sel}", "{{model}}")], 16, 12, "s"),
    ]
    if baseline is not None:
        panels += [
            _panel(7, "Conditional acceptance vs baseline (5m)", [
                (f"trtspec:conditional_acceptance:5m{sel}", "{{model}} pos {{position}}"),
                ("trtspec:baseline_conditional_acceptance", "baseline pos {{position}}")], 24, 0, "percentunit"),
            _panel(8, "Drift z per position (alert below the dashed line)",
                   [(f"trtspec:acceptance_drift_z:5m{sel}", "{{model}} pos {{position}}")], 24, 12),
            _panel(9, "Speedup vs plain decoding (5m)", [(f"trtspec:speedup_vs_plain:5m{sel}", "{{model}}")], 32),
        ]
    dashboard = {
        "title": "trtspec speculative decoding", "uid": "trtspec-spec-decode", "schemaVersion": 39, "version": 1,
        "editable": True, "time": {"from": "now-1h", "to": "now"}, "refresh": "10s", "tags": ["trtspec"],
        "templating": {"list": [
            {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"},
            {"name": "model", "type": "query", "datasource": {"type": "prometheus", "uid": "$datasource"},
             "query": "label_values(trtspec:drafts_per_s:1m, model)", "includeAll": True, "multi": True,
             "current": {"text": "All", "value": "$__all"}, "refresh": 2},
            {"name": "price_per_hour", "type": "textbox", "label": "$ per device-hour", "query": "2.5",
             "current": {"text": "2.5", "value": "2.5"}},
        ]},
        "panels": panels,
    }
    return json.dumps(dashboard, indent=2) + "\n"


def plan(baseline: Baseline | None, *, alpha: float = DEFAULT_ALPHA) -> dict[str, str]:
    """Relative path -> text of the observability files."""
    return {RULES_FILE: prometheus_rules(baseline, alpha=alpha), DASHBOARD_FILE: grafana_dashboard(baseline)}
