"""The cost model: predicted speedup of speculation from measured acceptance and measured (or projected) step costs.

One speculative step with draft length k emits E(k) tokens per sequence on average and costs
    k * T_draft(b) + T_target(b, k + 1) + overhead_spec
where T_target(b, n) is one target forward over n tokens per sequence at batch size b and T_draft(b) one draft
forward of a single token per sequence. Plain decoding emits 1 token per step at T_target(b, 1) + overhead_base. So
    predicted speedup = E(k) * (T_target(b, 1) + overhead_base) / (k * T_draft(b) + T_target(b, k + 1) + overhead_spec)
E(k) = 1 + sum_i r_i with r_i the measured per-position acceptance P(first i draft tokens accepted); with a constant
per-token acceptance alpha this is the geometric (1 - alpha^(k+1)) / (1 - alpha) (Leviathan et al.).
k = 0 always predicts exactly 1.0, so the optimal k can be 0 (do not speculate), which is the answer at large batch
sizes where T_target(b, k + 1) grows with k.

A measured run is priced step by step (sweep/analysis.py): its ordinary steps with `step_seconds` at their average
batch, each step that admitted requests with `admission_seconds` (the admitted rows' prompt passes, stretched to the
longest admitted prompt, beside the running rows' own step). Host time per step outside the forwards is calibrated
too: overhead_s + overhead_token_s * (draft tokens per row), and a model-free proposer's time per step (`StepCosts`).

The GPU projection replaces measured costs with a roofline: one forward over n tokens at batch b takes
max(weight_bytes / bandwidth, 2 * params * b * n / peak_flops). It is always labelled a projection.
Pure Python (no torch, no numpy), so the report can run anywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from trtspec.contracts.metrics import expected_tokens_per_step as geometric_tokens_per_step

PROJECTION_LABEL = "projection (roofline from model size and datasheet bandwidth/FLOPs; not measured)"


@dataclass(frozen=True)
class StepCosts:
    """Measured forward costs of one model set at one batch size (seconds per forward)."""

    batch_size: int
    target_s: Mapping[int, float]  # tokens per sequence in the forward (1..max_k + 1) -> seconds
    draft_s: float = 0.0  # one single-token draft forward; 0 for proposers without a model (ngram)
    target_prefill_s: float = 0.0  # one target forward over the prompt (mean prompt length)
    draft_prefill_s: float = 0.0  # the same for the draft model
    draft_tokens_s: Mapping[int, float] | None = None  # draft forward over n tokens per sequence, when measured
    prefill_tokens: float = 0.0  # the prompt length the prefill costs were measured at (0: unknown)
    overhead_s: float | None = None  # host time per step of plain decoding, outside the forwards (None: not calibrated)
    overhead_token_s: float = 0.0  # the extra host time per step per draft token of a row (verification, bookkeeping)
    proposer_s: Mapping[str, float] | None = None  # a model-free proposer's time per step, per method

    def host(self, draft_tokens: float) -> float | None:
        """Calibrated host time of one step whose rows carry `draft_tokens` draft tokens each on average:
        overhead_s + overhead_token_s * draft_tokens (None when the calibration did not measure it)."""
        return None if self.overhead_s is None else self.overhead_s + self.overhead_token_s * draft_tokens

    def draft(self, num_tokens: float) -> float:
        """T_draft(b, n): the draft's first forward of a step feeds the tokens committed since its last proposal."""
        if not self.draft_tokens_s:
            return self.draft_s
        return StepCosts(self.batch_size, self.draft_tokens_s).target(num_tokens)

    def target(self, num_tokens: float) -> float:
        """T_target(b, n); for an n that was not measured (or fractional), interpolate between the nearest measured."""
        if num_tokens in self.target_s:
            return self.target_s[num_tokens]
        known = sorted(self.target_s)
        lo = max((n for n in known if n < num_tokens), default=known[0])
        hi = min((n for n in known if n > num_tokens), default=known[-1])
        if lo == hi:
            return self.target_s[lo]
        w = (num_tokens - lo) / (hi - lo)
        return self.target_s[lo] * (1 - w) + self.target_s[hi] * w


