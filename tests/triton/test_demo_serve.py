"""`make demo`'s last step (scripts/demo_serve.py) runs end to end: build, deploy, serve, one streamed request, stop."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.triton
ROOT = Path(__file__).resolve().parents[2]


def test_demo_serve_streams_an_answer_and_shows_the_acceptance_series(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "demo_serve.py"), "--build", str(tmp_path / "build"),
                           "--repo", str(tmp_path / "repo"), "--max-tokens", "16"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    chars = re.search(r"\[demo\] (\d+) characters in (\d+) streamed responses", proc.stdout)
    assert chars and int(chars[1]) > 0 and int(chars[2]) > 1
    assert "trtspec_spec_decode_num_draft_tokens" in proc.stdout
    assert "[demo] tritonserver stopped" in proc.stdout
