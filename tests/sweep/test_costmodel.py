"""Cost-model math on synthetic numbers."""

from __future__ import annotations

import json

import pytest

from trtspec.contracts import costmodel as cm


def test_expected_tokens_geometric_and_per_position():
    alpha = 0.6
    per_pos = [alpha ** i for i in range(1, 6)]
    for k in range(6):
        assert cm.expected_tokens_per_step(per_pos, k) == pytest.approx(cm.geometric_tokens_per_step(alpha, k))
    assert cm.geometric_tokens_per_step(1.0, 4) == 5.0
    assert cm.geometric_tokens_per_step(0.0, 4) == 1.0
    assert cm.fit_alpha(cm.geometric_tokens_per_step(0.73, 5), 5) == pytest.approx(0.73, abs=1e-9)


def test_predicted_speedup_formula():
    costs = cm.StepCosts(1, {1: 0.010, 5: 0.012}, draft_s=0.001)
    pred = cm.predict(4, 3.0, costs, overhead_base_s=0.002, overhead_spec_s=0.003)
    # E * (T(1) + o_base) / (k T_d + T(k+1) + o_spec) = 3 * 0.012 / (0.004 + 0.012 + 0.003)
    assert pred.speedup == pytest.approx(3 * 0.012 / 0.019)
    assert pred.tokens_per_s == pytest.approx(3 / 0.019)
    assert cm.predict(0, 1.0, costs).speedup == 1.0
    # interpolation of an unmeasured n
    assert costs.target(3) == pytest.approx(0.011)
    # n-gram style: the proposer cost is given per step instead of k draft forwards
    assert cm.predict(4, 3.0, costs, draft_step_s=0.0).spec_step_s == pytest.approx(0.012)


def test_optimal_k_is_zero_when_verification_is_expensive():
    e_by_k = {k: cm.geometric_tokens_per_step(0.7, k) for k in range(1, 9)}
    cheap = cm.StepCosts(1, {n: 0.010 for n in range(1, 10)}, draft_s=0.0005)
    best = cm.optimal_k(e_by_k, cheap)
    assert best.k >= 4 and best.speedup > 2
    # at a large batch, verification grows ~linearly with tokens (compute-bound): do not speculate
    bound = cm.StepCosts(64, {n: 0.010 * n for n in range(1, 10)}, draft_s=0.002)
    assert cm.optimal_k(e_by_k, bound).k == 0
    # per-k overheads are used for each candidate
    over = cm.optimal_k(e_by_k, cheap, overhead_spec_s={k: 1.0 if k > 1 else 0.0 for k in e_by_k})
    assert over.k == 1


def test_cost_per_million_tokens():
    assert cm.cost_per_million_tokens(1000.0, 3.6) == pytest.approx(1.0)  # $3.6/h at 1000 tok/s -> $1 per 1M
    assert cm.cost_per_million_tokens(0.0, 1.0) == float("inf")


def test_llama_params_matches_transformers(random_pair):
    from transformers import LlamaForCausalLM

    for path in random_pair:
        cfg = json.loads((path / "config.json").read_text())
        model = LlamaForCausalLM.from_pretrained(path)
        assert cm.llama_params(cfg) == sum(p.numel() for p in model.parameters())


def test_projection_is_labelled_and_memory_bound_at_batch_1():
    target, draft = cm.ModelSize("8B", 8_000_000_000), cm.ModelSize("1B", 1_000_000_000)
    t1 = cm.projected_forward_s(target, cm.GPUS["H100"], batch=1, num_tokens=1)
    assert t1 == pytest.approx(16e9 / 3.35e12)
    # memory-bound at batch 1: verifying 5 tokens costs the same as 1
    assert cm.projected_forward_s(target, cm.GPUS["H100"], batch=1, num_tokens=5) == t1
    # compute-bound at a large batch: cost grows with tokens
    assert cm.projected_forward_s(target, cm.GPUS["H100"], batch=512, num_tokens=5) > \
        cm.projected_forward_s(target, cm.GPUS["H100"], batch=512, num_tokens=1)
    proj = cm.project("H200", target, draft, {4: 3.0}, [1, 512])
    assert all("projection" in p.label for p in proj)
    at1 = next(p for p in proj if p.batch_size == 1 and p.k == 4)
    assert at1.speedup == pytest.approx(3.0 / (1 + 4 / 8))  # E / (1 + k * draft/target weight ratio)
    at512 = next(p for p in proj if p.batch_size == 512 and p.k == 4)
    assert at512.speedup < at1.speedup
