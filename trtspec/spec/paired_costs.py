"""Step costs on a machine whose speed drifts: arms compared through steps measured next to each other in time.

On a CPU shared with other processes the same forward takes 30-40% longer in one period of seconds than in another
(caches and memory bandwidth are shared, so even process CPU time drifts), while two consecutive steps run at nearly
the same speed (step-to-step jitter ~2%). A policy that compares the cost of K = 1 measured in a fast period with
the cost of K = 3 measured in a slow one picks K = 1 for the wrong reason, and keeps it: the incumbent is re-measured
every step, the others only when explored (measured in docs/history/adaptive-k.md, "Adaptive k at concurrency 4").

So the cost of an arm (a step cap K, with or without a draft model) is split into the machine's speed and the arm's
cost relative to the others, on a log scale:

    log seconds(step t at arm a) = level_t + r_a + noise
  r_b - r_a   RELATIVE cost, from the last PAIR_WINDOW differences of log seconds between decode steps at most
              PAIR_GAP engine steps apart: the first step at b (explored, or the new choice) against the lower of the
              two steps at a just before it, and the same with a and b swapped. Slow drift cancels in each
              difference; a CPU spike at the tried step makes its difference too high if b was tried, too low if a
              was (one at a base step is taken out by the lower of two), so the pair's estimate is the quantile of
              its differences that weighs each by that direction (`_difference`);
  r           per arm, summed along a maximum spanning tree of the pairs (weight: differences seen) from the
              reference arm (the arm of the latest step; r_ref = 0): each arm priced through its best-measured
              pair; arms not connected to the reference have no relative cost (`seconds` -> None);
  level       the CURRENT speed: a low quantile of log seconds - r over the latest LEVEL_WINDOW steps of connected
              arms (noise on a shared CPU is one-sided: another process only ever adds time).

So seconds(a) = exp(level + r_a) prices every connected arm at the machine's current speed, each difference measured
within a few steps. `support(a)` says on how many differences an arm's relative cost rests: the policy explores an
arm until it rests on enough of them (a first difference may be a spike or a change of speed).

Arms on an ordered axis (`curve`: drafting arms at x = K) are priced instead by pooling: on a shared CPU single
steps jitter by 10-30% and a short run gives each pair 1-3 differences, so a tree that prices each arm through one
pair can make D(K) non-monotone and the choice jump between distant K. The
curve's log-step from x to x + 1 is the `_difference` quantile of every difference spanning it from arms within one
(widened until LINE_MIN) of it, each per unit of x it spans, never negative; it covers only the measured span.

Example (arm 1 tried once after two arm-0 steps; then the machine slows down by 40% while only arm 0 runs):
    costs = PairedCosts(); costs.observe(0, 0.020, 1); costs.observe(0, 0.020, 2); costs.observe(1, 0.030, 3)
    for t in range(4, 30): costs.observe(0, 0.028, t)
    costs.seconds(1) ~ 0.042, costs.seconds(0) ~ 0.028 (arm 1's own window would still say 0.030)
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

PAIR_WINDOW = 8  # differences remembered per pair of arms
PAIR_GAP = 2  # two decode steps at most this many engine steps apart form a pair (an admitting step may sit between)
LEVEL_WINDOW = 8  # latest steps whose speed estimates give the current level
LINE_MIN = 3  # differences spanning an increment of the curve before it is priced from them


@dataclass(frozen=True)
class Curve:
    """Decode-step seconds along an ordered axis x = 0, 1, 2, ... (the draft cap K) at the machine's current speed,
    and of the arms off the axis that adjacent steps connect to it (`PairedCosts.curve`)."""

    on: dict[int, float]  # x -> seconds, every x from the lowest to the highest measured arm
    off: dict[Hashable, float]  # arm off the axis -> its seconds

    def seconds(self, x: int) -> float | None:
        """Its seconds inside the measured span (lowest to highest x measured), else None: a step at the span's edge
        rests on the fewest differences, and extended flat it would make every larger x look free."""
        return self.on.get(x)


class PairedCosts:
    """Decode-step seconds per arm at one load level, from adjacent-step differences (see module docstring)."""

    def __init__(self) -> None:
        # (a, b), a < b -> (log s_b - log s_a, whether b was the arm tried: the side a spike or a change of speed
        # most likely hit, so the difference is too high if True, too low if False)
        self._pairs: dict[tuple[Hashable, Hashable], deque[tuple[float, bool]]] = {}
        self._history: deque[tuple[Hashable, float, int]] = deque(maxlen=3)  # latest (arm, log seconds, step)
        self._recent: deque[tuple[Hashable, float]] = deque(maxlen=LEVEL_WINDOW)  # (arm, log seconds)
        self._relative: dict[Hashable, float] | None = None  # arm -> r (reference 0); None = stale
        self._support: dict[Hashable, int] = {}  # arm -> differences of the pair that priced it (`support`)
        self._reference: Hashable | None = None  # the arm r is anchored at
        self._level: float | None = None  # the current level (log seconds of the reference arm); None = stale
        self._version = 0  # counts differences added (the fit's cache key)
        # ((differences added, axis), r per x on the axis and per arm off it): refitted only when a difference is added
        self._fit: tuple[tuple[int, Callable], tuple[dict[int, float], dict[Hashable, float]] | None] | None = None
        self._observed = 0  # steps observed (the priced curve's cache key: the level moves with every step)
        self._priced: tuple[tuple[int, Callable], Curve | None] | None = None  # (observed, axis), the curve

    def observe(self, arm: Hashable, seconds: float, step: int) -> None:
        """A decode step at `arm` took `seconds`; `step` = the engine's step count (adjacency in time)."""
        y = math.log(max(seconds, 1e-9))
        adjacent: list[tuple[Hashable, float, int]] = []  # the latest steps, each at most PAIR_GAP before the next
        for h in reversed(self._history):
            if not 0 < (adjacent[0][2] if adjacent else step) - h[2] <= PAIR_GAP:
                break
            adjacent.insert(0, h)
        if len(adjacent) >= 2 and adjacent[-1][0] == adjacent[-2][0] != arm:
            # the first step at `arm` after two at `other`: against the lower of those two (a spike in one of them is
            # not `other`'s cost); a spike at this step makes `arm` look dearer, never cheaper
            other, base = adjacent[-1][0], min(adjacent[-1][1], adjacent[-2][1])
            key = (other, arm) if _order(other) < _order(arm) else (arm, other)
            window = self._pairs.setdefault(key, deque(maxlen=PAIR_WINDOW))
            window.append((y - base, True) if key[0] == other else (base - y, False))
            self._relative = None
            self._version += 1
        self._history.append((arm, y, step))
        self._recent.append((arm, y))
        self._observed += 1
        self._level = None
        if arm != self._reference:
            self._relative = None

    def relative(self) -> dict[Hashable, float]:
        """r per arm connected to the latest step's arm (that arm 0); empty before any step."""
        if not self._history:
            return {}
        if self._relative is None or self._reference != self._history[-1][0]:
            self._reference, self._level = self._history[-1][0], None
            self._relative, self._support = _tree(self._reference,
                                                  {p: _difference(d) for p, d in self._pairs.items()},
                                                  {p: len(d) for p, d in self._pairs.items()})
        return self._relative

    def seconds(self, arm: Hashable) -> float | None:
        """The arm's decode-step seconds at the current speed; None when it is not connected to the latest step's."""
        relative = self.relative()
        if arm not in relative:
            return None
        if self._level is None:
            self._level = low_quantile([y - relative[a] for a, y in self._recent if a in relative])
        return math.exp(self._level + relative[arm])

    def support(self, arm: Hashable) -> int:
        """Differences the arm's relative cost rests on: those of the pair that prices it (its edge of the tree);
        0 when it is not connected to the latest step's arm, PAIR_WINDOW for that arm itself."""
        relative = self.relative()
        return PAIR_WINDOW if arm == self._reference else self._support.get(arm, 0) if arm in relative else 0


    def curve(self, x: Callable[[Hashable], int | None]) -> Curve | None:
        """The arms at x = 0, 1, 2, ... (None = off the axis) priced through increments pooled over all their
        differences.

        A tree prices each arm through one pair, so on a machine whose single steps jitter by 10-30% an arm priced by
        one or two differences can come out cheaper than a smaller one (issue 15 at concurrency 4: D(4) = 41.6 ms
        next to D(5) = 34 ms), and the choice jumps between distant arms. Here the curve's log-step from x to x + 1
        comes from every difference whose arms lie around it (within one arm on either side, widened until LINE_MIN
        differences span it): each difference counts per unit of x it spans, at the quantile its noise direction
        asks for (`_difference`); a step is never negative (a decode step drafting more tokens does not cost less).
        Arms off the axis are priced through their differences to arms on it; the level is the same low quantile
        of the latest steps as `seconds`. None until LINE_MIN differences between arms on the axis exist or when
        no latest step is on or connected to the axis."""
        if self._priced is None or self._priced[0] != (self._observed, x):  # one pricing per step (the policy asks
            self._priced = ((self._observed, x), self._price_curve(x))  # for every K of every choice)
        return self._priced[1]

    def _price_curve(self, x: Callable[[Hashable], int | None]) -> Curve | None:
        if self._fit is None or self._fit[0] != (self._version, x):  # refitted when a difference is added
            self._fit = ((self._version, x), self._fit_curve(x))
        fit = self._fit[1]
        if fit is None:
            return None
        on, off = fit
        recent = [y - (on[x(a)] if x(a) in on else off[a]) for a, y in self._recent if x(a) in on or a in off]
        if not recent:
            return None
        level = low_quantile(recent)
        return Curve({k: math.exp(level + r) for k, r in on.items()}, {a: math.exp(level + r) for a, r in off.items()})

    def _fit_curve(self, x: Callable[[Hashable], int | None]) -> tuple[dict[int, float], dict[Hashable, float]] | None:
        """(r per x over the measured span, r per arm off the axis connected to it) or None (see `curve`)."""
        spans: list[tuple[int, int, float, bool]] = []  # (x_lo, x_hi, log s_hi - log s_lo, whether too high)
        for (a, b), window in self._pairs.items():
            pa, pb = x(a), x(b)
            if pa is None or pb is None or pa == pb:
                continue
            for diff, tried_b in window:  # tried b: diff too high
                spans.append((pa, pb, diff, tried_b) if pa < pb else (pb, pa, -diff, not tried_b))
        if len(spans) < LINE_MIN:
            return None
        lo, hi = min(s[0] for s in spans), max(s[1] for s in spans)
        on = {lo: 0.0}
        for j in range(lo, hi):  # the step from j to j + 1
            for reach in range(1, hi - lo + 2):
                near = [(d / (top - low), high) for low, top, d, high in spans if j - reach < low <= j < top <= j + 1 + reach]
                if len(near) >= LINE_MIN or reach > hi - lo:
                    break
            on[j + 1] = on[j] + max(0.0, _difference(near) if near else 0.0)
        # arms off the axis: r_off from each difference with an arm on it; a difference whose noise makes r_off too
        # high (the off arm was the tried one) counts at the low quantile, as in `_difference`
        samples: dict[Hashable, list[tuple[float, bool]]] = {}
        for (a, b), window in self._pairs.items():
            pa, pb = x(a), x(b)
            if (pa is None) == (pb is None) or (pa if pb is None else pb) not in on:
                continue
            for diff, tried_b in window:
                if pa is not None:  # b off: r_b = r_a + d, too high when b was tried
                    samples.setdefault(b, []).append((on[pa] + diff, tried_b))
                else:  # a off: r_a = r_b - d, too high when a was tried (d too low)
                    samples.setdefault(a, []).append((on[pb] - diff, not tried_b))
        return on, {arm: _difference(v) for arm, v in samples.items() if len(v) >= LINE_MIN}


