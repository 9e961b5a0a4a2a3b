"""From results.jsonl to numbers: measured speedup vs the k = 0 baseline, the cost model's prediction per case, and
the recommendation (method, k per batch size, expected speedup, cost per 1M tokens). Pure Python (no torch).

Prediction per case (see costmodel.py): E(k) from the case's per-position acceptance; T_target(b, k+1) and T_draft(b)
from the calibration record of the case's model set at b = concurrency (the median over its slices when it was
calibrated in slices between the cases: `merge_slices`); host time per step (and a model-free proposer's) from the
same calibration (`StepCosts.host`), at the case's draft tokens per row and step. A prediction
uses the calibration and the run's counts and acceptance, never the run's time; records whose calibration has no host
times fall back to the engine's own accounting of the run (`overhead_time_s / num_target_forwards`). Measured speedup:
with rounds (`--repeats`), the median of each round's ratio to the same round's baseline.

Timing: `wall` uses wall-clock seconds; `cpu` uses process CPU seconds (cases and calibration record both), which
other processes time-slicing a shared CPU do not inflate (sharing caches and cores still does). The engine's
wall-clock split is converted with the run's own CPU/wall ratio. `auto` picks cpu when every record has CPU times and
the device is the CPU, else wall.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trtspec.contracts import costmodel
from trtspec.errors import UsageError
from trtspec.methods import BASELINE, resolve
from trtspec.methods.draft_target import DRAFT_TARGET
from trtspec.methods.eagle import EAGLE3
from trtspec.methods.lookahead import LOOKAHEAD
from trtspec.methods.medusa import MEDUSA
from trtspec.methods.suffix import SUFFIX
from trtspec.sweep.record_fields import check_records
from trtspec.sweep.records import Record, latest_by_id, read_results

TOLERANCE = 0.10  # the acceptance bound for |predicted / measured - 1| (issue 28)
BASELINE_KEYS = ("model", "temperature", "suite", "concurrency", "max_new_tokens", "num_prompts", "seed", "via")
LOOP_KEYS = ("num_requests", "prompt_tokens", "ramp")  # closed-loop fields a baseline shares too (absent = default)


@dataclass
class CaseRow:
    """One ok case with its derived numbers (None where a number cannot be derived)."""

    id: str
    params: dict[str, Any]
    tokens_per_s: float
    wall_time_s: float
    tokens_per_step: float
    acceptance_rate: float
    per_pos: list[float]
    measured_speedup: float | None = None
    prediction: costmodel.Prediction | None = None
    measured_step_s: float | None = None
    seconds: float = 0.0  # the case's duration in the chosen timing (wall or CPU)
    num_requests: int = 0
    wall_tokens_per_s: float = 0.0  # always wall clock, whatever the timing of tokens_per_s
    repeats: int = 1  # measurement rounds merged into this row (timings are their medians)
    round_tokens_per_s: dict[int, float] = field(default_factory=dict)  # per measurement round (params' repeat)
    round_speedups: list[float] = field(default_factory=list)  # per round: this round's case / its baseline's
    miss_reason: str = ""

    @property
    def method(self) -> str:
        return str(self.params["method"])

    @property
    def k(self) -> int:
        return int(self.params["k"])

    @property
    def suite(self) -> str:
        """Display name of the prompt suite: a shipped name, or the stem of a user JSONL path."""
        suite = str(self.params["suite"])
        return Path(suite).stem if suite.endswith(".jsonl") else suite

    @property
    def variant(self) -> str:
        """method plus its draft (@ its runtime unless torch) / heads / lookahead W,N,G / suffix cache state (and
        `adaptive` or `schedule`), the unit a recommendation picks."""
        extra = (self.params.get(DRAFT_TARGET.sweep_variant) or self.params.get(MEDUSA.sweep_variant)
                 or self.params.get(LOOKAHEAD.sweep_variant) or self.params.get(SUFFIX.sweep_variant))
        variant = f"{self.method}:{Path(str(extra)).name}" if extra else self.method
        if runtime := self.params.get("draft_runtime"):  # onnx: another variant than the same draft in torch
            variant += f"@{runtime}"
        if drafter := self.params.get(EAGLE3.sweep_variant):  # EAGLE-3 drafter and its tree (SweepSpec.eagle_trees)
            variant = f"{self.method}:{Path(str(drafter)).name}/{self.params.get('tree')}"
        return variant + (" adaptive" if self.params.get("adaptive") else " schedule" if self.params.get("schedule")
                          else "")

    prefill: tuple[float, float] | None = None  # (plain, speculative) prompt-pass seconds, when calibrated
    admissions: float | None = None  # admission steps per `concurrency` requests (measured by the runner)
    num_steps: int = 0  # engine steps of the run (measured by the runner)
    admission_steps: int = 0
    admission_trace: list[list[int]] = field(default_factory=list)  # per admission step: rows, admitted, longest prompt
    modelled_s: float | None = None  # the cost model's time for this run's measured step trace
    base_admissions: float | None = None  # the same for the baseline case

    base_modelled_s: float | None = None
    per_request_acceptance: list[float] = field(default_factory=list)  # each request's mean acceptance length
    # each request's (drafts, draft tokens, accepted tokens, emitted tokens, target forwards) (engine sweeps)
    per_request_counts: list[tuple[int, ...]] = field(default_factory=list)
    # a hybrid method's verified drafts (methods/hybrid.py): (from the suffix tree, from its model drafter)
    hybrid_drafts: tuple[int, int] = (0, 0)

    @property
    def predicted_speedup(self) -> float | None:
        """Predicted speedup of this case: modelled run times (step trace) when recorded, else whole requests with
        prompt passes, else per step."""
        if self.modelled_s and self.base_modelled_s:
            return self.base_modelled_s / self.modelled_s
        if self.prediction is None:
            return None
        if self.prefill and self.k:
            return self.prediction.with_prefill(int(self.params["max_new_tokens"]), *self.prefill,
                                                admissions_base=self.base_admissions, admissions_spec=self.admissions)
        return self.prediction.speedup

    @property
    def error(self) -> float | None:
        """predicted / measured - 1."""
        predicted = self.predicted_speedup
        if predicted is None or not self.measured_speedup:
            return None
        return predicted / self.measured_speedup - 1.0

    @property
    def within_tolerance(self) -> bool | None:
        err = self.error
        return None if err is None else abs(err) <= TOLERANCE


@dataclass
class Results:
    rows: list[CaseRow]
    errors: list[Record]
    calibrations: dict[str, Record]
    sweeps: list[Record] = field(default_factory=list)
    timing: str = "wall"
    warnings: list[str] = field(default_factory=list)  # about the file, for the reader (a skipped torn last line)

    def baseline_of(self, row: CaseRow) -> CaseRow | None:
        key = _baseline_key(row.params)
        return next((r for r in self.rows if r.method == BASELINE and _baseline_key(r.params) == key), None)


def load_results(path: str | Path, timing: str = "auto", *, max_bytes: int | None = None) -> Results:
    """Read a results file and derive every case's measured and predicted speedup (timing: wall | cpu | auto;
    max_bytes: refuse a larger file, as `read_records`). Every field the analysis reads is checked first
    (record_fields.py: ConfigError naming the file, line, field and value); an unterminated last line (a sweep
    stopped mid-write) is skipped, and said in `Results.warnings`."""
    if timing not in ("wall", "cpu", "auto"):
        raise ValueError(f"timing={timing!r}: use wall, cpu or auto")
    read = read_results(path, max_bytes=max_bytes)
    records = read.records
    cases = latest_by_id(records, "case")
    calibration_records = latest_by_id(records, "calibration")
    line_of = {id(rec): line for rec, line in zip(records, read.lines, strict=True)}
    used = [*cases.values(), *calibration_records.values(), *(r for r in records if r.get("kind") == "sweep")]
    check_records(path, sorted(((line_of[id(rec)], rec) for rec in used), key=lambda pair: pair[0]), timing=timing)
    ok = [rec for rec in cases.values() if rec.get("status") == "ok"]
    calibrations = merge_slices(calibration_records.values())
    if timing == "auto":
        on_cpu = all((rec.get("via_info") or {}).get("device", "cpu") == "cpu" for rec in ok)
        has_cpu = all("cpu_time_s" in rec["metrics"] for rec in ok) and \
            all("target_cpu_s" in c for c in calibrations.values())
        timing = "cpu" if ok and on_cpu and has_cpu else "wall"
    rows = _merge_repeats([_row(rec, timing) for rec in ok])
    errors = [rec for rec in cases.values() if rec.get("status") != "ok"]
    results = Results(rows, errors, calibrations, [r for r in records if r.get("kind") == "sweep"], timing)
    if read.torn_line is not None:
        results.warnings.append(
            f"{path}:{read.torn_line}: skipped the last line: it has no newline at its end (a sweep stopped while "
            "writing it); `trtspec sweep --out` on this file cuts it and runs that case again")
    stats_of = {rec["id"]: _clock_stats(rec["metrics"], timing) for rec in ok}
    for row in rows:
        row.modelled_s = _trace_seconds(row, stats_of[row.id], results.calibrations.values(), timing)
    for row in rows:
        base = results.baseline_of(row)
        row.base_modelled_s = base.modelled_s if base else None
        if base is not None and base.tokens_per_s > 0:
            # with rounds: the median of each round's case / that round's baseline (run close in time, so a slower
            # or faster stretch of a shared machine cancels), else the ratio of the two (median) rates
            row.round_speedups = [rate / base.round_tokens_per_s[r] for r, rate in sorted(row.round_tokens_per_s.items())
                                  if base.round_tokens_per_s.get(r)]
            row.measured_speedup = (statistics.median(row.round_speedups) if len(row.round_speedups) > 1
                                    else row.tokens_per_s / base.tokens_per_s)
        costs = step_costs(results.calibrations.values(), row.params, int(row.params["concurrency"]), timing)
        if costs is None or row.params.get("schedule") or row.params.get("ramp"):  # k or the batch size varies
            continue
        stats, base_stats = stats_of[row.id], stats_of.get(base.id, {}) if base else {}
        row.prediction = costmodel.predict(
            row.k, row.tokens_per_step, costs, overhead_base_s=_overhead_per_step(base_stats, costs),
            overhead_spec_s=_overhead_per_step(stats, costs), draft_step_s=_proposer_step_s(row, stats, costs))
        row.base_admissions = base.admissions if base else None
        if costs.target_prefill_s:
            uses_draft = resolve(row.method).needs_draft_model
            row.prefill = (costs.target_prefill_s, costs.target_prefill_s + (costs.draft_prefill_s if uses_draft else 0))
        row.miss_reason = _miss_reason(row, base, costs)
    return results


def merge_slices(calibrations: Iterable[Record]) -> dict[str, Record]:
    """One calibration per model set (by id): a model set calibrated in slices (records with `of`, runner.py) gets
    every number the median over its slices, the other fields from its first slice; others pass through."""
    groups: dict[str, list[Record]] = defaultdict(list)
    for rec in calibrations:
        groups[rec.get("of") or rec["id"]].append(rec)
    return {cid: recs[0] if len(recs) == 1 else {**_median_of(recs), "id": cid, "slices_merged": len(recs)}
            for cid, recs in groups.items()}


def _median_of(values: Sequence[Any]) -> Any:
    """The element-wise median of equally shaped values: numbers (bools aside) -> their median, dicts -> by key (keys
    of the first; a key some lack takes the median of those that have it), anything else -> the first."""
    first = values[0]
    if isinstance(first, dict):
        return {key: _median_of([v[key] for v in values if isinstance(v, dict) and key in v]) for key in first}
    if isinstance(first, int | float) and not isinstance(first, bool):
        numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
        return statistics.median(numbers)
    return first


def step_costs(calibrations: Iterable[Record], params: dict[str, Any], batch: float,
               timing: str = "wall") -> costmodel.StepCosts | None:
    """Calibrated forward costs for a case's model set at a batch size (interpolated between calibrated sizes)."""
    draft, heads = DRAFT_TARGET.checkpoint, MEDUSA.checkpoint  # a calibration's model set (sweep.runner.ModelSet)
    needs_draft = bool(params.get(draft) or params.get(heads))
    best: Record | None = None
    for rec in calibrations:
        if rec.get("model") != params["model"]:
            continue
        if needs_draft and (rec.get(draft), rec.get(heads), rec.get("draft_runtime")) != (
                params.get(draft), params.get(heads), params.get("draft_runtime")):
            continue
        best = rec
        if not needs_draft or rec.get(draft) == params.get(draft):
            break
    suffix = "cpu_s" if timing == "cpu" else "s"
    if best is None or not best.get(f"target_{suffix}"):
        return None
    sizes = sorted(int(b) for b in best[f"target_{suffix}"])

    def at(b: int) -> costmodel.StepCosts:
        target_s = {int(n): float(t) for n, t in best[f"target_{suffix}"][str(b)].items()}
        draft_s = float(best.get(f"draft_{suffix}", {}).get(str(b), 0.0)) if needs_draft else 0.0
        prefill = float(best.get(f"target_prefill_{suffix}", {}).get(str(b), 0.0))
        draft_prefill = float(best.get(f"draft_prefill_{suffix}", {}).get(str(b), 0.0))
        tokens = best.get(f"draft_tokens_{suffix}", {}).get(str(b)) if needs_draft else None
        draft_tokens = {int(n): float(t) for n, t in tokens.items()} if tokens else None
        overhead = best.get(f"overhead_{suffix}", {}).get(str(b))
        proposer = {m: float(by_b[str(b)]) for m, by_b in best.get(f"proposer_{suffix}", {}).items() if str(b) in by_b}
        return costmodel.StepCosts(b, target_s, draft_s, prefill, draft_prefill, draft_tokens,
                                   float(best.get("prompt_tokens") or 0.0),
                                   None if overhead is None else float(overhead),
                                   float(best.get(f"overhead_token_{suffix}", {}).get(str(b), 0.0)), proposer or None)

    lo = max((b for b in sizes if b <= batch), default=sizes[0])
    hi = min((b for b in sizes if b >= batch), default=sizes[-1])
    if lo == hi:
        return at(lo)
    return costmodel.blend(at(lo), at(hi), (batch - lo) / (hi - lo))


