"""`trtspec report`: results.jsonl -> report.md + PNG plots + a recommendation that can be written into a build config.

Formatting only: the numbers come from analysis.py (measured and predicted), costmodel.py (projection) and
schedule.py (the speculation schedule; its section, plot and --write-config: schedule_report.py). The Markdown is
written atomically (trtspec.atomic).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trtspec.atomic import write_text
from trtspec.contracts import costmodel
from trtspec.errors import ConfigError, UsageError
from trtspec.sweep.analysis import (
    TOLERANCE,
    Recommendation,
    Results,
    error_distribution,
    load_results,
    recommend,
    winners,
)
from trtspec.sweep.schedule import DEFAULT_GATE_BATCH, ScheduleRecommendation, recommend_schedules
from trtspec.sweep.schedule_report import render_schedule_plots, schedule_section


@dataclass
class ReportOutput:
    markdown: Path
    plots: dict[str, Path]
    recommendations: list[Recommendation]
    results: Results
    schedules: list[ScheduleRecommendation] = field(default_factory=list)  # per variant and temperature


def render_report(results_path: str | Path, out_dir: str | Path, *, price_per_hour: float | None = None,
                  gpus: Sequence[str] = ("H100", "H200"), plots: bool = True, timing: str = "auto",
                  max_batch_size: int | None = None, gate_batch_size: int = DEFAULT_GATE_BATCH,
                  load: str | None = None) -> ReportOutput:
    """Write `out_dir/report.md` and the plots; returns what was written, the recommendation and the schedules
    (batch sizes 1..max_batch_size, default the largest calibrated or measured; sweep/schedule.py)."""
    results_path, out_dir = Path(results_path), Path(out_dir)
    if not results_path.is_file():
        raise UsageError(f"results file {results_path} does not exist", hint="run `trtspec sweep ... --out FILE` first")
    try:
        if timing not in ("auto", "wall", "cpu"):
            raise ConfigError("timing", timing, "is not a timing mode", hint="use auto, wall or cpu")
        results = load_results(results_path, timing)
    except ValueError as exc:
        raise UsageError(str(exc), hint="the results file was edited or corrupted; rerun the sweep") from None
    if not results.rows and not results.errors:
        raise UsageError(f"{results_path} has no case records", hint="run `trtspec sweep ... --out FILE` first")
    for gpu in gpus:
        if gpu not in costmodel.GPUS:
            raise ConfigError("gpu", gpu, "is not a GPU the projection knows", hint=f"use {', '.join(costmodel.GPUS)}")
    out_dir.mkdir(parents=True, exist_ok=True)
    made = {}
    if plots:
        from trtspec.sweep.plots import render_all

        made = render_all(results, out_dir)
    recs = recommend(results, price_per_hour=price_per_hour)
    schedules = recommend_schedules(results, max_batch_size=max_batch_size, gate_batch_size=gate_batch_size, load=load)
    schedule_plots = render_schedule_plots(schedules, out_dir) if plots else {}
    text = _markdown(results_path, results, made, recs, price_per_hour, gpus,
                     schedule_section(schedules, schedule_plots))
    md = out_dir / "report.md"
    write_text(md, text)
    return ReportOutput(md, {**made, **schedule_plots}, recs, results, schedules)


def _fmt(value: float | None, spec: str = ".2f", suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]], *, numeric: bool = False) -> list[str]:
    """A Markdown table as lines, then a blank line; `numeric` right-aligns every column after the first."""
    align = ["---" if i == 0 or not numeric else "---:" for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines + [""]


def _markdown(results_path: Path, results: Results, plots: dict[str, Path], recs: list[Recommendation],
              price: float | None, gpus: Sequence[str], schedule_lines: Sequence[str] = ()) -> str:
    rows = sorted(results.rows, key=lambda r: (r.suite, r.params["temperature"], r.params["concurrency"],
                                               r.k > 0, r.variant, r.k))
    out = [f"# Speculative decoding sweep report: `{results_path.name}`", ""]
    sweep = results.sweeps[-1]["spec"] if results.sweeps else {}
    via = (results.sweeps[-1].get("via_info") if results.sweeps else None) or {}
    out += [f"- model `{sweep.get('model', '?')}`, via `{via.get('name', sweep.get('via', '?'))}`, "
            f"device `{via.get('device', sweep.get('device', '?'))}`",
            f"- {len(results.rows)} cases ok, {len(results.errors)} failed; {sweep.get('num_prompts', '?')} prompts "
            f"per suite, {sweep.get('max_new_tokens', '?')} new tokens per request, seed {sweep.get('seed', '?')} "
            "(request i uses seed + i), top_k 0, top_p 1",
            f"- chat template: {sweep.get('chat_template') or 'none (base models: prompts are sent as raw text)'}",
            "- speedup = tokens/s of the case / tokens/s of plain decoding (k = 0) with the same suite, temperature "
            "and concurrency. Mean acceptance length = 1 + accepted / drafts (tokens per target forward).",
            *(f"- warning: {warning}" for warning in results.warnings),
            f"- timing: **{results.timing}**"
            + (" (speedups and predictions use process CPU seconds, which other processes sharing the CPU do not "
               "inflate; `wall speedup` is the wall-clock ratio, noisy on a shared machine)"
               if results.timing == "cpu" else " (wall-clock seconds)"), ""]

    out += ["## Results", ""]
    cpu = results.timing == "cpu"
    out += markdown_table(["suite", "T", "conc", "method", "k", "mean acc. len", "acc. rate", "tokens/s (wall)",
                           *(["wall speedup"] if cpu else []), f"speedup ({results.timing})", "predicted", "error",
                           f"within {TOLERANCE:.0%}"],
                          [(r.suite, f"{r.params['temperature']:g}", r.params["concurrency"], r.variant, r.k,
                            _fmt(r.tokens_per_step), _fmt(r.acceptance_rate) if r.k else "-",
                            _fmt(r.wall_tokens_per_s, ".1f"),
                            *([_fmt(_wall_speedup(results, r), ".2f", "x")] if cpu else []),
                            _fmt(r.measured_speedup, ".2f", "x"), _fmt(r.predicted_speedup, ".2f", "x"),
                            _fmt(None if r.error is None else 100 * r.error, "+.0f", "%"),
                            {True: "yes", False: "**no**", None: "-"}[r.within_tolerance if r.k else None])
                           for r in rows])

    out += _hybrid_section(rows)
    out += _cost_model_section(results)
    if results.errors:
        out += ["## Failed cases", ""]
        out += markdown_table(["case", "error", "hint"],
                              [(e.get("label", e["id"]), f"{e['error']['type']}: {e['error']['message']}",
                                e["error"].get("hint") or "") for e in results.errors])
    out += _winners_section(results)
    out += _recommendation_section(recs, price, results.timing)
    out += schedule_lines
    out += _projection_section(results, recs, gpus)
    if plots:
        out += ["## Plots", ""]
        titles = {"acceptance_per_position": "Acceptance per position",
                  "acceptance_length_vs_k": "Mean acceptance length vs k",
                  "throughput_vs_k": "Tokens/s and speedup vs k", "speedup_vs_concurrency": "Speedup vs concurrency",
                  "predicted_vs_measured": "Predicted vs measured speedup"}
        for name, path in plots.items():
            out += [f"### {titles.get(name, name)}", "", f"![{titles.get(name, name)}]({path.name})", ""]
    return "\n".join(out)


def _times(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor


def _wall_speedup(results: Results, row: Any) -> float | None:
    base = results.baseline_of(row)
    return row.wall_tokens_per_s / base.wall_tokens_per_s if base and base.wall_tokens_per_s else None


def _hybrid_section(rows: Sequence[Any]) -> list[str]:
    """Which drafter a hybrid method's drafts came from (methods/hybrid.py), per case; [] without hybrid cases."""
    hybrid = [r for r in rows if sum(r.hybrid_drafts)]
    if not hybrid:
        return []
    return ["## Hybrid drafting: drafts by drafter", "",
            "Verified drafts of each hybrid case from the suffix tree (its score reached the threshold) and from the "
            "model drafter (the engine's per-request counts, summed over the case's requests).", "",
            *markdown_table(["suite", "T", "conc", "method", "k", "suffix tree", "model drafter", "suffix share"],
                            [(r.suite, f"{r.params['temperature']:g}", r.params["concurrency"], r.variant, r.k,
                              r.hybrid_drafts[0], r.hybrid_drafts[1],
                              f"{r.hybrid_drafts[0] / sum(r.hybrid_drafts):.0%}") for r in hybrid]), ""]


