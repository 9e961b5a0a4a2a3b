"""The speculation schedule a sweep recommends (sweep/schedule.py) and where it goes (sweep/schedule_report.py): k per
batch size from a known machine, max_concurrency, the gate's threshold and window, measured points anchoring the
model, the report's section and PNG, `--write-config` into torch and TensorRT-LLM 1.2.1 / 0.19.0 build configs, and,
for random cost tables, the argmax (held within a margin of the previous batch size's k) and TensorRT-LLM's schedule
rules."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.cli_checks import run_cli
from trtspec.build.plan import engine_config, plan_build
from trtspec.build.preflight import run_preflight
from trtspec.config import load_build_spec
from trtspec.contracts import costmodel
from trtspec.contracts.schedule import SpecSchedule
from trtspec.errors import ConfigError
from trtspec.sweep.analysis import CaseRow, Results, step_costs
from trtspec.sweep.schedule import (
    MIN_WINDOW,
    SWITCH_MARGIN,
    BatchRow,
    KPoint,
    choose,
    recommend_schedule,
    recommend_schedules,
)
from trtspec.sweep.schedule_report import render_schedule_plots, schedule_section, write_schedule_config
from trtspec.targets.llm_api import schedule_problems

ALPHA = 0.8
VARIANT = "draft_target:tiny-draft"


def machine(batch: int, n: int) -> float:
    """Target forward seconds: 10 ms nearly flat in tokens at batch 1 (memory bound), 20 ms x n at batch 8 (compute
    bound); the calibration holds batches 1 and 8, the model interpolates between them."""
    return {1: 0.010 * (1 + 0.02 * (n - 1)), 8: 0.020 * n}[batch]


def calibration(target: dict[int, dict[int, float]] | None = None, draft: dict[int, float] | None = None,
                model: str = "tiny") -> dict:
    target = target or {b: {n: machine(b, n) for n in range(1, 6)} for b in (1, 8)}
    draft = draft or {1: 0.001, 8: 0.002}
    return {"kind": "calibration", "id": "cal", "model": model, "draft": "tiny-draft", "medusa": None,
            "target_s": {str(b): {str(n): t for n, t in ts.items()} for b, ts in target.items()},
            "draft_s": {str(b): t for b, t in draft.items()}}


def row(k: int, concurrency: int = 1, *, e: float | None = None, measured: float | None = None,
        per_request: tuple[float, ...] = (), suite: str = "code", model: str = "tiny") -> CaseRow:
    params = {"model": model, "draft": "tiny-draft" if k else None, "medusa": None,
              "method": "draft_target" if k else "none", "k": k, "concurrency": concurrency, "temperature": 0.0,
              "suite": suite, "max_new_tokens": 64, "num_prompts": 4, "seed": 0, "via": "engine"}
    tokens_per_step = e if e is not None else sum(ALPHA ** i for i in range(k + 1))
    return CaseRow(id=f"{k}-{concurrency}-{suite}", params=params, tokens_per_s=100.0 * (measured or 1.0),
                   wall_time_s=1.0, tokens_per_step=tokens_per_step, acceptance_rate=0.0, per_pos=[],
                   measured_speedup=measured, per_request_acceptance=list(per_request))


def results(rows: list[CaseRow], calib: dict | None = None) -> Results:
    return Results(rows, [], {"cal": calib or calibration()}, timing="wall")


def sweep(*, measured_factor: float | None = None, per_request: tuple[float, ...] = ()) -> Results:
    """k 0..4 at concurrency 1 on the known machine; measured speedups = factor x the model's (None: not measured)."""
    rows = [row(0, measured=1.0 if measured_factor else None)]
    for k in range(1, 5):
        model = sum(ALPHA ** i for i in range(k + 1)) * machine(1, 1) / (k * 0.001 + machine(1, k + 1))
        rows.append(row(k, measured=measured_factor * model if measured_factor else None,
                        per_request=per_request if k == 4 else ()))
    return results(rows)


