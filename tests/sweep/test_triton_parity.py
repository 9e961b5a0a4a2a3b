"""Sweep parity: via triton against a real tritonserver serving the torch-flavour repository of the embedded
pair (the session's standard deployment, tests/conftest.py: k per request up to max_k 6) gives the same greedy acceptance numbers (draft tokens, accepted tokens, output tokens) as the in-process
engine (via engine), at concurrency 1 and 2. Skipped where the reference engine or the Triton deployment is missing.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("trtspec.spec.engine", reason="needs the reference engine (branch engine)")
pytest.importorskip("trtspec.triton.server", reason="needs the Triton deployment (branch triton)")

from trtspec.sweep.grid import SweepSpec  # noqa: E402
from trtspec.sweep.records import read_records  # noqa: E402
from trtspec.sweep.runner import run_sweep  # noqa: E402

pytestmark = pytest.mark.triton
MAX_K = 4


@pytest.fixture(scope="module")
def pair():
    from trtspec.models import resolve_model

    return resolve_model("tiny"), resolve_model("tiny-draft")


def _accepts(path):
    return {(r["params"]["method"], r["params"]["k"], r["params"]["concurrency"]): (r["metrics"]["output_tokens"],
                                                          r["metrics"]["stats"]["num_draft_tokens"],
                                                          r["metrics"]["stats"]["num_accepted_tokens"])
            for r in read_records(path) if r["kind"] == "case" and r["status"] == "ok"}


def test_triton_sweep_matches_in_process_greedy(standard_server, pair, tmp_path):
    target, draft = pair
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n"
                               for p in ["def add(a, b):", "import os", "for i in range(3):"]))
    # greedy (temperature 0 is the default); k = 0 is the plain-decoding baseline on both sides
    common = {"model": str(target), "drafts": [str(draft)], "methods": ["draft_target"], "k": [0, 2, MAX_K],
              "concurrency": [1, 2],
              "suites": [str(prompts)], "num_prompts": 3, "max_new_tokens": 12, "max_draft_len": MAX_K}
    local, remote = tmp_path / "engine.jsonl", tmp_path / "triton.jsonl"
    run_sweep(SweepSpec.build(**common, threads=1), local, show_progress=False)
    run_sweep(SweepSpec.build(**common, via="triton", url=standard_server.grpc_url), remote, show_progress=False)
    engine_numbers, triton_numbers = _accepts(local), _accepts(remote)
    assert len(engine_numbers) == 6 and engine_numbers == triton_numbers
    assert 0 < engine_numbers[("draft_target", MAX_K, 1)][2] < engine_numbers[("draft_target", MAX_K, 1)][1]
