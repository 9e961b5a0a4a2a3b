"""The speculation schedule a sweep recommends: per method (variant) and temperature, the draft length k for each
batch size up to a max batch size, where speculation stops (`max_concurrency`) and the acceptance gate, as a
`contracts.schedule.SpecSchedule` with its evidence. Pure Python (no torch).

Per batch size b = 1..max batch size, every candidate k (0 and each fixed k the sweep ran for the variant) has a
speedup over plain decoding: measured where the sweep ran (concurrency b, k) (the mean over its suites), else the
cost model's (`analysis.predictions_at`: E(k) measured, step costs calibrated at b, host overhead scaled to b). The
recommended k maximises it among plain decoding and the draft lengths that beat plain decoding by more than
SWITCH_MARGIN. TensorRT-LLM's rules shape the choice: schedule[1] is max_draft_len and no draft length exceeds it, so
for b > 1 the argmax is over k <= the k at batch 1 (`BatchRow.best_k` is the unconstrained one). For b > 1 the
previous batch size's k stays, while it still beats plain decoding by the margin, unless the argmax beats it by more
than the margin (`BatchRow.held`: the argmax the margin held back); when it must change, it changes least: to the k
nearest to it among those within the margin of the argmax (those are equally likely the true best within a sweep's
noise, and the best k falls smoothly as the batch grows; docs/report.md). The margin is the price of what the
steady-state numbers leave out: each change of k costs (under a changing load a request lives through several batch
sizes; a draft model catches up on the tokens committed while it did not draft), speculation costs draft memory and
latency spread, and differences of a few percent are within a sweep's noise, so plain decoding, the default that
needs nothing, is kept unless speculation clearly wins. The schedule keeps batch 1 and each batch size where k changes.

`max_concurrency` is the last batch size where speculation wins when plain decoding wins at every batch size above it
(None when speculation wins at the max batch size; 0 when it never wins).

The gate's break-even is the mean acceptance length (tokens per target forward) at which speculation at the
schedule's k stops paying at the gate batch size (default 1): speedup = E * S_0 / S_k, so break-even = S_k / S_0, the
cost model's per-step seconds with host overheads, divided by the same measured / modelled anchor as the speedup (at a
measured point: E / measured speedup). The written threshold is that break-even in the unit of the target release's
gate (`targets.controls.Release.threshold_from_break_even`): TensorRT-LLM 1.2.1's `acceptance_length_threshold` counts
accepted draft tokens per iteration without the bonus token (break-even - 1); 1.3's `acceptance_rate_threshold` is a
rate (break-even - 1) / k. Batch 1 by default because speculation is cheapest there (the smallest S_k / S_0): the gate
then closes only when acceptance is too low for speculation to pay at any load, and the schedule's smaller k (and
max_concurrency) already answer a higher load; a gate at a larger batch size closes sooner. One threshold judges every
draft length the schedule uses, and a request drafting k tokens reaches at most k + 1: when a smaller k used at a
larger batch size has a measured acceptance length below that break-even, the threshold is the lowest break-even
among the batch sizes using it (else the gate would close whenever the load reached them). The window comes from the
spread of the per-request values the release's gate records (engine sweeps record each request's counts): the
smallest window whose mean, at the measured acceptance, falls below the threshold with probability <= 1% (normal
approximation), clamped to [MIN_WINDOW, MAX_WINDOW] requests; else DEFAULT_WINDOW.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from trtspec.contracts.schedule import DraftLens, SpecSchedule
from trtspec.errors import ConfigError, UsageError
from trtspec.sweep.analysis import CaseRow, Results, predictions_at
from trtspec.targets.controls import Release, release

DEFAULT_GATE_BATCH = 1
DEFAULT_RELEASE = "1.2.1"  # the TensorRT-LLM release whose gate (names and unit) a recommendation writes
DEFAULT_WINDOW = 32  # finished requests, when the records hold no per-request acceptance lengths
MIN_WINDOW, MAX_WINDOW = 8, 256
WINDOW_Z = 2.326  # one-sided 1% quantile of the normal distribution
SWITCH_MARGIN = 0.03  # k > 0 only for a speedup over plain decoding more than 3%; for b > 1, k changes only for 3% more


@dataclass(frozen=True)
class KPoint:
    """One candidate k at one batch size: the cost model's speedup and throughput, and the measured ones where the
    sweep ran that (concurrency, k)."""

    k: int
    predicted_speedup: float
    predicted_tokens_per_s: float
    measured_speedup: float | None = None
    measured_tokens_per_s: float | None = None
    anchor: float = 1.0  # measured / modelled speedup of this k at the nearest measured batch sizes (interpolated)
    plain_anchor: float = 1.0  # the same for plain decoding's tokens/s

    @property
    def source(self) -> str:
        return "measured" if self.measured_speedup is not None else "modelled"

    @property
    def speedup(self) -> float:
        """The speedup the choice is made on: measured where it ran, else the model's anchored to the measurements."""
        return self.measured_speedup if self.measured_speedup is not None else self.predicted_speedup * self.anchor

    @property
    def tokens_per_s(self) -> float:
        if self.measured_tokens_per_s is not None:
            return self.measured_tokens_per_s
        return self.predicted_tokens_per_s * self.anchor * self.plain_anchor

    def to_dict(self) -> dict[str, Any]:
        return {"k": self.k, "source": self.source, "speedup": self.speedup, "tokens_per_s": self.tokens_per_s,
                "predicted_speedup": self.predicted_speedup, "predicted_tokens_per_s": self.predicted_tokens_per_s,
                "measured_speedup": self.measured_speedup, "measured_tokens_per_s": self.measured_tokens_per_s,
                "anchor": self.anchor, "plain_anchor": self.plain_anchor}