def test_known_machine_gives_the_expected_schedule_concurrency_and_gate():
    rec = recommend_schedule(sweep(), VARIANT, 0.0, max_batch_size=8)
    # the argmax is 4, 2, 1, 1, 1, 0, 0, 0. Batch 2: k=4 (1.367x) is more than SWITCH_MARGIN below k=2 (1.410x) and
    # k=3 (1.409x) is within it: the smallest change is to 3. Batch 3: k=3 (1.107x) is beaten by k=1 (1.157x) by more
    # than the margin, k=2 (1.156x) is within it: 2. Batch 4: k=2 (1.010x) no longer beats plain decoding by the
    # margin, k=1 (1.054x) does. Batch 5: k=1 (0.982x) loses to plain decoding
    assert [r.k for r in rec.rows] == [4, 3, 2, 1, 0, 0, 0, 0]
    assert [r.held for r in rec.rows] == [None, 2, 1, None, None, None, None, None]
    assert rec.rows[1].note == ("k=2 (1.41x) is within 3% of k=3, the smallest change from the previous batch size's "
                                "k=4")
    assert rec.draft_len == ((1, 4), (2, 3), (3, 2), (4, 1), (5, 0)) and rec.max_draft_len == 4
    assert rec.max_concurrency == 4 and all(r.chosen.source == "modelled" for r in rec.rows)
    assert (rec.rows[1].chosen.speedup, rec.rows[1].point(2).speedup) == (pytest.approx(1.4091, abs=1e-4),
                                                                       pytest.approx(1.4104, abs=1e-4))  # k=3, k=2
    # break-even S_4 / S_0 at batch 1 = (4 x 1 ms + 10.8 ms) / 10 ms = 1.48 tokens per target forward; TensorRT-LLM
    # 1.2.1's threshold counts accepted draft tokens without the bonus token: 0.48; no per-request records: the default
    # window
    assert rec.gate.threshold == pytest.approx(0.48) and rec.gate.window == 32 and "default 32" in rec.gate.window_reason
    assert rec.schedule == SpecSchedule(draft_len=((1, 4), (2, 3), (3, 2), (4, 1), (5, 0)), max_concurrency=4,
                                        acceptance_window=32, acceptance_length_threshold=0.48)
    at2 = recommend_schedule(sweep(), VARIANT, 0.0, max_batch_size=8, gate_batch_size=2).gate
    # at batch 2, k=3 breaks even at (3 D(2) + T(2, 4)) / T(2, 1) = 2.095, out of reach of k=1 (E = 1.8, used from
    # batch 4): the threshold is k=1's break-even at batch 4
    assert (at2.batch_size, at2.k, at2.threshold) == (4, 1, pytest.approx(0.708, abs=1e-3))
    assert "the break-even at batch 2, k=3 (2.095) is out of reach of k=1" in at2.reason
    assert recommend_schedule(sweep(), VARIANT, 0.0, max_batch_size=3).max_concurrency is None  # wins up to 3


def test_speculation_must_beat_plain_decoding_by_the_margin():
    """Measured at batch 8: k=1 at 1.02x plain decoding, within the margin: plain decoding there, the argmax held back
    and named; at 1.04x speculation stays."""
    def recommend(at_8: float):
        rows = [row(0, 1, measured=1.0), row(0, 8, measured=1.0)] + [row(k, 1, measured=1.0 + 0.1 * k)
                                                                      for k in (1, 2)]
        rows += [row(1, 8, measured=at_8), row(2, 8, measured=0.9)]
        return recommend_schedule(results(rows), VARIANT, 0.0, max_batch_size=8)

    within = recommend(1.02).rows[-1]
    assert (within.k, within.held, within.best_k) == (0, 1, 1)
    assert within.note == "k=1 (1.02x) does not beat plain decoding by more than 3%"
    assert recommend(1.02).max_concurrency is not None
    beyond = recommend(1.04)
    assert (beyond.rows[-1].k, beyond.rows[-1].held, beyond.max_concurrency) == (1, None, None)


