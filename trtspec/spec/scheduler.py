"""Continuous-batching scheduler: waiting and running queues, a per-step token budget, KV admission and preemption.

Every step the engine asks `schedule(wanted_k)` for a batch. Policy (vLLM-style, FIFO by arrival):
  1. running requests keep running, oldest first, each with its next-token row and its reserved draft tokens;
  2. if the KV budget (slots, and optionally paged blocks) cannot hold every running request's step, the newest running
     request is preempted by recompute: its KV is freed, it goes back to the waiting queue at its arrival place, keeps
     its output so far, and its context (prompt + output) is prefilled again when it is re-admitted;
  3. waiting requests are admitted in arrival order while their prefill + drafts fit the token budget, a sequence
     slot and the KV budget (at least one request always runs, so a long prompt cannot block the queue forever);
  4. the k policy may then lower (never raise) each reservation; the tokens left go to auxiliary (lookahead) tokens.
Preempting the newest and admitting the oldest means no request starves. The scheduler knows requests only through
`SchedulableRequest` and KV only through the callbacks it is given; it never touches models or proposers.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from trtspec.errors import ConfigError, OverloadedError


class SchedulableRequest(Protocol):
    request_id: int  # increasing with arrival
    slot: int | None  # KV slot while running

    @property
    def token_ids(self) -> list[int]: ...


@dataclass(frozen=True)
class SchedulerConfig:
    """Limits of one engine.

    max_num_seqs: running sequences at most (the KV slot count).
    max_num_batched_tokens: target tokens per step: prefill + next-token rows + draft tokens (+ lookahead tokens).
    max_queue_len: requests accepted (waiting + running); one more raises OverloadedError.
    kv_block_size / num_kv_blocks: paged KV accounting; None = bounded by slots and context only.
    """

    max_num_seqs: int = 64
    max_num_batched_tokens: int = 4096
    max_queue_len: int = 1024
    kv_block_size: int = 16
    num_kv_blocks: int | None = None

    def validate(self) -> SchedulerConfig:
        for name in ("max_num_seqs", "max_num_batched_tokens", "max_queue_len", "kv_block_size"):
            if getattr(self, name) < 1:
                raise ConfigError(name, getattr(self, name), "must be >= 1")
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ConfigError("max_num_batched_tokens", self.max_num_batched_tokens,
                              f"must be >= max_num_seqs ({self.max_num_seqs}): every running sequence needs a token",
                              hint="raise max_num_batched_tokens or lower max_num_seqs")
        if self.num_kv_blocks is not None and self.num_kv_blocks < 1:
            raise ConfigError("num_kv_blocks", self.num_kv_blocks, "must be >= 1 (or None for no block limit)")
        return self


@dataclass
class Schedule:
    """One step's batch: requests in run order, their draft budgets, and what changed."""

    requests: list = field(default_factory=list)  # [batch] SchedulableRequest
    ks: list[int] = field(default_factory=list)  # [batch] draft tokens allowed this step
    admitted: list[int] = field(default_factory=list)  # request ids that got KV this step (prefill)
    preempted: list[int] = field(default_factory=list)  # request ids sent back to waiting this step
    tokens_left: int = 0  # budget not used by context + draft tokens (auxiliary lookahead tokens may use it)