def low_quantile(values: Sequence[float]) -> float:
    """The 25th percentile (nearest rank, rounded down) of a non-empty sample: the minimum of up to 4 values."""
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 4]


def _difference(window: Sequence[tuple[float, bool]]) -> float:
    """log s_b - log s_a from a pair's differences d = x + noise, where noise at the tried step makes d too high when b
    was tried, too low when a was: the pooled sample's quantile at (0.25 n_b + 0.75 n_a) / n (the level at which
    a quarter of the b-tried and three quarters of the a-tried ones lie below: the low quantile when only b was
    tried, the high one when only a was, the median when both were as often)."""
    n_b = sum(tried_b for _, tried_b in window)
    q = (0.25 * n_b + 0.75 * (len(window) - n_b)) / len(window)
    return sorted(d for d, _ in window)[round(q * (len(window) - 1))]


def _order(arm: Hashable) -> str:
    """A total order on arm keys (tuples of ints and bools compare; repr keeps any key usable)."""
    return repr(arm)


def _tree(reference: Hashable, median: dict[tuple[Hashable, Hashable], float],
          weight: dict[tuple[Hashable, Hashable], int]) -> tuple[dict[Hashable, float], dict[Hashable, int]]:
    """r per arm connected to `reference` (r_reference = 0) along a maximum spanning tree of the pairs weighted by
    their differences (Prim): each arm is priced through its best-measured pair, so a pair seen once (perhaps a
    spike) never overrides a well-measured path, whatever cycles the pairs form."""
    # arm -> (weight, the pair's order: ties broken the same way from every reference, so the tree is unique and
    # r differences do not depend on which arm ran last; other arm, r_other - r_arm)
    edges: dict[Hashable, list[tuple[int, str, Hashable, float]]] = {}
    for (a, b), d in median.items():
        edges.setdefault(a, []).append((weight[(a, b)], _order((a, b)), b, d))
        edges.setdefault(b, []).append((weight[(a, b)], _order((a, b)), a, -d))
    relative, support = {reference: 0.0}, {}
    while True:
        frontier = [(w, order, other, relative[arm] + d) for arm in relative for w, order, other, d in
                    edges.get(arm, ()) if other not in relative]
        if not frontier:
            return relative, support
        w, _, other, r = max(frontier, key=lambda f: f[:2])
        relative[other], support[other] = r, w