def _points(speedups: dict[int, float]) -> tuple[KPoint, ...]:
    return tuple(KPoint(k, s, 1.0, measured_speedup=s) for k, s in sorted(speedups.items()))


def test_the_margin_at_its_exact_boundary():
    """Exactly SWITCH_MARGIN is not "more than" it: a k that beats plain decoding by exactly the margin does not pay
    (`pays`: >), and a previous k that the best beats by exactly the margin stays (`near_best`: <=); one ulp past
    the boundary, the other way."""
    from trtspec.sweep.schedule import _choose

    edge = 1.0 * (1 + SWITCH_MARGIN)  # the same product the rule computes: exactly on the boundary
    assert _choose(_points({0: 1.0, 1: edge}), argmax=1) == (0, 1)
    assert _choose(_points({0: 1.0, 1: math.nextafter(edge, math.inf)}), argmax=1) == (1, None)
    held, best = 1.2, 1.2 * (1 + SWITCH_MARGIN)
    assert _choose(_points({0: 1.0, 1: held, 2: best}), argmax=2, previous=1, cap=2) == (1, 2)
    assert _choose(_points({0: 1.0, 1: held, 2: math.nextafter(best, math.inf)}), argmax=2, previous=1,
                   cap=2) == (2, None)


def test_a_change_of_k_is_the_smallest_within_the_margin():
    """Measured at batch 2 with k=3 at batch 1: k=1 is the best; k=3 stays while the best is within the margin of it;
    when k=3 falls behind by more, the change goes to k=2 (within the margin of the best, nearer to 3), not to k=1."""
    def at_2(speedups: dict[int, float]):
        rows = [row(0, 1, measured=1.0), row(0, 2, measured=1.0)]
        rows += [row(k, 1, measured=1.0 + 0.1 * k) for k in (1, 2, 3)]
        rows += [row(k, 2, measured=speedup) for k, speedup in speedups.items()]
        return recommend_schedule(results(rows), VARIANT, 0.0, max_batch_size=2).rows[-1]

    stays = at_2({1: 1.30, 2: 1.28, 3: 1.27})
    assert (stays.k, stays.held, stays.previous) == (3, 1, 3)
    assert stays.note == "k=1 (1.30x) is within 3% of the previous batch size's k, which stays"
    changed = at_2({1: 1.30, 2: 1.28, 3: 1.10})
    assert (changed.k, changed.held, changed.best_k) == (2, 1, 1)
    assert changed.note == "k=1 (1.30x) is within 3% of k=2, the smallest change from the previous batch size's k=3"
    assert at_2({1: 1.30, 2: 1.20, 3: 1.10}).k == 1  # k=2 is more than the margin behind: the best


def test_the_threshold_stays_within_reach_of_every_draft_length_the_schedule_uses():
    """A 2 ms draft forward at batch 1: k=4 breaks even there at 1.88 tokens per step, above what k=1 (used at batch
    4, E = 1.8) reaches, so a gate at 1.88 would close whenever the load is 4, whatever the acceptance. The threshold
    is k=1's break-even at batch 4 instead, the lowest among the batch sizes that use it."""
    rec = recommend_schedule(results([row(0)] + [row(k) for k in range(1, 5)], calibration(draft={1: 0.002, 8: 0.001})),
                             VARIANT, 0.0, max_batch_size=8)
    assert [r.k for r in rec.rows] == [4, 3, 2, 1, 0, 0, 0, 0]
    assert (rec.gate.batch_size, rec.gate.k, rec.gate.threshold) == (4, 1, pytest.approx(0.718, abs=1e-3))
    assert "out of reach of k=1" in rec.gate.reason
    assert rec.gate.threshold < ALPHA  # E(1) - 1 on this machine


