"""Target logits + a row's context -> the processed target logits: the one logits-processor pipeline.

Plain decoding, chain verification and tree verification all go through `process_logits`, and every target row gets
its own context: the committed tokens (prompt + output) plus the draft tokens on the path to that row (a chain's
prefix, a tree node's ancestors and itself). A control that depends on the context therefore sees at a draft
position exactly what plain decoding would see there, and speculation stays exact.

Phases, in TensorRT-LLM's order (kernels/penaltyKernels.cu `batchApplyPenalty`, then kernels/banBadWords.cu, then
the sampling kernels; NVIDIA/TensorRT-LLM@249d93d5 and @23bc5b7c):
  1. temperature   z = logits / T                     (T = 0: greedy, no scaling; the argmax of z is taken later)
                                                       (TensorRT-LLM scales by 1 / (T + 1e-6): same up to 1e-6 / T)
  2. repetition    z = z * rp if z < 0 else z / rp      for every token seen in the row's context
  3. presence      z -= presence                        for every seen token
  4. frequency     z -= frequency * count               count = occurrences in the row's context
  5. min tokens    z[end ids] = -inf                    while the row's output is shorter than min_tokens
  6. bad words     z[word[-1]] = -inf                   when the row's context ends with word[:-1] (1 token: always)
  => z, the processed logits. log_softmax(z) is the distribution whose log-probs TensorRT-LLM returns
     (`output_log_probs`, `cum_log_probs`): after temperature, penalties and bans, before top-k / top-p. At
     temperature 0 (greedy here; TensorRT-LLM asks for greedy with top_k=1 at temperature 1) it is z at scale 1.
  7. sampling.scores_to_probs: greedy argmax, or top-k, top-p, softmax -> the distribution verified or sampled.
"Seen" and "count" cover prompt + output: TensorRT-LLM's penalty workspace starts from the prompt's tokens in the
context phase and adds each generated token (all three penalties; TensorRT-LLM's opt-in `promptIgnoreLength`, #8127,
which exempts prompt tokens from presence/frequency, is not modelled here).
TensorRT-LLM's bad-words kernel never bans token id 0 (`0 < banned_token`); here every listed token is banned.
Unlike TensorRT-LLM's speculative paths, which score every draft position with the committed context only, the
draft prefix is part of each row's context here: that is what makes verification exact.

With no context-dependent control set (`LogitsControls.active` False) this is logits / T: no per-row Python work.
This module knows nothing about requests, proposers or KV caches.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from trtspec.spec.params import SamplingParams, TokenSequences
from trtspec.spec.tree import tree_for_parents


@dataclass(frozen=True)
class LogitsControls:
    """One request's logits processors, fixed when the request is admitted."""

    temperature: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    min_tokens: int = 0
    end_ids: tuple[int, ...] = ()  # banned while the output is shorter than min_tokens (EOS, stop_token_ids)
    bad_words: TokenSequences = ()
    num_prompt_tokens: int = 0  # the context's first tokens that are not output (for min_tokens)

    @classmethod
    def for_request(cls, sampling: SamplingParams, end_ids: Sequence[int] = (),
                    num_prompt_tokens: int = 0) -> LogitsControls:
        return cls(temperature=sampling.temperature, repetition_penalty=sampling.repetition_penalty,
                   presence_penalty=sampling.presence_penalty, frequency_penalty=sampling.frequency_penalty,
                   min_tokens=sampling.min_tokens, end_ids=tuple(sorted(end_ids)), bad_words=sampling.bad_words,
                   num_prompt_tokens=num_prompt_tokens)

    @property
    def penalised(self) -> bool:
        return self.repetition_penalty != 1.0 or self.presence_penalty != 0.0 or self.frequency_penalty != 0.0

    @property
    def active(self) -> bool:
        """Any control that reads the row's context (False: the fast path, logits / temperature only)."""
        return self.penalised or (self.min_tokens > 0 and bool(self.end_ids)) or bool(self.bad_words)


def chain_paths(num_draft: int) -> Tensor:
    """[num_draft + 1, num_draft] bool: row r of a chain follows draft tokens 0 .. r - 1."""
    return torch.ones(num_draft + 1, num_draft, dtype=torch.bool).tril(-1)


