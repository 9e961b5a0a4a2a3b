"""SpecEngine: the request-level speculative-decoding loop over a batch of sequences.

`step()` is the whole algorithm, one phase per numbered block: schedule, propose, one batched target forward,
verify, commit + KV rollback, observe. Requests carry their own sampling parameters, generator, method and k, so one
batch may mix draft_target, ngram, suffix, lookahead and plain decoding. Continuous batching (queues, token budget,
admission, preemption by recompute) lives in scheduler.py, the per-step choice of k in adaptive.py, the speculation
schedule (draft length by batch size, max_concurrency, the acceptance gate) in schedule_policy.py; phase 1 calls them.
Every verified target row goes through the request's logits processors (logits_process.py) with its own context
(committed tokens + its draft prefix), so penalties, bad words and min_tokens stay exact under speculation; stop
words are matched token by token at commit, so an output that completes one inside an accepted draft is cut there.
A request may bring its own first draft (`SpecParams.draft_token_ids`, proposers/external.py).
The engine knows proposers only through the registry and verifiers only through verify.py and tree.py.
Phases 2-5 of each request (propose, target inputs, verify, commit) are in step_phases.py, the request types
(RequestOutput, RequestDelta, EngineRequest) in request_state.py.
"""

from __future__ import annotations

import itertools
import secrets
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from trtspec.contracts.engine import EngineConfig, ProposerOptions
from trtspec.contracts.iteration import IterationStats
from trtspec.contracts.metrics import AcceptanceStats
from trtspec.contracts.schedule import SpecSchedule
from trtspec.errors import ConfigError, ToolNotFoundError, UsageError
from trtspec.methods import resolve
from trtspec.methods.suffix import SUFFIX
from trtspec.spec.adaptive import AdaptiveK, KRequest, cpu_clock
from trtspec.spec.auxiliary import fit_aux, hand_back
from trtspec.spec.detokenize import IncrementalDetokenizer, decodes_whole
from trtspec.spec.logits_process import LogitsControls
from trtspec.spec.model import LlamaModel, forward_grouped
from trtspec.spec.params import SamplingParams, SpecParams
from trtspec.spec.proposers import PROPOSERS, Proposer, ProposerContext, runnable_methods
from trtspec.spec.proposers.draft_model import DraftModelProposer
from trtspec.spec.proposers.external import ExternalProposer
from trtspec.spec.request_state import EngineRequest, Prompt, RequestDelta, RequestOutput
from trtspec.spec.schedule_policy import GateState, SchedulePolicy
from trtspec.spec.scheduler import Schedule, Scheduler, SchedulerConfig
from trtspec.spec.step_phases import StepPhases


