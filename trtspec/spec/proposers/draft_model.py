"""Draft-model proposer: a small LM from the target's family samples k tokens autoregressively.

It owns the draft model's KV cache (one slot per request). Each step it feeds the context tokens its cache lacks
(the whole prompt the first time; afterwards the tokens committed since its last proposal), then samples k tokens
with the request's sampling parameters, logits processors (penalties, bans: the same pipeline as the target's, with
the draft's own context) and generator, returning the draft distributions for exact verification.
`commit` rolls its cache back to the longest prefix that is still part of the sequence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from trtspec.errors import ConfigError
from trtspec.methods.draft_target import DRAFT_TARGET
from trtspec.spec.logits_process import LogitsControls, process_logits
from trtspec.spec.model import LlamaModel, forward_grouped
from trtspec.spec.proposers.base import Draft, ProposeInput, Proposer, ProposerContext
from trtspec.spec.sampling import sample, scores_to_probs


@dataclass
class _DraftState:
    slot: int
    cached_ids: list[int]  # [cache length] tokens whose KV is in the draft cache


class DraftModelProposer(Proposer):
    """Proposer backed by a draft LlamaModel with its own KV cache slots.

    Example:
        context [12, 7, 99], k=3, temperature 0: the draft prefills [12, 7, 99] and greedily emits e.g. [4, 8, 15];
        Draft(token_ids=[4, 8, 15], draft_probs=one-hot rows [3, vocab]). If the target accepts 1 token and adds 16,
        commit(context=[12, 7, 99, 4, 16]) keeps [12, 7, 99, 4] in the draft cache; the next step feeds only [16].
    """

    name: ClassVar[str] = DRAFT_TARGET.proposer_key()  # its method home names it

    def __init__(self, model: LlamaModel, vocab_size: int, max_num_seqs: int = 256) -> None:
        self.model = model
        self.vocab_size = vocab_size
        self.cache = model.new_cache(num_slots=min(4, max_num_seqs), max_slots=max_num_seqs)
        self.states: dict[int, _DraftState] = {}

    @classmethod
    def create(cls, ctx: ProposerContext) -> DraftModelProposer:
        if ctx.draft_model is None:
            raise ConfigError("draft", None, "method draft_target needs a draft model", hint="pass draft='tiny-draft'")
        return cls(ctx.draft_model, ctx.vocab_size, ctx.max_num_seqs)

    def add_request(self, request_id: int) -> None:
        self.states[request_id] = _DraftState(slot=self.cache.alloc(), cached_ids=[])

    def free(self, request_id: int) -> None:
        state = self.states.pop(request_id, None)
        if state is not None:
            self.cache.free(state.slot)

    def commit(self, request_id: int, token_ids: list[int]) -> None:
        state = self.states[request_id]
        keep = 0
        for cached, committed in zip(state.cached_ids, token_ids, strict=False):
            if cached != committed:
                break
            keep += 1
        self.cache.rollback(state.slot, keep)
        del state.cached_ids[keep:]

    def propose(self, batch: list[ProposeInput]) -> list[Draft]:
        states = [self.states[item.request_id] for item in batch]
        # never run the draft past its context (the last sampled token is not fed, hence + 1)
        ks = [max(0, min(item.k, self.cache.max_seq_len + 1 - len(item.token_ids))) for item in batch]
        if len(batch) == 1 and ks[0] > 0 and _plain_greedy(batch[0]):
            return [self._propose_greedy(batch[0], states[0], ks[0])]
        rows = [i for i, k in enumerate(ks) if k > 0]
        tokens: list[list[int]] = [[] for _ in batch]
        probs: list[list[Tensor]] = [[] for _ in batch]  # per item: k x [vocab]
        # feed what each cache lacks (ragged), then sample k tokens one step at a time
        feed = [batch[i].token_ids[len(states[i].cached_ids):] for i in rows]
        for step in range(max(ks, default=0)):
            if not rows:
                break
            logits = self._forward([states[i] for i in rows], feed)  # [len(rows), vocab]
            next_rows, next_feed = [], []
            for j, i in enumerate(rows):
                item = batch[i]
                s = item.sampling
                controls = item.controls or LogitsControls(temperature=s.temperature)
                context = item.token_ids + tokens[i] if controls.active else ()
                scores = process_logits(logits[j][None], controls, context)  # [1, vocab]
                row_probs = scores_to_probs(scores[0], greedy=s.greedy, top_k=s.top_k, top_p=s.top_p)  # [vocab]
                token = int(row_probs.argmax()) if s.greedy else int(sample(row_probs[None], item.generator)[0])
                tokens[i].append(token)
                probs[i].append(row_probs)
                if step + 1 < ks[i]:
                    next_rows.append(i)
                    next_feed.append([token])
            rows, feed = next_rows, next_feed
        return [Draft(token_ids=torch.tensor(t, dtype=torch.long), draft_probs=torch.stack(p) if p else None)
                for t, p in zip(tokens, probs, strict=True)]

    def _propose_greedy(self, item: ProposeInput, state: _DraftState, k: int) -> Draft:
        """One greedy request without logits processors (batch 1): k forwards, the argmax fed back as a tensor (no
        host round trip, no per-token distributions: a greedy draft is one-hot, which `draft_probs=None` says)."""
        device = self.model.lm_head.weight.device
        slots = torch.tensor([state.slot], device=device)  # [1]
        feed = item.token_ids[len(state.cached_ids):]  # the tokens the cache lacks (at least the last committed one)
        input_ids = torch.tensor([feed], device=device)  # [1, n]
        tokens = []  # k x [1, 1] int64
        for _ in range(k):
            logits = self.model(input_ids, self.cache, slots).logits[:, -1]  # [1, draft vocab]
            input_ids = _match_vocab(logits, self.vocab_size).argmax(-1, keepdim=True)  # [1, 1] the next input
            tokens.append(input_ids)
        drafted = torch.cat(tokens, dim=1)[0].cpu()  # [k]
        state.cached_ids.extend(feed)
        state.cached_ids.extend(drafted[:-1].tolist())  # the last draft token is not fed
        return Draft(token_ids=drafted, draft_probs=None)

    def _forward(self, states: list[_DraftState], feed: list[list[int]]) -> Tensor:
        """Append `feed[i]` to state i's cache; return the logits after each row's last fed token, [rows, vocab]."""
        width = max(len(f) for f in feed)
        input_ids = torch.zeros(len(feed), width, dtype=torch.long)  # [rows, width]
        for i, f in enumerate(feed):
            input_ids[i, : len(f)] = torch.tensor(f)
        num_tokens = torch.tensor([len(f) for f in feed])  # [rows]
        slots = torch.tensor([s.slot for s in states])  # [rows]
        device = self.model.lm_head.weight.device
        # a row catching up (a prompt, or tokens committed while it did not draft) next to one-token rows: split, so
        # the others are not padded to its width (at 16 rows one admission would run the draft over 16 prompts)
        out = forward_grouped(self.model, input_ids.to(device), self.cache, slots.to(device),
                              num_tokens=num_tokens.to(device))
        for state, f in zip(states, feed, strict=True):
            state.cached_ids.extend(f)
        logits = out.logits[torch.arange(len(feed)), num_tokens.to(device) - 1]  # [rows, draft vocab]
        return _match_vocab(logits, self.vocab_size)


def _plain_greedy(item: ProposeInput) -> bool:
    """Greedy with no logits processor that reads the context: the draft token is the raw logits' argmax."""
    return item.sampling.greedy and (item.controls is None or not item.controls.active)


def _match_vocab(logits: Tensor, vocab_size: int) -> Tensor:
    """Draft logits [rows, draft_vocab] -> [rows, vocab_size]: padding-only vocab differences (allowed explicitly)
    are cut off or masked with -inf, so draft probabilities live on the target's vocabulary."""
    width = logits.shape[-1]
    if width >= vocab_size:
        return logits[:, :vocab_size]
    return torch.cat([logits, logits.new_full((logits.shape[0], vocab_size - width), float("-inf"))], dim=-1)