@dataclass(frozen=True)
class BatchRow:
    """The recommended k at one batch size, and every candidate it was chosen from (k ascending, 0 first)."""

    batch_size: int
    k: int  # the argmax over k <= the k at batch 1 (TensorRT-LLM: no draft length above max_draft_len)
    best_k: int  # the argmax over every k
    points: tuple[KPoint, ...]
    calibrated_up_to: int  # the largest calibrated batch size: above it the model uses that batch size's costs
    held: int | None = None  # the argmax over k <= the k at batch 1 when SWITCH_MARGIN kept another k (or plain)
    previous: int | None = None  # the k at the batch size below (None at batch 1)
    filled: bool = False  # k is a larger batch size's (its own choice, `held`, was lower: draft lengths never rise)

    def point(self, k: int) -> KPoint:
        return next(p for p in self.points if p.k == k)

    @property
    def chosen(self) -> KPoint:
        return self.point(self.k)

    @property
    def plain(self) -> KPoint:
        return self.point(0)

    @property
    def note(self) -> str:
        notes = []
        if self.filled:
            return (f"k={self.k}: a larger batch size's draft length (draft lengths do not rise with the batch size); "
                    f"this batch size alone chose k={self.held}")
        if self.best_k not in (self.k, self.held):
            notes.append(f"k={self.best_k} is faster ({self.point(self.best_k).speedup:.2f}x) but above the k at "
                         "batch 1 (max_draft_len)")
        if self.held is not None and self.k == 0:
            notes.append(f"k={self.held} ({self.point(self.held).speedup:.2f}x) does not beat plain decoding by more "
                         f"than {SWITCH_MARGIN:.0%}")
        elif self.held is not None and self.k == self.previous:
            notes.append(f"k={self.held} ({self.point(self.held).speedup:.2f}x) is within {SWITCH_MARGIN:.0%} of the "
                         "previous batch size's k, which stays")
        elif self.held is not None:
            notes.append(f"k={self.held} ({self.point(self.held).speedup:.2f}x) is within {SWITCH_MARGIN:.0%} of "
                         f"k={self.k}, the smallest change from the previous batch size's k={self.previous}")
        if self.batch_size > self.calibrated_up_to and self.chosen.measured_speedup is None:
            notes.append(f"costs of batch {self.calibrated_up_to} (not calibrated above)")
        return "; ".join(notes)

    def to_dict(self) -> dict[str, Any]:
        return {"batch_size": self.batch_size, "k": self.k, "best_k": self.best_k, "held": self.held,
                "filled": self.filled,
                "source": self.chosen.source,
                "speedup": self.chosen.speedup, "note": self.note, "points": [p.to_dict() for p in self.points]}


