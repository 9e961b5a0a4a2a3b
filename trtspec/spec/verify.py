"""The chain verifier: one call verifies every chain draft of a step, turning target probabilities into accepted
tokens plus one recovered/bonus token per request.

Words (defined in metrics.py): *accepted* draft tokens are kept; after the first rejection the target emits a
*recovered* token; when every draft token is accepted it emits a *bonus* token. So a verdict always emits
num_accepted + 1 tokens, and one target forward over (last token + k draft tokens) is enough.

- rejection sampling (Leviathan et al. 2023, Algorithm 1; Chen et al. 2023): with p = target and q = draft,
  accept draft token x with probability min(1, p(x) / q(x)); on rejection sample from norm(max(0, p - q)).
  The output is distributed exactly as p.
- one-hot drafts (n-gram, lookahead: no draft probabilities): q is a point mass on x, so the same rule accepts with
  probability p(x) and resamples from p with x removed.
- greedy is the same rule on a one-hot target (the argmax) with every uniform 0: accept iff x is the argmax, then
  emit the argmax. No randomness is drawn for a greedy request.

The batch is ragged, in vLLM v1's rejection-sampler shape (vllm/v1/sample/rejection_sampler.py): the drafts of all
requests flattened request after request (`draft_token_ids` [total_draft], `cu_num_draft_tokens` their cumulative
counts) and the target rows likewise ([total_draft + batch, vocab]: request i's k_i + 1 rows, the last one its bonus
row). Randomness stays per request: each sampling request draws its k_i + 1 uniforms from its own generator
(`draw_uniforms`), laid out like the target rows; verification itself is one vectorised pass over the batch.
Tree drafts go through tree.py. This module never knows which proposer made a draft.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from trtspec.spec.sampling import row_argmax, rows_to_probs, sample_inverse_cdf


@dataclass(frozen=True)
class Verdict:
    """The outcome of verifying one request's draft."""

    token_ids: list[int]  # [num_accepted + 1] accepted draft tokens, then the recovered or bonus token
    num_accepted: int  # accepted draft tokens (excludes the recovered/bonus token)
    num_draft_tokens: int  # draft tokens that were verified

    @property
    def accepted_all(self) -> bool:
        return self.num_accepted == self.num_draft_tokens

    @property
    def accepted_offsets(self) -> list[int]:
        """Draft indices of the accepted tokens (a chain keeps a prefix; tree verdicts pick a root path)."""
        return list(range(self.num_accepted))


def cu_num_draft_tokens(num_draft_tokens: Sequence[int]) -> list[int]:
    """[batch] inclusive cumulative draft counts (vLLM's `cu_num_draft_tokens`): request i's drafts are
    draft_token_ids[cu[i] - k_i : cu[i]] and its target rows target[cu[i] - k_i + i : cu[i] + i + 1].

    Args:
        num_draft_tokens: [batch] k_i per request (0 allowed: the request samples one token from the target).
    """
    return list(itertools.accumulate(num_draft_tokens))


def draw_uniforms(num_draft_tokens: Sequence[int], generators: Sequence[torch.Generator | None],
                  greedy: Sequence[bool], device: torch.device | str = "cpu") -> Tensor:
    """[total_draft + batch] float32: request i's k_i acceptance uniforms then its next-token uniform, laid out like
    its target rows, each drawn from the request's own generator; zeros for greedy requests (nothing is drawn).

    The draws of a request depend only on its generator and k_i, never on the rest of the batch.
    """
    uniforms = torch.zeros(sum(num_draft_tokens) + len(num_draft_tokens), device=device)  # [total_draft + batch]
    start = 0
    for k, generator, is_greedy in zip(num_draft_tokens, generators, greedy, strict=True):
        if not is_greedy:
            uniforms[start : start + k + 1] = torch.rand(k + 1, generator=generator, device=device)  # [k + 1]
        start += k + 1
    return uniforms


def one_hot_draft_probs(draft_token_ids: Tensor, draft_probs: Sequence[Tensor | None], num_draft_tokens: Sequence[int],
                        vocab: int) -> Tensor | None:
    """[total_draft, vocab] draft distributions of a ragged batch, one-hot rows for requests without them (n-gram,
    lookahead); None when no request has any (every draft one-hot: the verifier needs no rows then).

    Args:
        draft_token_ids: [total_draft]; draft_probs: [batch] x ([k_i, vocab] or None); num_draft_tokens: [batch].
    """
    if all(probs is None for probs in draft_probs) or not sum(num_draft_tokens):
        return None
    parts, start = [], 0
    for k, probs in zip(num_draft_tokens, draft_probs, strict=True):
        if probs is None:
            probs = torch.zeros(k, vocab, device=draft_token_ids.device).scatter_(
                1, draft_token_ids[start : start + k, None], 1.0)  # [k, vocab]
        parts.append(probs.float())
        start += k
    return torch.cat(parts)