class SpecEngine(StepPhases):
    """Speculative decoding over a target LlamaModel with registered proposers (see module docstring)."""

    def __init__(self, target: LlamaModel, *, draft: LlamaModel | None = None, tokenizer: Any = None, max_k: int = 8,
                 medusa: Path | None = None, eagle: Path | None = None, max_num_seqs: int = 256,
                 options: ProposerOptions | None = None, scheduler: SchedulerConfig | None = None,
                 k_policy: AdaptiveK | None = None, schedule: SpecSchedule | None = None) -> None:
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
                              medusa=medusa, options=options or ProposerOptions(),
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
                # one instance per key, whoever made it first (a hybrid may have made its drafter's already)
                self.proposers[key] = ctx.created.get(key) or PROPOSERS[key].create(ctx)
                ctx.created[key] = self.proposers[key]
            except ToolNotFoundError as exc:
                self.unavailable[m] = exc
        self.available_methods = tuple(m for m in loadable if m not in self.unavailable)
        # target layers whose input a proposer reads (EAGLE-3 taps), returned by every target forward
        self.taps: tuple[int, ...] = next((p.target_taps for p in self.proposers.values() if p.target_taps), ())
        self.external = ExternalProposer.create(ctx)  # a request's own first draft (SpecParams.draft_token_ids)
        # draft lengths of requests with SpecParams(adaptive=True); a CPU engine's steps timed in CPU time
        self.k_policy = k_policy or AdaptiveK(clock=cpu_clock if self.device.type == "cpu" else None)
        self.scheduler = Scheduler(scheduler, allocate=self._allocate, release=self._release, preempt=self._preempt,
                                   num_cached=lambda request: self.cache.length(request.slot))
        self.stats = AcceptanceStats()  # aggregated over finished requests
        self.last_iteration: IterationStats | None = None  # the latest step's counts (servers publish them)
        self._iterations = itertools.count()
        if schedule is not None:
            schedule.check(max_k=max_k)
        # draft length by batch size, no speculation above max_concurrency, the acceptance gate; None: always k
        self.schedule_policy = SchedulePolicy(schedule) if schedule is not None else None
        self._ids = itertools.count()

    @classmethod
    def from_pretrained(cls, target: str | Path = "tiny", draft: str | Path | None = None, medusa: str | Path | None = None,
                        *, eagle: str | Path | None = None, max_k: int = 8, device: str = "cpu", dtype: str = "float32",
                        max_num_seqs: int = 256, allow_vocab_padding: bool = False,
                        options: ProposerOptions | None = None, scheduler: SchedulerConfig | None = None,
                        schedule: SpecSchedule | None = None, draft_runtime: str = "torch") -> SpecEngine:
        """Load a target (and optionally a draft) by embedded name or HF directory; `draft_runtime` onnx runs the
        draft in ONNX Runtime (spec.onnx_draft: exported and checked against the checkpoint at load).

        Refuses a draft whose vocabulary or tokenizer differs from the target's before anything runs
        (IncompatibleModelsError naming both sizes); `allow_vocab_padding` accepts padding-only differences.
        """
        from trtspec.models import check_pair, resolve_eagle, resolve_medusa, resolve_model

        target_path = resolve_model(target, field="target")
        draft_path = resolve_model(draft, field="draft") if draft is not None else None
        if draft_path is not None:
            check_pair(target_path, draft_path, allow_vocab_padding=allow_vocab_padding)
        medusa_path = resolve_medusa(medusa) if medusa is not None else None
        draft_model = LlamaModel.from_pretrained(draft_path, dtype=dtype, device=device, field="draft") if draft_path else None
        if draft_runtime != "torch":  # EngineConfig checked the value and that a float32 CPU draft is set
            from trtspec.spec.onnx_draft import load_onnx_draft

            if draft_path is None or draft_model is None:
                raise ConfigError("draft_runtime", draft_runtime, "runs the draft model, and no draft is set",
                                  hint="set draft (e.g. tiny-draft), or draft_runtime torch")
            draft_model = load_onnx_draft(draft_path, draft_model)  # type: ignore[assignment]
        return cls(
            LlamaModel.from_pretrained(target_path, dtype=dtype, device=device, field="target"),
            draft=draft_model,
            tokenizer=_load_tokenizer(target_path),
            max_k=max_k,
            medusa=medusa_path,
            eagle=resolve_eagle(eagle) if eagle is not None else None,
            max_num_seqs=max_num_seqs,
            options=options,
            scheduler=scheduler,
            schedule=schedule,
        )

    @classmethod
    def from_config(cls, config: EngineConfig, *, scheduler: SchedulerConfig | None = None) -> SpecEngine:
        """The engine an EngineConfig describes (what every server runs): its checkpoints, max k, device and dtype,
        each proposer's typed part, its speculation schedule, and a request queue of `max_queue`."""
        return cls.from_pretrained(
            target=config.target, draft=config.draft, medusa=config.medusa, eagle=config.eagle,
            draft_runtime=config.draft_runtime,
            max_k=max(config.max_k, 1), device=config.device, dtype=config.dtype, options=config.proposer_options(),
            scheduler=scheduler or SchedulerConfig(max_queue_len=config.max_queue).validate(),
            schedule=config.schedule)

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
        if self.schedule_policy is not None:
            self.schedule_policy.forget(request_id)
        return self.scheduler.abort(request_id) is not None

    @property
    def gate_state(self) -> GateState | None:
        """The acceptance gate (open, window mean, closes, opens, probes); None without a gate. Safe to read from
        any thread (a frozen snapshot)."""
        policy = self.schedule_policy
        return policy.state if policy is not None and policy.gated else None

    def step(self) -> list[RequestDelta]:
        """One speculative step for every scheduled request; returns what each of them gained."""
        step_start = time.perf_counter()
        self.last_iteration = None  # set in phase 6 when the step ran anything
        # 1. schedule: running requests + admissions within the token and KV budgets; k per request, capped by the
        #    speculation schedule at this batch size (and the gate), then chosen within the caps and trimmed
        schedule = self.scheduler.schedule(self._step_k)
        batch = schedule.requests
        if not batch:
            return []
        caps = self._scheduled_ks(schedule)
        ks = self.scheduler.allot_draft_tokens(schedule, self.k_policy.choose(self._k_requests(batch, caps)))

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
        verdicts, target_scores = self._verify_batch(batch, drafts, out.logits, num_pending)  # one ragged batch

        context = [n > 1 or not r.output_ids for r, n in zip(batch, num_pending, strict=True)]  # prefill rows
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
        # a hybrid's choice per request (its draft names the proposer that made it): the suffix tree or its model
        hybrid = [s if v.num_draft_tokens and r.proposer is not None and s not in ("", r.proposer.name,
                                                                                 ExternalProposer.name) else ""
                  for r, v, s in zip(batch, verdicts, sources, strict=True)]
        if self.schedule_policy is not None:  # a per-iteration gate samples the batch's accepted / drafted
            self.schedule_policy.step(sum(v.num_draft_tokens for v in verdicts), sum(v.num_accepted for v in verdicts))
        self.last_iteration = IterationStats(
            iteration=next(self._iterations), timestamp=time.time(), latency_s=time.perf_counter() - step_start,
            draft_latency_s=draft_time, num_active_requests=len(batch), num_queued_requests=len(self.scheduler.waiting),
            num_context_requests=sum(context), num_generation_requests=len(batch) - sum(context),
            num_context_tokens=sum(n for n, c in zip(num_pending, context, strict=True) if c),
            num_completed_requests=sum(d.finished for d in deltas),
            num_requests_with_draft_tokens=sum(v.num_draft_tokens > 0 for v in verdicts),
            num_draft_tokens=sum(v.num_draft_tokens for v in verdicts),
            num_accepted_tokens=sum(v.num_accepted for v in verdicts),
            num_emitted_tokens=sum(len(d.token_ids) for d in deltas),
            num_hybrid_suffix_drafts=sum(h == SUFFIX.proposer for h in hybrid),
            num_hybrid_model_drafts=sum(h not in ("", SUFFIX.proposer) for h in hybrid))
        for request, verdict, delta, source, chosen in zip(batch, verdicts, deltas, sources, hybrid, strict=True):
            stats = request.stats
            if verdict.num_draft_tokens:
                stats.observe(verdict.num_draft_tokens, verdict.num_accepted)
                stats.num_hybrid_suffix_drafts += chosen == SUFFIX.proposer
                stats.num_hybrid_model_drafts += chosen not in ("", SUFFIX.proposer)
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
                if self.schedule_policy is not None:
                    self.schedule_policy.finish(request.request_id, stats)
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
        detokenizer = IncrementalDetokenizer(self.decode if self.tokenizer is not None else None,
                                             decodes_whole(self.tokenizer))
        while True:
            for delta in self.step():
                if delta.request_id != rid:
                    continue
                detokenizer.push_delta(delta)
                yield delta
                if delta.finished:
                    return

    # -- phases ------------------------------------------------------------------------------------------------
    def _scheduled_ks(self, schedule: Schedule) -> list[int]:
        """[batch] each request's reservation under the speculation schedule at this step's batch size, 0 while the
        acceptance gate is closed (probes excepted); the reservations as they are without a schedule. The k policy
        chooses within these caps, so adaptive requests and a caller's own draft are capped too."""
        policy = self.schedule_policy
        if policy is None:
            return schedule.ks
        admitted = set(schedule.admitted)
        for r in schedule.requests:
            if r.request_id in admitted:
                policy.admit(r.request_id, drafts=r.proposer is not None or r.external_draft is not None)
        return policy.caps(len(schedule.requests), [r.request_id for r in schedule.requests], schedule.ks)

    def _k_requests(self, batch: list[EngineRequest], reserved: list[int]) -> list[KRequest]:
        """A caller's draft keeps its length (not adaptive) and runs no draft model."""
        return [KRequest(request_id=r.request_id, method=r.spec.method if r.external_draft is None else "external",
                         cap=k, adaptive=r.spec.adaptive and r.external_draft is None,
                         pending=len(r.token_ids) - self.cache.length(r.slot),
                         uses_draft_model=resolve(r.spec.method).needs_draft_model and r.external_draft is None)
                for r, k in zip(batch, reserved, strict=True)]

    def _allocate(self, request: EngineRequest) -> None:
        """Admission (scheduler callback): a target KV slot and proposer state; the context is prefilled next."""
        request.slot = self.cache.alloc()
        if request.proposer is not None:
            request.proposer.add_request(request.request_id)
            request.proposer.observe_prompt(request.request_id, request.prompt_ids)

    def _step_k(self, request: EngineRequest) -> int:
        """Draft length this step: the request's k (its first step: the caller's draft length), capped so that
        neither max_new_tokens nor the context overflow: k accepted drafts and the bonus token make k + 1 new
        tokens, so k is at most max_context - len(token_ids) - 1 (plain decoding ends at exactly max_context)."""
        if request.external_draft is not None:
            k = len(request.external_draft)
        elif request.proposer is None:
            return 0
        else:
            k = request.spec.k
        remaining = request.sampling.max_new_tokens - len(request.output_ids)
        room = self.max_context - len(request.token_ids) - 1
        return max(0, min(k, remaining - 1, room))

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

    def _make_request(self, prompt: Prompt, sampling: SamplingParams, spec: SpecParams) -> EngineRequest:
        ids = self._validate(prompt, sampling, spec)
        info = resolve(spec.method)
        proposer = self.proposers[info.proposer] if spec.k > 0 and info.proposer is not None else None
        seed = sampling.seed if sampling.seed is not None else secrets.randbits(63)
        eos = () if sampling.ignore_eos else self.target.config.eos_token_ids
        stop_ids = frozenset(eos) | frozenset(sampling.stop_token_ids)
        return EngineRequest(request_id=next(self._ids), prompt_ids=ids, sampling=sampling, spec=spec, proposer=proposer,
                        generator=torch.Generator(device=self.device).manual_seed(seed), stop_ids=stop_ids,
                        controls=LogitsControls.for_request(sampling, stop_ids, len(ids)),
                        external_draft=list(spec.draft_token_ids) or None)

    def _enqueue(self, request: EngineRequest) -> int:
        self.scheduler.add(request)  # OverloadedError past the queue limit
        return request.request_id

    def _preempt(self, request: EngineRequest) -> None:
        """Recompute preemption: free the KV slot; the proposer keeps what the context cannot rebuild (`preempt`)."""
        if request.slot is not None:
            self.cache.free(request.slot)
            request.slot = None
        if request.proposer is not None:
            request.proposer.preempt(request.request_id)

    def _release(self, request: EngineRequest) -> None:
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
    """The checkpoint's tokenizer (trtspec.text_codec: the `tokenizers` library for a tokenizer.json, so an engine
    starts without importing transformers; the Hugging Face tokenizer behind it for everything else), or None."""
    if not (path / "tokenizer.json").is_file() and not (path / "tokenizer_config.json").is_file():
        return None
    from trtspec.text_codec import TextCodec

    return TextCodec(path)
