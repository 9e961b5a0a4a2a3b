"""A deploy-time baseline from a sweep's results: the cases of one method and temperature (every suite unless told
which), reduced to what `trtspec.contracts.baseline.Baseline` keeps (acceptance per position, throughput per
concurrency, calibrated step costs, host overhead per step).
"""

from __future__ import annotations

import hashlib
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from trtspec.contracts import costmodel
from trtspec.contracts.baseline import Baseline, StepCostsRecord, is_baseline_file
from trtspec.errors import UsageError
from trtspec.textfile import size_text

# The most of a sweep's results file read for a baseline: a case record is 2-4 KiB (docs/sweep/results.jsonl: 138
# records in 259 KiB), so 64 MiB holds some 20,000 cases, more than one method's sweep; a larger file is refused unread.
MAX_RESULTS_BYTES = 64 << 20


def from_results(path: Path, *, method: str, k: int, max_k: int | None = None,
                 temperature: float | None = None, suites: list[str] | None = None) -> Baseline:
    """The baseline of a sweep's results for one method (and draft) at one temperature (max_k None: the
    largest k the sweep measured for the method).

    Raises UsageError (naming the value and what the file holds) when the results have no such cases, more than
    one temperature and none chosen, no plain-decoding cases or no calibration.
    """
    from trtspec.sweep.analysis import load_results
    from trtspec.sweep.records import latest_by_id, read_records

    path = Path(path)
    if not path.is_file():
        raise UsageError(f"--baseline {path} is not a file", hint="give the results JSONL of `trtspec sweep`")
    if path.stat().st_size > MAX_RESULTS_BYTES:
        raise UsageError(f"--baseline {path} is larger than {size_text(MAX_RESULTS_BYTES)}, the most read as a "
                         "sweep's results", hint="give the results of a sweep of the deployed method only, or a "
                                                 "trtspec-baseline.json (`trtspec deploy --baseline` writes one)")
    results = load_results(path, timing="wall", max_bytes=MAX_RESULTS_BYTES)
    records = latest_by_id(read_records(path, max_bytes=MAX_RESULTS_BYTES), "case")
    spec_rows = [r for r in results.rows if r.method == method and r.k > 0 and not r.params.get("adaptive")]
    if not spec_rows:
        found = sorted({r.method for r in results.rows if r.k > 0})
        raise UsageError(f"--baseline {path} has no {method} cases with k > 0 (it has: {', '.join(found) or 'none'})",
                         hint=f"sweep the deployed method first: trtspec sweep --method {method} --k "
                              f"0-{max_k or max(k, 1)}")
    drafts = sorted({str(r.params.get("draft")) for r in spec_rows})
    if len(drafts) > 1:
        raise UsageError(f"--baseline {path} has {method} cases with several drafts ({', '.join(drafts)})",
                         hint="give the results of a sweep with the deployed draft only")
    temps = sorted({float(r.params["temperature"]) for r in spec_rows})
    if temperature is None and len(temps) > 1:
        raise UsageError(f"--baseline {path} has temperatures {temps}; choose the served one",
                         hint=f"pass --baseline-temperature (one of {', '.join(f'{t:g}' for t in temps)})")
    temperature = temps[0] if temperature is None else float(temperature)
    chosen = suites or sorted({r.suite for r in spec_rows})

    def keep(row: Any) -> bool:
        return float(row.params["temperature"]) == temperature and row.suite in chosen

    spec_rows = [r for r in spec_rows if keep(r)]
    plain_rows = [r for r in results.rows if r.k == 0 and keep(r)]
    if not spec_rows or not plain_rows:
        what = "speculative" if not spec_rows else "plain-decoding (k = 0)"
        raise UsageError(f"--baseline {path} has no {what} cases at temperature {temperature:g} for suites "
                         f"{chosen}", hint="sweep with --k 0,K at the served temperature")
    calib = list(results.calibrations.values())
    sizes = sorted({int(b) for c in calib for b in c.get("target_s", {})})
    costs = [c for c in (_costs(calib, spec_rows[0].params, b) for b in sizes) if c is not None]
    if not costs:
        raise UsageError(f"--baseline {path} holds no calibration for model {spec_rows[0].params['model']!r}",
                         hint="rerun the sweep (it calibrates every model set before its cases)")
    counts = _pooled_counts([records[r.id]["metrics"].get("stats", {}) | {"k": r.k} for r in
                             _one_per(spec_rows, ("suite", "k"))])
    by_k: dict[int, list[float]] = defaultdict(list)
    for row in spec_rows:
        by_k[row.k].append(row.tokens_per_step)
    return Baseline(
        model=str(spec_rows[0].params["model"]), draft=spec_rows[0].params.get("draft"), method=method,
        temperature=temperature, suites=chosen, k=k, max_k=max_k or max(r.k for r in spec_rows), **counts,
        tokens_per_step_by_k={kk: statistics.fmean(v) for kk, v in sorted(by_k.items())},
        plain_tokens_per_s=_mean_by(plain_rows, lambda r: r.wall_tokens_per_s),
        spec_tokens_per_s={kk: _mean_by([r for r in spec_rows if r.k == kk], lambda r: r.wall_tokens_per_s)
                           for kk in sorted(by_k)},
        costs=[StepCostsRecord.of(c) for c in costs],
        overhead_s={kk: _mean_by([r for r in spec_rows + plain_rows if r.k == kk and r.prediction],
                                 lambda r: r.prediction.overhead_step_s) for kk in sorted({0, *by_k})},
        source={"results": str(path.resolve()), "sha256": _sha256(path),
                "cases": sorted(r.id for r in spec_rows + plain_rows)})