@dataclass(frozen=True)
class Prediction:
    """A predicted speedup and the terms it came from (seconds per step, tokens per step)."""

    k: int
    batch_size: int
    tokens_per_step: float
    baseline_step_s: float
    spec_step_s: float
    draft_step_s: float
    target_step_s: float
    overhead_step_s: float
    label: str = "predicted from measured costs"

    @property
    def speedup(self) -> float:
        return self.tokens_per_step * self.baseline_step_s / self.spec_step_s

    @property
    def tokens_per_s(self) -> float:
        """Output tokens per second across the batch."""
        return self.batch_size * self.tokens_per_step / self.spec_step_s

    def with_prefill(self, new_tokens: int, prefill_base_s: float, prefill_spec_s: float, *,
                     admissions_base: float | None = None, admissions_spec: float | None = None) -> float:
        """Speedup of whole requests of `new_tokens` output tokens, prompt processing included.

        A step that admits requests runs their prompt pass (the batch is padded to it). Per c requests in flight,
        plain = a_0 * P_base + N * S_0 and speculative = a_k * P_spec + (N / E) * S_k, where P_spec adds the draft
        model's own prompt pass and a = admission steps per c requests (between 1, when a whole batch is admitted
        together, and c; default c). Short generations amortise the prompt less, so speedups shrink.
        """
        c = self.batch_size
        a_base = c if admissions_base is None else admissions_base
        a_spec = c if admissions_spec is None else admissions_spec
        plain = a_base * prefill_base_s + new_tokens * self.baseline_step_s
        spec = a_spec * prefill_spec_s + new_tokens / self.tokens_per_step * self.spec_step_s
        return plain / spec


def blend(lo: StepCosts, hi: StepCosts, weight: float) -> StepCosts:
    """Linear interpolation between the costs at two batch sizes (weight 0 = lo, 1 = hi)."""
    def mix(a: float, b: float) -> float:
        return a * (1 - weight) + b * weight

    batch = round(mix(lo.batch_size, hi.batch_size))
    target = {n: mix(lo.target(n), hi.target(n)) for n in sorted(set(lo.target_s) | set(hi.target_s))}
    draft_tokens = ({n: mix(lo.draft(n), hi.draft(n)) for n in sorted(lo.draft_tokens_s)}
                    if lo.draft_tokens_s and hi.draft_tokens_s else None)
    overhead = mix(lo.overhead_s, hi.overhead_s) if lo.overhead_s is not None and hi.overhead_s is not None else None
    proposer = ({m: mix(lo.proposer_s[m], hi.proposer_s[m]) for m in lo.proposer_s if m in hi.proposer_s}
                if lo.proposer_s and hi.proposer_s else None)
    return StepCosts(batch, target, mix(lo.draft_s, hi.draft_s), mix(lo.target_prefill_s, hi.target_prefill_s),
                     mix(lo.draft_prefill_s, hi.draft_prefill_s), draft_tokens, mix(lo.prefill_tokens, hi.prefill_tokens),
                     overhead, mix(lo.overhead_token_s, hi.overhead_token_s), proposer)


def step_seconds(costs: StepCosts, *, draft_len: float, draft_share: float, overhead_s: float,
                 draft_step_s: float | None = None, catch_up_tokens: float = 1.0) -> float:
    """Modelled seconds of one engine step at the batch size of `costs`.

    Args:
        draft_len: mean draft tokens per drafting sequence (0 for plain decoding).
        draft_share: probability that the step's padded batch contains a draft, 1 - (1 - f)^b for a per-sequence
            drafting frequency f; otherwise the step is a plain one-token forward.
        overhead_s: host time per step outside the forwards.
        draft_step_s: proposer time per step when it is not draft-model forwards (n-gram); default
            draft_share * (T_draft(b, catch_up_tokens) + (draft_len - 1) * T_draft(b, 1)).
        catch_up_tokens: tokens the draft model's first forward of a step feeds (those committed last step).
    """
    target = draft_share * costs.target(draft_len + 1) + (1 - draft_share) * costs.target(1)
    if draft_step_s is None:
        first = costs.draft(catch_up_tokens) if draft_len else 0.0
        draft = draft_share * (first + max(draft_len - 1, 0) * costs.draft(1))
    else:
        draft = draft_step_s
    return target + draft + overhead_s


