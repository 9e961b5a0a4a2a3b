"""scripts/bench.py writes each section under its own heading and replaces it in place on re-runs."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("bench", ROOT / "scripts" / "bench.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench"] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def test_write_section_appends_then_replaces(tmp_path):
    bench = _bench()
    out = tmp_path / "benchmarks.md"
    a = bench.Section(title="A", columns=["x", "y"], rows=[["1", "2"]], notes=["first"])
    b = bench.Section(title="B", columns=["x"], rows=[["3"]])
    bench.write_section(out, a, "python scripts/bench.py --section a")
    bench.write_section(out, b, "python scripts/bench.py --section b")
    a.rows, a.notes = [["5", "6"]], ["second"]
    bench.write_section(out, a, "python scripts/bench.py --section a")
    text = out.read_text()
    assert text.count("## A") == 1 and text.count("## B") == 1 and text.index("## A") < text.index("## B")
    assert "| 5 | 6 |" in text and "| 1 | 2 |" not in text and "- second" in text
    assert "Command: `python scripts/bench.py --section a`" in text
    assert "- second\n\n## B" in text  # a replaced section keeps the blank line before the next heading
    assert set(bench.SECTIONS) >= {"engine"}
