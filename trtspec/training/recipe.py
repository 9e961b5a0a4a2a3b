"""What the trainers share: the progress callback, and the self-distillation data recipe of the Medusa and EAGLE-3
trainers (`training.medusa.distillation_prompts` builds the data from it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

Progress = Callable[[str, int, int, str], None]  # (stage, done, total, info)


def silent(stage: str, done: int, total: int, info: str) -> None:
    """A `Progress` that shows nothing."""


@dataclass
class SelfDistillRecipe:
    """The self-distillation data: corpus prompts the frozen target continues itself, corpus windows it labels, and
    held-out prompts for evaluation. A trainer's recipe adds its own training settings."""

    num_prompts: int = 64  # self-distillation sequences: corpus prompts the target continues itself
    prompt_len: int = 32
    gen_len: int = 96
    num_corpus_windows: int = 64  # plus corpus windows of prompt_len + gen_len tokens, labelled by the target too
    eval_prompts: int = 24  # held-out prompts
    seed: int = 0

    def data_key(self) -> dict[str, Any]:
        """What the generated data depends on (a re-run with other training settings may reuse it)."""
        return {f.name: getattr(self, f.name) for f in fields(SelfDistillRecipe)}
