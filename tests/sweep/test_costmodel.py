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


def _machine(b: float) -> cm.StepCosts:
    """Made-up costs at batch b: target 10 ms + 1 ms per row + 2 ms per extra token, draft 2 ms + 0.5 ms per extra
    token, prompt passes 40 ms (target) and 8 ms (draft) per row, calibrated at a 50-token prompt."""
    return cm.StepCosts(round(b), {n: 0.010 + 0.001 * b + 0.002 * (n - 1) for n in range(1, 6)}, draft_s=0.002,
                        target_prefill_s=0.040 * b, draft_prefill_s=0.008 * b,
                        draft_tokens_s={n: 0.002 + 0.0005 * (n - 1) for n in range(1, 6)}, prefill_tokens=50)


def test_admission_step_plain_decoding():
    # one of 4 rows admitted, 60-token prompt: its prompt pass + the 3 running rows' one-token forward
    got = cm.admission_seconds(_machine, rows=4, admitted=1, prompt_tokens=60, draft_len=0, draft_model=False,
                               overhead_s=0.001)
    assert got == pytest.approx(0.040 * 60 / 50 + (0.010 + 0.003) + 0.001)
    # a whole batch admitted together: the prompt pass at 4 rows, no running rows
    got = cm.admission_seconds(_machine, rows=4, admitted=4, prompt_tokens=60, draft_len=0, draft_model=False,
                               overhead_s=0.0)
    assert got == pytest.approx(0.160 * 60 / 50)


def test_admission_step_with_a_draft_model():
    # 1 of 4 admitted, k = 2, running rows catch up 2 tokens: target = P(1) (W + k) / L + T(3, 3);
    # draft = P_d(1) W / L + T_d(3, 2) + (k - 1) T_d(4, 1)
    got = cm.admission_seconds(_machine, rows=4, admitted=1, prompt_tokens=60, draft_len=2, draft_model=True,
                               overhead_s=0.001, catch_up_tokens=2)
    target = 0.040 * 62 / 50 + (0.010 + 0.003 + 0.004)
    draft = 0.008 * 60 / 50 + 0.0025 + 0.002
    assert got == pytest.approx(target + draft + 0.001)
    # batch 1, k = 4: the prompt pass over prompt + draft, the draft's prompt pass and 3 more draft forwards
    got = cm.admission_seconds(_machine, rows=1, admitted=1, prompt_tokens=40, draft_len=4, draft_model=True,
                               overhead_s=0.0)
    assert got == pytest.approx(0.040 * 44 / 50 + 0.008 * 40 / 50 + 3 * 0.002)
    # a model-free proposer: its measured lookup time instead of draft forwards
    got = cm.admission_seconds(_machine, rows=1, admitted=1, prompt_tokens=40, draft_len=4, draft_model=False,
                               overhead_s=0.0, draft_step_s=0.0003)
    assert got == pytest.approx(0.040 * 44 / 50 + 0.0003)
    # prefill costs without a calibrated prompt length are taken as they are
    bare = cm.admission_seconds(lambda b: cm.StepCosts(1, {1: 0.01}, target_prefill_s=0.05), rows=1, admitted=1,
                                prompt_tokens=99, draft_len=0, draft_model=False, overhead_s=0.0)
    assert bare == pytest.approx(0.05)


def test_blend_carries_the_calibrated_prompt_length():
    assert cm.blend(_machine(1), _machine(4), 0.5).prefill_tokens == 50


