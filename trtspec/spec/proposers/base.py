"""The proposer interface: what a proposer gets (ProposeInput), what it returns (Draft), and how it is built.

A proposer turns each running sequence's context into a Draft: a chain or a tree of candidate tokens with the draft
distributions they were sampled from, or without them (one-hot drafts such as n-gram lookups). Proposers never call
the target model; verifiers never know which proposer made a draft. Proposers keep per-request state (e.g. a draft
KV slot) keyed by request id: `add_request` -> (`propose` -> `commit`)* -> `free`. Each one reads its own typed part
of the engine configuration (`ProposerContext.options`: trtspec.contracts.engine.ProposerOptions).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import torch
from torch import Tensor

from trtspec.contracts.engine import ProposerOptions

if TYPE_CHECKING:
    from torch import nn

    from trtspec.spec.logits_process import LogitsControls
    from trtspec.spec.model import LlamaConfig, LlamaModel
    from trtspec.spec.params import SamplingParams


@dataclass(frozen=True)
class Draft:
    """Candidate tokens for one sequence: a chain by default, a tree when `parents` branches.

    Node i's parent is parents[i] (-1 = the sequence's last committed token); a chain has parents [-1, 0, 1, ...].
    Nodes are listed parents-first (parents[i] < i).
    """

    token_ids: Tensor  # [num_draft] int64
    draft_probs: Tensor | None = None  # [num_draft, vocab] distributions the tokens were sampled from; None = one-hot
    parents: tuple[int, ...] | None = None  # [num_draft]; None = chain
    aux: AuxBranch | None = None  # tokens forwarded alongside the draft, never verified or committed (lookahead)
    drafter: str | None = None  # the proposer that made it, where a hybrid chose one (None: the request's proposer)

    @property
    def num_tokens(self) -> int:
        return self.token_ids.shape[0]

    @property
    def is_chain(self) -> bool:
        return self.parents is None or all(p == i - 1 for i, p in enumerate(self.parents))

    @classmethod
    def empty(cls) -> Draft:
        return cls(token_ids=torch.zeros(0, dtype=torch.long))


@dataclass(frozen=True)
class AuxBranch:
    """Auxiliary tokens the engine forwards in the same target pass as the draft, masked so that neither side sees
    the other; they are never verified or committed. After the forward the engine hands the target's argmax at each
    of them to `proposer.observe_auxiliary(request_id, argmax_ids)` (before `commit`) and drops their KV entries.
    Lookahead decoding's Jacobi window is such a branch.

    Every aux token sees the whole committed context; among the aux tokens it sees what `mask` allows.
    """

    token_ids: Tensor  # [num_aux] int64
    depths: Tensor  # [num_aux] int64 >= 1: position = position of the last committed token + depth
    mask: Tensor  # [num_aux, num_aux] bool, mask[i, j] = aux token i may attend to aux token j (mask[i, i] True)

    @property
    def num_tokens(self) -> int:
        return self.token_ids.shape[0]


@dataclass
class ProposeInput:
    """One sequence's request to a proposer for this step."""

    request_id: int
    token_ids: list[int]  # [context] prompt + generated tokens so far (the last one is not yet in the target cache)
    k: int  # draft tokens wanted (>= 1)
    sampling: SamplingParams
    generator: torch.Generator | None
    target_hidden: Tensor | None = None  # [hidden] target's last hidden state, for proposers that need it (Medusa)
    # the request's logits processors (penalties, bans): a proposer that samples may shape its draft distributions
    # like the target's (higher acceptance; exactness never depends on it). None = temperature/top-k/top-p only.
    controls: LogitsControls | None = None
    draft_token_ids: tuple[int, ...] = ()  # the caller's own draft (ExternalProposer only)


@dataclass
class ProposerContext:
    """The shared parts a proposer may need; the engine fills it once at load time."""

    vocab_size: int  # target vocab (width of draft_probs)
    max_k: int
    max_num_seqs: int = 256  # concurrent sequences (KV slots) the engine may schedule
    draft_model: LlamaModel | None = None
    medusa: Path | None = None
    options: ProposerOptions = field(default_factory=ProposerOptions)  # each proposer reads its own typed part
    hidden_size: int | None = None  # target hidden size (Medusa heads must match it)
    eagle: Path | None = None  # EAGLE-3 drafter directory
    target_config: LlamaConfig | None = None  # the target's shape (an EAGLE drafter is checked against it)
    target_embed: nn.Embedding | None = None  # the target's embeddings, shared with an EAGLE drafter (vLLM does too)
    # the proposers the engine has created so far, by key: a composite (a hybrid's model drafter) shares one instead
    # of loading its weights again (per-request state is keyed by request id, so one instance serves both)
    created: dict[str, Proposer] = field(default_factory=dict)


class Proposer:
    """What every proposer is: `create`, then per request `add_request` -> (`propose` -> `commit`)* -> `free`.

    Every hook the engine calls is declared here; the ones a proposer does not need are no-ops.
    """

    name: ClassVar[str]
    needs_hidden_states: ClassVar[bool] = False  # the engine passes ProposeInput.target_hidden when True
    # The target layers whose input the proposer reads (EAGLE-3): every target forward returns them
    # (LlamaModel.forward(taps=...)), and `observe_target` receives those of the committed positions. () = none.
    target_taps: tuple[int, ...] = ()

    @classmethod
    def create(cls, ctx: ProposerContext) -> Proposer:
        """Build from the engine's parts; raise ConfigError when a required part is missing."""
        raise NotImplementedError

    @classmethod
    def check_installed(cls) -> None:
        """Raise ToolNotFoundError (with the install hint) when an optional package the proposer needs is missing;
        the engine host calls it before loading anything (spec/host.py `check`)."""

    def propose(self, batch: list[ProposeInput]) -> list[Draft]:
        """One Draft per input, in order; a Draft may be shorter than k (even empty)."""
        raise NotImplementedError

    def add_request(self, request_id: int) -> None:
        """A request was admitted (again, after a preemption)."""

    def commit(self, request_id: int, token_ids: list[int]) -> None:
        """The sequence's context after verification (accepted + recovered/bonus appended): roll state back to it."""

    def free(self, request_id: int) -> None:
        """The request is gone: drop its state."""

    def preempt(self, request_id: int) -> None:
        """The request lost its KV (recompute preemption) and will be admitted again. By default its state goes (it
        is rebuilt from the context); a proposer with host-only state that the context cannot rebuild keeps it."""
        self.free(request_id)

    def observe_prompt(self, request_id: int, prompt_ids: list[int]) -> None:
        """At admission, after `add_request`: the prompt (proposers that learn from whole requests: suffix)."""

    def observe_finish(self, request_id: int, token_ids: list[int]) -> None:
        """The finished context, before `free` (proposers that learn from whole requests: suffix)."""

    def observe_auxiliary(self, request_id: int, argmax_ids: list[int]) -> None:
        """The target's argmax at each token of the request's AuxBranch, before `commit` (lookahead)."""

    def observe_target(self, request_id: int, start: int, features: Tensor) -> None:
        """Before `commit`: the taps (`target_taps`) of the positions committed this step, [n, taps * hidden] for
        positions start .. start + n - 1 (the uncached context tokens, then the accepted draft tokens)."""
