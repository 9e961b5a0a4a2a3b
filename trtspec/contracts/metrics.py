"""AcceptanceStats: what speculation achieved, as data (formatting and export live in the CLI and sweep layers).

Words, defined once here (vLLM's definitions and Prometheus-style names):
- a *draft* is one proposal of k tokens for one sequence; num_draft_tokens sums the k's.
- *accepted*: draft tokens the verifier kept. *recovered*: the token resampled after a rejection. *bonus*: the token
  the target adds when every draft token was accepted. Each target forward therefore emits accepted + 1 tokens.
- mean acceptance length = 1 + num_accepted_tokens / num_drafts (tokens per target forward while drafting).
- acceptance rate = num_accepted_tokens / num_draft_tokens; it falls as k grows even at constant per-token agreement.
- per-position acceptance r_i = num_accepted_tokens_per_pos[i] / num_drafts = P(first i+1 draft tokens accepted).
- conditional acceptance c_i = accepted at i / (accepted at i + rejected at i): P(token i accepted | the first i
  were), from num_accepted_tokens_per_pos and num_rejections_per_pos (every draft that reached position i either
  accepted or rejected its token there); these are the Bernoulli events drift detection tests (trtspec.ops.drift).
- alpha: per-token acceptance probability, maximum-likelihood estimate under i.i.d. acceptance: each verified token
  is a Bernoulli trial until the first rejection, so alpha = accepted / (accepted + rejections). From totals alone
  (no rejections counted: TensorRT-LLM's iteration statistics), the alpha whose E(k) matches the accepted tokens per
  draft (`alpha_from_totals`): a model, labelled estimated wherever it is shown.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

# The Prometheus series every server exports from these stats are named once in trtspec/contracts/series.py.


@dataclass
class AcceptanceStats:
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_accepted_tokens_per_pos: list[int] = field(default_factory=list)  # [max k seen]
    accepted_length_histogram: list[int] = field(default_factory=list)  # [max k seen + 1], index = accepted count
    num_rejections: int = 0  # drafts that ended with a rejection (not all tokens accepted)
    num_rejections_per_pos: list[int] = field(default_factory=list)  # [max k seen], index = the rejected position
    num_target_forwards: int = 0
    num_emitted_tokens: int = 0
    draft_time_s: float = 0.0
    target_time_s: float = 0.0
    overhead_time_s: float = 0.0
    wall_time_s: float = 0.0
    # hybrid methods (methods/hybrid.py): verified drafts taken from the suffix tree, and from the model drafter
    num_hybrid_suffix_drafts: int = 0
    num_hybrid_model_drafts: int = 0

    def observe(self, num_draft_tokens: int, num_accepted_tokens: int) -> None:
        """Record one verified draft (call only when num_draft_tokens > 0)."""
        if not 0 <= num_accepted_tokens <= num_draft_tokens:
            raise ValueError(f"accepted {num_accepted_tokens} of {num_draft_tokens} draft tokens")
        self.num_drafts += 1
        self.num_draft_tokens += num_draft_tokens
        self.num_accepted_tokens += num_accepted_tokens
        self.num_rejections += int(num_accepted_tokens < num_draft_tokens)
        _grow(self.num_rejections_per_pos, num_draft_tokens)
        if num_accepted_tokens < num_draft_tokens:
            self.num_rejections_per_pos[num_accepted_tokens] += 1
        _grow(self.num_accepted_tokens_per_pos, num_draft_tokens)
        for pos in range(num_accepted_tokens):
            self.num_accepted_tokens_per_pos[pos] += 1
        _grow(self.accepted_length_histogram, num_draft_tokens + 1)
        self.accepted_length_histogram[num_accepted_tokens] += 1

    def merge(self, other: AcceptanceStats) -> AcceptanceStats:
        """Add `other` into self (counts, lists elementwise, times) and return self."""
        for f in fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if isinstance(mine, list):
                _grow(mine, len(theirs))
                for i, value in enumerate(theirs):
                    mine[i] += value
            else:
                setattr(self, f.name, mine + theirs)
        return self

    # derived -------------------------------------------------------------------------------------------------
    @property
    def mean_acceptance_length(self) -> float:
        return mean_acceptance_length(self.num_drafts, self.num_accepted_tokens)

    @property
    def acceptance_rate(self) -> float:
        return acceptance_rate(self.num_draft_tokens, self.num_accepted_tokens)

    @property
    def acceptance_rate_per_pos(self) -> list[float]:
        return [n / self.num_drafts for n in self.num_accepted_tokens_per_pos] if self.num_drafts else []

    @property
    def conditional_acceptance_per_pos(self) -> list[float]:
        return conditional_acceptance(self.num_accepted_tokens_per_pos, self.num_rejections_per_pos)

    @property
    def alpha(self) -> float:
        trials = self.num_accepted_tokens + self.num_rejections
        return self.num_accepted_tokens / trials if trials else 0.0

    @property
    def tokens_per_target_forward(self) -> float:
        return self.num_emitted_tokens / self.num_target_forwards if self.num_target_forwards else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.num_emitted_tokens / self.wall_time_s if self.wall_time_s > 0 else 0.0

    @property
    def overhead_share(self) -> float:
        """Host overhead (neither draft nor target compute) as a share of draft + target + overhead time."""
        total = self.draft_time_s + self.target_time_s + self.overhead_time_s
        return self.overhead_time_s / total if total > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        """Fields plus derived values, JSON-ready."""
        out = asdict(self)
        for name in ("mean_acceptance_length", "acceptance_rate", "acceptance_rate_per_pos",
                     "conditional_acceptance_per_pos", "alpha",
                     "tokens_per_target_forward", "tokens_per_s", "overhead_share"):
            out[name] = getattr(self, name)
        return out


def mean_acceptance_length(num_drafts: float, num_accepted_tokens: float) -> float:
    """1 + num_accepted_tokens / num_drafts: tokens per target forward while drafting (1.0 when nothing was drafted).

    The one definition, for counters from anywhere (the engine, a server's perf metrics, Prometheus series).
    """
    return 1.0 + num_accepted_tokens / num_drafts if num_drafts else 1.0


def acceptance_rate(num_draft_tokens: float, num_accepted_tokens: float) -> float:
    """num_accepted_tokens / num_draft_tokens (0.0 when nothing was drafted)."""
    return num_accepted_tokens / num_draft_tokens if num_draft_tokens else 0.0


def conditional_acceptance(accepted_per_pos: list[int] | list[float],
                           rejections_per_pos: list[int] | list[float]) -> list[float]:
    """c_i = accepted_i / (accepted_i + rejected_i) per position (0.0 where no draft reached it)."""
    size = max(len(accepted_per_pos), len(rejections_per_pos))
    padded = [(list(accepted_per_pos) + [0] * size)[:size], (list(rejections_per_pos) + [0] * size)[:size]]
    return [a / (a + r) if a + r else 0.0 for a, r in zip(*padded, strict=True)]


def expected_tokens_per_step(alpha: float, k: int) -> float:
    """E(k) = (1 - alpha^(k+1)) / (1 - alpha): tokens per target forward with k draft tokens at a constant per-token
    acceptance alpha (Leviathan et al.; k + 1 when alpha = 1, 1 when k = 0)."""
    if k <= 0:
        return 1.0
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def draft_length(num_draft_tokens: float, num_drafts: float) -> int:
    """The draft length that totals stand for: draft tokens per draft, rounded, at least 1 (the served k of a source
    that publishes totals; TensorRT-LLM counts each request's draft budget, so its rows give max_draft_len)."""
    return max(1, round(num_draft_tokens / num_drafts)) if num_drafts > 0 else 1


def alpha_from_totals(num_drafts: float, num_draft_tokens: float, num_accepted_tokens: float) -> float:
    """The constant per-token acceptance alpha that explains totals alone (a source without per-position counts, e.g.
    TensorRT-LLM's iteration statistics): the alpha whose E(k) - 1 = alpha + ... + alpha^k equals the accepted tokens
    per draft, at k = the drafts' mean length rounded (at least 1). Solved by bisection to 1e-9; 0 without drafts."""
    if num_drafts <= 0 or num_draft_tokens <= 0:
        return 0.0
    k = draft_length(num_draft_tokens, num_drafts)
    target = min(num_accepted_tokens / num_drafts, float(k))
    lo, hi = 0.0, 1.0
    while hi - lo > 1e-9:
        mid = (lo + hi) / 2
        if expected_tokens_per_step(mid, k) - 1.0 < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _grow(values: list[int], size: int) -> None:
    values.extend([0] * (size - len(values)))