def _case(method: str, k: int, *, steps: int, trace: list[list[int]], forwards: int, draft_tokens: int,
          overhead: float = 0.001) -> dict:
    drafts = forwards if k else 0
    return {"kind": "case", "id": f"{method}-{k}", "status": "ok",
            "params": {"model": "m", "method": method, "k": k, "draft": "d" if k else None, "temperature": 0.0,
                       "suite": "code", "concurrency": 4, "max_new_tokens": 24, "num_prompts": 8, "seed": 0,
                       "via": "engine"},
            "metrics": {"wall_time_s": 1.0, "output_tokens": 192, "num_requests": 8, "num_steps": steps,
                        "num_admission_steps": len(trace), "admission_trace": trace,
                        "stats": {"num_target_forwards": forwards, "num_drafts": drafts,
                                  "num_draft_tokens": draft_tokens, "num_emitted_tokens": 2 * forwards if k else forwards,
                                  "overhead_time_s": overhead * forwards, "draft_time_s": 0.0,
                                  "mean_acceptance_length": 3.0 if k else 1.0}}}


def test_trace_prices_each_admission_step_and_the_other_steps_at_their_own_batch(tmp_path):
    from trtspec.sweep.analysis import load_results

    calibration = {"kind": "calibration", "id": "calib", "model": "m", "draft": "d", "medusa": None,
                   "prompt_tokens": 50, "target_s": {}, "draft_s": {}, "target_prefill_s": {}, "draft_prefill_s": {},
                   "draft_tokens_s": {}}
    for b in (1, 4):
        c = _machine(b)
        calibration["target_s"][str(b)] = {str(n): t for n, t in c.target_s.items()}
        calibration["draft_tokens_s"][str(b)] = {str(n): t for n, t in c.draft_tokens_s.items()}
        calibration["draft_s"][str(b)] = c.draft_s
        calibration["target_prefill_s"][str(b)] = c.target_prefill_s
        calibration["draft_prefill_s"][str(b)] = c.draft_prefill_s
    # plain: two waves of 4 admitted together; 18 other steps at 4 rows
    plain = _case("none", 0, steps=20, trace=[[4, 4, 60], [4, 4, 60]], forwards=80, draft_tokens=0)
    # k = 2 (every row drafts 2, commits 2 a step): a wave of 4, then 4 admissions of one row; 7 other steps at 3
    # rows on average (the batch drains at the tail), not the 41 / 12 rows of all steps
    spec = _case("draft_target", 2, steps=12, trace=[[4, 4, 60]] + [[4, 1, 60]] * 4, forwards=20 + 7 * 3,
                 draft_tokens=2 * 41)
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in (calibration, plain, spec)))
    rows = {r.k: r for r in load_results(path, "wall").rows}
    o = 0.001
    assert rows[0].modelled_s == pytest.approx(18 * (0.014 + o) + 2 * (0.160 * 60 / 50 + o))
    decode = 0.013 + 2 * 0.002 + (0.0025 + 0.002) + o  # T(3, 3) + T_d(3, catch-up 2) + T_d(3, 1)
    wave = 0.160 * 62 / 50 + 0.032 * 60 / 50 + 0.002 + o  # prompt passes of 4 rows + 1 more draft forward
    single = (0.040 * 62 / 50 + 0.017) + (0.008 * 60 / 50 + 0.0025 + 0.002) + o
    assert rows[2].modelled_s == pytest.approx(7 * decode + wave + 4 * single)
    assert rows[2].predicted_speedup == pytest.approx(rows[0].modelled_s / rows[2].modelled_s)
    from trtspec.sweep.report import _cost_model_section

    assert any(line.startswith("Error distribution over 1 cases: ") for line in
               _cost_model_section(load_results(path, "wall")))


def test_rounds_pair_each_case_with_its_own_rounds_baseline(tmp_path):
    from trtspec.sweep.analysis import load_results

    records = []
    for repeat, (base_s, case_s) in enumerate([(1.0, 0.5), (2.0, 1.25)]):  # the second round ran on a slower machine
        for method, k, seconds in (("none", 0, base_s), ("draft_target", 2, case_s)):
            rec = _case(method, k, steps=10, trace=[], forwards=10, draft_tokens=20 if k else 0)
            rec["id"] += f"#{repeat}"
            rec["params"]["repeat"] = repeat
            rec["metrics"]["wall_time_s"] = seconds
            records.append(rec)
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    row = next(r for r in load_results(path, "wall").rows if r.k)
    assert row.round_speedups == pytest.approx([2.0, 1.6])
    assert row.measured_speedup == pytest.approx(1.8)  # median of the paired rounds, not 1.5 / 0.875 (medians)


