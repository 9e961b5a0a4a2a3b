"""External drafts: the caller brings the draft (TensorRT-LLM's `draft_input_ids` on a draft_tokens_external engine).

NVIDIA's speculative-decoding clients (tensorrtllm_backend `e2e_grpc_speculative_decoding_client.py`, the BLS
`_spec_generate`) run the draft model themselves and send its tokens to the target model with
`request_output_len = len(draft) + 1`. The target verifies them in the request's first step, right after the
prompt, and generation then continues without a draft up to request_output_len. Here the engine gives a request's
`SpecParams.draft_token_ids` to this proposer in its first step only; later steps use the request's own method
(method "none": plain decoding). The draft is one-hot (no draft probabilities), so the existing verifiers apply:
greedy is exact, and at temperature > 0 rejection sampling of a one-hot draft accepts token x with probability
target(x) and resamples from the target without x, which is lossless.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from trtspec.spec.proposers.base import Draft, ProposeInput, Proposer, ProposerContext


class ExternalProposer(Proposer):
    """The caller's draft, cut to the step's k.

    Example:
        ProposeInput(token_ids=[5, 6, 7], k=3, draft_token_ids=(8, 9, 4, 2)) -> Draft(token_ids=[8, 9, 4]), one-hot.
    """

    name: ClassVar[str] = "external"

    @classmethod
    def create(cls, ctx: ProposerContext) -> ExternalProposer:
        return cls()

    def propose(self, batch: list[ProposeInput]) -> list[Draft]:
        return [Draft(token_ids=torch.tensor(item.draft_token_ids[: item.k], dtype=torch.long)) for item in batch]