def test_measured_points_anchor_the_model_between_them():
    """Measured speedups 0.9 x the model's at batch 1: the modelled batch sizes are scaled the same, so speculation
    stops one batch size earlier than the model alone says."""
    rec = recommend_schedule(sweep(measured_factor=0.9), VARIANT, 0.0, max_batch_size=8)
    assert rec.rows[0].chosen.source == "measured" and rec.rows[1].chosen.source == "modelled"
    assert rec.rows[1].chosen.anchor == pytest.approx(0.9) and rec.rows[1].chosen.predicted_speedup > 1.4
    assert rec.draft_len == ((1, 4), (2, 3), (3, 2), (4, 0)) and rec.max_concurrency == 3  # k=1 1.04x at 4
    assert rec.gate.threshold == pytest.approx(1.48 / 0.9 - 1, abs=1e-3)  # E / measured speedup at batch 1, k=4, - 1


def test_batch_one_anchors_only_itself_once_a_larger_batch_was_measured():
    """Measured at batch 1 at the model's speedups and at batch 4 at 0.8 x them: batches 2 and 3 take batch 4's ratio
    (what one request alone does not show: padded rows, prompt passes beside decode rows), not a line from batch 1's;
    above 4 batch 4's too."""
    model = recommend_schedule(sweep(), VARIANT, 0.0, max_batch_size=8)
    rows = [row(0, 1, measured=1.0), row(0, 4, measured=1.0)]
    for k in range(1, 5):
        rows.append(row(k, 1, measured=model.rows[0].point(k).predicted_speedup))
        rows.append(row(k, 4, measured=0.8 * model.rows[3].point(k).predicted_speedup))
    rec = recommend_schedule(results(rows), VARIANT, 0.0, max_batch_size=8)
    assert [r.chosen.source for r in rec.rows[:4]] == ["measured", "modelled", "modelled", "measured"]
    for b in (2, 3, 5, 8):
        assert all(p.anchor == pytest.approx(0.8) for p in rec.rows[b - 1].points[1:]), b
    only_one = recommend_schedule(sweep(measured_factor=0.9), VARIANT, 0.0, max_batch_size=8)
    assert all(p.anchor == pytest.approx(0.9) for r in only_one.rows[1:] for p in r.points[1:])


def test_window_from_the_spread_of_per_request_acceptance():
    spread = recommend_schedule(sweep(per_request=(1.0, 3.0, 1.0, 3.0)), VARIANT, 0.0, max_batch_size=8).gate
    # records without counts: mean acceptance length - 1: mean 1.0, sd 1.1547, threshold 0.48: ceil((2.326 x 1.1547 /
    # 0.52)^2) = 27
    assert spread.window == 27 and "sd 1.15" in spread.window_reason
    narrow = recommend_schedule(sweep(per_request=(3.0, 3.1, 2.9)), VARIANT, 0.0, max_batch_size=8).gate
    assert narrow.window == MIN_WINDOW
    below = recommend_schedule(sweep(per_request=(1.2, 1.4)), VARIANT, 0.0, max_batch_size=8).gate
    assert not below.set and "would close at once" in below.reason


def test_no_speculation_and_bad_arguments():
    slow_draft = results([row(0), row(1, e=1.1), row(2, e=1.2)], calibration(draft={1: 0.02, 8: 0.04}))
    rec = recommend_schedule(slow_draft, VARIANT, 0.0, max_batch_size=4)
    assert rec.draft_len == ((1, 0),) and rec.max_concurrency == 0 and not rec.gate.set
    for kwargs, field in (({"max_batch_size": 0}, "max_batch_size"), ({"gate_batch_size": 9}, "gate_batch_size")):
        with pytest.raises(ConfigError) as err:
            recommend_schedule(sweep(), VARIANT, 0.0, **{"max_batch_size": 8, **kwargs})
        assert err.value.field == field
    for kwargs, field in (({"method": "ngram"}, "method"), ({"temperature": 1.0}, "temperature")):
        with pytest.raises(ConfigError) as err:
            choose(sweep(), **kwargs)
        assert err.value.field == field and "choose one of" in str(err.value.hint)


