"""Fixtures for the reference-engine tests: a draft that is a perturbed copy of the random target (partial acceptance),
HF reference models, and the embedded pair when it is present."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from trtspec.models import EMBEDDED_MODELS


@pytest.fixture(autouse=True, scope="session")
def _few_threads() -> None:
    torch.set_num_threads(1)  # 2 shared cores on CI machines


@pytest.fixture(scope="session")
def near_draft(random_pair: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The random target with noise added to every weight: agrees with the target often, not always."""
    from tests.shared_files import made_once

    def make(base: Path) -> None:
        from transformers import LlamaForCausalLM

        model = LlamaForCausalLM.from_pretrained(random_pair[0])
        gen = torch.Generator().manual_seed(7)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn(p.shape, generator=gen) * 0.05)
        model.save_pretrained(base / "draft", safe_serialization=True)

    return made_once(tmp_path_factory, "near_draft", make) / "draft"


@pytest.fixture(scope="session")
def hf_target(random_pair: tuple[Path, Path]):
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM.from_pretrained(random_pair[0]).eval()


@pytest.fixture(scope="session")
def embedded_pair() -> tuple[Path, Path]:
    target, draft = EMBEDDED_MODELS / "tiny", EMBEDDED_MODELS / "tiny-draft"
    if not (target / "config.json").is_file() or not (draft / "config.json").is_file():
        pytest.skip("embedded tiny models not present yet")
    return target, draft


def hf_greedy(model, prompt: list[int], max_new_tokens: int) -> list[int]:
    """transformers' own greedy decoding of `prompt` (EOS stops it, as in the engine)."""
    out = model.generate(torch.tensor([prompt]), max_new_tokens=max_new_tokens, do_sample=False,
                         attention_mask=torch.ones(1, len(prompt), dtype=torch.long))
    ids = out[0, len(prompt):].tolist()
    eos = model.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [eos])
    for i, t in enumerate(ids):
        if t in eos:
            return ids[: i + 1]
    return ids


def two_token_joint(model, prompt: list[int], temperature: float, top_k: int) -> dict[tuple[int, int], float]:
    """transformers' exact distribution of the first two tokens after `prompt` at `temperature` and top-k: the
    reference a sampled speculative method's chi-square test compares with."""
    from trtspec.spec.sampling import logits_to_probs

    with torch.no_grad():
        first = logits_to_probs(model(torch.tensor([prompt])).logits[0, -1], temperature, top_k)
        out = {}
        for t1 in first.nonzero().flatten().tolist():
            second = logits_to_probs(model(torch.tensor([prompt + [t1]])).logits[0, -1], temperature, top_k)
            out.update({(t1, t2): float(first[t1] * second[t2]) for t2 in second.nonzero().flatten().tolist()})
    return out