def _trace_seconds(row: CaseRow, stats: dict[str, Any], calibrations: Iterable[Record], timing: str) -> float | None:
    """The cost model's time for the run's measured step trace (None without one).

    The runner records how many engine steps ran and, per step that admitted requests, its rows, how many it
    admitted and their longest prompt; the engine's stats give the rows per step and how often a row drafted and how
    long. Each admission step costs costmodel.admission_seconds, each other step costmodel.step_seconds at the
    average rows of the other steps; all costs are calibrated. Older records without the admission trace price each
    admission step as one prompt pass at the average batch.
    """
    forwards = stats.get("num_target_forwards") or 0
    if not row.num_steps or not forwards:
        return None
    trace = [tuple(int(x) for x in step) for step in row.admission_trace][: row.num_steps]
    decode_steps = row.num_steps - (len(trace) if trace else min(row.admission_steps, row.num_steps))
    decode_rows = forwards - sum(rows for rows, _, _ in trace)
    batch = decode_rows / decode_steps if trace and decode_steps else forwards / row.num_steps

    costs = step_costs(calibrations, row.params, batch, timing)
    if costs is None:
        return None

    def costs_at(b: float) -> costmodel.StepCosts:
        found = step_costs(calibrations, row.params, max(b, 1.0), timing)
        assert found is not None  # the calibration record that priced `costs`
        return found

    drafts = stats.get("num_drafts") or 0
    draft_len = (stats.get("num_draft_tokens") or 0) / drafts if drafts else 0.0
    share = 1 - (1 - drafts / forwards) ** batch
    overhead = _overhead_per_step(stats, costs)
    emitted = stats.get("num_emitted_tokens") or forwards
    draft_step = _proposer_step_s(row, stats, costs)
    draft_model = resolve(row.method).needs_draft_model and row.k > 0
    step = costmodel.step_seconds(costs, draft_len=draft_len, draft_share=share, overhead_s=overhead,
                                  draft_step_s=draft_step, catch_up_tokens=emitted / forwards)
    if not trace:
        prefill = costs.target_prefill_s + (costs.draft_prefill_s if draft_model else 0)
        return (row.num_steps - decode_steps) * (prefill + overhead) + decode_steps * step
    admitted = sum(costmodel.admission_seconds(costs_at, rows=rows, admitted=new, prompt_tokens=longest,
                                               draft_len=draft_len if row.k else 0.0, draft_model=draft_model,
                                               overhead_s=overhead, draft_step_s=draft_step,
                                               catch_up_tokens=emitted / forwards)
                   for rows, new, longest in trace)
    return admitted + decode_steps * step