@dataclass(frozen=True)
class Gate:
    """The acceptance gate of one release (its names and unit: targets.controls): threshold and window, or None with
    the reason (`reason` says how either was found)."""

    batch_size: int  # where the threshold is the break-even
    k: int  # the schedule's k there
    threshold: float | None  # in the release's unit
    window: int | None  # in the release's unit (completed requests, or iterations that drafted)
    reason: str
    window_reason: str = ""
    release: str = "1.2.1"

    @property
    def set(self) -> bool:
        return self.threshold is not None and self.window is not None

    @property
    def keys(self) -> tuple[str, str]:
        """(window, threshold) as the release names them."""
        names = release(self.release).keys
        return names["window"], names["threshold"]

    def to_dict(self) -> dict[str, Any]:
        return {"batch_size": self.batch_size, "k": self.k, "threshold": self.threshold, "window": self.window,
                "reason": self.reason, "window_reason": self.window_reason, "release": self.release,
                "unit": release(self.release).unit_text}


@dataclass(frozen=True)
class ScheduleRecommendation:
    """One variant's recommended schedule at one temperature, with its evidence."""

    variant: str
    method: str
    params: dict[str, Any]  # a case's parameters (model, draft, heads, drafter): what a build config needs
    temperature: float
    timing: str
    rows: tuple[BatchRow, ...]  # batch sizes 1..max_batch_size
    max_concurrency: int | None
    gate: Gate
    profile: tuple[tuple[int, float], ...] = ((1, 1.0),)  # the load profile: (batch size, share of the time)
    profile_note: str = ""  # why batch 1's k is not batch 1's own best, when the profile chose it
    per_batch: tuple[BatchRow, ...] = ()  # the schedule chosen per batch size alone (batch 1's own best first)

    @property
    def profile_speedup(self) -> float:
        """Throughput over the load profile / plain decoding's over it."""
        plain = math.fsum(w * self.rows[b - 1].plain.tokens_per_s for b, w in self.profile)
        return math.fsum(w * self.rows[b - 1].chosen.tokens_per_s for b, w in self.profile) / plain if plain else 1.0

    @property
    def max_batch_size(self) -> int:
        return self.rows[-1].batch_size

    @property
    def max_draft_len(self) -> int:
        """The k at batch 1 (TensorRT-LLM: schedule[1] == max_draft_len); 0: do not speculate."""
        return self.rows[0].k

    @property
    def draft_len(self) -> DraftLens:
        """Batch 1 and each batch size where k changes."""
        return _draft_len(self.rows)

    @property
    def schedule(self) -> SpecSchedule:
        """The recommended SpecSchedule; its gate under the names (and so in the unit) of the gate's release."""
        return SpecSchedule(draft_len=self.draft_len, max_concurrency=self.max_concurrency, **self._gate_fields())

    @property
    def per_batch_schedule(self) -> SpecSchedule:
        """The schedule chosen per batch size alone (batch 1's own best first), with the same gate: what the load
        profile is weighed against."""
        rows = self.per_batch or self.rows
        return SpecSchedule(draft_len=_draft_len(rows), max_concurrency=_max_concurrency(rows),
                            **(self._gate_fields() if rows[0].k else {}))

    def _gate_fields(self) -> dict[str, Any]:
        return dict(zip(self.gate.keys, (self.gate.window, self.gate.threshold), strict=True)) if self.gate.set else {}

    def to_dict(self) -> dict[str, Any]:
        return {"variant": self.variant, "method": self.method, "temperature": self.temperature,
                "timing": self.timing, "max_batch_size": self.max_batch_size, "max_draft_len": self.max_draft_len,
                "schedule": self.schedule.to_dict(), "max_concurrency": self.max_concurrency,
                "gate": self.gate.to_dict(), "profile": [list(p) for p in self.profile],
                "profile_speedup": self.profile_speedup, "profile_note": self.profile_note,
                "per_batch_draft_len": [r.k for r in self.per_batch], "rows": [r.to_dict() for r in self.rows]}


# ---------------------------------------------------------------------------------------------------------------


def candidates(results: Results) -> dict[tuple[str, float], list[CaseRow]]:
    """The fixed-k rows of each (variant, temperature) a schedule can be made for (as analysis.recommend: no adaptive
    rows, no warm suffix cache)."""
    groups: dict[tuple[str, float], list[CaseRow]] = defaultdict(list)
    for r in results.rows:
        if r.k > 0 and not r.params.get("adaptive") and r.params.get("suffix_cache") != "warm":
            groups[(r.variant, float(r.params["temperature"]))].append(r)
    return dict(sorted(groups.items()))


def calibrated_sizes(results: Results) -> list[int]:
    timing = "cpu_s" if results.timing == "cpu" else "s"
    return sorted({int(b) for c in results.calibrations.values() for b in c.get(f"target_{timing}") or {}})


