"""EAGLE in sweeps: the engine backend runs each eagle3 case with its drafter and tree (lossless at temperature 0),
and the bench sections' tables and goal verdict come from the measured numbers."""

from __future__ import annotations

from benchlib.benchmarks import MIXED, measure
from benchlib.benchmarks_eagle import DraftCostSpec, draft_cost_section, eagle_rows, goal_verdict
from trtspec.sweep.grid import SweepSpec


def test_engine_sweep_runs_eagle_trees_losslessly(eagle_target, trained_eagle, monkeypatch):
    from trtspec.spec.proposers.eagle import EagleProposer

    built = []
    create = EagleProposer.create.__func__

    def recording(cls, ctx):
        proposer = create(cls, ctx)
        built.append((proposer.topk, proposer.depth, proposer.choices))
        return proposer

    monkeypatch.setattr(EagleProposer, "create", classmethod(recording))
    spec = SweepSpec.build(model=str(eagle_target), methods=["eagle3"], eagle=[str(trained_eagle[0])],
                           eagle_trees=["chain", "dynamic:3x3", "[[0], [1], [0, 0]]"], k=[0, 3], suites=[MIXED],
                           num_prompts=2, prompt_tokens=24, max_new_tokens=16, max_draft_len=4, threads=1,
                           calibrate=False)
    measured = measure(spec, show_progress=False)
    assert sorted(built) == sorted([(1, 6, None), (3, 3, None), (4, 6, [[0], [1], [0, 0]])])
    rows = eagle_rows(measured)
    assert [(r["method"], r["tree"], r["k"]) for r in rows] == [
        ("none", None, 0), ("eagle3", "chain", 3), ("eagle3", "dynamic:3x3", 3), ("eagle3", "[[0], [1], [0, 0]]", 3)]
    assert all(r["same"] == "yes" for r in rows)
    assert all(r["mal"] >= 1 and r["draft_s_per_token"] > 0 for r in rows[1:])


def test_goal_verdict_reads_the_rows():
    rows = [{"method": "draft_target", "k": 4, "mal": 2.8, "draft_s_per_token": 0.009, "name": "draft_target"},
            {"method": "eagle3", "k": 4, "mal": 2.9, "draft_s_per_token": 0.002, "name": "eagle3 dynamic tree"},
            {"method": "eagle3", "k": 4, "mal": 2.5, "draft_s_per_token": 0.001, "name": "eagle3 chain tree"}]
    assert goal_verdict(rows).startswith("Goal (issue 17) at k=4: MET. mean acceptance length 2.90 (eagle3 dynamic")
    rows[1]["draft_s_per_token"] = 0.004  # 0.44x of the draft model's: the cost half fails
    verdict = goal_verdict(rows)
    assert "NOT MET" in verdict and "= 0.44x (goal <= 0.33x): not met" in verdict
    rows[1]["mal"] = 2.7
    assert "short by 0.10" in goal_verdict(rows)
    assert goal_verdict(rows, k=8).startswith("Goal not evaluated")


def test_draft_cost_section_compares_each_k_with_the_draft_model():
    from tests.sweep.test_benchmarks import DOCS, _docs_columns

    spec = DraftCostSpec(model="tiny", draft="tiny-draft", eagle="tiny-eagle", ks=(4, 8), num_prompts=2,
                         new_tokens=16, rounds=3)
    costs = {("draft_target (chain)", 4): [(0.005, 4.0), (0.007, 4.0), (0.004, 4.0)],  # median over rounds: 5 ms
             ("eagle3 chain", 4): [(0.006, 4.0)] * 3, ("eagle3 dynamic tree", 4): [(0.0025, 4.0)] * 3,
             ("draft_target (chain)", 8): [(0.008, 8.0)] * 3,
             ("eagle3 chain", 8): [(0.006, 6.0)] * 3,  # the chain stops at depth 6: fewer tokens per step
             ("eagle3 dynamic tree", 8): [(0.004, 8.0)] * 3}
    section = draft_cost_section(spec, costs)
    assert section.columns == _docs_columns("EAGLE-3 vs draft model: draft cost")
    assert f"## {section.title}\n" in DOCS.read_text()  # a rerun replaces the recorded section
    assert section.rows[0] == ["draft_target (chain)", "4", "5.00", "4.00", "1.25", "1.00x"]
    assert section.rows[1] == ["eagle3 chain", "4", "6.00", "4.00", "1.50", "1.20x"]
    assert section.rows[2][-1] == "0.50x"
    assert section.rows[4] == ["eagle3 chain", "8", "6.00", "6.00", "1.00", "1.00x"]
    assert [r[-1] for r in section.rows[3::3]] == ["1.00x"] and section.rows[5][-1] == "0.50x"