@dataclass(frozen=True)
class ErrorDistribution:
    """How close the cost model came over the speculative cases with a prediction, and how well the measurement
    itself repeats, over the cases the sweep measured in more than one round: split-half, |median of the even rounds'
    speedups / median of the odd rounds' - 1| (each half has half the case's tokens), and the round-to-round spread
    (max / min - 1) of single rounds."""

    cases: int
    within: dict[float, int]  # bound (0.05, 0.10, 0.15) -> cases with |error| <= bound
    median_error: float  # of |predicted / measured - 1|
    worst_error: float
    worst_case: str
    repeated: int = 0  # cases with more than one round
    median_halves: float | None = None  # split-half difference
    worst_halves: float | None = None
    halves_within_5: int = 0  # repeated cases whose halves agree within 5%
    median_spread: float | None = None  # round-to-round spread

    def lines(self) -> list[str]:
        """The distribution in two Markdown lines (the report's and the bench's)."""
        bounds = ", ".join(f"{n} within {b:.0%}" for b, n in sorted(self.within.items()))
        out = [f"Error distribution over {self.cases} cases: {bounds}; median |error| {100 * self.median_error:.1f}%, "
               f"worst {100 * self.worst_error:.1f}% ({self.worst_case})."]
        if self.repeated:
            out.append(f"Measurement repeatability over {self.repeated} cases run in more than one round: the "
                       "medians of the even and of the odd rounds' measured speedups differ by "
                       f"{100 * self.median_halves:.1f}% median, {100 * self.worst_halves:.1f}% worst "
                       f"({self.halves_within_5} of {self.repeated} within 5%); single rounds spread by "
                       f"{100 * self.median_spread:.0f}% (max / min - 1, median).")
        return out