def admission_seconds(costs_at: Callable[[float], StepCosts], *, rows: int, admitted: int, prompt_tokens: float,
                      draft_len: float, draft_model: bool, overhead_s: float, draft_step_s: float | None = None,
                      catch_up_tokens: float = 1.0) -> float:
    """Modelled seconds of an engine step that admits `admitted` of its `rows` requests (their prompt pass).

    The engine runs the admitted rows' prompts (plus their first draft) and the running rows' ordinary step as
    separate forwards (spec/model.py `forward_grouped`), so with a = admitted, r = rows, d = draft_len, W = the
    longest admitted prompt and L = the prompt length the prefill costs were calibrated at:
        target = P_target(a) * (W + d) / L + [r > a] * T_target(r - a, d + 1)
        draft  = P_draft(a) * W / L + [r > a] * T_draft(r - a, c) + (d - 1) * T_draft(r, 1)   (draft model, d >= 1)
               = draft_step_s                                                                  (model-free proposer)
        step   = target + draft + overhead_s
    where P(a) is the calibrated prompt pass of a sequences and c = catch_up_tokens. Plain decoding is d = 0: the
    prompt pass and the running rows' one-token forward.
    """
    new = costs_at(admitted)

    def stretch(tokens: float) -> float:  # a prompt pass costs in proportion to its tokens (1 when L is unknown)
        return tokens / new.prefill_tokens if new.prefill_tokens else 1.0

    target = new.target_prefill_s * stretch(prompt_tokens + draft_len)
    rest = costs_at(rows - admitted) if rows > admitted else None
    if rest is not None:
        target += rest.target(draft_len + 1)
    if draft_step_s is not None:
        draft = draft_step_s
    elif draft_model and draft_len:
        draft = new.draft_prefill_s * stretch(prompt_tokens)
        draft += rest.draft(catch_up_tokens) if rest is not None else 0.0
        draft += max(draft_len - 1, 0) * costs_at(rows).draft(1)
    else:
        draft = 0.0
    return target + draft + overhead_s


def expected_tokens_per_step(per_pos: Sequence[float], k: int | None = None) -> float:
    """E(k) = 1 + sum of the first k unconditional per-position acceptance rates (bonus/recovered token included)."""
    rates = list(per_pos) if k is None else list(per_pos)[:k]
    return 1.0 + sum(rates)


def fit_alpha(tokens_per_step: float, k: int) -> float:
    """The alpha whose geometric E(k) equals a measured mean acceptance length (bisection; 0 <= alpha <= 1)."""
    if k <= 0 or tokens_per_step <= 1.0:
        return 0.0
    if tokens_per_step >= k + 1:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if geometric_tokens_per_step(mid, k) < tokens_per_step:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def predict(k: int, tokens_per_step: float, costs: StepCosts, *, overhead_base_s: float = 0.0,
            overhead_spec_s: float = 0.0, draft_step_s: float | None = None) -> Prediction:
    """Predicted speedup of draft length k at the batch size of `costs`.

    Args:
        k: draft length; 0 returns the baseline itself (speedup 1).
        tokens_per_step: E(k), tokens emitted per sequence per target forward.
        costs: measured forward costs at this batch size.
        overhead_base_s / overhead_spec_s: host time per step outside the forwards (sampling, verification,
            bookkeeping) of plain decoding and of speculation.
        draft_step_s: proposer time per step when it is not k draft forwards (e.g. n-gram lookup); default k * T_draft.
    """
    baseline = costs.target(1) + overhead_base_s
    if k == 0:
        return Prediction(0, costs.batch_size, 1.0, baseline, baseline, 0.0, costs.target(1), overhead_base_s)
    draft = k * costs.draft_s if draft_step_s is None else draft_step_s
    target = costs.target(k + 1)
    return Prediction(k, costs.batch_size, tokens_per_step, baseline, draft + target + overhead_spec_s, draft, target,
                      overhead_spec_s)


def optimal_k(tokens_per_step_by_k: Mapping[int, float], costs: StepCosts, *, overhead_base_s: float = 0.0,
              overhead_spec_s: Mapping[int, float] | float = 0.0,
              draft_step_s: Mapping[int, float] | None = None) -> Prediction:
    """The prediction with the highest speedup over the given k values; k = 0 (speedup 1) is always a candidate.

    `overhead_spec_s` and `draft_step_s` may be given per k (measured per case) or, for the overhead, as one value.
    """
    best = predict(0, 1.0, costs, overhead_base_s=overhead_base_s)
    for k, tps in sorted(tokens_per_step_by_k.items()):
        if k <= 0:
            continue
        overhead = overhead_spec_s.get(k, 0.0) if isinstance(overhead_spec_s, Mapping) else overhead_spec_s
        cand = predict(k, tps, costs, overhead_base_s=overhead_base_s, overhead_spec_s=overhead,
                       draft_step_s=None if draft_step_s is None else draft_step_s.get(k))
        if cand.speedup > best.speedup:
            best = cand
    return best