def default_max_batch_size(results: Results) -> int:
    """The largest calibrated batch size or measured concurrency."""
    sizes = calibrated_sizes(results) + [int(r.params["concurrency"]) for r in results.rows]
    return max(sizes, default=1)


def recommend_schedules(results: Results, *, max_batch_size: int | None = None,
                        gate_batch_size: int = DEFAULT_GATE_BATCH, target_release: str = DEFAULT_RELEASE,
                        load: str | dict[int, float] | None = None) -> list[ScheduleRecommendation]:
    """A schedule per (variant, temperature) of the sweep; [] when the results hold no calibration."""
    if not results.calibrations:
        return []
    return [recommend_schedule(results, variant, temperature, max_batch_size=max_batch_size,
                               gate_batch_size=gate_batch_size, target_release=target_release, load=load)
            for variant, temperature in candidates(results)]


def recommend_schedule(results: Results, variant: str, temperature: float, *, max_batch_size: int | None = None,
                       gate_batch_size: int = DEFAULT_GATE_BATCH, target_release: str = DEFAULT_RELEASE,
                       load: str | dict[int, float] | None = None) -> ScheduleRecommendation:
    """The schedule of one variant at one temperature (module docstring). ConfigError naming `max_batch_size` /
    `gate_batch_size` when out of range; UsageError when the results hold no calibration for its model set."""
    rows = candidates(results).get((variant, float(temperature)))
    if not rows:
        raise ConfigError("method", variant, f"has no fixed-k cases at temperature {temperature:g}",
                          hint="choose one of: " + ", ".join(f"{v} (T={t:g})" for v, t in candidates(results)))
    top = default_max_batch_size(results) if max_batch_size is None else max_batch_size
    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise ConfigError("max_batch_size", top, "must be an integer >= 1", hint="e.g. --max-batch-size 16")
    if isinstance(gate_batch_size, bool) or not isinstance(gate_batch_size, int) or not 1 <= gate_batch_size <= top:
        raise ConfigError("gate_batch_size", gate_batch_size, f"must be an integer in [1, max batch size {top}]",
                          hint="the batch size the gate's threshold is the break-even at, e.g. 1")
    model = rows[0].params["model"]
    base_rows = [r for r in results.rows if r.k == 0 and float(r.params["temperature"]) == float(temperature)
                 and r.params["model"] == model]
    calibs = list(results.calibrations.values())
    calibrated_up_to = max(calibrated_sizes(results), default=0)
    measured_sizes = {int(r.params["concurrency"]) for r in rows if r.measured_speedup is not None}
    raw = {b: tuple(_point(k, pred.speedup, pred.tokens_per_s, rows, base_rows, b) for k, pred in
                    sorted(predictions_at(rows, base_rows, calibs, b, results.timing).items()))
           for b in sorted(set(range(1, top + 1)) | measured_sizes)}
    # measured / modelled at the measured batch sizes: each k's speedup, and plain decoding's tokens/s
    speedup_ratios: dict[int, list[tuple[int, float]]] = defaultdict(list)
    plain_ratios = []
    for b, points in raw.items():
        for p in points:
            if p.measured_speedup is not None and p.predicted_speedup > 0:
                speedup_ratios[p.k].append((b, p.measured_speedup / p.predicted_speedup))
        if points[0].measured_tokens_per_s and points[0].predicted_tokens_per_s > 0:
            plain_ratios.append((b, points[0].measured_tokens_per_s / points[0].predicted_tokens_per_s))
    anchored = {}
    for b in range(1, top + 1):
        plain = _anchor(plain_ratios, b)
        anchored[b] = tuple(p if p.measured_speedup is not None else
                            replace(p, anchor=_anchor(speedup_ratios[p.k], b), plain_anchor=plain) for p in raw[b])
    measured = {int(r.params["concurrency"]) for r in (*rows, *base_rows)}
    weights = load_profile(load, top, measured)
    per_batch = _table(anchored, calibrated_up_to)
    table, own = per_batch, _profile_tokens_per_s(per_batch, weights)
    best_value, best_table = own, per_batch
    for first in sorted({p.k for p in anchored[1]} - {per_batch[0].k}):
        other = _table(anchored, calibrated_up_to, first)
        if (value := _profile_tokens_per_s(other, weights)) > best_value:
            best_value, best_table = value, other
    profile_note = ""
    if best_table is not per_batch and best_value > own * (1 + SWITCH_MARGIN):
        table = best_table
        profile_note = (f"over the load profile, k={table[0].k} at batch 1 gives {best_value / own:.2f}x the "
                        f"throughput of the schedule chosen per batch size alone (k={per_batch[0].k} at batch 1, "
                        f"{per_batch[0].chosen.speedup:.2f}x there; k={table[0].k} is {table[0].chosen.speedup:.2f}x "
                        "at batch 1)")
    max_concurrency = _max_concurrency(table)
    gate = _gate(rows, base_rows, calibs, table, gate_batch_size, results.timing, release(target_release))
    return ScheduleRecommendation(variant, rows[0].method, dict(rows[0].params), float(temperature), results.timing,
                                  tuple(table), max_concurrency, gate, tuple(sorted(weights.items())), profile_note,
                                  tuple(per_batch))


