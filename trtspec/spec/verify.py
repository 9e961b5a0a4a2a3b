"""Chain verifiers: turn target probabilities and a chain draft into accepted tokens plus one recovered/bonus token.

Words (defined in metrics.py): *accepted* draft tokens are kept; after the first rejection the target emits a
*recovered* token; when every draft token is accepted it emits a *bonus* token. So a verdict always emits
num_accepted + 1 tokens, and one target forward over (last token + k draft tokens) is enough.

- greedy: accept the longest prefix that equals the target's argmax, then emit the target's argmax.
- rejection sampling (Leviathan et al. 2023, Algorithm 1; Chen et al. 2023): with p = target and q = draft,
  accept draft token x with probability min(1, p(x) / q(x)); on rejection sample from norm(max(0, p - q)).
  The output is distributed exactly as p.
- one-hot drafts (n-gram, lookahead: no draft probabilities): q is a point mass on x, so the same rule accepts with
  probability p(x) and resamples from p with x removed. We run rejection sampling on q = one_hot(x).

The core functions are vectorised over a batch of equally long chains (the statistical tests call them on 20k rows);
`verify_chain` wraps them for one request. They never know which proposer made the draft.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from trtspec.spec.sampling import sample


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


def greedy_verify(target_probs: Tensor, draft_token_ids: Tensor) -> tuple[Tensor, Tensor]:
    """Longest draft prefix equal to the target's argmax, then the target's argmax.

    Args:
        target_probs: [batch, k + 1, vocab] (or logits: only the argmax matters); row i scores the token after
            draft position i - 1 (row 0 follows the last committed token).
        draft_token_ids: [batch, k] int64.
    Returns:
        output_token_ids [batch, k + 1] (accepted, then the target token, then -1 padding), num_accepted [batch].
    """
    target_argmax = target_probs.argmax(-1)  # [batch, k + 1]
    k = draft_token_ids.shape[1]
    matches = (draft_token_ids == target_argmax[:, :k]).long()  # [batch, k]
    num_accepted = matches.cumprod(-1).sum(-1)  # [batch]
    return _assemble(draft_token_ids, target_argmax, num_accepted), num_accepted


def rejection_verify(target_probs: Tensor, draft_probs: Tensor, draft_token_ids: Tensor,
                     generator: torch.Generator | None) -> tuple[Tensor, Tensor]:
    """Exact speculative sampling (Leviathan et al. Alg. 1; p = target, q = draft).

    Args:
        target_probs: [batch, k + 1, vocab]; row i is the target distribution for draft position i, row k the bonus.
        draft_probs: [batch, k, vocab]; the distributions the draft tokens were sampled from.
        draft_token_ids: [batch, k] int64.
        generator: randomness for the accept tests and the recovered/bonus samples.
    Returns:
        output_token_ids [batch, k + 1] (accepted, then recovered or bonus, then -1 padding), num_accepted [batch].
    """
    batch, k = draft_token_ids.shape
    target_at_draft = target_probs[:, :k].gather(-1, draft_token_ids[..., None]).squeeze(-1)  # [batch, k]
    draft_at_draft = draft_probs.gather(-1, draft_token_ids[..., None]).squeeze(-1)  # [batch, k]
    uniform = torch.rand(batch, k, generator=generator, device=target_probs.device)  # [batch, k]
    # accept iff u < p(x) / q(x), written without the division (q(x) > 0 for a sampled x)
    accepted = uniform * draft_at_draft < target_at_draft  # [batch, k]
    num_accepted = accepted.long().cumprod(-1).sum(-1)  # [batch]

    # the token after the accepted prefix: recovered ~ norm(max(0, p - q)) at the rejected position, or bonus ~ p
    # at position k. Draft positions pad the draft with zeros so that position k yields the target itself.
    padded_draft = torch.cat([draft_probs, torch.zeros_like(target_probs[:, :1])], dim=1)  # [batch, k + 1, vocab]
    rows = torch.arange(batch, device=target_probs.device)  # [batch]
    next_probs = residual_probs(target_probs[rows, num_accepted], padded_draft[rows, num_accepted])  # [batch, vocab]
    next_token = sample(next_probs, generator)  # [batch]
    next_ids = draft_token_ids.new_zeros(batch, k + 1)  # [batch, k + 1]
    next_ids[rows, num_accepted] = next_token
    return _assemble(draft_token_ids, next_ids, num_accepted), num_accepted


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


def verify_chain(target_probs: Tensor, draft_token_ids: Tensor, draft_probs: Tensor | None, *, greedy: bool,
                 generator: torch.Generator | None) -> Verdict:
    """Verify one request's chain draft.

    Args:
        target_probs: [k + 1, vocab] target distributions (sampling params applied) after the last committed token
            and after each draft token.
        draft_token_ids: [k] int64 (k may be 0: then this samples one token from the target).
        draft_probs: [k, vocab], or None for one-hot drafts (n-gram, lookahead).
        greedy: temperature 0; no randomness is drawn.
        generator: the request's generator.
    """
    k = draft_token_ids.shape[0]
    if greedy:
        output, num_accepted = greedy_verify(target_probs[None], draft_token_ids[None])
    else:
        if draft_probs is None:
            draft_probs = torch.zeros(k, target_probs.shape[-1], device=target_probs.device).scatter_(
                1, draft_token_ids[:, None], 1.0)  # [k, vocab] one-hot
        output, num_accepted = rejection_verify(target_probs[None], draft_probs[None], draft_token_ids[None], generator)
    n = int(num_accepted[0])
    return Verdict(token_ids=output[0, : n + 1].tolist(), num_accepted=n, num_draft_tokens=k)


def _assemble(draft_token_ids: Tensor, next_ids: Tensor, num_accepted: Tensor) -> Tensor:
    """[batch, k + 1]: draft tokens before num_accepted, next_ids at num_accepted, -1 after.

    Args:
        draft_token_ids: [batch, k]; next_ids: [batch, k + 1]; num_accepted: [batch].
    """
    batch, k = draft_token_ids.shape
    pos = torch.arange(k + 1, device=draft_token_ids.device)[None, :]  # [1, k + 1]
    padded_draft = torch.cat([draft_token_ids, draft_token_ids.new_full((batch, 1), -1)], dim=1)  # [batch, k + 1]
    out = torch.where(pos < num_accepted[:, None], padded_draft, next_ids)
    return out.masked_fill(pos > num_accepted[:, None], -1)