def cost_per_million_tokens(tokens_per_s: float, price_per_hour: float) -> float:
    """Dollars per 1M output tokens at a throughput (all sequences of the batch) and a $/device-hour price."""
    if tokens_per_s <= 0:
        return float("inf")
    return price_per_hour / (tokens_per_s * 3600.0) * 1e6


# ---------------------------------------------------------------------------------------------------------------
# Projection to a named GPU (roofline)


@dataclass(frozen=True)
class GpuSpec:
    """Datasheet numbers: HBM bandwidth (bytes/s) and dense BF16 tensor-core peak (FLOP/s)."""

    name: str
    bandwidth: float
    peak_flops: float
    source: str = ""


GPUS: dict[str, GpuSpec] = {
    # NVIDIA H100 / H200 SXM datasheets: 3.35 / 4.8 TB/s HBM3/HBM3e; 989 TFLOPS dense BF16 (1,979 with sparsity).
    "H100": GpuSpec("H100 SXM", 3.35e12, 989e12, "NVIDIA H100 datasheet"),
    "H200": GpuSpec("H200 SXM", 4.8e12, 989e12, "NVIDIA H200 datasheet"),
}


@dataclass(frozen=True)
class ModelSize:
    name: str
    params: int
    bytes_per_param: float = 2.0  # fp16/bf16 weights on the GPU

    @property
    def weight_bytes(self) -> float:
        return self.params * self.bytes_per_param


def llama_params(config: Mapping[str, object]) -> int:
    """Parameter count of a Llama-family HF config (embeddings, attention with GQA, SwiGLU MLP, norms, LM head)."""
    h = int(config["hidden_size"])  # type: ignore[arg-type]
    vocab = int(config["vocab_size"])  # type: ignore[arg-type]
    layers = int(config["num_hidden_layers"])  # type: ignore[arg-type]
    heads = int(config["num_attention_heads"])  # type: ignore[arg-type]
    kv_heads = int(config.get("num_key_value_heads") or heads)  # type: ignore[arg-type]
    ffn = int(config["intermediate_size"])  # type: ignore[arg-type]
    head_dim = int(config.get("head_dim") or h // heads)  # type: ignore[arg-type]
    attn = h * heads * head_dim * 2 + h * kv_heads * head_dim * 2
    per_layer = attn + 3 * h * ffn + 2 * h
    lm_head = 0 if config.get("tie_word_embeddings") else vocab * h
    return vocab * h + layers * per_layer + h + lm_head


def projected_forward_s(model: ModelSize, gpu: GpuSpec, *, batch: int, num_tokens: int) -> float:
    """Roofline time of one forward over `num_tokens` tokens for each of `batch` sequences."""
    memory = model.weight_bytes / gpu.bandwidth
    compute = 2.0 * model.params * batch * num_tokens / gpu.peak_flops
    return max(memory, compute)


@dataclass(frozen=True)
class Projection:
    gpu: str
    batch_size: int
    k: int
    speedup: float
    tokens_per_s: float
    label: str = field(default=PROJECTION_LABEL)


def project(gpu_name: str, target: ModelSize, draft: ModelSize | None, tokens_per_step_by_k: Mapping[int, float],
            batch_sizes: Sequence[int]) -> list[Projection]:
    """Projected speedup and throughput per (batch size, k) on a named GPU; draft None = model-free proposer."""
    gpu = GPUS[gpu_name]
    out: list[Projection] = []
    for b in batch_sizes:
        costs = StepCosts(b, {n: projected_forward_s(target, gpu, batch=b, num_tokens=n)
                              for n in range(1, max(tokens_per_step_by_k, default=0) + 2)},
                          projected_forward_s(draft, gpu, batch=b, num_tokens=1) if draft else 0.0)
        for k, tps in sorted({0: 1.0, **tokens_per_step_by_k}.items()):
            pred = predict(k, tps, costs)
            out.append(Projection(gpu.name, b, k, pred.speedup, pred.tokens_per_s))
    return out