def tree_paths(parents: Sequence[int]) -> Tensor:
    """[N + 1, N] bool for a tree draft (Draft.parents, -1 = root): row r (0 = root) follows node r's ancestors and
    node r itself; row 0 follows no draft token."""
    return tree_for_parents(tuple(parents)).attention_mask[:, 1:]


def process_logits(logits: Tensor, controls: LogitsControls, context: Sequence[int],
                   draft_token_ids: Tensor | None = None, paths: Tensor | None = None) -> Tensor:
    """Processed logits of one request's target rows: `process_batch` with a batch of one.

    Args:
        logits: [rows, vocab] raw logits; row r scores the token after `context` + the draft tokens `paths[r]` picks.
        controls: the request's LogitsControls.
        context: committed tokens (prompt + output so far); not read on the fast path.
        draft_token_ids: [num_draft] int64, or None: no draft (every row follows `context` alone).
        paths: [rows, num_draft] bool, paths[r, j] = draft token j precedes row r (`chain_paths`, `tree_paths`).
    Returns:
        [rows, vocab] float32 processed logits.
    """
    draft = None if draft_token_ids is None or paths is None else (draft_token_ids, paths)
    return process_batch(logits, [controls], [context], [logits.shape[0]], [draft])


def process_batch(logits: Tensor, controls: Sequence[LogitsControls], contexts: Sequence[Sequence[int]],
                  num_rows: Sequence[int], drafts: Sequence[tuple[Tensor, Tensor] | None]) -> Tensor:
    """Processed logits of a ragged batch of requests' target rows (phases 1-6 of the module docstring).

    Temperature, the three penalties and min_tokens are applied to every row at once with per-row parameters (a
    request's rows share its controls; a control that is off is an exact no-op: x * 1, x / 1, x - 0). Bad words match
    token sequences against each row's context, per request that sets them.

    Args:
        logits: [sum(num_rows), vocab] raw logits, request after request; row r of request i scores the token after
            contexts[i] + the draft tokens drafts[i][1][r] picks.
        controls: [batch] each request's LogitsControls.
        contexts: [batch] committed tokens (prompt + output so far); read only for requests with `active` controls.
        num_rows: [batch] target rows per request (a chain of k: k + 1; a tree of N: N + 1).
        drafts: [batch] (draft_token_ids [num_draft] int64, paths [rows, num_draft] bool: draft token j precedes row
            r, `chain_paths` / `tree_paths`), or None: every row follows the context alone.
    Returns:
        [sum(num_rows), vocab] float32 processed logits.
    """
    # 1. temperature
    scores = logits.float()  # [rows, vocab]
    device = scores.device
    temperatures = [c.temperature if c.temperature > 0 else 1.0 for c in controls]
    if any(t != 1.0 for t in temperatures):
        per_row = torch.tensor(temperatures, device=device).repeat_interleave(
            torch.tensor(list(num_rows), device=device))  # [rows]
        scores = scores / per_row[:, None]
    active = [i for i, c in enumerate(controls) if c.active]
    if not active:
        return scores
    starts = [0, *itertools.accumulate(num_rows)]
    rows = torch.cat([torch.arange(starts[i], starts[i + 1], device=device) for i in active])  # [active rows]
    processed = _process_active(scores[rows], [controls[i] for i in active], [contexts[i] for i in active],
                                [num_rows[i] for i in active], [drafts[i] for i in active])  # [active rows, vocab]
    return scores.index_copy(0, rows, processed)


