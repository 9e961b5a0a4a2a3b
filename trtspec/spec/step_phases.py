"""Phases 2-5 of `SpecEngine.step` for each request (engine.py runs them in order over the batch): propose (a
Draft per request, batched per proposer), the target forward's inputs (pending tokens + draft, tree positions and
masks), verify (each row through the request's logits processors, then the chain or tree verifier), commit (tokens cut
at a stop, log-probs, KV rollback/compaction, proposer bookkeeping).

`StepPhases` is a mixin of SpecEngine: its methods read the engine's cache, scheduler, device, context length and
external proposer (declared below)."""

from __future__ import annotations

import itertools

import torch
from torch import Tensor

from trtspec.spec.auxiliary import apply_aux_layout
from trtspec.spec.logits_process import chain_paths, emitted_log_probs, ends_with, process_batch, tree_paths
from trtspec.spec.model import KVCache
from trtspec.spec.proposers import Draft, ProposeInput, Proposer
from trtspec.spec.proposers.external import ExternalProposer
from trtspec.spec.request_state import EngineRequest, RequestDelta
from trtspec.spec.scheduler import Scheduler
from trtspec.spec.tree import TreeVerdict, tree_for_parents, tree_layout, verify_tree, verify_trees
from trtspec.spec.verify import Verdict, verify_chains


