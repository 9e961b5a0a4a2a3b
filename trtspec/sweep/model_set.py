"""The models one sweep engine holds (`ModelSet`), and the distinct sets a sweep's cases need, in first-seen order.

Shared by the runner (one calibration per set) and the engine backend (one engine per set), so neither imports the
other for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from trtspec.methods.draft_target import DRAFT_TARGET
from trtspec.methods.eagle import EAGLE3
from trtspec.methods.medusa import MEDUSA
from trtspec.sweep.grid import Case, case_id


@dataclass(frozen=True)
class ModelSet:
    """The models one engine holds: the target plus at most one draft model, Medusa heads or EAGLE-3 drafter."""

    model: str
    draft: str | None = None
    medusa: str | None = None
    eagle: str | None = None
    draft_runtime: str | None = None  # what runs the draft model when not torch (Case.draft_runtime)

    @property
    def calibration_id(self) -> str:
        extra = {EAGLE3.checkpoint: self.eagle} if self.eagle else {}  # ids written before EAGLE stay the same
        extra |= {"draft_runtime": self.draft_runtime} if self.draft_runtime else {}  # likewise before draft_runtime
        return "calib-" + case_id({"model": self.model, DRAFT_TARGET.checkpoint: self.draft,
                                   MEDUSA.checkpoint: self.medusa, **extra})


def model_sets(cases: list[Case]) -> list[ModelSet]:
    """Distinct model sets of the cases, in first-seen order (a target-only set when no case uses a draft)."""
    seen: dict[ModelSet, None] = {}
    for case in cases:
        if case.draft or case.medusa or case.eagle:
            seen.setdefault(ModelSet(case.model, case.draft, case.medusa, case.eagle, case.draft_runtime))
    if not seen and cases:
        seen[ModelSet(cases[0].model)] = None
    return list(seen)