def _process_active(scores: Tensor, controls: list[LogitsControls], contexts: list[Sequence[int]],
                    num_rows: list[int], drafts: list[tuple[Tensor, Tensor] | None]) -> Tensor:
    """Phases 2-6 on the rows of requests whose controls read the context. scores: [rows, vocab] (temperature
    applied), request after request; the other arguments as in `process_batch`, one entry per request here."""
    rows, vocab = scores.shape
    device = scores.device
    counts_row = torch.tensor(num_rows, device=device)  # [batch]

    def per_row(values: Sequence[float]) -> Tensor:  # [rows] a per-request value repeated over the request's rows
        return torch.tensor(values, device=device).repeat_interleave(counts_row)

    ids = [torch.zeros(0, dtype=torch.long, device=device) if d is None else d[0].to(device) for d in drafts]
    paths = [torch.zeros(n, 0, dtype=torch.bool, device=device) if d is None else d[1].to(device)
             for d, n in zip(drafts, num_rows, strict=True)]
    starts = list(itertools.accumulate(num_rows, initial=0))
    # 2-4. penalties: occurrences in the committed context + the draft tokens on the row's path
    if any(c.penalised for c in controls):
        counts = _token_counts(vocab, contexts, counts_row, ids, paths, starts)  # [rows, vocab]
        seen = counts > 0  # [rows, vocab]
        if any(c.repetition_penalty != 1.0 for c in controls):
            repetition = per_row([c.repetition_penalty for c in controls])[:, None]  # [rows, 1]
            scores = torch.where(seen, torch.where(scores < 0, scores * repetition, scores / repetition), scores)
        if any(c.presence_penalty != 0.0 for c in controls):
            scores = scores - per_row([c.presence_penalty for c in controls])[:, None] * seen.float()
        if any(c.frequency_penalty != 0.0 for c in controls):
            scores = scores - per_row([c.frequency_penalty for c in controls])[:, None] * counts
    # 5. min tokens: the end ids cannot end an output shorter than min_tokens (no row can once the committed output
    #    alone is long enough: the draft tokens on a path only lengthen it)
    short = [c.min_tokens > 0 and bool(c.end_ids) and len(ctx) - c.num_prompt_tokens < c.min_tokens
             for c, ctx in zip(controls, contexts, strict=True)]
    if any(short):
        committed = per_row([len(ctx) - c.num_prompt_tokens for c, ctx in zip(controls, contexts, strict=True)])
        num_output = committed + torch.cat([p.sum(-1) for p in paths])  # [rows]
        limit = per_row([c.min_tokens for c in controls])  # [rows]
        banning = (num_output < limit) & per_row(short).bool()  # [rows]
        end_mask = torch.stack([_vocab_mask(c.end_ids, vocab, device) for c in controls])  # [batch, vocab]
        end_mask = end_mask.repeat_interleave(counts_row, dim=0)  # [rows, vocab]
        scores = scores.masked_fill(banning[:, None] & end_mask, float("-inf"))
    # 6. bad words: sequence matching against each row's context, per request that sets them
    for i, c in enumerate(controls):
        if c.bad_words:
            lo, hi = starts[i], starts[i + 1]
            scores = torch.cat([scores[:lo], _ban_bad_words(scores[lo:hi], c.bad_words, contexts[i], ids[i], paths[i]),
                                scores[hi:]])
    return scores


def _token_counts(vocab: int, contexts: list[Sequence[int]], num_rows: Tensor, draft_token_ids: list[Tensor],
                  paths: list[Tensor], starts: list[int]) -> Tensor:
    """[rows, vocab] float32: occurrences of each token in a request's context + the draft tokens on row r's path.

    Args:
        num_rows: [batch] rows per request; draft_token_ids: [batch] x [num_draft]; paths: [batch] x [rows, num_draft];
        starts: [batch + 1] first row of each request.
    """
    device = num_rows.device
    batch = len(contexts)
    committed = torch.tensor([t for ctx in contexts for t in ctx], dtype=torch.long, device=device)  # [total context]
    owner = torch.arange(batch, device=device).repeat_interleave(
        torch.tensor([len(ctx) for ctx in contexts], device=device))  # [total context]
    per_request = torch.bincount(owner * vocab + committed, minlength=batch * vocab)[: batch * vocab]
    counts = per_request.view(batch, vocab).float().repeat_interleave(num_rows, dim=0)  # [rows, vocab]
    # row r adds 1 at draft_token_ids[j] for every j on its path (exact small integers in float32)
    on_path = [(p.nonzero(), ids, start) for p, ids, start in zip(paths, draft_token_ids, starts[:-1], strict=True)]
    row_index = torch.cat([start + nz[:, 0] for nz, _, start in on_path])  # [pairs]
    token_index = torch.cat([ids[nz[:, 1]] for nz, ids, _ in on_path])  # [pairs]
    if row_index.numel():
        counts.index_put_((row_index, token_index), torch.ones_like(row_index, dtype=counts.dtype), accumulate=True)
    return counts