def _cost_model_section(results: Results) -> list[str]:
    """How close the predictions came: the count within the tolerance, the error distribution and the measurement's
    own round-to-round spread, the formulas, the calibration and each miss with its reason."""
    out = ["## Cost model check", ""]
    checked = [r for r in results.rows if r.k > 0 and r.error is not None]
    if not checked:
        return out + ["No predictions: the results have no calibration records (forward costs are measured only "
                      "with --via engine).", ""]
    inside = [r for r in checked if r.within_tolerance]
    distribution = error_distribution(checked)
    assert distribution is not None  # `checked` has a prediction
    out += [f"Predicted speedup within {TOLERANCE:.0%} of measured for **{len(inside)} of {len(checked)}** cases "
            f"(median |error| {_median([abs(r.error or 0) for r in checked]) * 100:.1f}%).", "",
            *distribution.lines(), "",
            "Per step: S_0 = T_target(b,1) + overhead_base and S_k = k * T_draft(b) + T_target(b,k+1) + overhead_spec; "
            "steady-state speedup = E(k) * S_0 / S_k, with E(k) = 1 + sum of the measured per-position acceptance, T "
            "from the calibration micro-benchmark at b = concurrency, host time per step (and a model-free proposer's) "
            "from the calibration too (older results: the engine's own accounting of the run). A case's predicted speedup is modelled time of its baseline / modelled time of the case, "
            "each the run's measured step trace (engine steps, admission steps with their prompt pass, average rows "
            "per step, how often rows drafted and how long; each admission step as its prompt passes, stretched to "
            "its longest prompt, plus the running rows' own step) priced with the calibrated costs; without a trace, "
            "(c * P_0 + N * S_0) / (c * P_k + N / E(k) * S_k) for N new tokens per request and c in flight.", ""]
    key = "cpu_s" if results.timing == "cpu" else "s"
    calib = [c for c in results.calibrations.values() if c.get(f"target_{key}")]
    if calib:
        c = calib[0]
        sizes = sorted(c[f"target_{key}"], key=int)
        ns = sorted({n for b in sizes for n in c[f"target_{key}"][b]}, key=int)
        out += [f"Calibration ({results.timing} ms per forward; target over n tokens per sequence, draft over 1 "
                f"token; {c.get('smoothing', 'median of repeats')}):", ""]
        out += markdown_table(["batch", *[f"target n={n}" for n in ns], "draft",
                               f"prompt pass ({c.get('prompt_tokens', '?')} tokens): target", "draft"],
                              [(b, *[_fmt(_times(c[f"target_{key}"][b].get(n), 1e3)) for n in ns],
                                *[f"{c.get(f'{role}_{key}', {}).get(b, 0) * 1e3:.2f}"
                                  for role in ("draft", "target_prefill", "draft_prefill")]) for b in sizes])
    misses = [r for r in checked if not r.within_tolerance]
    if misses:
        out += ["Where the model misses, and why:", ""]
        out += markdown_table(["case", "measured", "predicted", "why"],
                              [(f"{r.variant} k={r.k} T={r.params['temperature']:g} {r.suite} "
                                f"c={r.params['concurrency']}", _fmt(r.measured_speedup, ".2f", "x"),
                                _fmt(r.predicted_speedup, ".2f", "x"), r.miss_reason) for r in misses])
    return out


