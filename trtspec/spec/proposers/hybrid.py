"""Hybrid proposers (methods/hybrid.py): suffix decoding's draft where the suffix tree's match is strong, a model
drafter's elsewhere, chosen per request and per step.

Each step every request first gets the suffix tree's draft (arctic-inference's `speculate`: tokens, score = the sum of
their estimated acceptance probabilities, match length). It is taken when it is not empty, its score is at least the
threshold (`Hybrid.min_score`; unset: the model drafter's k this step, arctic-inference's rule `score >= n_predict`)
and its match at least `Hybrid.min_match_len` tokens long; the other requests go to the model drafter in one batched
call, each asking at most `Hybrid.drafter_k` tokens (unset: 4, capped by the request's k). Every Draft names the proposer that made it (`Draft.drafter`),
which the engine counts per request and per step (AcceptanceStats / IterationStats `num_hybrid_*_drafts`).

Both parts see every request's whole lifecycle (admission, each commit, the target's taps for EAGLE-3, finish), so a
model drafter that sat out some steps catches up on its next proposal: the draft model feeds the tokens its cache
lacks, the EAGLE-3 drafter the target features pending since its last draft. Drafts stay each part's own (one-hot
suffix trees; draft-model chains with their distributions; EAGLE-3 trees), so verification is exact at any temperature
and a greedy output is the target's own.

The suffix tree here is the hybrid's own (its global cache is not method `suffix`'s), configured by the engine
configuration's `suffix` part; the EAGLE-3 tree by its `eagle_tree` part.
"""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

from torch import Tensor

from trtspec.contracts.engine import Hybrid
from trtspec.errors import ConfigError
from trtspec.methods.hybrid import SUFFIX_DRAFT, SUFFIX_EAGLE3
from trtspec.methods.suffix import SUFFIX
from trtspec.spec.proposers.base import Draft, ProposeInput, Proposer, ProposerContext
from trtspec.spec.proposers.draft_model import DraftModelProposer
from trtspec.spec.proposers.eagle import EagleProposer
from trtspec.spec.proposers.suffix import SuffixProposer, load_arctic


class HybridProposer(Proposer):
    """The suffix tree first, a model drafter where its draft is weak (module docstring). Subclasses name the
    drafter (`drafter_class`) and what a configuration without it is told."""

    drafter_class: ClassVar[type[Proposer]]
    drafter_field: ClassVar[str]  # the EngineConfig field (and CLI flag) naming the drafter's checkpoint
    drafter_example: ClassVar[str]

    def __init__(self, suffix: SuffixProposer, drafter: Proposer, options: Hybrid = Hybrid()) -> None:
        self.suffix = suffix
        self.drafter = drafter
        self.options = options
        self.target_taps = drafter.target_taps  # EAGLE-3's taps: every target forward returns them

    @classmethod
    def create(cls, ctx: ProposerContext) -> HybridProposer:
        if not cls.drafter_given(ctx):
            raise ConfigError(cls.drafter_field, None, f"method {cls.name} drafts with a model where the suffix "
                              "match is weak, and none is given",
                              hint=f"pass {cls.drafter_field}={cls.drafter_example!r} (--{cls.drafter_field} "
                                   f"{cls.drafter_example}), or use method suffix alone")
        # the engine's own drafter proposer, made before or after this one: one instance, loaded once
        key = cls.drafter_class.name
        if key not in ctx.created:
            ctx.created[key] = cls.drafter_class.create(ctx)
        return cls(SuffixProposer(ctx.options.suffix), ctx.created[key], ctx.options.hybrid)

    @staticmethod
    def drafter_given(ctx: ProposerContext) -> bool:
        raise NotImplementedError

    @classmethod
    def check_installed(cls) -> None:
        load_arctic()  # ToolNotFoundError (exit 3) with the install hint

    # -- lifecycle: both parts see every request -------------------------------------------------------------------
    def add_request(self, request_id: int) -> None:
        self.suffix.add_request(request_id)
        self.drafter.add_request(request_id)

    def observe_prompt(self, request_id: int, prompt_ids: list[int]) -> None:
        self.suffix.observe_prompt(request_id, prompt_ids)
        self.drafter.observe_prompt(request_id, prompt_ids)

    def observe_target(self, request_id: int, start: int, features: Tensor) -> None:
        self.drafter.observe_target(request_id, start, features)

    def commit(self, request_id: int, token_ids: list[int]) -> None:
        self.suffix.commit(request_id, token_ids)
        self.drafter.commit(request_id, token_ids)

    def observe_finish(self, request_id: int, token_ids: list[int]) -> None:
        self.suffix.observe_finish(request_id, token_ids)
        self.drafter.observe_finish(request_id, token_ids)

    def preempt(self, request_id: int) -> None:
        self.suffix.preempt(request_id)  # host trees kept
        self.drafter.preempt(request_id)  # KV state rebuilt from the context

    def free(self, request_id: int) -> None:
        self.suffix.free(request_id)
        self.drafter.free(request_id)

    def reset(self) -> None:
        """Forget the traffic (the suffix tree's global cache), as method suffix's `reset`."""
        self.suffix.reset()

    @property
    def num_cached_requests(self) -> int:
        return self.suffix.num_cached_requests

    # -- proposing -------------------------------------------------------------------------------------------------
    def drafter_k(self, k: int) -> int:
        """The model drafter's draft length for a request asking k."""
        return self.options.drafter_k_for(k)

    def propose(self, batch: list[ProposeInput]) -> list[Draft]:
        drafts: list[Draft | None] = [None] * len(batch)
        weak: list[int] = []  # batch indices the model drafter drafts for
        min_match = self.options.min_match_len or 0
        for i, item in enumerate(batch):
            draft, score, match_len = self.suffix.speculate(item)
            if draft.num_tokens and score >= self.options.threshold(self.drafter_k(item.k)) and match_len >= min_match:
                drafts[i] = replace(draft, drafter=SUFFIX.proposer)
            else:
                weak.append(i)
        if weak:
            inputs = [replace(batch[i], k=self.drafter_k(batch[i].k)) for i in weak]
            for i, draft in zip(weak, self.drafter.propose(inputs), strict=True):
                drafts[i] = replace(draft, drafter=self.drafter.name)
        return [d if d is not None else Draft.empty() for d in drafts]


class SuffixDraftProposer(HybridProposer):
    """Suffix decoding + a draft model (method suffix_draft)."""

    name: ClassVar[str] = SUFFIX_DRAFT.proposer_key()
    drafter_class = DraftModelProposer
    drafter_field = SUFFIX_DRAFT.checkpoint or ""
    drafter_example = SUFFIX_DRAFT.checkpoint_example or "tiny-draft"

    @staticmethod
    def drafter_given(ctx: ProposerContext) -> bool:
        return ctx.draft_model is not None


class SuffixEagleProposer(HybridProposer):
    """Suffix decoding + an EAGLE-3 drafter (method suffix_eagle3)."""

    name: ClassVar[str] = SUFFIX_EAGLE3.proposer_key()
    drafter_class = EagleProposer
    drafter_field = SUFFIX_EAGLE3.checkpoint or ""
    drafter_example = SUFFIX_EAGLE3.checkpoint_example or "tiny-eagle"

    @staticmethod
    def drafter_given(ctx: ProposerContext) -> bool:
        return ctx.eagle is not None