def _draft_len(rows: Sequence[BatchRow]) -> DraftLens:
    """Batch 1 and each batch size where k changes."""
    pairs = [(1, rows[0].k)]
    for prev, row in zip(rows, rows[1:], strict=False):
        if row.k != prev.k:
            pairs.append((row.batch_size, row.k))
    return tuple(pairs)


def _max_concurrency(rows: Sequence[BatchRow]) -> int | None:
    """The last batch size that speculates when none above it does (None: the last batch size does; 0: none does)."""
    speculating = [row.batch_size for row in rows if row.k > 0]
    return None if speculating and speculating[-1] == rows[-1].batch_size else (speculating[-1] if speculating else 0)


def load_profile(load: str | dict[int, float] | None, top: int, measured: set[int]) -> dict[int, float]:
    """{batch size: weight} summing to 1: `load` ("1:0.2,4:0.5,16:0.3" or a mapping; ConfigError naming `--load`
    unless each key is a batch size in [1, top] and each weight a finite number >= 0, not all 0), else the sweep's
    measured concurrencies up to `top`, alike (batch 1 when none)."""
    if load is None:
        sizes = sorted(b for b in measured if 1 <= b <= top) or [1]
        return {b: 1.0 / len(sizes) for b in sizes}
    pairs: dict[int, float] = {}
    items = load.items() if isinstance(load, dict) else (item.partition(":")[::2] for item in str(load).split(","))
    for key, value in items:
        try:
            batch, weight = int(str(key).strip()), float(str(value).strip())
            if not str(key).strip().isascii() or not str(value).strip().isascii() or "_" in f"{key}{value}":
                raise ValueError(key)
        except ValueError:
            raise ConfigError("--load", str(load), f"entry {key}:{value} is not BATCH:WEIGHT",
                              hint="e.g. --load 1:0.2,4:0.5,16:0.3 (batch size: share of the time at it)") from None
        if not 1 <= batch <= top or not math.isfinite(weight) or weight < 0 or batch in pairs:
            raise ConfigError("--load", str(load), f"entry {batch}:{value}: a batch size in [1, {top}] once, with a "
                              "finite weight >= 0", hint=f"batch sizes up to the max batch size {top}")
        pairs[batch] = weight
    total = math.fsum(pairs.values())
    if total <= 0:
        raise ConfigError("--load", str(load), "has no weight above 0", hint="e.g. --load 1:0.2,4:0.5,16:0.3")
    return {b: w / total for b, w in sorted(pairs.items())}


def _profile_tokens_per_s(table: list[BatchRow], weights: dict[int, float]) -> float:
    """Tokens/s over the load profile: each batch size's, by its share of the time."""
    return math.fsum(w * table[b - 1].chosen.tokens_per_s for b, w in weights.items())


def _table(anchored: dict[int, tuple[KPoint, ...]], calibrated_up_to: int, first: int | None = None) -> list[BatchRow]:
    """k per batch size (module docstring): batch 1's choice (or `first`), then at each larger batch size the rule over
    the k at most batch 1's; then draft lengths are made never to rise with the batch size by filling dips: a batch size
    whose own choice is below a larger batch size's takes the larger one's k (`BatchRow.filled`), so one batch size
    where speculation is level with plain decoding does not turn it off for every larger one."""
    table: list[BatchRow] = []
    for b, points in sorted(anchored.items()):
        best_k = _argmax(points, None)
        if table:
            k, held = _choose(points, _argmax(points, table[0].k), table[-1].k, table[0].k)
        elif first is None:
            k, held = _choose(points, best_k)
        else:
            k, held = first, (best_k if best_k != first else None)
        table.append(BatchRow(b, k, best_k, points, calibrated_up_to, held, table[-1].k if table else None))
    above = 0
    for i in range(len(table) - 1, 0, -1):  # the largest k of the larger batch sizes
        row = table[i]
        if row.k < above:
            table[i] = replace(row, k=above, held=row.k if row.k != above else row.held, filled=True)
        above = max(above, table[i].k)
    return [replace(row, previous=table[i - 1].k if i else None) for i, row in enumerate(table)]