def _winners_section(results: Results) -> list[str]:
    """Measured: the fastest configuration per suite, temperature and concurrency; with suffix cases, where suffix
    decoding wins and where it does not."""
    rows = winners(results)
    if not rows:
        return []
    has_suffix = any(w.suffix_cold or w.suffix_warm for w in rows)
    out = ["## Where each method wins (measured)", ""]

    def case(row: Any) -> str:
        return "-" if row is None else f"{row.variant} k={row.k} ({_fmt(row.measured_speedup, '.2f', 'x')})"

    header = ["suite", "T", "conc", "fastest", "fastest other than suffix" if has_suffix else "runner-up"]
    table = []
    for w in rows:
        line: list[object] = [w.suite, f"{w.temperature:g}", w.concurrency, case(w.best)]
        if has_suffix:
            line += [case(w.best_other), case(w.suffix_cold), case(w.suffix_warm), w.verdict]
        else:
            line += [case(w.runner_up)]  # the fastest of another variant ("-": the only one)
        table.append(line)
    if has_suffix:
        header += ["suffix, cold cache", "suffix, warm cache", "verdict"]
    out += markdown_table(header, table)
    if has_suffix:
        use = [f"{w.suite} T={w.temperature:g} c={w.concurrency}" for w in rows if w.verdict == "use suffix"]
        other = [f"{w.suite} T={w.temperature:g} c={w.concurrency} ({w.verdict})" for w in rows
                 if w.verdict and w.verdict != "use suffix"]
        out += [f"**Suffix decoding is recommended for:** {', '.join(use) or 'none of the measured cases'}.",
                "",
                f"**Not recommended for:** {'; '.join(other) or 'none of the measured cases'}.",
                "",
                "Speedups are measured against plain decoding of the same suite, temperature and concurrency. "
                "Cold: the suffix cache was emptied before the case and learned only from the case's own requests "
                "as they finished; warm: the same requests had run once just before (retries, repeated templates). "
                "The verdict follows the cold cache. Suffix drafts are copies of text seen before, so they pay where "
                "the output repeats the prompt or earlier outputs (code, edits, templates, retries) and at "
                "temperature 0; sampled (temperature 1) and free-form (prose) continuations rarely repeat, and the "
                "rejected draft tokens then cost target compute for nothing.", ""]
    return out