def error_distribution(rows: Iterable[CaseRow]) -> ErrorDistribution | None:
    """The prediction errors of the speculative rows (None when no row has one) and their measurement's spread."""
    checked = [r for r in rows if r.k > 0 and r.error is not None]
    if not checked:
        return None
    errors = sorted(abs(r.error or 0.0) for r in checked)
    worst = max(checked, key=lambda r: abs(r.error or 0.0))
    repeated = [r for r in checked if len(r.round_speedups) > 1]
    spreads = [max(r.round_speedups) / min(r.round_speedups) - 1 for r in repeated]
    halves = sorted(abs(statistics.median(r.round_speedups[0::2]) / statistics.median(r.round_speedups[1::2]) - 1)
                    for r in repeated)
    return ErrorDistribution(
        cases=len(checked), within={b: sum(e <= b for e in errors) for b in (0.05, 0.10, 0.15)},
        median_error=statistics.median(errors), worst_error=errors[-1],
        worst_case=f"{worst.variant} k={worst.k} T={worst.params['temperature']:g} {worst.suite} "
                   f"c={worst.params['concurrency']}",
        repeated=len(repeated), median_halves=statistics.median(halves) if halves else None,
        worst_halves=halves[-1] if halves else None, halves_within_5=sum(h <= 0.05 for h in halves),
        median_spread=statistics.median(spreads) if spreads else None)