def greedy_verify(target_argmax: Tensor, draft_token_ids: Tensor, num_draft_tokens: Sequence[int]) -> list[Verdict]:
    """Greedy verification of a ragged batch of chains: the longest draft prefix equal to the target's argmax, then
    the target's argmax (`rejection_verify` on one-hot targets with zero uniforms, without its vocabulary-wide work).

    Args:
        target_argmax: [total_draft + batch] int64 argmax of each target row (laid out as in `rejection_verify`).
        draft_token_ids: [total_draft] int64; num_draft_tokens: [batch].
    """
    rows = _target_rows(num_draft_tokens, draft_token_ids.device)  # [total_draft]
    matches = (draft_token_ids == target_argmax[rows]).tolist()  # [total_draft]
    argmax = target_argmax.tolist()  # [total_draft + batch]
    accepted = _accepted_prefixes(matches, num_draft_tokens)
    return _verdicts(draft_token_ids.tolist(), num_draft_tokens, accepted,
                     [argmax[start + i + n] for i, (start, n) in enumerate(zip(_starts(num_draft_tokens), accepted,
                                                                                    strict=True))])


def rejection_verify(target_probs: Tensor, draft_probs: Tensor | None, draft_token_ids: Tensor,
                     num_draft_tokens: Sequence[int], uniforms: Tensor) -> list[Verdict]:
    """Exact speculative sampling over a ragged batch of chains (Leviathan et al. Alg. 1; p = target, q = draft).

    Args:
        target_probs: [total_draft + batch, vocab]; request i's rows: one per draft position, then the bonus row.
            A greedy request's rows are one-hot on the argmax (sampling.rows_to_probs).
        draft_probs: [total_draft, vocab] the distributions the draft tokens were sampled from (one-hot rows for
            drafts without any: `one_hot_draft_probs`), or None: every draft is one-hot.
        draft_token_ids: [total_draft] int64, request after request.
        num_draft_tokens: [batch] k_i.
        uniforms: [total_draft + batch] in [0, 1), laid out like target_probs (`draw_uniforms`).
    """
    device = target_probs.device
    total, batch = draft_token_ids.numel(), len(num_draft_tokens)
    rows = _target_rows(num_draft_tokens, device)  # [total_draft] the target row of each draft token
    target_at_draft = target_probs[rows, draft_token_ids]  # [total_draft]
    draft_at_draft = (torch.ones_like(target_at_draft) if draft_probs is None
                      else draft_probs[torch.arange(total, device=device), draft_token_ids])  # [total_draft]
    accepted = _accepted_prefixes(accepts(uniforms[rows], target_at_draft, draft_at_draft).tolist(), num_draft_tokens)

    # the token after the accepted prefix: recovered ~ norm(max(0, p - q)) at the rejected position, or bonus ~ p
    starts = _starts(num_draft_tokens)
    next_row = torch.tensor([s + i + n for i, (s, n) in enumerate(zip(starts, accepted, strict=True))], device=device)
    rejected = [i for i, (k, n) in enumerate(zip(num_draft_tokens, accepted, strict=True)) if n < k]
    rejected_draft = [starts[i] + accepted[i] for i in rejected]  # flat index of each rejected draft token
    next_draft = target_probs.new_zeros(batch, target_probs.shape[-1])  # [batch, vocab] q at the rejection, else 0
    if rejected:
        flat = torch.tensor(rejected_draft, device=device)  # [rejected]
        if draft_probs is None:
            next_draft[torch.tensor(rejected, device=device), draft_token_ids[flat]] = 1.0  # one-hot q
        else:
            next_draft[torch.tensor(rejected, device=device)] = draft_probs.index_select(0, flat)
    next_probs = residual_probs(target_probs.index_select(0, next_row), next_draft)  # [batch, vocab]
    bonus_uniforms = uniforms[torch.tensor([s + i + k for i, (s, k) in enumerate(zip(starts, num_draft_tokens,
                                                                                     strict=True))], device=device)]
    next_token = sample_inverse_cdf(next_probs, bonus_uniforms).tolist()  # [batch]
    return _verdicts(draft_token_ids.tolist(), num_draft_tokens, accepted, next_token)