def _recommendation_section(recs: list[Recommendation], price: float | None, timing: str) -> list[str]:
    out = ["## Recommendation", ""]
    if not recs:
        return out + ["No recommendation: the results have no calibration records.", ""]
    out += ["Steady-state prediction (long generations, prompt passes amortised) from the acceptance measured in this "
            "sweep, averaged over its suites, and the forward costs measured on this machine at each batch size "
            "(k = 0 means: do not speculate at this batch size; host overhead per step is scaled from the nearest "
            "measured concurrency). Every batch size, with measured points, max_concurrency and the acceptance "
            "gate: the speculation schedule below, which `--write-config build.yaml` writes.", ""]
    header = ["T", "batch", "method", "k", "expected speedup", "tokens/s", "plain tokens/s"]
    if timing == "cpu":
        out += ["Throughput and cost are per CPU-second of this process (timing cpu).", ""]
    if price:
        header += [f"$ per 1M tokens (at ${price:g}/h)", "plain $ per 1M"]
    rows = []
    for r in recs:
        row: list[object] = [f"{r.temperature:g}", r.batch_size, r.variant if r.k else "none", r.k,
                             f"{r.speedup:.2f}x", f"{r.tokens_per_s:.1f}", f"{r.baseline_tokens_per_s:.1f}"]
        if price:
            row += [_fmt(r.cost_per_million, ".2f"), _fmt(r.baseline_cost_per_million, ".2f")]
        rows.append(row)
    return out + markdown_table(header, rows)


def _projection_section(results: Results, recs: list[Recommendation], gpus: Sequence[str]) -> list[str]:
    """Roofline projection of the recommended variant's measured acceptance onto named GPUs."""
    if not recs or not gpus:
        return []
    from trtspec.models import read_config, resolve_model

    rec = next((r for r in recs if r.k > 0), recs[0])
    rows = [r for r in results.rows if r.variant == rec.variant and r.params["temperature"] == rec.temperature
            and r.k > 0]
    if not rows:
        return []
    try:
        target = costmodel.ModelSize(rows[0].params["model"],
                                     costmodel.llama_params(read_config(resolve_model(rows[0].params["model"]))))
        draft_name = rows[0].params.get("draft")
        draft = (costmodel.ModelSize(draft_name, costmodel.llama_params(read_config(resolve_model(draft_name))))
                 if draft_name else None)
    except Exception as exc:  # noqa: BLE001 - a projection is optional; say why it is missing
        return ["## GPU projection", "", f"Skipped: model sizes unavailable ({exc}).", ""]
    e_by_k: dict[int, list[float]] = {}
    for r in rows:
        e_by_k.setdefault(r.k, []).append(r.tokens_per_step)
    e_mean = {k: sum(v) / len(v) for k, v in e_by_k.items()}
    out = ["## GPU projection", "", f"**This is a {costmodel.PROJECTION_LABEL}.**", "",
           f"{rec.variant} at T={rec.temperature:g}: target {target.params / 1e6:.1f}M params"
           + (f", draft {draft.params / 1e6:.2f}M params" if draft else "")
           + ", bf16 weights, the measured E(k). Kernel-launch and host overheads are ignored, and they dominate for "
           "models this small, so read this as the limit for models of this size ratio, not as a prediction; the "
           "large batch sizes show where verification turns compute-bound and speculation stops paying.", ""]
    table = []
    for gpu in gpus:
        proj = costmodel.project(gpu, target, draft, e_mean, sorted({r.batch_size for r in recs} | {64, 256, 1024}))
        for b in sorted({p.batch_size for p in proj}):
            best = max((p for p in proj if p.batch_size == b), key=lambda p: p.speedup)
            table.append((f"{costmodel.GPUS[gpu].name} (projection)", b, best.k, f"{best.speedup:.2f}x",
                          f"{best.tokens_per_s:,.0f}"))
    return out + markdown_table(["GPU", "batch", "best k", "projected speedup", "projected tokens/s"], table)


def _median(values: list[float]) -> float:
    import statistics

    return statistics.median(values) if values else 0.0