def _merge_repeats(rows: list[CaseRow]) -> list[CaseRow]:
    """One row per case across measurement rounds: the first round's counts, the median of each timing."""
    groups: dict[tuple, list[CaseRow]] = defaultdict(list)
    for row in rows:
        key = tuple(sorted((k, str(v)) for k, v in row.params.items() if k != "repeat"))
        groups[key].append(row)
    merged = []
    for group in groups.values():
        first = min(group, key=lambda r: int(r.params.get("repeat", 0)))
        first.round_tokens_per_s = {int(r.params.get("repeat", 0)): r.tokens_per_s for r in group}
        for name in ("tokens_per_s", "wall_tokens_per_s", "seconds", "wall_time_s"):
            setattr(first, name, statistics.median(getattr(r, name) for r in group))
        steps = [r.measured_step_s for r in group if r.measured_step_s]
        first.measured_step_s = statistics.median(steps) if steps else None
        first.repeats = len(group)
        merged.append(first)
    return merged


def _clock_stats(metrics: dict[str, Any], timing: str) -> dict[str, Any]:
    """The case's stats with the engine's wall-clock time split converted to CPU seconds in cpu timing."""
    stats = dict(metrics.get("stats", {}))
    if timing == "cpu" and metrics.get("wall_time_s"):
        scale = metrics["cpu_time_s"] / metrics["wall_time_s"]
        for name in ("draft_time_s", "target_time_s", "overhead_time_s"):
            if stats.get(name) is not None:
                stats[name] = stats[name] * scale
    return stats


