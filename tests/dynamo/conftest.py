"""Fixtures for the Dynamo tests."""

from __future__ import annotations

import pytest

MAX_TOKENS = 24


@pytest.fixture(scope="session")
def reference():
    """The target's own greedy output: the reference engine without speculation (plain decoding)."""
    import torch

    from trtspec.spec.engine import SpecEngine
    from trtspec.spec.params import SamplingParams, SpecParams

    torch.set_num_threads(1)
    engine = SpecEngine.from_pretrained("tiny")
    cache: dict[tuple[str, int], object] = {}

    def greedy(prompt: str, max_tokens: int = MAX_TOKENS):
        if (prompt, max_tokens) not in cache:
            cache[prompt, max_tokens] = engine.generate(
                [engine.encode(prompt)], SamplingParams(temperature=0.0, max_new_tokens=max_tokens),
                SpecParams(method="none"))[0]
        return cache[prompt, max_tokens]

    return greedy
