"""The headline section's table and verdicts (scripts/benchlib/benchmarks_headline.py) from per-round results: ratios
paired per round against the engine's plain row, a goal met only when both clocks reach it, a row whose outputs
differ from plain flagged and never a goal's candidate, and the no-slower check made from the two worker rows."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from benchlib import benchmarks_headline as bh  # noqa: E402


def _row(name: str, group: str, seconds: list[float], *, cpu: list[float] | None = None,
         outputs: list[list[int]] | None = None, drafts: int = 0, accepted: int = 0) -> bh.Row:
    row = bh.Row(name, group)
    for wall_s, cpu_s in zip(seconds, cpu or seconds, strict=True):
        row.start_round()
        for tokens in outputs or [[1, 2, 3, 4]] * 2:
            row.add(tokens, wall_s / 2, cpu_s / 2)
    row.drafts, row.accepted = drafts, accepted
    return row


def test_verdicts_pair_rounds_and_need_both_clocks():
    spec = bh.HeadlineSpec(baseline_rev="abc1234", rounds=3)
    rows = [
        _row(bh.PLAIN, "engine", [1.0, 2.0, 1.0]),  # a slow round 2 (load) hits every row alike
        _row(bh.BEFORE_PLAIN, "worker", [1.0, 2.0, 1.0]),
        _row(bh.NOW_PLAIN, "worker", [1.1, 2.2, 1.1]),  # 10% slower than the baseline revision: not met
        _row("engine: draft_target k=4", "engine", [0.5, 1.0, 0.5], drafts=10, accepted=25),  # 2.0x every round
        _row("engine: eagle3 chain k=4", "engine", [0.8, 1.6, 0.8], cpu=[0.6, 1.2, 0.6]),  # 1.25x wall, 1.67x CPU
        _row("engine: suffix k=16 (cold cache)", "engine", [0.3, 0.6, 0.3],
             outputs=[[1, 2, 3, 4], [1, 2, 3, 5]]),  # 3.3x, but the second output differs from plain
        _row("transformers: greedy", "transformers", [1.25, 2.5, 1.25]),
        _row("engine: suffix_eagle3 k=16 (hybrid)", "engine", [0.4, 0.8, 0.4]),  # 2.5x: a hybrid, not EAGLE-3 alone
    ]
    section = bh.section(spec, rows, {"load": [1.0, 1.0], "num_prompts": 2, "baseline_package": "abc1234 (x)"})
    table = {row[0]: row for row in section.rows}
    assert table["engine: draft_target k=4"][2:6] == ["2.00x", "2.00x", "2.00-2.00", "3.50"]
    assert table["engine: eagle3 chain k=4"][2:4] == ["1.25x", "1.67x"]
    assert table["engine: suffix k=16 (cold cache)"][-1] == "NO" and table[bh.PLAIN][-1] == "yes"
    assert table["transformers: greedy"][2] == "0.80x"
    notes = "\n".join(section.notes)
    # the suffix row is faster (3.3x) but not lossless here: the best method is the hybrid at 2.5x
    assert "best method (hybrids included) >= 3.0x: engine: suffix_eagle3 k=16 (hybrid) at 2.50x CPU time / 2.50x " \
           "wall: **not met**" in notes
    assert "draft_target k=4 >= 1.8x: engine: draft_target k=4 at 2.00x CPU time / 2.00x wall: **met**" in notes
    assert "EAGLE-3 (best tree and k) >= 1.5x: engine: eagle3 chain k=4 at 1.67x CPU time / 1.25x wall: " \
           "**met in one timing only**" in notes
    assert "no slower than before (this tree / abc1234" in notes and "0.91x CPU time / 0.91x wall: **not met**" in notes
    goal_lines = [line for line in section.notes if line.startswith("Goal") and "no slower" not in line]
    assert len(goal_lines) == 3 and not any("worker" in line for line in goal_lines)  # workers are not candidates