@functools.lru_cache(maxsize=256)
def _vocab_mask(token_ids: tuple[int, ...], vocab: int, device: torch.device) -> Tensor:
    """[vocab] bool, True at `token_ids` (those inside the vocabulary); cached per control set, never modified."""
    mask = torch.zeros(vocab, dtype=torch.bool, device=device)  # [vocab]
    mask[[t for t in token_ids if t < vocab]] = True
    return mask


def _ban_bad_words(scores: Tensor, bad_words: TokenSequences, context: Sequence[int], draft_token_ids: Tensor,
                   paths: Tensor) -> Tensor:
    """`scores` [rows, vocab] with -inf at word[-1] in every row whose context ends with word[:-1]
    (TensorRT-LLM `ban_bad_words`; a one-token word is banned everywhere).

    Args:
        draft_token_ids: [num_draft]; paths: [rows, num_draft].
    """
    rows, vocab = scores.shape
    singles = tuple(word[0] for word in bad_words if len(word) == 1)
    if singles:
        scores = scores.masked_fill(_vocab_mask(singles, vocab, scores.device), float("-inf"))
    multi = [word for word in bad_words if len(word) > 1 and word[-1] < vocab]
    if not multi:
        return scores
    longest = max(len(word) for word in multi) - 1
    tail = list(context[-longest:])
    draft = draft_token_ids.tolist()
    banned_rows, banned_tokens = [], []
    for row, on_path in enumerate(paths.tolist()):
        row_tail = (tail + [t for t, on in zip(draft, on_path, strict=True) if on])[-longest:]
        for word in multi:
            if ends_with(row_tail, word[:-1]):
                banned_rows.append(row)
                banned_tokens.append(word[-1])
    if not banned_rows:
        return scores
    index = torch.tensor([banned_rows, banned_tokens], dtype=torch.long, device=scores.device)  # [2, num_banned]
    return scores.index_put((index[0], index[1]), torch.tensor(float("-inf"), device=scores.device))


def ends_with(tokens: Sequence[int], suffix: Sequence[int]) -> bool:
    """Whether `tokens` ends with `suffix` (bad-word prefixes, stop words)."""
    n = len(suffix)
    return n <= len(tokens) and list(tokens[len(tokens) - n:]) == list(suffix)


def emitted_log_probs(scores: Tensor, token_ids: Sequence[int], sampling: SamplingParams) -> tuple[list[float], list[float]]:
    """Log-probabilities of emitted tokens, each under the processed target distribution of its row.

    TensorRT-LLM (kernels/samplingTopKKernels.cu and samplingTopPKernels.cu, NVIDIA/TensorRT-LLM@03961722 and
    @03cff08f): the logits are softmaxed over the whole vocabulary after temperature, penalties and bans; the
    log-prob is log p(token) ("NOT normalized, same way as OpenAI does"). With normalize_log_probs, the top-k kernel
    (k >= 1; greedy is k = 1) reports log(p(token) / sum of the top-k probabilities) instead; the top-p-only kernel
    never normalises. cum_log_probs always adds the unnormalised value.

    Args:
        scores: [num_tokens, vocab] processed logits of the rows that emitted the tokens.
        token_ids: [num_tokens] the emitted tokens.
        sampling: the request's parameters (normalize_log_probs, greedy, top_k).
    Returns:
        (reported, raw): reported = raw, or normalised as above; raw = log p(token).
    """
    log_probs = torch.log_softmax(scores.float(), dim=-1)  # [num_tokens, vocab]
    tokens = torch.tensor(list(token_ids), dtype=torch.long, device=scores.device)  # [num_tokens]
    raw = log_probs.gather(-1, tokens[:, None])[:, 0]  # [num_tokens]
    reported = raw
    top_k = 1 if sampling.greedy else sampling.top_k
    if sampling.normalize_log_probs and top_k > 0:
        top = log_probs.topk(min(top_k, log_probs.shape[-1]), dim=-1).values  # [num_tokens, top_k]
        reported = raw - torch.logsumexp(top, dim=-1)
    return reported.tolist(), raw.tolist()
