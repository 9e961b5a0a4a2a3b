"""Proposer registry: `PROPOSERS[methods.resolve(method).proposer]` is the class that drafts for `method`.

Registering a proposer here is what makes its method runnable by the engine and selectable in the CLI.
"""

from __future__ import annotations

from trtspec.spec.proposers.base import AuxBranch, Draft, ProposeInput, Proposer, ProposerContext
from trtspec.spec.proposers.draft_model import DraftModelProposer
from trtspec.spec.proposers.eagle import EagleProposer
from trtspec.spec.proposers.lookahead import LookaheadProposer
from trtspec.spec.proposers.medusa import MedusaProposer
from trtspec.spec.proposers.ngram import NgramProposer
from trtspec.spec.proposers.suffix import SuffixProposer

PROPOSERS: dict[str, type[Proposer]] = {
    DraftModelProposer.name: DraftModelProposer,
    EagleProposer.name: EagleProposer,
    LookaheadProposer.name: LookaheadProposer,
    MedusaProposer.name: MedusaProposer,
    NgramProposer.name: NgramProposer,
    SuffixProposer.name: SuffixProposer,
}


def runnable_methods() -> list[str]:
    """Engine methods that have a registered proposer (plus "none")."""
    from trtspec.methods import engine_methods, resolve

    return [m for m in engine_methods() if m == "none" or resolve(m).proposer in PROPOSERS]


__all__ = ["PROPOSERS", "AuxBranch", "Draft", "ProposeInput", "Proposer", "ProposerContext", "runnable_methods"]
