"""The "controls" section of docs/benchmarks.md (issue 40): a release's acceptance gate, run exactly as that release
runs it (`speculation_controls trtllm-<release>`: its unit, its window, closed for good), with the threshold and
window `trtspec.sweep.schedule.choose` derives for that release from a sweep of greedy code traffic. Per release:

  open      the recommended schedule on the traffic it was derived from (held-out code, prose and grounded prompts,
            greedy): the gate must stay open
  collapse  the same deployment meeting traffic where acceptance collapses (prose at temperature 1): the gate must
            close, within its window for a per-request gate

Both beside plain decoding (tokens per CPU second, one torch thread, rounds paired). The n-gram drafter is the method
whose acceptance collapses there (the distilled draft model's does not, schedule section); TensorRT-LLM 1.2.1 applies
its gate to NGram; 1.3.0rc29 applies its rate gate to its one-model forms (EAGLE-3, MTP, Draft_Target) and the facts
do not establish it for NGram, so the 1.3.0rc29 rows run that release's gate rule on n-gram traffic to show the rule.
No torch at import.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from typing import Any

from benchlib.benchmarks import MIXED, Measured, Section, _by_case, _machine
from trtspec.sweep.grid import BASELINE, SweepSpec, schedule_text

RELEASES = ("1.2.1", "1.3.0rc29")
OPEN_SUITE, COLLAPSE_SUITE = MIXED, "prose"


@dataclass(frozen=True)
class ControlsBench:
    """What the section runs (scripts/bench.py flags)."""

    model: str = "tiny"
    method: str = "ngram"
    ks: tuple[int, ...] = (1, 2, 3, 4)
    concurrency: tuple[int, ...] = (1, 4)
    gate_concurrency: int = 4
    max_new_tokens: int = 32
    prompt_tokens: int = 64
    sweep_repeats: int = 2
    requests: int = 96
    repeats: int = 3
    threads: int = 1

    def recommendation_spec(self) -> SweepSpec:
        """The method at k = 0 and `ks` on greedy code traffic, each concurrency, calibrated (the engine records each
        request's counts, so the window comes from what the release's gate records)."""
        return SweepSpec.build(model=self.model, drafts=[], methods=[self.method], k=[0, *self.ks],
                               suites=[OPEN_SUITE], concurrency=list(self.concurrency), num_prompts=16,
                               num_requests=24, prompt_tokens=self.prompt_tokens, max_new_tokens=self.max_new_tokens,
                               max_draft_len=max(self.ks), repeats=self.sweep_repeats, shuffle=True,
                               threads=self.threads, calibration_batch_sizes=sorted(set(self.concurrency)),
                               calibration_repeats=2 * self.sweep_repeats, stagger_start=True)

    def cells_spec(self, schedules: list[Any]) -> SweepSpec:
        """Each exact-controls schedule and plain decoding on the open and the collapse traffic, at the gate
        concurrency or the largest below it where every schedule speculates (a gate sees only drafting requests)."""
        from benchlib.benchmarks_schedule import gate_concurrency

        concurrency = min(gate_concurrency(s, max(self.ks), self.gate_concurrency, self.concurrency) for s in schedules)
        return SweepSpec.build(model=self.model, drafts=[], methods=[self.method], k=[0],
                               schedules=[schedule_text(s) for s in schedules], suites=[OPEN_SUITE, COLLAPSE_SUITE],
                               temperatures=[0.0, 1.0], concurrency=[concurrency], num_prompts=16,
                               num_requests=self.requests, prompt_tokens=self.prompt_tokens,
                               max_new_tokens=self.max_new_tokens, max_draft_len=max(self.ks), repeats=self.repeats,
                               shuffle=True, threads=self.threads, calibrate=False, stagger_start=True)


def exact(schedule: Any, release: str) -> Any:
    """The schedule run exactly as TensorRT-LLM `release` runs it (no probes)."""
    return replace(schedule, probe_every=None, controls=f"trtllm-{release}")


def _traffic(params: dict[str, Any]) -> str | None:
    """open (code, greedy) or collapse (prose, temperature 1); None for the other two combinations."""
    temperature, suite = float(params["temperature"]), params["suite"]
    if suite == OPEN_SUITE and temperature == 0.0:
        return "open"
    if suite == COLLAPSE_SUITE and temperature == 1.0:
        return "collapse"
    return None


@dataclass
class ControlsVerdict:
    release: str
    traffic: str  # open | collapse
    window: int
    threshold: float
    closed_after: list[int | None]  # finished requests when the gate closed, per round
    ratios: list[float]  # gated / plain, same round
    per_request: bool  # a per-request window (1.2.1) or iterations (1.3)

    @property
    def passed(self) -> bool:
        if self.traffic == "open":
            return all(n is None for n in self.closed_after)
        closed = [n for n in self.closed_after if n is not None]
        return len(closed) == len(self.closed_after) and (not self.per_request or max(closed) <= self.window)

    def line(self) -> str:
        closed = ", ".join("never" if n is None else str(n) for n in self.closed_after)
        want = ("stays open" if self.traffic == "open" else
                "closes within its window" if self.per_request else "closes")
        ratio = statistics.median(self.ratios) if self.ratios else 0.0
        return (f"{self.release}, {self.traffic} traffic: gate (window {self.window}, threshold {self.threshold:g}) "
                f"closed after {closed} finished requests per round (wanted: {want}); gated / plain {ratio:.2f}: "
                f"{'PASS' if self.passed else 'FAIL'}")


def verdicts(measured: Measured, schedules: dict[str, Any], clock: str) -> tuple[list[list[str]], list[ControlsVerdict]]:
    metric = "tokens_per_cpu_s" if clock == "cpu" else "tokens_per_s"
    by_text = {schedule_text(s): release for release, s in schedules.items()}
    plain: dict[tuple[str, int], float] = {}
    cells: dict[tuple[str, str], list[dict]] = {}
    for runs in _by_case(measured.records).values():
        params = runs[0]["params"]
        traffic = _traffic(params)
        if traffic is None:
            continue
        if params["method"] == BASELINE:
            plain.update({(traffic, r["params"].get("repeat", 0)): r["metrics"].get(metric, 0.0) for r in runs})
        elif params.get("schedule") in by_text:
            cells[(by_text[params["schedule"]], traffic)] = runs
    rows, out = [], []
    for (release, traffic), runs in sorted(cells.items()):
        schedule = schedules[release]
        ratios = [r["metrics"].get(metric, 0.0) / plain[(traffic, r["params"].get("repeat", 0))] for r in runs
                  if plain.get((traffic, r["params"].get("repeat", 0)))]
        verdict = ControlsVerdict(release, traffic, schedule.gate_window, schedule.gate_threshold or 0.0,
                                  [r["metrics"].get("gate", {}).get("closed_after") for r in runs], ratios,
                                  schedule.acceptance_length_threshold is not None)
        out.append(verdict)
        stats = runs[0]["metrics"]["stats"]
        rows.append([f"TensorRT-LLM {release}", traffic, f"`{schedule_text(schedule)}`",
                     f"{statistics.median(r['metrics'].get(metric, 0.0) for r in runs):.1f}",
                     f"{statistics.median(ratios):.2f}" if ratios else "-",
                     f"{stats['mean_acceptance_length']:.2f}" if "mean_acceptance_length" in stats else "-",
                     ", ".join("never" if n is None else str(n) for n in verdict.closed_after),
                     "PASS" if verdict.passed else "FAIL"])
    return rows, out


def run(bench: ControlsBench) -> Section:
    import os
    import time

    from benchlib.benchmarks import measure
    from trtspec.sweep.schedule import choose

    start, load = time.perf_counter(), os.getloadavg()[0]
    swept = measure(bench.recommendation_spec())
    recs = {release: choose(swept.results, method=bench.method, max_batch_size=max(bench.concurrency),
                            target_release=release) for release in RELEASES}
    for release, rec in recs.items():
        print(f"recommended for {release}: {schedule_text(rec.schedule)} ({rec.gate.reason}; {rec.gate.window_reason})",
              flush=True)
    gated = {release: exact(rec.schedule, release) for release, rec in recs.items() if rec.gate.set}
    missing = [f"{release}: {rec.gate.reason}" for release, rec in recs.items() if not rec.gate.set]
    clock = "cpu" if bench.threads == 1 else "wall"
    rows: list[list[str]] = []
    found: list[ControlsVerdict] = []
    if gated:
        rows, found = verdicts(measure(bench.cells_spec(list(gated.values()))), gated, clock)
    notes = [
        "Verdict (issue 40: with the release's exact controls, a gate derived from a sweep of greedy code traffic "
        "stays open on that traffic, and the same deployment's gate closes within its window when the traffic "
        "collapses): " + "; ".join(v.line() for v in found) + ("." if found else "")
        + (f" No gate recommended for {'; '.join(missing)}." if missing else ""),
        f"Recommended (`choose(..., target_release=R)` on a sweep of {bench.method} at k = 0, "
        f"{', '.join(map(str, bench.ks))} on {OPEN_SUITE} prompts, greedy, concurrency "
        f"{', '.join(map(str, bench.concurrency))}, {bench.sweep_repeats} rounds, calibrated): "
        + " ".join(f"{release}: `{schedule_text(rec.schedule)}` ({rec.gate.reason}; window: {rec.gate.window_reason})."
                   for release, rec in recs.items()),
        f"Cells: {bench.requests} requests of {bench.max_new_tokens} tokens at {bench.gate_concurrency} in flight (or "
        "the largest sweep concurrency below it where the schedules speculate), "
        f"{bench.repeats} rounds, plain decoding beside each; open = {OPEN_SUITE} prompts greedy, collapse = "
        f"{COLLAPSE_SUITE} prompts at temperature 1. 1.2.1's gate records each completed request's accepted draft "
        "tokens per iteration (bonus token excluded) over its window of requests; 1.3.0rc29's records each drafting "
        "step's accepted / drafted over a window of steps. TensorRT-LLM 1.3.0rc29 applies its gate to its one-model "
        "forms, not established for NGram: its rows show that release's rule on the n-gram drafter.",
        _machine() + f"; {(time.perf_counter() - start) / 60:.0f} minutes wall; 1-minute load average {load:.1f} at "
        f"the start, {os.getloadavg()[0]:.1f} at the end.",
    ]
    return Section(title=f"Speculation controls as each TensorRT-LLM release runs them: the acceptance gate "
                         f"({bench.model}, {bench.method})",
                   columns=["release", "traffic", "schedule", "tokens per CPU s" if clock == "cpu" else "tokens/s",
                            "gated / plain", "mean acceptance length", "gate closed after (per round)", "verdict"],
                   rows=rows, notes=notes)