def accepts(uniform: Tensor, target_at_draft: Tensor, draft_at_draft: Tensor) -> Tensor:
    """Accept draft token x iff u < p(x) / q(x), i.e. with probability min(1, p(x) / q(x)); written without the
    division (q(x) > 0 for a sampled x). All arguments and the result: [total_draft]."""
    return uniform * draft_at_draft < target_at_draft


def residual_probs(target_probs: Tensor, draft_probs: Tensor) -> Tensor:
    """norm(max(0, p - q)): the distribution of the recovered token (p itself when q = 0).

    Args:
        target_probs, draft_probs: [batch, vocab].
    Returns:
        [batch, vocab]. Not in Algorithm 1 but needed in floating point: when p - q has no positive mass (p == q
        up to rounding, so rejection had probability ~0) we fall back to p.
    """
    residual = (target_probs - draft_probs).clamp_min(0)  # [batch, vocab]
    mass = residual.sum(-1, keepdim=True)  # [batch, 1]
    return torch.where(mass > 0, residual / mass.clamp_min(torch.finfo(mass.dtype).tiny), target_probs)


def verify_chains(target_scores: Tensor, draft_token_ids: Sequence[Tensor], draft_probs: Sequence[Tensor | None], *,
                  greedy: Sequence[bool], top_k: Sequence[int], top_p: Sequence[float],
                  generators: Sequence[torch.Generator | None]) -> list[Verdict]:
    """Verify the chain drafts of a batch of requests in one pass (the engine's entry point for chains).

    Args:
        target_scores: [total_draft + batch, vocab] each request's processed target logits (temperature and logits
            processors applied) after its last committed token and after each of its draft tokens.
        draft_token_ids: [batch] x [k_i] int64 (k_i may be 0: then the request samples one token from the target).
        draft_probs: [batch] x ([k_i, vocab], or None for one-hot drafts: n-gram, lookahead).
        greedy: [batch] temperature 0 (or top_k 1); no randomness is drawn for these.
        top_k, top_p: [batch] each request's filters (sampling.rows_to_probs).
        generators: [batch] each request's generator.
    """
    device = target_scores.device
    ks = [int(ids.numel()) for ids in draft_token_ids]
    flat_ids = torch.cat([torch.zeros(0, dtype=torch.long, device=device),
                          *(ids.to(device) for ids in draft_token_ids)])  # [total_draft]
    if all(greedy):
        return greedy_verify(row_argmax(target_scores), flat_ids, ks)

    def per_row(values: Sequence, dtype: torch.dtype) -> Tensor:  # [rows] a request's value on each of its rows
        return torch.tensor([v for v, k in zip(values, ks, strict=True) for _ in range(k + 1)], dtype=dtype)

    target_probs = rows_to_probs(target_scores, greedy=per_row(greedy, torch.bool), top_k=per_row(top_k, torch.long),
                                 top_p=per_row(top_p, torch.float32))  # [total_draft + batch, vocab]
    probs = one_hot_draft_probs(flat_ids, draft_probs, ks, target_scores.shape[-1])  # [total_draft, vocab] or None
    return rejection_verify(target_probs, probs, flat_ids, ks, draw_uniforms(ks, generators, greedy, device))


def _starts(num_draft_tokens: Sequence[int]) -> list[int]:
    """[batch] each request's first flat draft index (its first target row is that + its index in the batch)."""
    return [0, *itertools.accumulate(num_draft_tokens)][:-1]


def _target_rows(num_draft_tokens: Sequence[int], device: torch.device) -> Tensor:
    """[total_draft] int64 the target row that scores each draft token: draft j of request i -> its row j."""
    return torch.tensor([start + i + j for i, (start, k) in enumerate(zip(_starts(num_draft_tokens), num_draft_tokens,
                                                                          strict=True)) for j in range(k)],
                        dtype=torch.long, device=device)


def _accepted_prefixes(accepted: list[bool], num_draft_tokens: Sequence[int]) -> list[int]:
    """[batch] the length of each request's accepted prefix, from the per-token accept tests [total_draft]."""
    out, start = [], 0
    for k in num_draft_tokens:
        n = 0
        while n < k and accepted[start + n]:
            n += 1
        out.append(n)
        start += k
    return out


def _verdicts(draft_token_ids: list[int], num_draft_tokens: Sequence[int], accepted: list[int],
              next_token: list[int]) -> list[Verdict]:
    """One Verdict per request: its accepted draft prefix, then its recovered or bonus token."""
    verdicts = []
    for start, k, n, token in zip(_starts(num_draft_tokens), num_draft_tokens, accepted, next_token, strict=True):
        verdicts.append(Verdict(token_ids=[*draft_token_ids[start : start + n], token], num_accepted=n,
                                num_draft_tokens=k))
    return verdicts