def _point(k: int, predicted: float, predicted_tps: float, rows: list[CaseRow], base_rows: list[CaseRow],
           batch: int) -> KPoint:
    """The candidate k at `batch`: the model's numbers, and the sweep's where it ran (concurrency batch, k)."""
    if k == 0:
        ran = [r for r in base_rows if int(r.params["concurrency"]) == batch]
        if not ran:
            return KPoint(0, predicted, predicted_tps)
        return KPoint(0, predicted, predicted_tps, 1.0, statistics.fmean(r.tokens_per_s for r in ran))
    ran = [r for r in rows if r.k == k and int(r.params["concurrency"]) == batch and r.measured_speedup is not None]
    if not ran:
        return KPoint(k, predicted, predicted_tps)
    return KPoint(k, predicted, predicted_tps, statistics.fmean(r.measured_speedup or 0.0 for r in ran),
                  statistics.fmean(r.tokens_per_s for r in ran))


def _anchor(ratios: list[tuple[int, float]], batch: int) -> float:
    """A measured / modelled ratio at `batch`, linear in batch size between the nearest measured batch sizes around
    it (the nearest one's outside them; 1 where none was measured). `ratios`: (batch size, ratio), ascending. Batch 1
    is a regime of its own (one request: no rows padded to another's draft length, no prompt pass beside decode
    rows, which the model does not price), so its ratio anchors only batch 1 when a batch size above 1 was measured."""
    if batch > 1 and any(b > 1 for b, _ in ratios):
        ratios = [r for r in ratios if r[0] > 1]
    if not ratios:
        return 1.0
    lo = max((r for r in ratios if r[0] <= batch), default=ratios[0])
    hi = min((r for r in ratios if r[0] >= batch), default=ratios[-1])
    if lo[0] == hi[0]:
        return lo[1]
    w = (batch - lo[0]) / (hi[0] - lo[0])
    return lo[1] * (1 - w) + hi[1] * w


def _argmax(points: tuple[KPoint, ...], cap: int | None) -> int:
    """The k with the highest speedup among k <= cap (every k: cap None); the smaller k wins a tie, so k = 0 unless
    speculation is strictly faster."""
    best = points[0]
    for point in points[1:]:
        if (cap is None or point.k <= cap) and point.speedup > best.speedup:
            best = point
    return best.k


def _choose(points: tuple[KPoint, ...], argmax: int, previous: int | None = None,
            cap: int | None = None) -> tuple[int, int | None]:
    """(k, held), `argmax` being the best k <= `cap` (the k at batch 1): `previous` (the k at the batch size below,
    > 0) while it beats plain decoding by more than SWITCH_MARGIN and `argmax` does not beat it by more than that;
    else, when `argmax` beats plain decoding by more than the margin, the smallest change: of the k <= `cap` that beat
    plain decoding by the margin and that `argmax` does not beat by more than it, the nearest to `previous` (of two as
    near, the faster; `argmax` itself at batch 1 or after plain decoding); else 0. `held` is `argmax` when another k
    was chosen (None when it was)."""
    speedup = {p.k: p.speedup for p in points}
    cap = max(speedup) if cap is None else cap

    def pays(k: int) -> bool:
        return k == 0 or speedup[k] > speedup[0] * (1 + SWITCH_MARGIN)

    def near_best(k: int) -> bool:
        return speedup[argmax] <= speedup[k] * (1 + SWITCH_MARGIN)

    if previous and pays(previous) and near_best(previous):
        k = previous
    elif argmax == 0 or not pays(argmax):
        k = 0
    elif previous:
        candidates = [c for c in speedup if 0 < c <= cap and pays(c) and near_best(c)]  # argmax among them
        k = min(candidates, key=lambda c: (abs(c - previous), -speedup[c]))
    else:
        k = argmax
    return k, (argmax if argmax != k else None)