def test_error_distribution_counts_bounds_and_spread():
    from trtspec.sweep.analysis import CaseRow, error_distribution

    def row(k: int, measured: float, predicted: float, rounds: list[float]) -> CaseRow:
        return CaseRow(id=f"c{k}", params={"method": "ngram", "k": k, "temperature": 0.0, "suite": "code",
                                           "concurrency": 1}, tokens_per_s=1.0, wall_time_s=1.0, tokens_per_step=2.0,
                       acceptance_rate=0.5, per_pos=[], measured_speedup=measured, modelled_s=1.0,
                       base_modelled_s=predicted, round_speedups=rounds)

    rows = [row(1, 1.0, 1.04, [1.0, 1.03]), row(2, 1.0, 0.92, [1.0, 1.1, 1.05, 1.2]), row(3, 2.0, 2.6, []),
            row(0, 1.0, 1.0, [])]
    dist = error_distribution(rows)
    assert dist is not None and dist.cases == 3  # k = 0 is the baseline, not a case
    assert dist.within == {0.05: 1, 0.10: 2, 0.15: 2}
    assert dist.median_error == pytest.approx(0.08) and dist.worst_error == pytest.approx(0.30)
    assert dist.worst_case == "ngram k=3 T=0 code c=1"
    # split-half: rounds 0, 2 vs 1, 3: median(1.0, 1.05) / median(1.1, 1.2) - 1 = 1.025 / 1.15 - 1
    assert (dist.repeated, dist.halves_within_5) == (2, 1)
    assert dist.worst_halves == pytest.approx(1 - 1.025 / 1.15)
    assert dist.median_halves == pytest.approx((0.03 / 1.03 + 1 - 1.025 / 1.15) / 2)
    assert dist.median_spread == pytest.approx((0.03 + 0.2) / 2)
    assert "2 within 10%" in dist.lines()[0] and "(1 of 2 within 5%)" in dist.lines()[1]
    assert error_distribution([rows[-1]]) is None


def test_host_costs_per_step_and_per_draft_token():
    lo = cm.StepCosts(1, {1: 0.01}, overhead_s=0.0005, overhead_token_s=0.00002, proposer_s={"ngram": 0.0003})
    hi = cm.StepCosts(4, {1: 0.02}, overhead_s=0.0011, overhead_token_s=0.00008, proposer_s={"ngram": 0.0005})
    assert lo.host(2.5) == pytest.approx(0.0005 + 2.5 * 0.00002)
    assert cm.StepCosts(1, {1: 0.01}).host(2.0) is None  # not calibrated: the caller falls back to the run's own
    mid = cm.blend(lo, hi, 0.5)
    assert mid.host(1.0) == pytest.approx(0.0008 + 0.00005)
    assert mid.proposer_s == pytest.approx({"ngram": 0.0004})


