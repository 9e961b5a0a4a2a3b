"""The "schedule" section of docs/benchmarks.md (issue 28): the speculation schedule a sweep recommends, run on the
embedded pair beside plain decoding, every fixed k and adaptive k, at fixed concurrencies and on a load ramp; and the
acceptance gate on traffic where acceptance collapses. Three sweeps, each run by `benchmarks.measure`:

  recommendation  draft_target and ngram, k = 0..max, closed loops at each concurrency, calibrated forward costs;
                  `trtspec.sweep.schedule.choose` makes each method's SpecSchedule (draft length per batch size,
                  max_concurrency, the gate's threshold and window), as `trtspec report` does
  comparison      draft_target: no speculation, fixed k, adaptive k and the recommended schedule (and the same
                  schedule with its gate off, which tells the draft lengths' part from the gate's), at each
                  concurrency and on a ramp (concurrency phases in one closed loop, so the schedule's k follows the
                  load); rounds shuffled per load; verdict per load: schedule / the best of no speculation and fixed
                  k, paired per round, >= SCHEDULE_MARGIN; adaptive k and the gate-off schedule / best beside it
  gate            a method's recommended schedule with its gate vs plain decoding on the traffic where that method's
                  acceptance collapses: finished requests until the gate closed, and throughput / plain per round

Judged on tokens per CPU second with one torch thread (the machine is shared), as the batching section does. No torch
at import.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from benchlib.benchmarks import MIXED, Measured, Section, _by_case, _machine, _yes, median_interval, percentile
from trtspec.sweep.grid import BASELINE, SweepSpec, schedule_text

SCHEDULE_MARGIN = 0.97  # issue 28: the recommended schedule >= 0.97 x the best fixed k at each load
GATE_MARGIN = 0.97  # issue 28: with acceptance collapsed, the gated schedule >= 0.97 x plain decoding
RAMP = (1, 2, 4, 8, 16, 8, 4, 2, 1)
GATE_SUITE, GATE_TEMPERATURE = "prose", 1.0


@dataclass(frozen=True)
class ScheduleBench:
    """What the section runs (scripts/bench.py flags)."""

    model: str = "tiny"
    draft: str = "tiny-draft"
    concurrency: tuple[int, ...] = (1, 4, 16)
    ramp: tuple[int, ...] = RAMP
    sweep_ks: tuple[int, ...] = tuple(range(1, 6))  # the recommendation sweep's k (beside k = 0)
    fixed_ks: tuple[int, ...] = tuple(range(1, 6))  # the comparison's fixed-k rows
    adaptive_max_k: int = 8
    max_new_tokens: int = 32
    prompt_tokens: int = 64
    waves: int = 3  # requests per cell >= waves x concurrency
    ramp_waves: int = 1  # requests per ramp phase = ramp_waves x its concurrency
    min_requests: int = 24
    sweep_repeats: int = 4
    repeats: int = 12
    gate_method: str = "ngram"
    gate_concurrency: int = 4
    gate_requests: int = 192
    gate_repeats: int = 6
    threads: int = 1

    @property
    def max_draft_len(self) -> int:
        return max(*self.sweep_ks, *self.fixed_ks, self.adaptive_max_k)

    @property
    def ramp_text(self) -> str:
        return ",".join(map(str, self.ramp))

    def recommendation_spec(self) -> SweepSpec:
        """draft_target and the gate's method at k = 0 and sweep_ks, each concurrency, calibrated at every batch size
        the ramp visits (a calibration slice of 2 repeats per round, spread over them); repeats shuffled rounds (the
        analysis takes medians). Every closed loop of this section starts staggered (`gate_spec`: requests of one
        length started together stay in lockstep under plain decoding, every prompt pass of a wave batched into one
        step, which traffic and the ramp's overlapping phases do not do)."""
        sizes = sorted({*self.concurrency, *self.ramp})
        return SweepSpec.build(model=self.model, drafts=[self.draft],
                               methods=list(dict.fromkeys(["draft_target", self.gate_method])),
                               k=[0, *self.sweep_ks], suites=[MIXED], concurrency=list(self.concurrency),
                               num_prompts=2 * max(self.concurrency), num_requests=self.min_requests,
                               waves=self.waves, prompt_tokens=self.prompt_tokens,
                               max_new_tokens=self.max_new_tokens, max_draft_len=max(self.sweep_ks),
                               repeats=self.sweep_repeats, shuffle=True, threads=self.threads,
                               calibration_batch_sizes=sizes,
                               calibration_repeats=2 * self.sweep_repeats, calibration_slices=self.sweep_repeats,
                               stagger_start=True)

    def comparison_spec(self, schedule: Any, per_batch: Any = None) -> SweepSpec:
        """draft_target: k = 0, fixed_ks, adaptive, `schedule` (a SpecSchedule) and, when it has a gate, the same
        schedule without it, and `per_batch` (the schedule chosen per batch size alone) where it differs, at each
        concurrency and on the ramp; `repeats` rounds, each load's cells in their own random order."""
        schedules = [schedule, ungated(schedule)] if schedule.gated else [schedule]
        if per_batch is not None and per_batch != schedule:
            schedules.append(per_batch)
        return SweepSpec.build(model=self.model, drafts=[self.draft], methods=["draft_target"],
                               k=[0, *self.fixed_ks], adaptive=[self.adaptive_max_k],
                               schedules=[schedule_text(s) for s in schedules], suites=[MIXED],
                               concurrency=list(self.concurrency), ramps=[self.ramp_text],
                               ramp_waves=self.ramp_waves,
                               num_prompts=2 * max(self.concurrency), num_requests=self.min_requests,
                               waves=self.waves, prompt_tokens=self.prompt_tokens,
                               max_new_tokens=self.max_new_tokens, max_draft_len=self.max_draft_len,
                               repeats=self.repeats, shuffle=True, threads=self.threads, calibrate=False,
                               stagger_start=True)

    def gate_spec(self, schedule: Any, concurrency: int) -> SweepSpec:
        """The gate's method under `schedule` vs plain decoding on temperature-1 prose at `concurrency`, and the same
        gate without probes (TensorRT-LLM's) when `schedule` probes; the first requests arriving one per step
        (requests of one length started together stay in lockstep under plain decoding, every prompt pass batched
        into one step, while the gate's window of drafting requests spreads them: the cells would then differ by
        that, not by the gate)."""
        schedules = [schedule] + ([permanent(schedule)] if schedule.probe_every != 0 else [])
        return SweepSpec.build(model=self.model, drafts=[], methods=[self.gate_method], k=[0],
                               schedules=[schedule_text(s) for s in schedules], suites=[GATE_SUITE],
                               temperatures=[GATE_TEMPERATURE], concurrency=[concurrency], num_prompts=16,
                               num_requests=self.gate_requests, prompt_tokens=self.prompt_tokens,
                               max_new_tokens=self.max_new_tokens, max_draft_len=self.max_draft_len,
                               repeats=self.gate_repeats, shuffle=True, threads=self.threads, calibrate=False,
                               stagger_start=True)


def ungated(schedule: Any) -> Any:
    """The schedule's draft lengths and max_concurrency, without the acceptance gate."""
    return replace(schedule, acceptance_window=None, acceptance_length_threshold=None, acceptance_rate_window_size=None,
                   acceptance_rate_threshold=None, probe_every=None)


def exact(schedule: Any) -> Any:
    """The schedule run exactly as TensorRT-LLM 1.2.1 runs it (its lookup and rule, its gate permanent)."""
    return replace(schedule, probe_every=None, controls="trtllm-1.2.1")


def permanent(schedule: Any) -> Any:
    """The schedule with TensorRT-LLM's gate: no probes, closed for good."""
    return replace(schedule, probe_every=0)


def unreachable_gate(schedule: Any) -> list[int]:
    """The draft lengths > 0 of the schedule whose requests cannot reach its gate's threshold (1.2.1's unit: k
    accepted draft tokens per iteration at most; a rate: 1 at most): where the schedule drafts them, the gate closes
    once they fill its window."""
    if not schedule.gated or not schedule.draft_len:
        return []
    if schedule.acceptance_length_threshold is None:
        return sorted({k for _, k in schedule.draft_len if k > 0}) if schedule.gate_threshold > 1 else []
    return sorted({k for _, k in schedule.draft_len if 0 < k <= schedule.acceptance_length_threshold})


def gate_concurrency(schedule: Any, k: int, wanted: int, concurrency: Sequence[int]) -> int:
    """`wanted` when the schedule speculates there, else the largest of `concurrency` (and 1) where it does."""
    for c in sorted({wanted, 1, *(c for c in concurrency if c <= wanted)}, reverse=True):
        if schedule.draft_len_at(c, k) > 0:
            return c
    return 1


# ---------------------------------------------------------------------------------------------------------------
# verdicts (pure)


GATE_OFF = "recommended schedule, gate off"
PER_BATCH = "schedule chosen per batch size alone"
PER_BATCH_MARGIN = 0.99  # issue 40: the recommended schedule not below the per-batch one (within a round's noise)


def ramp_profile(ramp: Sequence[int]) -> dict[int, float]:
    """The ramp's load profile: each phase's concurrency weighted by its requests (ramp_waves x c per phase)."""
    weights: dict[int, float] = {}
    for c in ramp:
        weights[c] = weights.get(c, 0.0) + c
    return weights


def row_name(params: dict[str, Any], recommended: str | None = None,
             per_batch: str | None = None) -> tuple[tuple[int, int], str]:
    """(sort key, row name): no speculation, fixed k ascending, adaptive, the schedule (`recommended`: its text;
    `per_batch`: the schedule chosen per batch size alone; another schedule is its gate-off copy)."""
    if params["method"] == BASELINE:
        return (0, 0), "no speculation"
    if params.get("adaptive"):
        return (2, params["k"]), f"adaptive k<={params['k']}"
    if params.get("schedule"):
        if per_batch is not None and params["schedule"] == per_batch:
            return (3, 2), PER_BATCH
        if recommended is not None and params["schedule"] != recommended:
            return (3, 1), GATE_OFF
        return (3, 0), "recommended schedule"
    return (1, params["k"]), f"fixed k={params['k']}"


@dataclass
class LoadVerdict:
    """The schedule (and adaptive k, shown) against the best of no speculation and every fixed k at one load.

    The best is the configuration with the highest median on the judged clock; the verdict is the median over
    rounds of schedule / best in the same round (paired: the machine's drift cancels), with a bootstrap interval."""

    load: str  # "c=4" or "ramp 1,2,...,1"
    best: str
    per_round: list[float]  # schedule / best, same round, round order
    adaptive_per_round: list[float] = field(default_factory=list)  # adaptive / best, same round
    ungated_per_round: list[float] = field(default_factory=list)  # the schedule with its gate off / best
    gate: str = ""  # what the schedule's gate did at this load
    per_batch_per_round: list[float] = field(default_factory=list)  # schedule / the per-batch schedule, same round

    @property
    def paired(self) -> float:
        return statistics.median(self.per_round) if self.per_round else 0.0

    @property
    def adaptive_paired(self) -> float:
        return statistics.median(self.adaptive_per_round) if self.adaptive_per_round else 0.0

    @property
    def passed(self) -> bool:
        per_batch = statistics.median(self.per_batch_per_round) if self.per_batch_per_round else 1.0
        return self.paired >= SCHEDULE_MARGIN and per_batch >= PER_BATCH_MARGIN

    def line(self) -> str:
        def spread(values: list[float]) -> str:
            if not values:
                return ""
            low, high = median_interval(values)
            return f" (90% interval {low:.2f}-{high:.2f}, rounds {min(values):.2f}-{max(values):.2f})"

        ungated = (f"; gate off / best = {statistics.median(self.ungated_per_round):.2f}"
                   f"{spread(self.ungated_per_round)}" if self.ungated_per_round else "")
        gate = f"; {self.gate}" if self.gate else ""
        gate += (f"; schedule / {PER_BATCH} = {statistics.median(self.per_batch_per_round):.2f}"
                 f"{spread(self.per_batch_per_round)}" if self.per_batch_per_round else "")
        return (f"{self.load}: schedule / best ({self.best}) = {self.paired:.2f}{spread(self.per_round)}{gate}; "
                f"adaptive / best = {self.adaptive_paired:.2f}{spread(self.adaptive_per_round)}{ungated}: "
                f"{'PASS' if self.passed else 'FAIL'}")


def load_verdict(load: str, by_round: dict[str, dict[int, float]]) -> LoadVerdict:
    """`by_round`: row name -> round -> judged rate (row names of `row_name`)."""
    medians = {name: statistics.median(rounds.values()) for name, rounds in by_round.items() if rounds}
    others = [n for n in medians if n == "no speculation" or n.startswith("fixed")]
    best = max(others, key=medians.__getitem__)

    def paired(name: str) -> list[float]:
        rounds = by_round.get(name, {})
        return [rate / by_round[best][r] for r, rate in sorted(rounds.items()) if by_round[best].get(r, 0.0) > 0]

    adaptive = next((n for n in by_round if n.startswith("adaptive")), None)
    schedule, per_batch = by_round.get("recommended schedule", {}), by_round.get(PER_BATCH, {})
    versus = [rate / per_batch[r] for r, rate in sorted(schedule.items()) if per_batch.get(r, 0.0) > 0]
    return LoadVerdict(load, best, paired("recommended schedule"), paired(adaptive) if adaptive else [],
                       paired(GATE_OFF), per_batch_per_round=versus)


@dataclass
class GateVerdict:
    """The gated schedule vs plain decoding on collapsed traffic, per round.

    Judged from the gate's close on: tokens per CPU second after the round's `closed_after` finished requests, gated /
    plain after the same number of finished requests in the same round (the window before the close is the price of
    any gate, bounded by its size and reported as `closed_after`; what the issue asks of the rest is that throughput
    stays at plain decoding's, probes included). The whole cell's ratio is shown beside it."""

    method: str
    concurrency: int
    window: int
    threshold: float
    requests: int
    closed_after: list[int | None]  # finished requests when the gate first closed, per round
    drafted: list[int]  # requests that drafted, per round
    ratios: list[float]  # gated / plain tokens per judged second over the whole cell, same round
    acceptance: float  # mean acceptance length of the drafting steps (all rounds)
    after_close: list[float] = field(default_factory=list)  # gated / plain from the close on, same round
    probes: list[int] = field(default_factory=list)  # probe requests admitted while closed, per round
    probe_cost: list[float] = field(default_factory=list)  # gated / the same gate without probes, from the close on

    @property
    def closed_in_window(self) -> bool:
        return all(n is not None and n <= self.window for n in self.closed_after)

    @property
    def paired(self) -> float:
        """Gated / plain from the close on (the verdict's number), median over rounds."""
        return statistics.median(self.after_close) if self.after_close else 0.0

    @property
    def whole(self) -> float:
        return statistics.median(self.ratios) if self.ratios else 0.0

    @property
    def passed(self) -> bool:
        return self.closed_in_window and self.paired >= GATE_MARGIN

    def line(self) -> str:
        def spread(values: list[float]) -> str:
            low, high = median_interval(values) if values else (0.0, 0.0)
            return (f"90% interval {low:.2f}-{high:.2f}, rounds {min(values, default=0):.2f}-"
                    f"{max(values, default=0):.2f}")

        closed = ", ".join("never" if n is None else str(n) for n in self.closed_after)
        return (f"gate ({self.method}, window {self.window}, threshold {self.threshold:.3f}) on {GATE_SUITE} at "
                f"temperature {GATE_TEMPERATURE:g}, c={self.concurrency}: mean acceptance length while drafting "
                f"{self.acceptance:.2f}; closed after {closed} finished requests (per round; window {self.window}); "
                f"requests that drafted {', '.join(map(str, self.drafted))} of {self.requests} (the window, those in "
                f"flight when it closed, and probes: {', '.join(map(str, self.probes))}); from the close on, gated / "
                f"plain = {self.paired:.2f} ({spread(self.after_close)}); whole cell, the window included: "
                f"{self.whole:.2f} ({spread(self.ratios)})"
                + (f"; the probes' cost: from the close on, with / without probes = "
                   f"{statistics.median(self.probe_cost):.2f} ({spread(self.probe_cost)})" if self.probe_cost else "")
                + f": {'PASS' if self.passed else 'FAIL'}")


# ---------------------------------------------------------------------------------------------------------------
# the section


def _load(params: dict[str, Any]) -> str:
    return f"ramp {params['ramp']}" if params.get("ramp") else f"c={params['concurrency']}"


def gate_summary(runs: list[dict]) -> str:
    """What the gate did over a schedule's runs at one load (empty without a gate)."""
    gates = [r["metrics"]["gate"] for r in runs if "gate" in r["metrics"]]
    if not gates:
        return ""
    closed = [g["closed_after"] for g in gates if g.get("closed_after") is not None]
    means = [g["window_mean"] for g in gates if g.get("window_mean") is not None]
    after = f" after {statistics.median(closed):g} finished requests (median)" if closed else ""
    mean = f", window mean {statistics.median(means):.2f} at the end (median)" if means else ""
    return f"the gate closed in {len(closed)} of {len(gates)} rounds{after}{mean}"


def comparison_rows(measured: Measured, clock: str, recommended: str | None = None,
                    per_batch: str | None = None) -> tuple[list[list[str]], list[LoadVerdict]]:
    """Table rows and a verdict per load (fixed concurrencies ascending, then the ramp); `recommended`: the
    recommended schedule's text, `per_batch` the per-batch schedule's (another schedule is its gate-off copy)."""
    metric = "tokens_per_cpu_s" if clock == "cpu" else "tokens_per_s"
    loads: dict[str, list[tuple[tuple[int, int], str, list[dict]]]] = {}
    for runs in _by_case(measured.records).values():
        loads.setdefault(_load(runs[0]["params"]), []).append((*row_name(runs[0]["params"], recommended, per_batch),
                                                                runs))
    order = sorted(loads, key=lambda name: (name.startswith("ramp"), int(name[2:]) if name.startswith("c=") else 0))
    rows, verdicts = [], []
    for load in order:
        modes = [(name, runs) for _, name, runs in sorted(loads[load], key=lambda mode: mode[0])]
        by_round = {name: {r["params"].get("repeat", 0): r["metrics"].get(metric, 0.0) for r in runs}
                    for name, runs in modes}
        verdict = load_verdict(load, by_round)
        verdict.gate = next((gate_summary(runs) for name, runs in modes if name == "recommended schedule"), "")
        verdicts.append(verdict)
        plain = modes[0][1][0]["metrics"]["output_sha256"]
        judged = {name: statistics.median(rounds.values()) for name, rounds in by_round.items()}
        for name, runs in modes:
            rates = list(by_round[name].values())
            wall = statistics.median(r["metrics"]["tokens_per_s"] for r in runs)
            typical = min(runs, key=lambda r: abs(r["metrics"][metric] - judged[name]))
            stats, latencies = typical["metrics"]["stats"], typical["metrics"]["latencies_s"]
            per_step = stats["num_draft_tokens"] / max(stats["num_target_forwards"], 1)
            mark = ("PASS" if verdict.passed else "FAIL") if name == "recommended schedule" else \
                "best" if name == verdict.best else ""
            rows.append([name, load, f"{judged[name]:.1f}", f"{min(rates):.0f}-{max(rates):.0f}",
                         f"{judged[name] / judged[verdict.best]:.2f}", f"{wall:.1f}",
                         f"{1000 * percentile(latencies, 50):.0f}", f"{per_step:.2f}",
                         _yes(r["metrics"]["output_sha256"] == plain for r in runs), mark])
    return rows, verdicts


def rate_after(metrics: dict[str, Any], finished: int | None) -> float:
    """Tokens per CPU second after the run's first `finished` finished requests (the whole run: None or 0)."""
    trace = metrics.get("finish_trace_cpu_s") or []
    if not finished or finished >= len(trace):
        return metrics.get("tokens_per_cpu_s", 0.0)
    tokens, cpu = trace[-1][0] - trace[finished - 1][0], trace[-1][1] - trace[finished - 1][1]
    return tokens / cpu if cpu > 0 else 0.0


def gate_result(measured: Measured, method: str, schedule: Any, clock: str) -> tuple[list[list[str]], GateVerdict]:
    metric = "tokens_per_cpu_s" if clock == "cpu" else "tokens_per_s"
    groups = list(_by_case(measured.records).values())
    plain = next(runs for runs in groups if runs[0]["params"]["method"] == BASELINE)
    gated = next(runs for runs in groups if runs[0]["params"].get("schedule") == schedule_text(schedule))
    no_probes = next((runs for runs in groups if schedule.probe_every != 0
                      and runs[0]["params"].get("schedule") == schedule_text(permanent(schedule))), [])
    plain_of = {r["params"].get("repeat", 0): r["metrics"] for r in plain}
    no_probes_of = {r["params"].get("repeat", 0): r["metrics"] for r in no_probes}
    ratios, after_close, probe_cost = [], [], []
    for r in gated:
        base = plain_of.get(r["params"].get("repeat", 0))
        if not base or not base.get(metric):
            continue
        ratios.append(r["metrics"].get(metric, 0.0) / base[metric])
        closed = r["metrics"].get("gate", {}).get("closed_after")
        plain_rate = rate_after(base, closed)
        after_close.append(rate_after(r["metrics"], closed) / plain_rate if plain_rate else 0.0)
        other = no_probes_of.get(r["params"].get("repeat", 0))
        if other:  # from the later close of the two on
            later = max(closed or 0, other.get("gate", {}).get("closed_after") or 0)
            other_rate = rate_after(other, later)
            probe_cost.append(rate_after(r["metrics"], later) / other_rate if other_rate else 0.0)
    drafts = sum(r["metrics"]["stats"]["num_drafts"] for r in gated)
    accepted = sum(r["metrics"]["stats"]["num_accepted_tokens"] for r in gated)
    params = gated[0]["params"]
    verdict = GateVerdict(method, params["concurrency"], schedule.gate_window,
                          schedule.gate_threshold, gated[0]["metrics"]["num_requests"],
                          [r["metrics"].get("gate", {}).get("closed_after") for r in gated],
                          [r["metrics"]["requests_drafted"] for r in gated], ratios,
                          1 + accepted / drafts if drafts else 0.0, after_close,
                          [r["metrics"].get("gate", {}).get("probes", 0) for r in gated], probe_cost)
    plain_by_round = {repeat: m.get(metric, 0.0) for repeat, m in plain_of.items()}
    load = f"gate: {GATE_SUITE} T={GATE_TEMPERATURE:g} c={params['concurrency']}"
    rows = []
    named = [("no speculation", plain), (f"{method} schedule + gate", gated)]
    named += [(f"{method} schedule + gate, no probes (TensorRT-LLM's)", no_probes)] if no_probes else []
    for name, runs in named:
        rates = [r["metrics"].get(metric, 0.0) for r in runs]
        stats = runs[0]["metrics"]["stats"]
        per_step = stats["num_draft_tokens"] / max(stats["num_target_forwards"], 1)
        rows.append([name, load, f"{statistics.median(rates):.1f}", f"{min(rates):.0f}-{max(rates):.0f}",
                     f"{statistics.median(rates) / statistics.median(plain_by_round.values()):.2f}",
                     f"{statistics.median(r['metrics']['tokens_per_s'] for r in runs):.1f}",
                     f"{1000 * percentile(runs[0]['metrics']['latencies_s'], 50):.0f}", f"{per_step:.2f}", "-",
                     ("PASS" if verdict.passed else "FAIL") if runs is gated else ""])
    return rows, verdict


def recommendation_note(rec: Any) -> str:
    """One method's recommended schedule with its modelled/measured speedup at the batch sizes that matter."""
    sizes = sorted({1, 2, 4, 8, 16, rec.max_batch_size} & {r.batch_size for r in rec.rows})
    speedups = ", ".join(f"b={b}: k={rec.rows[b - 1].k} {rec.rows[b - 1].chosen.speedup:.2f}x "
                         f"({rec.rows[b - 1].chosen.source})" for b in sizes)
    gate = (f"gate: window {rec.gate.window}, threshold {rec.gate.threshold:.3f} ({rec.gate.reason}; window: "
            f"{rec.gate.window_reason})" if rec.gate.set else rec.gate.reason)
    return (f"{rec.variant}: `{schedule_text(rec.schedule)}`; max_concurrency {rec.max_concurrency}; speedup per "
            f"batch size {speedups}; {gate}.")


def section(bench: ScheduleBench, recommendations: dict[str, Any], comparison: Measured,
            gate: tuple[Measured, Any] | None, gate_skipped: str = "", machine_state: str = "") -> Section:
    """The table (comparison rows per load, then the gate's rows) and the notes with the verdicts."""
    clock = "cpu" if bench.threads == 1 else "wall"
    rec = recommendations.get("draft_target")
    schedule = exact(rec.schedule) if rec is not None else None
    per_batch = exact(rec.per_batch_schedule) if rec is not None and rec.per_batch_schedule != rec.schedule else None
    rows, verdicts = comparison_rows(comparison, clock, schedule_text(schedule) if schedule is not None else None,
                                     schedule_text(per_batch) if per_batch is not None else None)
    notes = [
        "Verdict (issue 28: the recommended schedule >= " f"{SCHEDULE_MARGIN:.2f} x the best of no speculation and "
        f"every fixed k at each load, judged on {'tokens per CPU second' if clock == 'cpu' else 'wall tokens/s'}; "
        "the best is the configuration with the highest median, the verdict the median over rounds of schedule / "
        "best in the same round with a 90% bootstrap interval; adaptive k / best and the gate-off schedule / best "
        "beside it, not judged): "
        + "; ".join(v.line() for v in verdicts) + ("." if verdicts else ""),
    ]
    short = unreachable_gate(schedule) if schedule is not None else []
    if short:
        notes.append(f"The recommended gate's threshold ({schedule.gate_threshold:.3f}, the break-even at the gate's "
                     "batch size and k) is out of reach of requests drafting k = "
                     f"{', '.join(map(str, short))} (at most k accepted draft tokens per iteration): at the batch sizes where "
                     "the schedule drafts that k, the gate closes once such requests fill its window, whatever the "
                     "acceptance, and a probe then widens its steps' target forward to k + 1 tokens for every row of the "
                     "batch. The gate-off rows show the draft lengths alone.")
    if gate is not None:
        gate_measured, gate_schedule = gate
        gate_rows, gate_verdict = gate_result(gate_measured, bench.gate_method, gate_schedule, clock)
        rows += gate_rows
        notes.append("Gate verdict (issue 28: where acceptance collapses the gate turns speculation off within its "
                     f"window, and throughput stays >= {GATE_MARGIN:.2f} x plain decoding, paired per round): "
                     + gate_verdict.line() + ".")
    elif gate_skipped:
        notes.append(f"Gate: not measured: {gate_skipped}.")
    notes += [
        "Recommended (`trtspec.sweep.schedule.choose` on a sweep of draft_target and "
        f"{bench.gate_method} at k = 0, {', '.join(map(str, bench.sweep_ks))}, greedy, concurrency "
        f"{', '.join(map(str, bench.concurrency))}, {bench.sweep_repeats} shuffled rounds (medians), forward costs "
        f"calibrated at batch sizes {', '.join(map(str, sorted({*bench.concurrency, *bench.ramp})))} in "
        f"{bench.sweep_repeats} slices spread over the rounds (medians); measured "
        "speedups where the sweep ran, the cost model anchored to them between): "
        + " ".join(recommendation_note(rec) for rec in recommendations.values()),
        f"Comparison: closed loops of held-out prompts ({MIXED}, last {bench.prompt_tokens} tokens), "
        f"{bench.max_new_tokens} new tokens each, greedy, EOS ignored, the first requests arriving one per step "
        f"(as in the recommendation sweep and the gate); max({bench.waves} x concurrency, "
        f"{bench.min_requests}) requests per cell; the ramp {bench.ramp_text} is one closed loop of "
        f"{bench.ramp_waves} x c requests per phase with c in flight (a phase starts when fewer than its c are "
        f"in flight), so the schedule's draft length follows the load within a run. {bench.repeats} rounds; in "
        "each round every load's cells run together in their own random order. Columns: the judged rate (median "
        "over rounds) and its min-max, vs best = median / the best median (a ratio of medians; the verdict pairs "
        "rounds), wall tokens/s (median), latency p50 of the run nearest the median, draft tokens per target "
        "forward per request; same tokens as plain = greedy outputs equal to no speculation's at that load, k "
        "changing mid-request included.",
        f"Gate traffic: {bench.gate_method} under its recommended schedule (made on greedy traffic) meets "
        f"{GATE_SUITE} prompts at temperature {GATE_TEMPERATURE:g}: {bench.gate_requests} requests of "
        f"{bench.max_new_tokens} tokens per cell, {bench.gate_repeats} rounds, plain decoding beside it. The "
        "draft_target pair does not collapse there (its draft is distilled from the target: mean acceptance "
        "length 3.3 at k = 4 on prose at temperature 1, 3.6 at 2.0, measured before this run), so the gate is "
        f"shown on {bench.gate_method}, whose prompt-lookup drafts stop matching once sampling leaves the prompt's "
        "n-grams. trtspec's gate reopens through probes (TensorRT-LLM's stays closed): while it is closed one "
        "request at a time still drafts, the 16th drafting admission after the close and then 16 after each probe "
        "finishes, doubled after each probe below the threshold up to 256; their cost is in both ratios, and the same "
        "gate without probes (TensorRT-LLM's) runs beside it to price them (with / without, from the later close of "
        "the two, same round). The verdict's "
        "ratio starts at the close (tokens per CPU second after the round's closed_after finished requests, gated / "
        "plain after as many); the whole cell's adds the window's requests, which drafted at collapsed acceptance "
        "before any gate could know.",
        _machine() + (f"; {machine_state}" if machine_state else "") + ".",
    ]
    return Section(
        title=f"Speculation schedule: recommended vs fixed k vs adaptive k, and the acceptance gate ({bench.model} + "
              f"{bench.draft})",
        columns=["configuration", "load", "tokens per CPU s" if clock == "cpu" else "tokens/s", "min-max over rounds",
                 "vs best", "wall tokens/s", "latency p50 (ms)", "draft tokens / step", "same tokens as plain",
                 "verdict"],
        rows=rows, notes=notes)


def run(bench: ScheduleBench) -> Section:
    """The three sweeps in order (the recommendation decides what the others run), printing the recommendation."""
    import os
    import time

    from benchlib.benchmarks import measure
    from trtspec.sweep.schedule import choose

    start, load = time.perf_counter(), os.getloadavg()[0]
    swept = measure(bench.recommendation_spec())
    top = max(*bench.concurrency, *bench.ramp)
    recommendations = {method: choose(swept.results, method=method, max_batch_size=top,
                                      load=ramp_profile(bench.ramp))
                       for method in dict.fromkeys(["draft_target", bench.gate_method])}
    for rec in recommendations.values():
        print("recommended:", recommendation_note(rec), flush=True)
    dt = recommendations["draft_target"]
    comparison = measure(bench.comparison_spec(exact(dt.schedule), exact(dt.per_batch_schedule)))
    gate_rec = recommendations[bench.gate_method]
    gate, skipped = None, ""
    if not gate_rec.gate.set:
        skipped = f"the recommendation for {gate_rec.variant} has no gate ({gate_rec.gate.reason})"
    else:
        c = gate_concurrency(gate_rec.schedule, gate_rec.max_draft_len, bench.gate_concurrency, bench.concurrency)
        gate = (measure(bench.gate_spec(gate_rec.schedule, c)), gate_rec.schedule)
    state = (f"{(time.perf_counter() - start) / 60:.0f} minutes wall; 1-minute load average {load:.1f} at the start, "
             f"{os.getloadavg()[0]:.1f} at the end (other jobs share the cores)")
    return section(bench, recommendations, comparison, gate, skipped, state)
