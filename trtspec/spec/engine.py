"""SpecEngine: the request-level speculative-decoding loop over a batch of sequences.

`step()` is the whole algorithm, one phase per numbered block: schedule, propose, one batched target forward,
verify, commit + KV rollback, observe. Requests carry their own sampling parameters, generator, method and k, so one
batch may mix draft_target, ngram, suffix, lookahead and plain decoding. Continuous batching (queues, token budget,
admission, preemption by recompute) lives in scheduler.py, the per-step choice of k in adaptive.py; phase 1 calls both.
Every verified target row goes through the request's logits processors (logits_process.py) with its own context
(committed tokens + its draft prefix), so penalties, bad words and min_tokens stay exact under speculation; stop
words are matched token by token at commit, so an output that completes one inside an accepted draft is cut there.
A request may bring its own first draft (`SpecParams.draft_token_ids`, proposers/external.py).
The engine knows proposers only through the registry and verifiers only through verify.py and tree.py.
"""

from __future__ import annotations

import itertools
import secrets
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from trtspec.errors import ConfigError, ToolNotFoundError, UsageError
from trtspec.methods import resolve
from trtspec.spec.adaptive import AdaptiveK, KRequest, cpu_clock
from trtspec.spec.auxiliary import apply_aux_layout, fit_aux, hand_back
from trtspec.spec.detokenize import IncrementalDetokenizer
from trtspec.spec.logits_process import (
    LogitsControls,
    chain_paths,
    emitted_log_probs,
    ends_with,
    process_logits,
    tree_paths,
)
from trtspec.spec.metrics import AcceptanceStats
from trtspec.spec.model import LlamaModel, forward_grouped
from trtspec.spec.params import SamplingParams, SpecParams
from trtspec.spec.proposers import PROPOSERS, Draft, ProposeInput, Proposer, ProposerContext, runnable_methods
from trtspec.spec.proposers.draft_model import DraftModelProposer
from trtspec.spec.proposers.external import ExternalProposer
from trtspec.spec.sampling import scores_to_probs
from trtspec.spec.scheduler import Scheduler, SchedulerConfig
from trtspec.spec.tree import TreeVerdict, tree_for_parents, tree_layout, verify_tree
from trtspec.spec.verify import Verdict, verify_chain

Prompt = str | Sequence[int]


@dataclass
class RequestOutput:
    """A finished request."""

    request_id: int
    prompt_token_ids: list[int]
    token_ids: list[int]  # generated tokens (stop token / stop word included when it ended the request)
    text: str  # decoded generated tokens ("" without a tokenizer)
    finish_reason: str  # "length" | "stop"
    stats: AcceptanceStats
    log_probs: list[float] | None = None  # [len(token_ids)] with SamplingParams.return_log_probs
    cum_log_prob: float | None = None  # sum of the unnormalised log-probs (TensorRT-LLM cum_log_probs)


@dataclass
class RequestDelta:
    """What one step added to one request (`step()` and `stream()` yield these)."""

    request_id: int
    token_ids: list[int]  # tokens appended this step
    finished: bool
    finish_reason: str | None = None
    text: str = ""  # decoded text delta (filled by `stream()`)
    stats: AcceptanceStats | None = None  # only when finished
    # with SamplingParams.return_log_probs, aligned with token_ids: each token's log-prob under the target
    # distribution of the position that verified it (logits_process.emitted_log_probs), and the running sum of the
    # request's unnormalised log-probs up to and including it
    log_probs: list[float] | None = None
    cum_log_probs: list[float] | None = None

    @property
    def cum_log_prob(self) -> float | None:
        """The request's cumulative log-prob after this delta's last token (None: no tokens or no log-probs)."""
        return self.cum_log_probs[-1] if self.cum_log_probs else None