class StepPhases:
    """The per-request phases of one engine step (see module docstring)."""

    device: torch.device
    cache: KVCache
    max_context: int
    scheduler: Scheduler
    external: ExternalProposer

    def _propose(self, batch: list[EngineRequest], ks: list[int]) -> tuple[list[Draft], list[str]]:
        """One Draft per request, and the name of the proposer that made it ("" = none).

        A request's own draft (SpecParams.draft_token_ids) goes to the ExternalProposer in its first step and is
        used up then, whatever k that step allowed: later steps have a longer context it no longer continues.
        """
        drafts = [Draft.empty() for _ in batch]
        sources = [""] * len(batch)
        groups: dict[int, tuple[Proposer, list[int]]] = {}  # id(proposer) -> (proposer, batch indices)
        for i, (request, k) in enumerate(zip(batch, ks, strict=True)):
            proposer = self.external if request.external_draft is not None else request.proposer
            if k > 0 and proposer is not None:
                groups.setdefault(id(proposer), (proposer, []))[1].append(i)
                sources[i] = proposer.name
        for proposer, indices in groups.values():
            inputs = [ProposeInput(request_id=batch[i].request_id, token_ids=batch[i].token_ids, k=ks[i],
                                   sampling=batch[i].sampling, generator=batch[i].generator,
                                   target_hidden=batch[i].target_hidden, controls=batch[i].controls,
                                   draft_token_ids=tuple(batch[i].external_draft or ())) for i in indices]
            for i, draft in zip(indices, proposer.propose(inputs), strict=True):
                drafts[i] = Draft(draft.token_ids[: ks[i]].to(self.device),
                                  None if draft.draft_probs is None else draft.draft_probs[: ks[i]].to(self.device),
                                  None if draft.parents is None else draft.parents[: ks[i]],  # parents-first
                                  draft.aux, draft.drafter)
                sources[i] = draft.drafter or sources[i]  # a hybrid's choice this step
        for request in batch:
            request.external_draft = None
        return drafts, sources

    def _target_inputs(self, batch: list[EngineRequest], drafts: list[Draft]
                       ) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None, list[int]]:
        """Right-padded rows of (uncached context tokens + draft tokens), with positions and a tree mask if needed.

        Returns:
            input_ids [batch, T], num_tokens [batch], positions [batch, T] or None (sequential),
            tree_mask [batch, T, T] or None (causal), num_pending per row (uncached context tokens).
        """
        pending = [r.token_ids[self.cache.length(r.slot):] for r in batch]
        num_pending = [len(p) for p in pending]
        rows = [p + d.token_ids.tolist() + ([] if d.aux is None else d.aux.token_ids.tolist())
                for p, d in zip(pending, drafts, strict=True)]
        width = max(len(row) for row in rows)
        input_ids = torch.zeros(len(rows), width, dtype=torch.long)  # [batch, T]
        for i, row in enumerate(rows):
            input_ids[i, : len(row)] = torch.tensor(row)
        num_tokens = torch.tensor([len(row) for row in rows])  # [batch]
        positions = tree_mask = None
        has_aux = any(d.aux is not None for d in drafts)
        if has_aux or not all(d.is_chain for d in drafts):
            bases = [self.cache.length(r.slot) for r in batch]
            positions, tree_mask = tree_layout(drafts, num_pending, bases, width)
            if has_aux:
                apply_aux_layout(positions, tree_mask, drafts, num_pending, bases)
        to = self.device
        return (input_ids.to(to), num_tokens.to(to), None if positions is None else positions.to(to),
                None if tree_mask is None else tree_mask.to(to), num_pending)

    def _verify_batch(self, batch: list[EngineRequest], drafts: list[Draft], logits: Tensor,
                      num_pending: list[int]) -> tuple[list[Verdict | TreeVerdict], list[Tensor]]:
        """Every request's verdict from one target forward, and the processed target logits it was made on.

        The target rows of all requests are gathered into one ragged batch (request after request: k_i + 1 rows
        for a chain, N + 1 for a tree; not when every request is verified on its own) and processed at once (logits_process.process_batch: each row with its own
        context, the committed tokens plus the draft tokens on its path). Chains are verified together in one pass
        (verify.verify_chains), sampled trees in one walk over their padded trees (tree.verify_trees), each request's
        randomness from its own generator. Greedy trees and typical acceptance go one by one (tree.verify_tree:
        greedy's longest-path rule is vectorised over a tree's root-to-leaf paths, which differ per tree).

        Args:
            logits: [batch, T, vocab] the forward's logits; request i's rows start at its last pending token.
        Returns:
            verdicts [batch], target_scores [batch] x [k_i + 1, vocab] float32 (views into one tensor).
        """
        width, vocab = logits.shape[1], logits.shape[2]
        num_rows = [d.num_tokens + 1 for d in drafts]
        chains = [i for i, d in enumerate(drafts) if d.parents is None]
        trees = [i for i, d in enumerate(drafts) if d.parents is not None]  # tree drafts (possibly chain-shaped)
        walked = [i for i in trees if not batch[i].sampling.greedy and batch[i].spec.acceptance == "exact"]
        walked = walked if len(walked) > 1 else []  # one sampled tree: verify_tree walks it alone, without padding
        controls = [r.controls for r in batch]
        paths = [None if not c.active else (d.token_ids, chain_paths(d.num_tokens) if d.parents is None
                                            else tree_paths(d.parents)) for c, d in zip(controls, drafts, strict=True)]
        if len(batch) == 1 or not (chains or walked):  # every request verified on its own: no batch to gather
            views = [logits[i, n - 1 : n - 1 + rows] for i, (n, rows) in enumerate(zip(num_pending, num_rows,
                                                                                       strict=True))]
            target_scores = [process_batch(view, [c], [r.token_ids], [rows], [path]) for view, c, r, rows, path in
                             zip(views, controls, batch, num_rows, paths, strict=True)]  # [batch] x [k_i + 1, vocab]
            scores = target_scores[0]  # [k + 1, vocab] (read only for a single request)
        else:
            index = torch.tensor([i * width + n - 1 + r for i, (n, rows) in enumerate(zip(num_pending, num_rows,
                                                                                          strict=True))
                                  for r in range(rows)], device=logits.device)  # [total_draft + batch] forward rows
            target_logits = logits.reshape(-1, vocab).index_select(0, index)  # [total_draft + batch, vocab]
            scores = process_batch(target_logits, controls, [r.token_ids for r in batch], num_rows, paths)  # [rows, V]
            target_scores = list(scores.split(num_rows))  # [batch] x [k_i + 1, vocab]
        verdicts: list[Verdict | TreeVerdict | None] = [None] * len(batch)
        if chains:
            chain_scores = scores if len(chains) == len(batch) else torch.cat([target_scores[i] for i in chains])
            samplings = [batch[i].sampling for i in chains]
            chain_verdicts = verify_chains(chain_scores, [drafts[i].token_ids for i in chains],
                                           [drafts[i].draft_probs for i in chains],
                                           greedy=[s.greedy for s in samplings], top_k=[s.top_k for s in samplings],
                                           top_p=[s.top_p for s in samplings],
                                           generators=[batch[i].generator for i in chains])
            for i, verdict in zip(chains, chain_verdicts, strict=True):
                verdicts[i] = verdict
        if walked:  # sampled trees, lossless: one walk over all of them, each request's uniforms its own
            for i, verdict in zip(walked, verify_trees(
                    [tree_for_parents(tuple(drafts[i].parents)) for i in walked], [drafts[i].token_ids for i in walked],
                    [drafts[i].draft_probs for i in walked], [target_scores[i] for i in walked],
                    [batch[i].sampling for i in walked], [batch[i].generator for i in walked]), strict=True):
                verdicts[i] = verdict
        for i in [i for i in trees if i not in walked]:  # greedy trees and typical acceptance (lossy), each on its own
            request, draft = batch[i], drafts[i]
            verdicts[i] = verify_tree(tree_for_parents(tuple(draft.parents)), draft.token_ids, draft.draft_probs,
                                      target_scores[i], request.sampling, request.generator,
                                      acceptance=request.spec.acceptance)
        return verdicts, target_scores  # type: ignore[return-value]

    def _commit(self, request: EngineRequest, verdict: Verdict | TreeVerdict, num_pending: int, hidden: Tensor,
                target_scores: Tensor, aux: Tensor | None = None) -> RequestDelta:
        """Append the verdict's tokens (cut at a stop token, a completed stop word, max_new_tokens or the context)
        with their log-probs, and roll the KV caches back.

        A tree verdict keeps a root path whose nodes are not contiguous: their KV entries are compacted into place.
        Every emitted token was verified at the row after the previous one, with that row's context, so the tokens
        kept before a cut are exactly what plain decoding emits.

        Args:
            hidden: [T, hidden] this request's target hidden states from the step's forward.
            target_scores: [k + 1, vocab] the processed target logits the verdict was made on.
            aux: [T, taps * hidden] the target's tapped layers (a proposer with target_taps reads them).
        """
        cached = self.cache.length(request.slot) - num_pending - verdict.num_draft_tokens
        keep = verdict.accepted_offsets  # draft indices of the accepted tokens, in order
        if keep == list(range(len(keep))):
            self.cache.rollback(request.slot, cached + num_pending + len(keep))
        else:
            self.cache.compact(request.slot, cached + num_pending, keep)
        if request.proposer is not None and request.proposer.needs_hidden_states:
            # the state that predicted the next token: the last accepted draft token's, else the last pending one's
            request.target_hidden = hidden[num_pending + keep[-1] if keep else num_pending - 1]  # [hidden]
        if aux is not None and request.proposer is not None and request.proposer.target_taps:  # committed positions' taps
            rows = list(range(num_pending)) + [num_pending + k for k in keep]
            request.proposer.observe_target(request.request_id, cached, aux[rows])
        new_ids: list[int] = []
        finish_reason = None
        for token in verdict.token_ids:
            new_ids.append(token)
            if token in request.stop_ids or self._completes_stop_word(request, new_ids):
                finish_reason = "stop"
                break
            if len(request.output_ids) + len(new_ids) >= request.sampling.max_new_tokens:
                finish_reason = "length"
                break
            if len(request.token_ids) + len(new_ids) >= self.max_context:  # the context is full: cut here
                finish_reason = "length"
                break
        log_probs = cum_log_probs = None
        if request.sampling.return_log_probs:  # token t was verified at row 0 (t = 0) or at accepted node t - 1
            rows = [0] + [offset + 1 for offset in verdict.accepted_offsets]
            log_probs, raw = emitted_log_probs(target_scores[rows[: len(new_ids)]], new_ids, request.sampling)
            cum_log_probs = list(itertools.accumulate(raw, initial=request.cum_log_prob))[1:]
            request.cum_log_prob = cum_log_probs[-1]
        request.output_ids.extend(new_ids)
        finished = finish_reason is not None
        if finished:
            if request.proposer is not None:
                request.proposer.observe_finish(request.request_id, request.token_ids)  # before free
            self.scheduler.finish(request)
        elif request.proposer is not None:
            request.proposer.commit(request.request_id, request.token_ids)
        return RequestDelta(request_id=request.request_id, token_ids=new_ids, finished=finished,
                            finish_reason=finish_reason, stats=request.stats if finished else None,
                            log_probs=log_probs, cum_log_probs=cum_log_probs)

    @staticmethod
    def _completes_stop_word(request: EngineRequest, new_ids: list[int]) -> bool:
        """Whether prompt + output + new_ids now ends with one of the request's stop words (TensorRT-LLM matches
        across the prompt too, on every new token, and keeps the stop word in the output)."""
        words = request.sampling.stop_words
        if not words or all(new_ids[-1] != word[-1] for word in words):
            return False
        longest = max(len(word) for word in words)
        tail = (request.token_ids[-longest:] + new_ids)[-longest:]
        return any(ends_with(tail, word) for word in words)