def _row(rec: Record, timing: str = "wall") -> CaseRow:
    metrics = rec["metrics"]
    seconds = float(metrics["cpu_time_s"] if timing == "cpu" else metrics.get("wall_time_s", 0.0))
    output_tokens = metrics.get("output_tokens")
    stats = metrics.get("stats", {})
    drafts = stats.get("num_drafts") or 0
    per_pos_counts = stats.get("num_accepted_tokens_per_pos") or []
    per_pos = [c / drafts for c in per_pos_counts] if drafts else []
    tokens_per_step = stats.get("mean_acceptance_length") or (1.0 + sum(per_pos))
    steps = metrics.get("num_steps")
    return CaseRow(
        id=rec["id"], params=rec["params"],
        tokens_per_s=output_tokens / seconds if output_tokens and seconds else float(metrics.get("tokens_per_s", 0.0)),
        wall_time_s=float(metrics.get("wall_time_s", 0.0)), tokens_per_step=float(tokens_per_step),
        acceptance_rate=float(stats.get("acceptance_rate") or 0.0), per_pos=per_pos,
        measured_step_s=seconds / steps if steps else None, seconds=seconds,
        num_requests=int(metrics.get("num_requests") or 0), wall_tokens_per_s=float(metrics.get("tokens_per_s", 0.0)),
        num_steps=int(metrics.get("num_steps") or 0), admission_steps=int(metrics.get("num_admission_steps") or 0),
        admission_trace=list(metrics.get("admission_trace") or []),
        per_request_acceptance=[float(x) for x in metrics.get("per_request_mean_acceptance_length") or []],
        per_request_counts=[tuple(int(n) for n in c) for c in metrics.get("per_request_counts") or []],
        hybrid_drafts=(int(stats.get("num_hybrid_suffix_drafts") or 0), int(stats.get("num_hybrid_model_drafts") or 0)),
        admissions=(metrics["num_admission_steps"] * int(rec["params"]["concurrency"]) / metrics["num_requests"]
                    if metrics.get("num_admission_steps") and metrics.get("num_requests") else None))


def _baseline_key(params: dict[str, Any]) -> tuple:
    return tuple(params.get(k) for k in BASELINE_KEYS + LOOP_KEYS)


def _overhead_per_step(stats: dict[str, Any], costs: costmodel.StepCosts | None = None) -> float:
    """Host time per step: calibrated (plain decoding's + per draft token, at the run's draft tokens per row and
    step: a count) when the calibration measured it, else the engine's own accounting of the run."""
    forwards = stats.get("num_target_forwards") or 0
    calibrated = costs.host((stats.get("num_draft_tokens") or 0) / forwards if forwards else 0.0) if costs else None
    if calibrated is not None:
        return calibrated
    return float(stats.get("overhead_time_s") or 0.0) / forwards if forwards else 0.0


def _proposer_step_s(row: CaseRow, stats: dict[str, Any], costs: costmodel.StepCosts | None = None) -> float | None:
    """Proposers without a model (n-gram, lookahead) cost their calibrated time per step, else what the engine
    measured in the run; model drafts use the calibrated forwards (None)."""
    info = resolve(row.method)
    if info.needs_draft_model or info.needs_medusa_heads or row.k == 0:
        return None
    if costs is not None and costs.proposer_s and row.method in costs.proposer_s:
        return costs.proposer_s[row.method]
    forwards = stats.get("num_target_forwards") or 0
    return float(stats.get("draft_time_s") or 0.0) / forwards if forwards else 0.0


def modelled_seconds(row: CaseRow, *, baseline: bool = False) -> float | None:
    """Modelled seconds of the case (all its requests): the step-trace model when recorded, else
    R / c * (a * P + N / E * S)."""
    if row.modelled_s and row.base_modelled_s:
        return row.base_modelled_s if baseline else row.modelled_s
    pred = row.prediction
    if pred is None or not row.num_requests:
        return None
    c, n = int(row.params["concurrency"]), int(row.params["max_new_tokens"])
    plain_prefill, spec_prefill = row.prefill or (0.0, 0.0)
    a_base = c if row.base_admissions is None else row.base_admissions
    a_spec = c if row.admissions is None else row.admissions
    per_wave = (a_base * plain_prefill + n * pred.baseline_step_s if baseline or row.k == 0
                else a_spec * spec_prefill + n / pred.tokens_per_step * pred.spec_step_s)
    return per_wave * row.num_requests / c