def _break_even(rows: list[CaseRow], base_rows: list[CaseRow], calibs: list[Any], table: list[BatchRow], batch: int,
                timing: str) -> tuple[float, Any]:
    """(S_k / S_0 at `batch` and the schedule's k there, anchored like the speedups; the prediction): the mean
    acceptance length at which that k stops paying at that batch size (inf when not finite)."""
    k = table[batch - 1].k
    pred = predictions_at(rows, base_rows, calibs, batch, timing)[k]
    point = table[batch - 1].chosen  # its speedup = E x S_0 / S_k, anchored: S_k / S_0 scales by 1 / anchor
    anchor = (point.measured_speedup / point.predicted_speedup if point.measured_speedup is not None
              and point.predicted_speedup > 0 else point.anchor)
    ratio = pred.spec_step_s / pred.baseline_step_s / anchor if pred.baseline_step_s > 0 and anchor > 0 else math.inf
    return ratio, pred


def _gate(rows: list[CaseRow], base_rows: list[CaseRow], calibs: list[Any], table: list[BatchRow], batch: int,
          timing: str, controls: Release) -> Gate:
    """The gate of release `controls` at `batch` (module docstring). The break-even is in tokens per target forward;
    the release's threshold is that in its own unit (`Release.threshold_from_break_even`: 1.2.1 records tokens per
    iteration - 1, 1.3 a rate). One threshold judges requests of every draft length the schedule uses, and a request
    drafting k tokens reaches at most k + 1 tokens per step: where the break-even at `batch` is not below the measured
    mean acceptance length of a k used at other batch sizes, the gate would close whenever the load puts requests at
    that k, whatever their acceptance. The threshold is then the lowest break-even among the batch sizes using such a
    k."""
    name = controls.name
    k = table[batch - 1].k
    if k == 0:
        return Gate(batch, 0, None, None, f"no gate: the schedule does not speculate at batch {batch}", release=name)
    ratio, pred = _break_even(rows, base_rows, calibs, table, batch, timing)
    if not math.isfinite(ratio):
        return Gate(batch, k, None, None, f"no gate: the modelled step time ratio at batch {batch}, k={k} is not "
                    "finite", release=name)
    if round(ratio, 3) <= 1.0:  # (the break-even is judged with 3 decimals)
        return Gate(batch, k, None, None, f"no gate: at batch {batch} a step at k={k} costs {ratio:.3f}x a plain step, "
                    "so speculation does not lose even when no draft token is accepted", release=name)
    if pred.tokens_per_step <= ratio:
        return Gate(batch, k, None, None, f"no gate: k={k} at batch {batch} does not beat plain decoding at the "
                    f"measured acceptance (E = {pred.tokens_per_step:.2f} <= break-even {ratio:.3f})", release=name)
    reason = (f"break-even at batch {batch}, k={k}: S_k / S_0 = {pred.spec_step_s * 1e3:.3f} / "
              f"{pred.baseline_step_s * 1e3:.3f} ms per step = {ratio:.3f} tokens per target forward (cost model, host "
              "overhead included, anchored to the measured speedups)")
    binding_batch, binding_k = batch, k
    for row in table:
        if row.k in (0, k):
            continue
        other_ratio, other = _break_even(rows, base_rows, calibs, table, row.batch_size, timing)
        current = controls.threshold_from_break_even(ratio, binding_k)  # compared in the release's unit
        if controls.threshold_from_break_even(other.tokens_per_step, row.k) <= current and \
                controls.threshold_from_break_even(other_ratio, row.k) < current:
            reason = (f"break-even at batch {row.batch_size}, k={row.k} ({other_ratio:.3f} tokens per target forward): "
                      f"the break-even at batch {batch}, k={k} ({ratio:.3f}) is out of reach of k={row.k} (measured "
                      f"E = {other.tokens_per_step:.2f}), which the schedule uses from batch {row.batch_size}")
            ratio, binding_batch, binding_k = other_ratio, row.batch_size, row.k
    threshold = round(controls.threshold_from_break_even(ratio, binding_k), 3)
    window_key, threshold_key = controls.keys["window"], controls.keys["threshold"]
    reason += f"; TensorRT-LLM {name}'s {threshold_key} is {controls.unit_text}: {threshold:g}"
    if threshold <= 0.0:
        return Gate(binding_batch, binding_k, None, None, f"no gate: {reason}; a threshold of {threshold:g} is never "
                    "above what the gate records", release=name)
    values, per, source = _gate_samples(rows, binding_k, controls)
    if len(values) < 2:
        return Gate(binding_batch, binding_k, threshold, DEFAULT_WINDOW, reason, f"default {DEFAULT_WINDOW}: the "
                    f"records hold no per-request acceptance at k={binding_k} (engine sweeps record it)", release=name)
    mean, sd = statistics.fmean(values), statistics.stdev(values)
    if mean <= threshold:
        return Gate(binding_batch, binding_k, None, None, f"no gate: the measured mean at k={binding_k} ({mean:.3f}, "
                    f"{controls.unit_text}) is not above the threshold {threshold:g}: a gate would close at once",
                    release=name)
    window = math.ceil((WINDOW_Z * sd / (mean - threshold)) ** 2 * per)
    window = min(MAX_WINDOW * max(1, round(per)), max(MIN_WINDOW * max(1, round(per)), window))
    unit = controls.facts["gate"]["window_unit"]
    return Gate(binding_batch, binding_k, threshold, window, reason,
                f"{window_key} in {unit}: per-request values at k={binding_k} ({source}): mean {mean:.3f}, sd {sd:.3f} "
                f"over {len(values)} requests; the mean of {window} {unit} falls below {threshold:g} with probability "
                f"<= 1% (normal approximation, clamped to [{MIN_WINDOW}, {MAX_WINDOW}] requests' worth)", release=name)