def swept_methods(path: Path) -> list[str]:
    """The speculative methods (k > 0) a sweep's results hold (a baseline file: its own method)."""
    from trtspec.sweep.analysis import load_results

    if is_baseline_file(path):
        return [Baseline.read(path).method]
    results = load_results(Path(path), timing="wall", max_bytes=MAX_RESULTS_BYTES)
    return sorted({r.method for r in results.rows if r.k > 0})


def baseline_for(path: Path, *, method: str, k: int, max_k: int | None = None, temperature: float | None = None,
                 suites: list[str] | None = None) -> Baseline:
    """A baseline file as it is, or one made from a sweep's results (`from_results`) for the served
    method and k."""
    if is_baseline_file(path):
        return Baseline.read(path)
    return from_results(path, method=method, k=k, max_k=max_k, temperature=temperature, suites=suites)


def _sha256(path: Path) -> str:
    with open(path, "rb") as fh:  # read under the limit, as the records were
        return hashlib.sha256(fh.read(MAX_RESULTS_BYTES + 1)).hexdigest()


def _costs(calibrations: list[dict], params: dict, batch: int) -> costmodel.StepCosts | None:
    from trtspec.sweep.analysis import step_costs

    return step_costs(calibrations, params, batch, "wall")


def _one_per(rows: list[Any], keys: tuple[str, ...]) -> list[Any]:
    """The first row per (suite, k): concurrency and repeats re-run the same requests, so their acceptance
    counts are the same trials again (greedy) or more of them (sampled); pooling them once keeps counts honest."""
    seen: dict[tuple, Any] = {}
    for row in rows:
        seen.setdefault(tuple(getattr(row, key) for key in keys), row)
    return list(seen.values())


def _pooled_counts(stats_list: list[dict]) -> dict[str, list[int]]:
    """Accepted / rejected / drafts per position summed over cases; rejections come from num_rejections_per_pos,
    or (records written before it existed) from the accepted-length histogram: with drafts of k tokens, a draft
    with a < k accepted was rejected at position a."""
    size = max(int(s["k"]) for s in stats_list)
    drafts, accepted, rejected = [0] * size, [0] * size, [0] * size
    for stats in stats_list:
        k = int(stats["k"])
        per_pos = stats.get("num_accepted_tokens_per_pos") or []
        rejections = stats.get("num_rejections_per_pos")
        if rejections is None:
            hist = stats.get("accepted_length_histogram") or []
            rejections = [hist[i] if i < len(hist) else 0 for i in range(k)]
        for i in range(min(k, size)):
            drafts[i] += int(stats.get("num_drafts") or 0)
            accepted[i] += int(per_pos[i]) if i < len(per_pos) else 0
            rejected[i] += int(rejections[i]) if i < len(rejections) else 0
    return {"drafts_per_pos": drafts, "accepted_per_pos": accepted, "rejections_per_pos": rejected}


def _mean_by(rows: list[Any], value: Any) -> dict[int, float]:
    by: dict[int, list[float]] = defaultdict(list)
    for row in rows:
        by[int(row.params["concurrency"])].append(float(value(row)))
    return {c: statistics.fmean(v) for c, v in sorted(by.items())}
