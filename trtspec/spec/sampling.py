"""Logits -> probabilities (temperature, top-k, top-p) and sampling with an explicit torch.Generator.

The same `logits_to_probs` is applied to target and draft logits, so speculative sampling is exact with respect to
the *filtered* target distribution, which is what plain sampling with these parameters draws from. Order of the
warpers follows transformers: temperature, then top-k, then top-p. Temperature 0 means greedy: a one-hot
distribution on the argmax (first index on ties, like torch.argmax).

`scores_to_probs` is the second half on its own: processed logits (temperature and the request's logits processors
already applied by spec/logits_process.py) -> the distribution that is verified or sampled.
"""

from __future__ import annotations

import torch
from torch import Tensor

from trtspec.spec.params import is_greedy

__all__ = ["is_greedy", "logits_to_probs", "sample", "scores_to_probs"]


def logits_to_probs(logits: Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0) -> Tensor:
    """Normalised next-token probabilities.

    Args:
        logits: [..., vocab] unnormalised scores.
        temperature: 0 = greedy (one-hot argmax); > 0 divides the logits.
        top_k: keep the k most likely tokens (0 = off).
        top_p: keep the smallest set of most likely tokens whose mass reaches top_p (1.0 = off).
    Returns:
        [..., vocab] float32 probabilities.
    """
    logits = logits.float()
    if temperature == 0:
        return scores_to_probs(logits, greedy=True)
    return scores_to_probs(logits / temperature, greedy=False, top_k=top_k, top_p=top_p)


def scores_to_probs(scores: Tensor, *, greedy: bool, top_k: int = 0, top_p: float = 1.0) -> Tensor:
    """Processed logits -> the distribution to verify or sample: one-hot argmax, or top-k, top-p, softmax.

    Args:
        scores: [..., vocab] processed logits (temperature already applied).
        greedy: one-hot on the argmax (first index on ties).
        top_k, top_p: as in `logits_to_probs`.
    Returns:
        [..., vocab] float32 probabilities.
    """
    scores = scores.float()
    if greedy:
        return torch.zeros_like(scores).scatter_(-1, scores.argmax(-1, keepdim=True), 1.0)  # one-hot [..., vocab]
    if 0 < top_k < scores.shape[-1]:
        kth = torch.topk(scores, top_k, dim=-1).values[..., -1:]  # [..., 1]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if top_p < 1.0:
        sorted_scores, order = scores.sort(dim=-1, descending=True)  # [..., vocab]
        sorted_probs = sorted_scores.softmax(-1)
        # drop a token when the mass strictly before it already reaches top_p (the top token always stays)
        drop_sorted = (sorted_probs.cumsum(-1) - sorted_probs) >= top_p  # [..., vocab]
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        scores = scores.masked_fill(drop, float("-inf"))
    return scores.softmax(-1)


def sample(probs: Tensor, generator: torch.Generator | None) -> Tensor:
    """One token per row.

    Args:
        probs: [num_rows, vocab] normalised probabilities.
        generator: the request's generator (None = torch's default generator).
    Returns:
        [num_rows] int64 token ids.
    """
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