@dataclass
class _Request:
    request_id: int
    prompt_ids: list[int]
    sampling: SamplingParams
    spec: SpecParams
    proposer: Proposer | None  # None = plain decoding
    generator: torch.Generator
    stop_ids: frozenset[int]
    controls: LogitsControls  # the request's logits processors (logits_process.py)
    external_draft: list[int] | None = None  # the caller's draft, verified in the first step (then None)
    output_ids: list[int] = field(default_factory=list)
    slot: int | None = None  # target KV slot, assigned when scheduled
    target_hidden: Tensor | None = None  # [hidden] for proposers that read the target's hidden state
    stats: AcceptanceStats = field(default_factory=AcceptanceStats)
    start_time: float = field(default_factory=time.perf_counter)
    cum_log_prob: float = 0.0  # running sum of the emitted tokens' unnormalised log-probs (return_log_probs)

    @property
    def token_ids(self) -> list[int]:
        return self.prompt_ids + self.output_ids


class SpecEngine:
    """Speculative decoding over a target LlamaModel with registered proposers (see module docstring)."""

    def __init__(self, target: LlamaModel, *, draft: LlamaModel | None = None, tokenizer: Any = None, max_k: int = 8,
                 medusa: Path | None = None, eagle: Path | None = None, max_num_seqs: int = 256,
                 proposer_options: dict[str, object] | None = None, scheduler: SchedulerConfig | None = None,
                 k_policy: AdaptiveK | None = None) -> None:
        scheduler = scheduler or SchedulerConfig(max_num_seqs=max_num_seqs,
                                                 max_num_batched_tokens=max(4096, max_num_seqs))
        max_num_seqs = scheduler.max_num_seqs
        self.target = target
        self.tokenizer = tokenizer
        self.max_k = max_k
        self.device = target.lm_head.weight.device
        self.vocab_size = target.config.vocab_size
        self.cache = target.new_cache(num_slots=min(4, max_num_seqs), max_slots=max_num_seqs)
        self.max_context = self.cache.max_seq_len
        ctx = ProposerContext(vocab_size=self.vocab_size, max_k=max_k, max_num_seqs=max_num_seqs, draft_model=draft,
                              medusa=medusa, options=dict(proposer_options or {}),
                              hidden_size=target.config.hidden_size, eagle=eagle, target_config=target.config,
                              target_embed=target.embed_tokens)
        loadable = [m for m in runnable_methods() if (draft is not None or not resolve(m).needs_draft_model)
                    and (medusa is not None or not resolve(m).needs_medusa_heads)
                    and (eagle is not None or not resolve(m).needs_eagle_drafter)]
        self.proposers: dict[str, Proposer] = {}
        # methods whose proposer needs an optional package that is missing (suffix: arctic-inference); a request for
        # one gets this error before anything runs, every other method still works
        self.unavailable: dict[str, ToolNotFoundError] = {}
        for m in loadable:
            key = resolve(m).proposer
            if key is None or key in self.proposers:
                continue
            try:
                self.proposers[key] = PROPOSERS[key].create(ctx)
            except ToolNotFoundError as exc:
                self.unavailable[m] = exc
        self.available_methods = tuple(m for m in loadable if m not in self.unavailable)
        # target layers whose input a proposer reads (EAGLE-3 taps), returned by every target forward
        self.taps: tuple[int, ...] = next((p.target_taps for p in self.proposers.values() if hasattr(p, "target_taps")), ())
        self.external = ExternalProposer.create(ctx)  # a request's own first draft (SpecParams.draft_token_ids)
        # draft lengths of requests with SpecParams(adaptive=True); a CPU engine's steps timed in CPU time
        self.k_policy = k_policy or AdaptiveK(clock=cpu_clock if self.device.type == "cpu" else None)
        self.scheduler = Scheduler(scheduler, allocate=self._allocate, release=self._release, preempt=self._preempt,
                                   num_cached=lambda request: self.cache.length(request.slot))
        self.stats = AcceptanceStats()  # aggregated over finished requests
        self._ids = itertools.count()

    @classmethod
    def from_pretrained(cls, target: str | Path = "tiny", draft: str | Path | None = None, medusa: str | Path | None = None,
                        *, eagle: str | Path | None = None, max_k: int = 8, device: str = "cpu", dtype: str = "float32", max_num_seqs: int = 256,
                        allow_vocab_padding: bool = False, proposer_options: dict[str, object] | None = None,
                        scheduler: SchedulerConfig | None = None) -> SpecEngine:
        """Load a target (and optionally a draft) by embedded name or HF directory.

        Refuses a draft whose vocabulary or tokenizer differs from the target's before anything runs
        (IncompatibleModelsError naming both sizes); `allow_vocab_padding` accepts padding-only differences.
        """
        from trtspec.models import check_pair, resolve_eagle, resolve_medusa, resolve_model

        target_path = resolve_model(target, field="target")
        draft_path = resolve_model(draft, field="draft") if draft is not None else None
        if draft_path is not None:
            check_pair(target_path, draft_path, allow_vocab_padding=allow_vocab_padding)
        medusa_path = resolve_medusa(medusa) if medusa is not None else None
        return cls(
            LlamaModel.from_pretrained(target_path, dtype=dtype, device=device, field="target"),
            draft=LlamaModel.from_pretrained(draft_path, dtype=dtype, device=device, field="draft") if draft_path else None,
            tokenizer=_load_tokenizer(target_path),
            max_k=max_k,
            medusa=medusa_path,
            eagle=resolve_eagle(eagle) if eagle is not None else None,
            max_num_seqs=max_num_seqs,
            proposer_options=proposer_options,
            scheduler=scheduler,
        )

    # -- text --------------------------------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        if self.tokenizer is None:
            raise UsageError("this model has no tokenizer, so prompts must be token-id lists",
                             hint="pass token ids, or use a checkpoint with tokenizer.json")
        return list(self.tokenizer.encode(text, add_special_tokens=True))

    def decode(self, token_ids: Sequence[int]) -> str:
        return "" if self.tokenizer is None else self.tokenizer.decode(list(token_ids), skip_special_tokens=True)

    # -- request API -------------------------------------------------------------------------------------------
    def add_request(self, prompt: Prompt, sampling: SamplingParams | None = None, spec: SpecParams | None = None) -> int:
        """Validate and enqueue one request; returns its id. Raises ConfigError before any state changes."""
        return self._enqueue(self._make_request(prompt, sampling or SamplingParams(), spec or SpecParams()))

    def has_unfinished(self) -> bool:
        return len(self.scheduler) > 0

    def abort(self, request_id: int) -> bool:
        """Drop a request (waiting or running) and free its KV slots now; no output is produced for it.

        Returns whether the request was still queued or running.
        """
        self.k_policy.forget(request_id)
        return self.scheduler.abort(request_id) is not None

    def step(self) -> list[RequestDelta]:
        """One speculative step for every scheduled request; returns what each of them gained."""
        step_start = time.perf_counter()
        # 1. schedule: running requests + admissions within the token and KV budgets; k per request, then trimmed
        schedule = self.scheduler.schedule(self._step_k)
        batch = schedule.requests
        if not batch:
            return []
        ks = self.scheduler.allot_draft_tokens(schedule, self.k_policy.choose(self._k_requests(schedule.requests,
                                                                                                schedule.ks)))

        # 2. propose: each proposer drafts for its own requests, batched (a caller's draft in a request's first step)
        t = time.perf_counter()
        drafts, sources = self._propose(batch, ks)
        drafts = fit_aux(drafts, schedule.tokens_left,
                         [self.max_context - len(r.token_ids) - d.num_tokens for r, d in zip(batch, drafts, strict=True)])
        _synchronize(self.device)
        draft_time = time.perf_counter() - t

        # 3. target forward: one pass over every request's uncached tokens + draft tokens
        input_ids, num_tokens, positions, tree_mask, num_pending = self._target_inputs(batch, drafts)
        t = time.perf_counter()
        out = forward_grouped(self.target, input_ids, self.cache, torch.tensor([r.slot for r in batch], device=self.device),
                              num_tokens=num_tokens, positions=positions, tree_mask=tree_mask, taps=self.taps)
        _synchronize(self.device)
        target_time = time.perf_counter() - t
        for i, (request, draft) in enumerate(zip(batch, drafts, strict=True)):  # aux branches: hand back, drop KV
            if draft.aux is not None:
                drop = hand_back(request.proposer, request.request_id, draft, out.logits[i], num_pending[i] + draft.num_tokens)
                self.cache.rollback(request.slot, self.cache.length(request.slot) - drop)

        # 4. verify: the target distribution after the last committed token and after each draft token, each row
        #    through the request's logits processors with its own context; the verifier keeps a prefix / root path
        verdicts, target_scores = [], []
        for i, (request, draft) in enumerate(zip(batch, drafts, strict=True)):
            start = num_pending[i] - 1
            target_logits = out.logits[i, start : start + draft.num_tokens + 1]  # [k + 1, vocab]
            target_scores.append(self._target_scores(request, draft, target_logits))  # [k + 1, vocab]
            verdicts.append(self._verify(request, draft, target_scores[-1]))

        # 5. commit: append tokens (cut at a stop), their log-probs, roll target and draft KV back, retire finished
        deltas = [self._commit(request, verdict, num_pending[i], out.hidden[i], target_scores[i],
                               None if out.aux is None else out.aux[i])
                  for i, (request, verdict) in enumerate(zip(batch, verdicts, strict=True))]

        # 6. observe: acceptance counts, the time split (shared step time is charged to every request in it), costs
        overhead_time = time.perf_counter() - step_start - draft_time - target_time
        draft_ks = [k for k, source in zip(ks, sources, strict=True) if k > 0 and source == DraftModelProposer.name]
        self.k_policy.observe_step(rows=len(batch), width=input_ids.shape[1], target_s=target_time,
                                   draft_steps=max(draft_ks, default=0), draft_rows=len(draft_ks), draft_s=draft_time,
                                   overhead_s=overhead_time, prefill_rows=sum(n > 1 for n in num_pending),
                                   max_k=max(ks))
        for request, verdict, delta, source in zip(batch, verdicts, deltas, sources, strict=True):
            stats = request.stats
            if verdict.num_draft_tokens:
                stats.observe(verdict.num_draft_tokens, verdict.num_accepted)
                method = request.spec.method if source != ExternalProposer.name else source
                self.k_policy.observe_draft(request.request_id, method, verdict.num_draft_tokens, verdict.num_accepted)
            stats.num_target_forwards += 1
            stats.num_emitted_tokens += len(delta.token_ids)
            stats.draft_time_s += draft_time
            stats.target_time_s += target_time
            stats.overhead_time_s += overhead_time
            if delta.finished:
                stats.wall_time_s = time.perf_counter() - request.start_time
                self.stats.merge(stats)
                self.k_policy.forget(request.request_id, len(request.output_ids))
        return deltas

    # -- batch API ---------------------------------------------------------------------------------------------
    def generate(self, prompts: Sequence[Prompt], sampling: SamplingParams | Sequence[SamplingParams] | None = None,
                 spec: SpecParams | Sequence[SpecParams] | None = None) -> list[RequestOutput]:
        """Run `prompts` to completion (per-prompt params when sequences are given), outputs in prompt order.

        All requests are validated before any runs, so bad input yields an error and no partial output.
        Requests already in the engine (from add_request) advance too, but their deltas are dropped here: drive
        `step()` yourself when mixing the two.
        """
        if isinstance(prompts, str):
            prompts = [prompts]
        samplings = _per_prompt(sampling, SamplingParams(), len(prompts), "sampling")
        specs = _per_prompt(spec, SpecParams(), len(prompts), "spec")
        requests = [self._make_request(prompt, s, p) for prompt, s, p in zip(prompts, samplings, specs, strict=True)]
        self.scheduler.check_capacity(len(requests))
        ids = [self._enqueue(request) for request in requests]
        prompt_ids = {request.request_id: list(request.prompt_ids) for request in requests}
        generated: dict[int, list[int]] = {rid: [] for rid in ids}
        log_probs: dict[int, list[float] | None] = {r.request_id: [] if r.sampling.return_log_probs else None
                                                    for r in requests}
        finished: dict[int, RequestDelta] = {}
        while any(rid not in finished for rid in ids):
            for delta in self.step():
                if delta.request_id in generated:
                    generated[delta.request_id].extend(delta.token_ids)
                    if delta.log_probs is not None:
                        log_probs[delta.request_id].extend(delta.log_probs)  # type: ignore[union-attr]
                    if delta.finished:
                        finished[delta.request_id] = delta
        return [RequestOutput(request_id=rid, prompt_token_ids=prompt_ids[rid], token_ids=generated[rid],
                              text=self.decode(generated[rid]), finish_reason=finished[rid].finish_reason or "length",
                              stats=finished[rid].stats or AcceptanceStats(), log_probs=log_probs[rid],
                              cum_log_prob=finished[rid].cum_log_prob)
                for rid in ids]

    def stream(self, prompt: Prompt, sampling: SamplingParams | None = None,
               spec: SpecParams | None = None) -> Iterator[RequestDelta]:
        """Yield one request's deltas with decoded text deltas (other running requests advance too).

        Tokens of an incomplete multi-byte character are held back until it completes (`IncrementalDetokenizer`),
        so a delta may carry no tokens; the last one carries the rest and the stats."""
        rid = self.add_request(prompt, sampling, spec)
        detokenizer = IncrementalDetokenizer(self.decode if self.tokenizer is not None else None)
        while True:
            for delta in self.step():
                if delta.request_id != rid:
                    continue
                detokenizer.push_delta(delta)
                yield delta
                if delta.finished:
                    return

    # -- phases ------------------------------------------------------------------------------------------------
    def _k_requests(self, batch: list[_Request], reserved: list[int]) -> list[KRequest]:
        """A caller's draft keeps its length (not adaptive) and runs no draft model."""
        return [KRequest(request_id=r.request_id, method=r.spec.method if r.external_draft is None else "external",
                         cap=k, adaptive=r.spec.adaptive and r.external_draft is None,
                         pending=len(r.token_ids) - self.cache.length(r.slot),
                         uses_draft_model=resolve(r.spec.method).needs_draft_model and r.external_draft is None)
                for r, k in zip(batch, reserved, strict=True)]

    def _allocate(self, request: _Request) -> None:
        """Admission (scheduler callback): a target KV slot and proposer state; the context is prefilled next."""
        request.slot = self.cache.alloc()
        if request.proposer is not None:
            request.proposer.add_request(request.request_id)
            if hasattr(request.proposer, "observe_prompt"):  # proposers that learn from whole requests (suffix)
                request.proposer.observe_prompt(request.request_id, request.prompt_ids)

    def _step_k(self, request: _Request) -> int:
        """Draft length this step: the request's k (its first step: the caller's draft length), capped so that
        neither max_new_tokens nor the context overflow."""
        if request.external_draft is not None:
            k = len(request.external_draft)
        elif request.proposer is None:
            return 0
        else:
            k = request.spec.k
        remaining = request.sampling.max_new_tokens - len(request.output_ids)
        room = self.max_context - len(request.token_ids)
        return max(0, min(k, remaining - 1, room))

    def _propose(self, batch: list[_Request], ks: list[int]) -> tuple[list[Draft], list[str]]:
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
                                  draft.aux)
        for request in batch:
            request.external_draft = None
        return drafts, sources

    def _target_inputs(self, batch: list[_Request], drafts: list[Draft]
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

    def _target_scores(self, request: _Request, draft: Draft, target_logits: Tensor) -> Tensor:
        """Processed target logits of every row (logits_process.py): row r's context is the committed tokens plus
        the draft tokens before it (a chain's prefix, a tree node's root path). Without context-dependent controls
        this is target_logits / temperature.

        Args:
            target_logits: [k + 1, vocab] (a tree: [root + nodes, vocab] under the tree mask).
        Returns:
            [k + 1, vocab] float32.
        """
        if not request.controls.active:
            return process_logits(target_logits, request.controls, ())
        paths = chain_paths(draft.num_tokens) if draft.parents is None else tree_paths(draft.parents)
        return process_logits(target_logits, request.controls, request.token_ids, draft.token_ids, paths)

    def _verify(self, request: _Request, draft: Draft, target_scores: Tensor) -> Verdict | TreeVerdict:
        """target_scores: [k + 1, vocab] processed target logits (a tree: [root + nodes, vocab])."""
        s = request.sampling
        if draft.parents is not None:  # a tree draft (possibly chain-shaped): tree verification, incl. typical
            tree = tree_for_parents(tuple(draft.parents))
            return verify_tree(tree, draft.token_ids, draft.draft_probs, target_scores, s, request.generator,
                               acceptance=request.spec.acceptance)
        target_probs = scores_to_probs(target_scores, greedy=s.greedy, top_k=s.top_k, top_p=s.top_p)  # [k + 1, V]
        return verify_chain(target_probs, draft.token_ids, draft.draft_probs, greedy=s.greedy,
                            generator=request.generator)

    def _commit(self, request: _Request, verdict: Verdict | TreeVerdict, num_pending: int, hidden: Tensor,
                target_scores: Tensor, aux: Tensor | None = None) -> RequestDelta:
        """Append the verdict's tokens (cut at a stop token, a completed stop word, max_new_tokens or the context)
        with their log-probs, and roll the KV caches back.

        A tree verdict keeps a root path whose nodes are not contiguous: their KV entries are compacted into place.
        Every emitted token was verified at the row after the previous one, with that row's context, so the tokens
        kept before a cut are exactly what plain decoding emits.

        Args:
            hidden: [T, hidden] this request's target hidden states from the step's forward.
            target_scores: [k + 1, vocab] the processed target logits the verdict was made on.
            aux: [T, taps * hidden] the target's tapped layers (proposers with observe_target read them).
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
        if aux is not None and hasattr(request.proposer, "observe_target"):  # taps of the committed positions
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
        log_probs = cum_log_probs = None
        if request.sampling.return_log_probs:  # token t was verified at row 0 (t = 0) or at accepted node t - 1
            rows = [0] + [offset + 1 for offset in verdict.accepted_offsets]
            log_probs, raw = emitted_log_probs(target_scores[rows[: len(new_ids)]], new_ids, request.sampling)
            cum_log_probs = list(itertools.accumulate(raw, initial=request.cum_log_prob))[1:]
            request.cum_log_prob = cum_log_probs[-1]
        request.output_ids.extend(new_ids)
        if finish_reason is None and len(request.token_ids) >= self.max_context:
            finish_reason = "length"
        finished = finish_reason is not None
        if finished:
            if request.proposer is not None and hasattr(request.proposer, "observe_finish"):
                request.proposer.observe_finish(request.request_id, request.token_ids)  # before free
            self.scheduler.finish(request)
        elif request.proposer is not None:
            request.proposer.commit(request.request_id, request.token_ids)
        return RequestDelta(request_id=request.request_id, token_ids=new_ids, finished=finished,
                            finish_reason=finish_reason, stats=request.stats if finished else None,
                            log_probs=log_probs, cum_log_probs=cum_log_probs)

    @staticmethod
    def _completes_stop_word(request: _Request, new_ids: list[int]) -> bool:
        """Whether prompt + output + new_ids now ends with one of the request's stop words (TensorRT-LLM matches
        across the prompt too, on every new token, and keeps the stop word in the output)."""
        words = request.sampling.stop_words
        if not words or all(new_ids[-1] != word[-1] for word in words):
            return False
        longest = max(len(word) for word in words)
        tail = (request.token_ids[-longest:] + new_ids)[-longest:]
        return any(ends_with(tail, word) for word in words)

    # -- helpers -----------------------------------------------------------------------------------------------
    def _validate(self, prompt: Prompt, sampling: SamplingParams, spec: SpecParams) -> list[int]:
        if spec.method in self.unavailable:
            raise self.unavailable[spec.method]
        sampling.validate()
        spec.validate(max_k=self.max_k, available=self.available_methods)
        ids = self.encode(prompt) if isinstance(prompt, str) else list(prompt)
        if not ids:
            raise ConfigError("prompt", prompt, "is empty", hint="pass at least one token of text")
        token_fields = {"prompt": [ids], "bad_words": sampling.bad_words, "stop_words": sampling.stop_words,
                        "stop_token_ids": [sampling.stop_token_ids], "draft_token_ids": [spec.draft_token_ids]}
        for name, sequences in token_fields.items():
            bad = next((t for seq in sequences for t in seq if not 0 <= t < self.vocab_size), None)
            if bad is not None:
                raise ConfigError(name, f"token id {bad}", f"outside the vocabulary [0, {self.vocab_size})",
                                  hint="use token ids of this model's tokenizer")
        if len(ids) >= self.max_context:
            raise ConfigError("prompt", f"{len(ids)} tokens", f"does not fit the model's context of {self.max_context}"
                              " tokens with room to generate", hint=f"shorten the prompt below {self.max_context} tokens")
        return ids

    def _make_request(self, prompt: Prompt, sampling: SamplingParams, spec: SpecParams) -> _Request:
        ids = self._validate(prompt, sampling, spec)
        info = resolve(spec.method)
        proposer = self.proposers[info.proposer] if spec.k > 0 and info.proposer is not None else None
        seed = sampling.seed if sampling.seed is not None else secrets.randbits(63)
        eos = () if sampling.ignore_eos else self.target.config.eos_token_ids
        stop_ids = frozenset(eos) | frozenset(sampling.stop_token_ids)
        return _Request(request_id=next(self._ids), prompt_ids=ids, sampling=sampling, spec=spec, proposer=proposer,
                        generator=torch.Generator(device=self.device).manual_seed(seed), stop_ids=stop_ids,
                        controls=LogitsControls.for_request(sampling, stop_ids, len(ids)),
                        external_draft=list(spec.draft_token_ids) or None)

    def _enqueue(self, request: _Request) -> int:
        self.scheduler.add(request)  # OverloadedError past the queue limit
        return request.request_id

    def _preempt(self, request: _Request) -> None:
        """Recompute preemption: free the KV slots; proposers with host-only state (`preempt`) keep it."""
        if request.proposer is not None and hasattr(request.proposer, "preempt"):
            request.proposer.preempt(request.request_id)
            self.cache.free(request.slot)
            request.slot = None
        else:
            self._release(request)

    def _release(self, request: _Request) -> None:
        if request.slot is not None:
            self.cache.free(request.slot)
            request.slot = None
        if request.proposer is not None:
            request.proposer.free(request.request_id)


def _synchronize(device: torch.device) -> None:
    """Wait for queued GPU work so that the draft / target / overhead time split is honest."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _per_prompt(value: Any, default: Any, n: int, name: str) -> list[Any]:
    if value is None:
        return [default] * n
    if isinstance(value, SamplingParams | SpecParams):
        return [value] * n
    values = list(value)
    if len(values) != n:
        raise UsageError(f"{name}: got {len(values)} parameter sets for {n} prompts", hint="pass one, or one per prompt")
    return values


def _load_tokenizer(path: Path) -> Any:
    if not (path / "tokenizer.json").is_file() and not (path / "tokenizer_config.json").is_file():
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)