def test_section_and_plot(tmp_path):
    recs = recommend_schedules(sweep(measured_factor=0.9), max_batch_size=8)
    plots = render_schedule_plots(recs, tmp_path)
    assert set(plots) == {"schedule_T0"} and plots["schedule_T0"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = "\n".join(schedule_section(recs, plots))
    for needle in ("### draft_target:tiny-draft, T=0", "`draft_len_schedule` {1: 4, 2: 3, 3: 2, 4: 0}",
                   "`max_concurrency` 3", "`acceptance_length_threshold` 0.644, `acceptance_window` 32",
                   "| 1 | 4 | 2.04x | measured | 2.27x | 2.04x |", "| 2 | 3 | 1.27x | modelled | 1.41x | - |",
                   "![Schedule, T=0](schedule_T0.png)"):
        assert needle in text, needle


@pytest.mark.parametrize("backend", ["tensorrtllm", "torch"])
def test_write_config_round_trip(tmp_path, backend):
    path = tmp_path / "build.yaml"
    path.write_text(f"name: tiny-dt\nbackend: {backend}\ntarget: tiny\nmethod: ngram\nk: 2\nngram:\n"
                    "  max_matching_ngram_size: 2\nengine:\n  max_batch_size: 6\n  max_input_len: 64\n"
                    "  max_seq_len: 256\nllm_api:\n  max_concurrency: 2\n")
    done = write_schedule_config(path, sweep(), max_batch_size=6)
    assert done.written and done.notes == ("removed `ngram:` (method draft_target does not use it)",)
    data = yaml.safe_load(path.read_text())
    assert list(data) == ["name", "backend", "target", "method", "max_draft_len", "engine", "llm_api", "draft"]  # k renamed in place
    assert data["llm_api"] == {"draft_len_schedule": {1: 4, 2: 3, 3: 2, 4: 1, 5: 0}, "max_concurrency": 4,
                               "acceptance_window": 32, "acceptance_length_threshold": 0.48}
    assert path.read_text().startswith("# Recommended by `trtspec report`: method draft_target at temperature 0")
    resolved = run_preflight(load_build_spec(path), dry_run=True)
    assert engine_config(resolved).schedule == done.recommendation.schedule
    if backend == "tensorrtllm":
        speculative = plan_build(resolved).llm_api["speculative_config"]
        assert speculative["max_draft_len"] == 4 and speculative["draft_len_schedule"][1] == 4
        assert {k: speculative[k] for k in data["llm_api"]} == data["llm_api"]
        assert schedule_problems(speculative["draft_len_schedule"], 4, "1.2.1") == []


def test_write_config_engine_workflow_gets_no_controls_and_dry_run_writes_nothing(tmp_path):
    path = tmp_path / "build.yaml"
    text = "target: tiny\ndraft: tiny-draft\nmethod: draft_target\nmax_draft_len: 3\ntrtllm:\n  version: 0.19.0\n"
    path.write_text(text)
    done = write_schedule_config(path, sweep(), dry_run=True)
    assert not done.written and path.read_text() == text and "+max_draft_len: 4" in done.diff
    assert done.notes[0].startswith("no llm_api controls written: TensorRT-LLM 0.19.0's engine workflow")
    assert "llm_api" not in yaml.safe_load(done.text)
    code, out, err = run_cli(["report", str(tmp_path / "none.jsonl"), "--out", str(tmp_path / "r"), "--dry-run"])
    assert code == 2 and "--dry-run is an option of --write-config" in err


def test_write_config_refuses_a_schedule_past_the_build(tmp_path):
    path = tmp_path / "build.yaml"
    path.write_text("target: tiny\nmethod: none\nengine:\n  max_batch_size: 4\n")
    with pytest.raises(ConfigError) as err:
        write_schedule_config(path, sweep(), max_batch_size=8)
    assert err.value.field == "max_batch_size" and "engine.max_batch_size 4" in err.value.message
    assert path.read_text() == "target: tiny\nmethod: none\nengine:\n  max_batch_size: 4\n"


# --- property: the argmax of the predictions, and TensorRT-LLM's rules ------------------------------------------

SIZES = (1, 4, 16)
tables = st.fixed_dictionaries({
    "base": st.tuples(*[st.floats(0.002, 0.05) for _ in SIZES]),
    "slope": st.tuples(*[st.floats(0.0, 1.5) for _ in SIZES]),
    "draft": st.tuples(*[st.floats(0.0, 0.01) for _ in SIZES]),
    "alpha": st.floats(0.0, 1.0),
    "max_k": st.integers(1, 4),
    "measured": st.lists(st.tuples(st.integers(1, 4), st.sampled_from(SIZES), st.floats(0.3, 3.0)), max_size=4),
})


@settings(max_examples=60, deadline=None, derandomize=True)
@given(tables)
@example({"base": (0.03125,) * 3, "slope": (0.0,) * 3, "draft": (1.192092896e-07, 0.0, 0.0), "alpha": 1.0,
          "max_k": 1, "measured": []})  # a break-even of 1.0000038: written with 3 decimals, no gate (found here)
def test_recommended_k_is_the_argmax_and_the_schedule_keeps_the_rules(table):
    calib = calibration({b: {n: table["base"][i] * (1 + table["slope"][i] * (n - 1)) for n in range(1, 6)}
                         for i, b in enumerate(SIZES)}, dict(zip(SIZES, table["draft"], strict=True)))
    e = {k: sum(table["alpha"] ** i for i in range(k + 1)) for k in range(table["max_k"] + 1)}
    measured = {(k, c): s for k, c, s in table["measured"] if k <= table["max_k"]}
    rows = [row(0, c, measured=1.0 if any(m[1] == c for m in measured) else None) for c in SIZES]
    rows += [row(k, c, e=e[k], measured=measured.get((k, c))) for k in range(1, table["max_k"] + 1) for c in SIZES]
    rec = recommend_schedule(results(rows, calib), VARIANT, 0.0, max_batch_size=16)
    if not measured:  # the cost model alone: the candidates' speedups are costmodel.predict's at each batch size
        for r in rec.rows:
            costs = step_costs([calib], rows[-1].params, r.batch_size)
            speedups = [1.0] + [costmodel.predict(k, e[k], costs).speedup for k in range(1, table["max_k"] + 1)]
            assert [p.speedup for p in r.points] == pytest.approx(speedups), (r.batch_size, speedups)
    assert [r.k for r in rec.rows] == sorted((r.k for r in rec.rows), reverse=True)  # never rises with the batch
    weights = dict(rec.profile)
    assert sum(w * r.chosen.tokens_per_s for r in rec.rows for b, w in weights.items() if b == r.batch_size) >= \
        sum(w * r.chosen.tokens_per_s for r in rec.per_batch for b, w in weights.items() if b == r.batch_size) - 1e-9
    assert bool(rec.profile_note) == ([r.k for r in rec.rows] != [r.k for r in rec.per_batch])
    for i, r in enumerate(rec.rows):  # whatever the candidates' source: the best within the cap (k <= the k at 1),
        if (i == 0 and rec.profile_note) or r.filled:  # or the previous batch size's own choice
            continue  # batch 1's k chosen for the load profile; a dip filled with a larger batch size's k
        assert all(r.k >= later.k for later in rec.rows[i:])  # a filled row is the max of those above it
        allowed = [p for p in r.points if p.k <= rec.rows[0].k or r.batch_size == 1]
        top = max(p.speedup for p in allowed)  # k while it beats plain decoding by the margin and the best is within
        previous = r.point(r.previous) if i and r.previous is not None and not rec.rows[i - 1].filled else (
            r.point(rec.rows[i - 1].held) if i and rec.rows[i - 1].filled else None)  # the margin, else the smallest change within the
        # margin of the best; a k > 0 only when it beats plain by the margin

        def pays(point: KPoint, r: BatchRow = r) -> bool:
            return point.k == 0 or point.speedup > r.plain.speedup * (1 + SWITCH_MARGIN)

        best = max(allowed, key=lambda p: (p.speedup, -p.k))
        near = [p for p in allowed if p.k > 0 and pays(p) and top <= p.speedup * (1 + SWITCH_MARGIN)]
        if previous is not None and previous.k > 0 and pays(previous) and top <= previous.speedup * (1 + SWITCH_MARGIN):
            assert r.k == previous.k and r.held in (None, *(p.k for p in allowed if p.speedup == top))
        elif best.k > 0 and pays(best) and previous is not None and previous.k > 0:  # the smallest change
            change = min(abs(p.k - previous.k) for p in near)
            assert r.chosen in near and abs(r.k - previous.k) == change
            assert r.chosen.speedup == max(p.speedup for p in near if abs(p.k - previous.k) == change)
            assert r.held is None if r.k == best.k else r.held == best.k
        elif pays(best):
            assert r.chosen.speedup == top and r.held is None
        else:
            assert r.k == 0 and (top == r.plain.speedup or r.held is not None and r.point(r.held).speedup == top)
        assert r.k == 0 or pays(r.chosen)
    schedule = rec.schedule
    schedule.check(max_k=rec.max_draft_len, max_batch_size=16)
    assert schedule_problems(dict(schedule.draft_len), rec.max_draft_len, "1.2.1") == []
    assert all(schedule.draft_len_at(r.batch_size, rec.max_draft_len) == r.k for r in rec.rows)
    if rec.max_concurrency is not None:
        assert all(r.k == 0 for r in rec.rows[rec.max_concurrency:])
        assert rec.max_concurrency == 0 or rec.rows[rec.max_concurrency - 1].k > 0
    assert rec.gate.threshold is None or (math.isfinite(rec.gate.threshold) and rec.gate.threshold > 0)


def test_draft_lengths_never_rise_with_the_batch_size():
    """Measured: at batch 2 neither k beats plain decoding by the margin, at batch 3 k=1 does (1.2x): per batch size
    alone that is 1:2,2:0,3:1. Draft lengths do not rise with the batch size, and one batch size level with plain
    decoding does not turn speculation off for the larger ones: batch 2 takes batch 3's k=1 (1:2,2:1)."""
    rows = [row(0, c, measured=1.0) for c in (1, 2, 3)]
    rows += [row(2, 1, measured=1.5), row(1, 1, measured=1.3), row(2, 2, measured=1.01), row(1, 2, measured=1.0),
             row(2, 3, measured=1.0), row(1, 3, measured=1.2)]
    rec = recommend_schedule(results(rows), VARIANT, 0.0, max_batch_size=3)
    assert [r.k for r in rec.rows] == [2, 1, 1] and rec.draft_len == ((1, 2), (2, 1)) and rec.max_concurrency is None
    assert rec.rows[1].filled and rec.rows[1].held == 0 and "do not rise with the batch size" in rec.rows[1].note
    assert not rec.rows[2].filled


def test_a_load_profile_trades_batch_one_for_the_load():
    """Batch 1 alone loses (every k 0.92x there) but 4 in flight gains 1.3x at k=2: per batch size alone nothing would
    speculate (max_draft_len 0); over the sweep's concurrencies (1 and 4, alike) k=2 at batch 1 wins, and the note
    says what batch 1 gives up. A profile that is batch 1 alone keeps plain decoding."""
    rows = [row(0, 1, measured=1.0), row(0, 4, measured=1.0), row(1, 1, measured=0.92), row(2, 1, measured=0.92),
            row(1, 4, measured=1.2), row(2, 4, measured=1.3)]
    rec = recommend_schedule(results(rows), VARIANT, 0.0, max_batch_size=4)
    assert [r.k for r in rec.per_batch] == [0, 0, 0, 0] and rec.rows[0].k == 2 and rec.rows[3].k == 2
    assert "k=2 at batch 1 gives" in rec.profile_note and "0.92x at batch 1" in rec.profile_note
    assert rec.profile == ((1, 0.5), (4, 0.5)) and rec.profile_speedup == pytest.approx((0.92 + 1.3) / 2)
    alone = recommend_schedule(results(rows), VARIANT, 0.0, max_batch_size=4, load="1:1")
    assert [r.k for r in alone.rows] == [0, 0, 0, 0] and not alone.profile_note and alone.max_draft_len == 0


@pytest.mark.parametrize("load", ["1:0.5,9:0.5", "1:x", "0:1", "1:-1", "1:0", "1:nan", "1:1,1:1", "1:\u0661"])
def test_a_bad_load_profile_names_the_flag(load):
    with pytest.raises(ConfigError) as err:
        recommend_schedule(sweep(), VARIANT, 0.0, max_batch_size=8, load=load)
    assert err.value.field == "--load" and "e.g." in err.value.hint or "batch sizes up to" in err.value.hint


def test_a_sweep_of_one_pair_is_not_written_into_a_config_for_another(tmp_path):
    path = tmp_path / "build.yaml"
    text = ("name: big\nbackend: torch\ntarget: /models/llama-8b\ndraft: /models/llama-1b\nmethod: draft_target\n"
            "k: 2\nengine:\n  max_batch_size: 6\n  max_input_len: 64\n  max_seq_len: 256\n")
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        write_schedule_config(path, sweep(), max_batch_size=6)
    assert err.value.field == "target" and "'tiny'" in err.value.message and "--force" in err.value.hint
    assert path.read_text() == text  # nothing written on refusal
    done = write_schedule_config(path, sweep(), max_batch_size=6, force=True)
    assert done.written and yaml.safe_load(path.read_text())["target"] == "/models/llama-8b"


def test_no_speculation_is_said_in_words():
    from trtspec.sweep.schedule_report import schedule_text

    slow = recommend_schedule(results([row(0), row(1, e=1.1)], calibration(draft={1: 0.02, 8: 0.04})), VARIANT, 0.0,
                              max_batch_size=4)
    assert slow.max_draft_len == 0 and schedule_text(slow).startswith("no speculation")
    assert schedule_text(recommend_schedule(sweep(), VARIANT, 0.0, max_batch_size=8)).startswith(
        "`draft_len_schedule` {1: 4, 2: 3, 3: 2, 4: 1, 5: 0}")


def test_write_config_for_one_model_eagle3_writes_no_controls_and_says_why(tmp_path):
    """TensorRT-LLM 1.2.1's one-model EAGLE-3 has no drafter: the controls would be ignored there, so none are written
    (a note names two-model EAGLE-3); a two-model config gets them."""
    rows = [replace(r, params={**r.params, "method": "eagle3" if r.params["k"] else "none", "draft": None,
                               "eagle": "tiny-eagle" if r.params["k"] else None})
            for r in sweep().rows]
    eagle = Results([CaseRow(**{**r.__dict__, "id": r.id + "e"}) for r in rows], [], {"cal": calibration()},
                    timing="wall")
    for one_model, written in ((True, False), (False, True)):
        path = tmp_path / f"e{one_model}.yaml"
        path.write_text("name: e\nbackend: tensorrtllm\ntarget: /models/t\nmethod: eagle\nk: 3\neagle:\n  model: "
                        f"/models/e\n  eagle3: true\n  one_model: {str(one_model).lower()}\nengine:\n  max_batch_size: "
                        "6\n  max_input_len: 64\n  max_seq_len: 256\n")
        done = write_schedule_config(path, eagle, max_batch_size=6, force=True)
        data = yaml.safe_load(path.read_text())
        assert ("llm_api" in data) == written, data
        assert any("no drafter" in n for n in done.notes) == (not written)