def _miss_reason(row: CaseRow, base: CaseRow | None, costs: costmodel.StepCosts) -> str:
    """A short why for a prediction outside the tolerance: which side (speculative or plain) the model mis-timed."""
    if row.within_tolerance is not False or row.prediction is None:
        return ""
    parts = []
    for name, case, modelled in (("speculative", row, modelled_seconds(row)),
                                 ("plain", base, modelled_seconds(row, baseline=True))):
        if case is None or not modelled or not case.seconds:
            continue
        off = case.seconds / modelled - 1
        if abs(off) > 0.08:
            parts.append(f"{name} run took {case.seconds:.2f} s vs {modelled:.2f} s modelled ({off:+.0%})")
    if costs.batch_size != int(row.params["concurrency"]):
        parts.append(f"costs from batch {costs.batch_size} (not calibrated at {row.params['concurrency']})")
    if not parts and int(row.params["concurrency"]) > 1:
        parts.append("fewer tokens per batched step than E(k): the batch drains at the tail")
    return "; ".join(parts) or "small errors on both sides add up"


# ---------------------------------------------------------------------------------------------------------------
# Recommendation


@dataclass(frozen=True)
class Winner:
    """Per suite, temperature and concurrency: the fastest measured configuration, and suffix decoding's place."""

    suite: str
    temperature: float
    concurrency: int
    best: CaseRow | None  # the fastest speculative case (fixed or adaptive k), None when none ran
    suffix_cold: CaseRow | None  # the fastest suffix case with a cold cache (None: no suffix cases)
    suffix_warm: CaseRow | None
    best_other: CaseRow | None  # the fastest case of a method other than suffix decoding
    runner_up: CaseRow | None = None  # the fastest case of another variant than `best` (None: no other variant ran)

    @property
    def verdict(self) -> str:
        """Whether to use suffix decoding here, from the cold cache (warm = the same traffic repeated)."""
        cold = (self.suffix_cold.measured_speedup or 0.0) if self.suffix_cold else None
        other = (self.best_other.measured_speedup or 0.0) if self.best_other else 0.0
        warm = (self.suffix_warm.measured_speedup or 0.0) if self.suffix_warm else 0.0
        if cold is None:
            return ""
        if cold > 1.0 and cold >= other:
            return "use suffix"
        if warm > max(1.0, other):
            return "suffix only where requests repeat: it wins with a warm cache"
        if max(cold, other) <= 1.0:
            return "do not speculate: nothing beats plain decoding"
        return f"not suffix: {self.best_other.variant} is faster" if self.best_other else "not suffix"


def winners(results: Results) -> list[Winner]:
    """The fastest measured configuration per (suite, temperature, concurrency), with the best suffix cases."""
    groups: dict[tuple[str, float, int], list[CaseRow]] = defaultdict(list)
    for r in results.rows:
        if r.k > 0 and r.measured_speedup is not None:
            groups[(r.suite, float(r.params["temperature"]), int(r.params["concurrency"]))].append(r)
    out = []
    for (suite, temperature, concurrency), rows in sorted(groups.items()):
        suffix = [r for r in rows if resolve(r.method).cross_request_cache]
        best = _fastest(rows)
        out.append(Winner(suite, temperature, concurrency, best,
                          _fastest([r for r in suffix if r.params.get("suffix_cache") != "warm"]),
                          _fastest([r for r in suffix if r.params.get("suffix_cache") == "warm"]),
                          _fastest([r for r in rows if r not in suffix]),
                          _fastest([r for r in rows if best is None or r.variant != best.variant])))
    return out


def _fastest(rows: list[CaseRow]) -> CaseRow | None:
    return max(rows, key=lambda r: r.measured_speedup or 0.0, default=None)



@dataclass(frozen=True)
class Recommendation:
    temperature: float
    batch_size: int
    variant: str
    method: str
    draft: str | None
    k: int
    speedup: float
    tokens_per_s: float
    baseline_tokens_per_s: float
    cost_per_million: float | None
    baseline_cost_per_million: float | None


