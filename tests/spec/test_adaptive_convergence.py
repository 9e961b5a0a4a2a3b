"""Adaptive k in a synthetic serving loop: injected step costs and seeded acceptance, no models, no wall clock.

The loop keeps `rows` requests in flight (a finished request is replaced by a new one, whose first step is a prompt
pass), draws each draft's accepted prefix from a per-token acceptance alpha, and charges every step the seconds a
roofline cost model gives (weights read vs token compute, plus draft steps and admissions). The simulated clock is
the sum of those charges. The policy must converge to K = 0 when the target is compute-bound, find speculation
again when load drops, lower K when acceptance drops, and end within 5% of the best fixed k in every regime.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from trtspec.contracts.metrics import expected_tokens_per_step
from trtspec.spec.adaptive import AdaptiveK, KRequest, load_bucket

MAX_K = 8


@dataclass
class Costs:
    """Roofline step costs: a decode step reads the weights once or computes every token, whichever is slower."""

    weights_s: float = 0.020  # one forward's weight reads (memory-bound floor)
    token_s: float = 0.0015  # target compute per token
    draft_step_s: float = 0.002  # one draft-model forward over the batch
    admit_plain_s: float = 0.010  # prompt passes per admitted request, plain step
    admit_spec_s: float = 0.010  # the same when the step speculates (the draft's prompt pass, split batches)

    def decode(self, rows: int, k: int) -> float:
        return max(self.weights_s, self.token_s * rows * (1 + k)) + self.draft_step_s * k


@dataclass
class Loop:
    """A closed loop of requests of `length` output tokens against one policy, on a simulated clock."""

    policy: AdaptiveK
    seed: int = 0
    length: int = 32
    rng: random.Random = field(init=False)  # acceptance draws and request lengths
    spikes: random.Random = field(init=False)  # one draw per step: every run sees the same spikes at the same steps
    next_id: int = 0
    remaining: dict[int, int] = field(default_factory=dict)  # request id -> tokens still to generate
    fresh: set[int] = field(default_factory=set)  # admitted, prompt not yet passed
    seconds: float = 0.0
    tokens: int = 0
    chosen: list[int] = field(default_factory=list)  # the step cap of every step
    speed: Callable[[float], float] = lambda seconds: 1.0  # the machine's slowness at a simulated time (drift)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.spikes = random.Random(self.seed + 1)

    def run(self, rows: int, alpha: float, costs: Costs, steps: int, *, fixed_k: int | None = None,
            spike_p: float = 0.0) -> float:
        """`steps` steps at `rows` in flight; returns tokens / simulated second over them."""
        seconds, tokens = self.seconds, self.tokens
        for _ in range(steps):
            while len(self.remaining) > rows:  # load drops: the newest requests leave
                self.policy.forget(max(self.remaining))
                self.fresh.discard(max(self.remaining))
                del self.remaining[max(self.remaining)]
            while len(self.remaining) < rows:
                # staggered lengths: the loop starts in a steady state, not with one synchronised wave
                self.remaining[self.next_id] = self.length if self.tokens else self.rng.randint(1, self.length)
                self.fresh.add(self.next_id)
                self.next_id += 1
            self.step(alpha, costs, fixed_k, spike_p)
        return (self.tokens - tokens) / (self.seconds - seconds)

    def step(self, alpha: float, costs: Costs, fixed_k: int | None, spike_p: float) -> None:
        ids = sorted(self.remaining)
        batch = [KRequest(i, "draft_target", min(MAX_K if fixed_k is None else fixed_k, self.remaining[i] - 1),
                          fixed_k is None, 64 if i in self.fresh else 1, True) for i in ids]
        ks = self.policy.choose(batch)
        step_k = max(ks)
        admitted = len(self.fresh)
        seconds = costs.decode(len(ids), step_k)
        seconds += admitted * (costs.admit_spec_s if step_k else costs.admit_plain_s)
        seconds *= self.speed(self.seconds)
        if self.spikes.random() < spike_p:  # another process took the CPU
            seconds *= 4
        self.fresh.clear()
        for i, k in zip(ids, ks, strict=True):
            accepted = 0
            while accepted < k and self.rng.random() < alpha:
                accepted += 1
            if k:
                self.policy.observe_draft(i, "draft_target", k, accepted)
            emitted = min(accepted + 1, self.remaining[i])
            self.tokens += emitted
            self.remaining[i] -= emitted
            if not self.remaining[i]:
                del self.remaining[i]
                self.policy.forget(i, self.length)
        self.policy.observe_step(rows=len(ids), width=1 + step_k, target_s=seconds, draft_steps=step_k,
                                 draft_rows=len(ids) if step_k else 0, draft_s=0.0, overhead_s=0.0,
                                 prefill_rows=admitted, max_k=step_k)
        self.seconds += seconds
        self.chosen.append(step_k)


def best_fixed(rows: int, alpha: float, costs: Costs, steps: int = 300) -> tuple[int, float]:
    """(k, tokens/s) of the best fixed k in 0..MAX_K, each measured in its own loop (same seed)."""
    rates = {k: Loop(AdaptiveK()).run(rows, alpha, costs, steps, fixed_k=k) for k in range(MAX_K + 1)}
    k = max(rates, key=rates.__getitem__)
    return k, rates[k]


COMPUTE_BOUND = Costs()  # at 16 rows token compute dominates: K = 0 is best
LOAD_16, LOAD_1 = 16, 1


def test_the_roofline_makes_the_regimes_it_claims():
    assert best_fixed(LOAD_16, 0.8, COMPUTE_BOUND)[0] == 0
    assert best_fixed(LOAD_1, 0.8, COMPUTE_BOUND)[0] >= 3


def test_compute_bound_converges_to_plain_decoding():
    loop = Loop(AdaptiveK())
    loop.run(LOAD_16, 0.8, COMPUTE_BOUND, 48)
    assert loop.policy.settled_k(LOAD_16) == 0, loop.chosen  # within 48 steps from priors that call drafting cheap
    loop.chosen.clear()
    rate = loop.run(LOAD_16, 0.8, COMPUTE_BOUND, 300)
    assert loop.chosen.count(0) >= 0.95 * len(loop.chosen)  # exploration is rare once K = 0 is clearly best
    assert rate >= 0.97 * best_fixed(LOAD_16, 0.8, COMPUTE_BOUND)[1]


def test_load_drop_finds_speculation_again_and_load_rise_backs_off():
    loop = Loop(AdaptiveK())
    loop.run(LOAD_16, 0.8, COMPUTE_BOUND, 200)
    assert loop.policy.settled_k(LOAD_16) == 0
    loop.chosen.clear()
    loop.run(LOAD_1, 0.8, COMPUTE_BOUND, 40)  # never ran at one request: priors, then measurements
    assert loop.policy.settled_k(LOAD_1) >= 2, loop.chosen
    rate = loop.run(LOAD_1, 0.8, COMPUTE_BOUND, 300)
    assert rate >= 0.95 * best_fixed(LOAD_1, 0.8, COMPUTE_BOUND)[1]
    loop.chosen.clear()
    loop.run(LOAD_16, 0.8, COMPUTE_BOUND, 16)  # measured before: back to K = 0 at once
    assert loop.chosen[-8:].count(0) >= 7, loop.chosen


def test_acceptance_drop_lowers_k_and_recovery_raises_it():
    loop = Loop(AdaptiveK())
    loop.run(LOAD_1, 0.9, COMPUTE_BOUND, 200)
    high = loop.policy.settled_k(LOAD_1)
    loop.chosen.clear()
    loop.run(LOAD_1, 0.3, COMPUTE_BOUND, 40)
    low = loop.policy.settled_k(LOAD_1)
    assert high >= 6 and low is not None and low <= 2, (high, loop.chosen)
    assert loop.run(LOAD_1, 0.3, COMPUTE_BOUND, 300) >= 0.95 * best_fixed(LOAD_1, 0.3, COMPUTE_BOUND)[1]
    loop.chosen.clear()
    loop.run(LOAD_1, 0.9, COMPUTE_BOUND, 120)  # the drafts it still makes show that acceptance is back
    assert statistics.median(loop.chosen[-40:]) >= 5, loop.chosen
    assert loop.run(LOAD_1, 0.9, COMPUTE_BOUND, 300) >= 0.95 * best_fixed(LOAD_1, 0.9, COMPUTE_BOUND)[1]


@pytest.mark.parametrize("alpha", [0.3, 0.5, 0.8, 0.95])
@pytest.mark.parametrize("rows", [1, 4, 16])
def test_within_five_percent_of_the_best_fixed_k_with_cpu_spikes(rows, alpha):
    """A shared CPU: 10% of the steps take 4x (the same steps in every run). After 100 steps of learning, adaptive
    k runs within 5% of the best fixed k (each fixed k measured over the same 100 + 400 steps)."""
    def rate(fixed_k: int | None) -> float:
        loop = Loop(AdaptiveK(), seed=1)
        loop.run(rows, alpha, COMPUTE_BOUND, 100, fixed_k=fixed_k, spike_p=0.1)
        return loop.run(rows, alpha, COMPUTE_BOUND, 400, fixed_k=fixed_k, spike_p=0.1)

    assert rate(None) >= 0.95 * max(rate(k) for k in range(MAX_K + 1))


def test_admission_tax_of_speculation_decides_a_close_call():
    """Per decode step K = 1 pays a little at 16 rows, but speculating makes every admission dearer (the draft's
    prompt pass, admissions split over more steps): measured per admitted request, that tax makes K = 0 best."""
    costs = Costs(weights_s=0.020, token_s=0.0011, draft_step_s=0.0, admit_plain_s=0.004, admit_spec_s=0.012)
    rows, alpha = 16, 0.8
    decode_rate = {k: rows * expected_tokens_per_step(alpha, k) / costs.decode(rows, k) for k in (0, 1)}
    assert decode_rate[1] > decode_rate[0]  # per decode step speculation looks better ...
    assert best_fixed(rows, alpha, costs)[0] == 0  # ... but not once admissions are paid
    loop = Loop(AdaptiveK())
    rate = loop.run(rows, alpha, costs, 400)
    assert loop.chosen[-100:].count(0) >= 90
    assert rate >= 0.95 * best_fixed(rows, alpha, costs)[1]


def test_a_step_that_admits_requests_chooses_like_a_decode_step():
    """Prompt passes cost the same whatever K is: they must not make drafting look free."""
    policy = AdaptiveK(explore_every=0)
    Loop(policy).run(LOAD_16, 0.8, COMPUTE_BOUND, 100)
    decode = [KRequest(900 + i, "draft_target", MAX_K, True, 1, True) for i in range(16)]
    admitting = decode[:12] + [KRequest(1000 + i, "draft_target", MAX_K, True, 64, True) for i in range(4)]
    assert policy.choose(admitting) == policy.choose(decode) == [0] * 16


def test_load_buckets_share_costs_between_neighbouring_batch_sizes():
    assert [load_bucket(n) for n in (1, 2, 8)] == [1, 2, 8]
    assert load_bucket(15) == load_bucket(16) == load_bucket(17) == 16
    assert load_bucket(14) != 16 and load_bucket(18) != 16
    assert load_bucket(0) == 1


def test_an_injected_clock_times_the_step_instead_of_the_reported_seconds():
    """A CPU engine times steps with cpu_clock (time-slicing by other processes is not the step's cost); here a
    fake clock: 20 ms from choice to observation, while the engine reported 1 s of wall time."""
    ticks = iter([10.0, 10.02])
    policy = AdaptiveK(clock=lambda: next(ticks))
    batch = [KRequest(0, "draft_target", 4, True, 1, True)]
    k = max(policy.choose(batch))
    policy.observe_step(rows=1, width=1 + k, target_s=1.0, draft_steps=k, draft_rows=1 if k else 0, draft_s=0.0,
                        overhead_s=0.0, prefill_rows=0, max_k=k)
    assert abs(policy.decode_seconds(1, k, True) - 0.02) < 1e-9


def slow_minutes(slowdown: float, period_s: float) -> Callable[[float], float]:
    """A shared machine's speed over (simulated) time: every other `period_s` seconds everything takes `slowdown`
    times longer (another process runs), the same for every policy measured."""
    return lambda seconds: slowdown if int(seconds / period_s) % 2 else 1.0


def test_a_drifting_machine_speed_does_not_lock_in_a_short_draft():
    """The machine is 40% slower every other second. Each arm's cost is a low quantile of its own latest steps, so
    the incumbent's cost follows the speed while an arm explored in the other period keeps that period's cost, and
    the policy leaves the best K (2) for K = 0, 1 or 5 on such stale comparisons. Today: 0.90 of the best fixed k
    (0.99 with a steady speed, same seed). Adaptive k must end within 5% of the best fixed k (each fixed k on the
    same speed profile)."""
    def rate(fixed_k: int | None) -> float:
        loop = Loop(AdaptiveK(), seed=1, speed=slow_minutes(1.4, 1.0))
        loop.run(4, 0.8, COMPUTE_BOUND, 100, fixed_k=fixed_k)
        return loop.run(4, 0.8, COMPUTE_BOUND, 600, fixed_k=fixed_k)

    assert rate(None) >= 0.95 * max(rate(k) for k in range(MAX_K + 1))


def triangle(slowdown: float, period_s: float) -> Callable[[float], float]:
    """The machine slows down linearly to `slowdown` over `period_s` seconds, then speeds up again."""
    return lambda seconds: 1 + (slowdown - 1) * abs((seconds / period_s) % 2 - 1)


@pytest.mark.parametrize("rows", [1, 4, 16])
@pytest.mark.parametrize("period_s", [1.0, 5.0])
@pytest.mark.parametrize("profile", [slow_minutes, triangle], ids=["square", "triangle"])
def test_within_five_percent_under_drift_and_spikes(profile, period_s, rows):
    """Slow drift (40% slower every other period, stepwise or gradually) on top of 10% CPU spikes: adaptive k ends
    within 5% of the best fixed k on the same speed profile and spikes (each arm compared through adjacent steps)."""
    def rate(fixed_k: int | None) -> float:
        loop = Loop(AdaptiveK(), seed=1, speed=profile(1.4, period_s))
        loop.run(rows, 0.8, COMPUTE_BOUND, 100, fixed_k=fixed_k, spike_p=0.1)
        return loop.run(rows, 0.8, COMPUTE_BOUND, 400, fixed_k=fixed_k, spike_p=0.1)

    assert rate(None) >= 0.95 * max(rate(k) for k in range(MAX_K + 1))