def _gate_samples(rows: list[CaseRow], k: int, controls: Release) -> tuple[list[float], float, str]:
    """(per-request values in the release's unit at k, gate samples per request, where they came from). 1.2.1 samples
    once per completed request: `Release.request_gate_value` of its counts. 1.3 samples once per iteration that
    drafted: a request's accepted / drafted is the mean of its iterations' rates, so its spread is theirs over the
    iterations it drafted in, which is the factor returned. Records without counts (older sweeps) give the 1.2.1 value
    as mean acceptance length - 1, which leaves out the first-token iteration (an upper bound)."""
    counts = [c for r in rows if r.k == k for c in r.per_request_counts if c[0] > 0]
    if counts and controls.unit == "accepted_per_iteration":
        return [controls.request_gate_value(c[3], c[4]) for c in counts], 1.0, "their counts"
    if counts:
        rates = [controls.iteration_gate_value(c[1], c[2]) or 0.0 for c in counts]
        return rates, statistics.fmean(c[0] for c in counts), "their accepted / drafted, spread per iteration"
    lengths = [x for r in rows if r.k == k for x in r.per_request_acceptance]
    if controls.unit == "accepted_per_iteration":
        return [x - 1.0 for x in lengths], 1.0, "mean acceptance length - 1: records without per-request counts"
    return [], 1.0, "no per-request counts"


def choose(results: Results, *, method: str | None = None, temperature: float | None = None,
           max_batch_size: int | None = None, gate_batch_size: int = DEFAULT_GATE_BATCH,
           target_release: str = DEFAULT_RELEASE, load: str | dict[int, float] | None = None) -> ScheduleRecommendation:
    """One recommendation: `method` a variant (`draft_target:tiny-draft`) or a method with one variant (default: the
    variant with the best speedup over the load profile), `temperature` one the sweep ran (default: the lowest).
    ConfigError naming `method` / `temperature` with the choices."""
    groups = candidates(results)
    if not results.calibrations or not groups:
        raise UsageError("no schedule to recommend: the results hold no calibration records or no fixed-k cases",
                         hint="sweep with --via engine (it calibrates forward costs) and k > 0")
    variants = sorted({v for v, _ in groups})
    if method is not None:
        matches = [v for v in variants if v == method] or [v for v in variants if v.split(":")[0] == method]
        if len(matches) != 1:
            problem = "matches several variants" if matches else "is not a variant of these results"
            raise ConfigError("method", method, problem, hint="choose one of: " + ", ".join(variants))
        variants = matches
    temps = sorted({t for v, t in groups if v in variants})
    if temperature is not None and float(temperature) not in temps:
        raise ConfigError("temperature", temperature, "has no fixed-k cases for " + ", ".join(variants),
                          hint="choose one of: " + ", ".join(f"{t:g}" for t in temps))
    temp = float(temperature) if temperature is not None else temps[0]
    recs = [recommend_schedule(results, v, temp, max_batch_size=max_batch_size, gate_batch_size=gate_batch_size,
                               target_release=target_release, load=load) for v in variants if (v, temp) in groups]
    return max(recs, key=lambda r: r.profile_speedup)