def recommend(results: Results, batch_sizes: Sequence[int] | None = None,
              price_per_hour: float | None = None) -> list[Recommendation]:
    """Per temperature: the variant with the best predicted speedup, and its best k (0 allowed) per batch size.

    E(k) is averaged over the suites of the sweep; step costs come from calibration at each batch size, host
    overhead per step from the nearest measured concurrency, scaled linearly with the batch size (an assumption).
    """
    calibs = list(results.calibrations.values())
    if not calibs:
        return []
    sizes = sorted(batch_sizes or {int(b) for c in calibs for b in c.get("target_s", {})})
    timing = results.timing
    out: list[Recommendation] = []
    for temperature in sorted({float(r.params["temperature"]) for r in results.rows}):
        rows = [r for r in results.rows if float(r.params["temperature"]) == temperature]
        by_variant: dict[str, list[CaseRow]] = defaultdict(list)
        for r in rows:
            # a recommendation is a fixed k per batch size; a warm suffix cache is a traffic condition (the same
            # requests again), not a setting, so suffix is judged by its cold cases
            if (r.k > 0 and not r.params.get("adaptive") and not r.params.get("schedule")
                    and r.params.get("suffix_cache") != "warm"):
                by_variant[r.variant].append(r)
        base_rows = [r for r in rows if r.k == 0]
        plans: dict[str, list[Recommendation]] = {}
        for variant, vrows in by_variant.items():
            plans[variant] = [_best_at(variant, vrows, base_rows, calibs, b, temperature, price_per_hour, timing)
                              for b in sizes]
        if not plans:
            continue
        best = max(plans, key=lambda v: statistics.geometric_mean([max(p.speedup, 1e-9) for p in plans[v]]))
        out.extend(plans[best])
    return out


def predictions_at(rows: list[CaseRow], base_rows: list[CaseRow], calibs: list[Record], batch: int,
                   timing: str = "wall") -> dict[int, costmodel.Prediction]:
    """The cost model's prediction at `batch` for k = 0 and each k of one variant's rows (k > 0, fixed): E(k) averaged
    over the rows (suites, concurrencies), step costs calibrated at `batch`, host overhead per step from the nearest
    measured concurrency scaled to `batch`. UsageError when the results hold no calibration for the model set."""
    sample = rows[0]
    costs = step_costs(calibs, sample.params, batch, timing)
    if costs is None:
        raise UsageError(f"model={sample.params['model']!r}: the results hold no calibration for this model set",
                         hint="rerun the sweep (it calibrates every model set before its cases)")
    tps_by_k: dict[int, list[float]] = defaultdict(list)
    for r in rows:
        tps_by_k[r.k].append(r.tokens_per_step)
    e_by_k = {k: statistics.fmean(v) for k, v in tps_by_k.items()}
    over_base = _scaled_overhead(base_rows, batch)
    model_free = not (resolve(sample.method).needs_draft_model or resolve(sample.method).needs_medusa_heads)
    out = {0: costmodel.predict(0, 1.0, costs, overhead_base_s=over_base)}
    for k, e in sorted(e_by_k.items()):
        draft_step = (statistics.fmean([r.prediction.draft_step_s for r in rows if r.k == k and r.prediction] or [0.0])
                      if model_free else None)
        out[k] = costmodel.predict(k, e, costs, overhead_base_s=over_base,
                                   overhead_spec_s=_scaled_overhead([r for r in rows if r.k == k], batch),
                                   draft_step_s=draft_step)
    return out


def _best_at(variant: str, rows: list[CaseRow], base_rows: list[CaseRow], calibs: list[Record], batch: int,
             temperature: float, price: float | None, timing: str) -> Recommendation:
    sample = rows[0]
    predictions = predictions_at(rows, base_rows, calibs, batch, timing)
    best = predictions[0]  # k = 0 unless a k beats it
    for k in sorted(predictions):
        if predictions[k].speedup > best.speedup:
            best = predictions[k]
    base_tps = batch / best.baseline_step_s
    return Recommendation(
        temperature=temperature, batch_size=batch, variant=variant, method=sample.method if best.k else "none",
        draft=sample.params.get("draft"), k=best.k, speedup=best.speedup, tokens_per_s=best.tokens_per_s,
        baseline_tokens_per_s=base_tps,
        cost_per_million=costmodel.cost_per_million_tokens(best.tokens_per_s, price) if price else None,
        baseline_cost_per_million=costmodel.cost_per_million_tokens(base_tps, price) if price else None)


def _scaled_overhead(rows: list[CaseRow], batch: int) -> float:
    """Overhead per step at `batch`, from the rows at the nearest concurrency, scaled by batch / concurrency."""
    with_pred = [r for r in rows if r.prediction is not None]
    if not with_pred:
        return 0.0
    conc = min({int(r.params["concurrency"]) for r in with_pred}, key=lambda c: (abs(c - batch), c))
    near = [r for r in with_pred if int(r.params["concurrency"]) == conc]
    return statistics.fmean(r.prediction.overhead_step_s for r in near) * batch / conc  # type: ignore[union-attr]