class Scheduler:
    """Waiting/running queues over a KV budget (see module docstring).

    Args:
        allocate(request): give the request a KV slot (and proposer state); called on admission.
        release(request): free its KV slot and proposer state; called on finish and abort.
        num_cached(request): tokens of the request currently in the target KV cache.
        preempt(request): free its KV for recompute (default: release); host-side proposer state may be kept.
    """

    def __init__(self, config: SchedulerConfig, *, allocate: Callable[[SchedulableRequest], None],
                 release: Callable[[SchedulableRequest], None],
                 num_cached: Callable[[SchedulableRequest], int],
                 preempt: Callable[[SchedulableRequest], None] | None = None) -> None:
        self.config = config.validate()
        self.waiting: deque[SchedulableRequest] = deque()  # arrival order (preempted ones re-enter at their place)
        self.running: list[SchedulableRequest] = []  # arrival order
        self._allocate, self._release, self._num_cached = allocate, release, num_cached
        self._preempt_kv = preempt or release
        self.num_preemptions = 0

    # -- queue ---------------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.waiting) + len(self.running)

    def add(self, request: SchedulableRequest) -> None:
        """Enqueue a new request, or raise OverloadedError when the queue limit is reached (nothing is dropped)."""
        self.check_capacity(1)
        self.waiting.append(request)

    def check_capacity(self, num_new: int) -> None:
        """Raise OverloadedError unless `num_new` more requests fit the queue limit."""
        if len(self) + num_new > self.config.max_queue_len:
            raise OverloadedError(f"engine overloaded: {len(self)} requests are queued or running and {num_new} more "
                                  f"would exceed max_queue_len={self.config.max_queue_len}; rejected, nothing was queued",
                                  hint="retry later, or raise max_queue_len")

    def abort(self, request_id: int) -> SchedulableRequest | None:
        """Remove a request wherever it is and free its KV now; returns it (None if unknown)."""
        for queue in (self.running, self.waiting):
            for request in queue:
                if request.request_id == request_id:
                    queue.remove(request)
                    self._release(request)
                    return request
        return None

    def finish(self, request: SchedulableRequest) -> None:
        self.running.remove(request)
        self._release(request)

    # -- policy --------------------------------------------------------------------------------------------------
    def blocks(self, num_tokens: int) -> int:
        return -(-num_tokens // self.config.kv_block_size)

    def schedule(self, wanted_k: Callable[[SchedulableRequest], int]) -> Schedule:
        """Pick this step's batch and reserve each request's draft tokens (phases 1-4 of the module docstring).

        Args:
            wanted_k: draft tokens a request asks for this step (its k, or the adaptive policy's upper bound).
                Requests are admitted and kept only with their whole reservation, so a request's k is not cut
                because of its neighbours (which would change a seeded request's random draws); only a request
                running alone is trimmed to the budgets.
        """
        cfg = self.config
        out = Schedule()
        wanted: dict[int, int] = {}

        def reserve(request: SchedulableRequest) -> int:
            if request.request_id not in wanted:
                wanted[request.request_id] = max(0, wanted_k(request))
            return wanted[request.request_id]

        def kv_blocks(request: SchedulableRequest) -> int:  # KV the request holds during this step
            return self.blocks(len(request.token_ids) + reserve(request))

        # 2. preempt the newest running requests until every running request's step fits the KV blocks
        if cfg.num_kv_blocks is not None:
            while len(self.running) > 1 and sum(kv_blocks(r) for r in self.running) > cfg.num_kv_blocks:
                self._preempt(self.running[-1], out)
        # 1. running requests: their uncached tokens (normally the one token sampled last step) + reserved drafts
        budget = cfg.max_num_batched_tokens - sum(len(r.token_ids) - self._num_cached(r) + reserve(r)
                                                  for r in self.running)
        used_blocks = sum(kv_blocks(r) for r in self.running)
        # 3. admit waiting requests in arrival order while they fit (at least one request always runs)
        while self.waiting and len(self.running) < cfg.max_num_seqs:
            request = self.waiting[0]
            tokens = len(request.token_ids) + reserve(request)
            fits_tokens = tokens <= budget or not self.running
            fits_kv = (cfg.num_kv_blocks is None or used_blocks + kv_blocks(request) <= cfg.num_kv_blocks
                       or not self.running)
            if not (fits_tokens and fits_kv):
                break  # FIFO: later requests wait behind it
            self.waiting.popleft()
            try:
                self._allocate(request)
            except OverloadedError:  # the KV cache itself is out of slots: wait for a running request to finish
                self.waiting.appendleft(request)
                break
            self.running.append(request)
            out.admitted.append(request.request_id)
            budget -= tokens
            used_blocks += kv_blocks(request)
        # 4. reservations; a request running alone over the budgets gets fewer draft tokens
        out.requests = list(self.running)
        out.ks = [reserve(r) for r in out.requests]
        free_blocks = None if cfg.num_kv_blocks is None else cfg.num_kv_blocks - used_blocks
        for i in reversed(range(len(out.requests))):
            request = out.requests[i]
            while out.ks[i] > 0 and (budget < 0 or (free_blocks is not None and free_blocks < 0)):
                before = self.blocks(len(request.token_ids) + out.ks[i])
                out.ks[i] -= 1
                budget += 1
                if free_blocks is not None:
                    free_blocks += before - self.blocks(len(request.token_ids) + out.ks[i])
        out.tokens_left = max(0, budget)
        return out

    @staticmethod
    def allot_draft_tokens(schedule: Schedule, chosen: list[int]) -> list[int]:
        """Final draft lengths: the k policy's choice, never above the reservation; unused tokens return to the
        step's budget (auxiliary branches may use them).

        Args:
            chosen: [batch] draft tokens the k policy wants for each scheduled request.
        """
        ks = [max(0, min(k, reserved)) for k, reserved in zip(chosen, schedule.ks, strict=True)]
        schedule.tokens_left += sum(schedule.ks) - sum(ks)
        schedule.ks = ks
        return ks

    def _preempt(self, request: SchedulableRequest, out: Schedule) -> None:
        """Recompute preemption: free the KV, keep the output, requeue in arrival order (ahead of newer arrivals)."""
        self.running.remove(request)
        self._preempt_kv(request)
        position = next((i for i, r in enumerate(self.waiting) if r.request_id > request.request_id), len(self.waiting))
        self.waiting.insert(position, request)
        out.preempted.append(request.request_id)
        self.num_preemptions += 1