def test_calibrated_host_time_replaces_the_runs_own(tmp_path):
    from trtspec.sweep.analysis import load_results

    calibration = {"kind": "calibration", "id": "calib", "model": "m", "draft": None, "medusa": None,
                   "prompt_tokens": 50, "target_s": {"1": {str(n): t for n, t in _machine(1).target_s.items()}},
                   "target_prefill_s": {"1": 0.040}, "overhead_s": {"1": 0.0005}, "overhead_token_s": {"1": 0.0001},
                   "proposer_s": {"ngram": {"1": 0.0003}}}
    plain = _case("none", 0, steps=20, trace=[[1, 1, 50]], forwards=20, draft_tokens=0, overhead=0.5)
    # ngram k = 3: 10 steps, 6 of them drafted 3 tokens (18 draft tokens over 10 rows: 1.8 per row and step)
    ngram = _case("ngram", 3, steps=10, trace=[[1, 1, 50]], forwards=10, draft_tokens=18, overhead=0.5)
    ngram["params"]["draft"] = None
    ngram["metrics"]["stats"]["num_drafts"] = 6
    ngram["metrics"]["stats"]["draft_time_s"] = 5.0  # the run's own n-gram time is not used either
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in (calibration, plain, ngram)))
    rows = {r.k: r for r in load_results(path, "wall").rows}
    assert rows[0].modelled_s == pytest.approx(19 * (0.011 + 0.0005) + (0.040 + 0.0005))
    host = 0.0005 + 0.0001 * 1.8
    share = 0.6  # batch 1: a step drafts with the rows' drafting frequency
    step = share * (0.011 + 3 * 0.002) + (1 - share) * 0.011 + 0.0003 + host  # T(1, 1 + 3) or T(1, 1); lookup; host
    assert rows[3].modelled_s == pytest.approx(9 * step + (0.040 * 53 / 50 + 0.0003 + host))
    assert rows[3].prediction.overhead_step_s == pytest.approx(host)


def test_engine_calibration_measures_host_time(random_pair):
    from trtspec.sweep.backend_engine import EngineBackend
    from trtspec.sweep.grid import SweepSpec
    from trtspec.sweep.runner import ModelSet

    target, draft = (str(p) for p in random_pair)
    spec = SweepSpec.build(model=target, drafts=[draft], methods=["draft_target", "ngram"], k=[0, 2], num_prompts=1,
                           max_new_tokens=4, max_draft_len=2, calibration_batch_sizes=[1, 2], calibration_repeats=1,
                           prompt_tokens=16, threads=1)
    backend = EngineBackend()
    try:
        backend.preflight(spec)  # one torch thread, as a sweep runs
        fields = backend.calibrate(spec, ModelSet(target, draft))
    finally:
        backend.close()
    assert fields["host_methods"] == ["none", "draft_target", "ngram"]
    for clock in ("s", "cpu_s"):
        assert set(fields[f"overhead_{clock}"]) == set(fields[f"overhead_token_{clock}"]) == {"1", "2"}
        assert all(v > 0 for v in fields[f"overhead_{clock}"].values())
        assert set(fields[f"proposer_{clock}"]) == {"ngram"}


def test_engine_calibration_keeps_a_cheaper_wider_forward(random_pair, monkeypatch):
    """A CPU forward over 4 tokens can cost less than over 3 (kernel widths): the calibration keeps each n's median."""
    from trtspec.sweep import backend_engine
    from trtspec.sweep.backend_engine import EngineBackend
    from trtspec.sweep.grid import SweepSpec
    from trtspec.sweep.runner import ModelSet

    seconds = {1: 0.010, 2: 0.012, 3: 0.015, 4: 0.013}
    monkeypatch.setattr(backend_engine._Bench, "time", lambda self, n: (seconds.get(n, 0.05), seconds.get(n, 0.05)))
    monkeypatch.setattr(backend_engine, "_host_costs", lambda *args: {})
    target, draft = (str(p) for p in random_pair)
    spec = SweepSpec.build(model=target, drafts=[draft], methods=["draft_target"], k=[0, 3], num_prompts=1,
                           max_new_tokens=4, max_draft_len=3, calibration_batch_sizes=[1], calibration_repeats=1,
                           prompt_tokens=16, threads=1)
    backend = EngineBackend()
    try:
        backend.preflight(spec)
        fields = backend.calibrate(spec, ModelSet(target, draft))
    finally:
        backend.close()
    assert fields["target_s"]["1"] == {"1": 0.010, "2": 0.012, "3": 0.015, "4": 0.013}
    assert fields["draft_tokens_cpu_s"]["1"]["4"] == 0.013
