"""N-gram prompt lookup: copy the continuation of an earlier occurrence of the context's last n tokens.

No draft model and no probabilities (one-hot drafts): the verifier accepts token x with probability target(x).
Matching follows transformers' PromptLookupCandidateGenerator: try n = max_ngram down to min_ngram, take the earliest
occurrence that has a continuation, and copy up to k tokens of it.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from trtspec.errors import ConfigError
from trtspec.methods.ngram import NGRAM
from trtspec.spec.proposers.base import Draft, ProposeInput, Proposer, ProposerContext


class NgramProposer(Proposer):
    """Prompt-lookup proposer.

    Example:
        context [5, 6, 7, 9, 5, 6], k=2, max_ngram=3: the 3-gram [9, 5, 6] never occurred before, the 2-gram
        [5, 6] occurred at position 0, followed by [7, 9] -> Draft(token_ids=[7, 9], draft_probs=None).
    """

    name: ClassVar[str] = NGRAM.proposer_key()  # its method home names it

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise ConfigError(NGRAM.section, (min_ngram, max_ngram), "needs 1 <= min_ngram <= max_ngram",
                              hint="e.g. min_ngram=1, max_ngram=3")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram

    @classmethod
    def create(cls, ctx: ProposerContext) -> NgramProposer:
        return cls(max_ngram=ctx.options.ngram.max_size, min_ngram=ctx.options.ngram.min_size)

    def propose(self, batch: list[ProposeInput]) -> list[Draft]:
        return [Draft(token_ids=torch.tensor(self.lookup(item.token_ids, item.k), dtype=torch.long))
                for item in batch]

    def lookup(self, token_ids: list[int], k: int) -> list[int]:
        """Up to k tokens continuing the earliest earlier match of the longest matching suffix n-gram."""
        context = torch.tensor(token_ids, dtype=torch.long)  # [context]
        length = context.shape[0]
        for n in range(min(self.max_ngram, length - 1), self.min_ngram - 1, -1):
            windows = context.unfold(0, n, 1)  # [length - n + 1, n]
            matches = (windows == context[-n:]).all(-1)  # [length - n + 1]
            # a match must be followed by at least one token (the suffix itself is not)
            starts = matches[: length - n].nonzero().flatten()  # [num_matches]
            if starts.numel():
                start = int(starts[0]) + n
                return token_ids[start : start + k]
        return []
