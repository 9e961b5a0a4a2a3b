"""`trtspec train draft`: the held-out split never trains, an interrupted run resumes to the same draft as an
uninterrupted one, the report's acceptance is measured on held-out prompts, and bad input is a one-line error that
writes nothing. Runs the embedded pair with a few steps (CPU, seconds)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trtspec.contracts.prompt_log import LoggedPrompt
from trtspec.models import resolve_model
from trtspec.training.distill import DistillRecipe, distill_draft, resume_dir, split_prompts

ROOT = Path(__file__).resolve().parents[2]
RECIPE = DistillRecipe(steps=6, batch_size=2, gen_len=8, max_prompt_len=16, k=2, eval_new_tokens=8,
                       checkpoint_every=2, heldout_fraction=0.3)


def write_log(path: Path, prompts: list[list[int]]) -> Path:
    path.write_text("".join(json.dumps({"prompt_ids": p}) + "\n" for p in prompts))
    return path


PROMPTS = [[100 + i, 200 + 2 * i, 300 + 3 * i, 17, 18, 19] for i in range(8)]


@given(st.lists(st.lists(st.integers(0, 30), min_size=1, max_size=4), min_size=2, max_size=40),
       st.floats(0, 1))
@settings(deadline=None)
def test_split_puts_each_distinct_prompt_on_one_side(prompts, fraction):
    logged = [LoggedPrompt(tuple(p), None) for p in prompts + prompts[::2]]  # duplicates too
    distinct = {tuple(p) for p in prompts}
    if len(distinct) < 2:
        return
    split = split_prompts(logged, lambda _: [], 64, DistillRecipe(heldout_fraction=fraction))
    train, heldout = {tuple(p) for p in split.train}, {tuple(p) for p in split.heldout}
    assert not train & heldout and train | heldout == distinct
    assert len(split.train) == len(train) and len(split.heldout) == len(heldout)  # each once
    assert heldout and train


def run(out: Path, log: Path, **kwargs):
    return distill_draft(resolve_model("tiny"), resolve_model("tiny-draft"), log, out, RECIPE, **kwargs)


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> tuple[Path, Path, dict]:
    """One uninterrupted run (log, output, report), shared by the two tests below; every prompt but 3 logged once."""
    base = tmp_path_factory.mktemp("distill")
    log = write_log(base / "log.jsonl", PROMPTS + PROMPTS[:3])  # logged twice: still one prompt
    return log, base / "out", run(base / "out", log)


@pytest.mark.slow
def test_an_interrupted_run_resumes_to_the_same_draft(tmp_path, whole):
    log, whole_out, whole_report = whole

    def interrupt(stage, done, total, info):
        if stage == "train" and done == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "b" / "out", log, progress=interrupt)
    assert not (tmp_path / "b" / "out").exists() and (resume_dir(tmp_path / "b" / "out") / "state.pt").is_file()
    steps = []
    again = run(tmp_path / "b" / "out", log, progress=lambda s, d, t, i: steps.append(d) if s == "train" else None)
    assert steps == [5, 6]  # resumed after the checkpoint of step 4, not from 0
    assert not resume_dir(tmp_path / "b" / "out").exists()
    weights = "model.safetensors"
    assert (whole_out / weights).read_bytes() == (tmp_path / "b" / "out" / weights).read_bytes()
    assert again["acceptance_after"] == whole_report["acceptance_after"]


def test_acceptance_is_measured_on_held_out_prompts_only(whole):
    _, out, report = whole
    data = report["data"]
    assert data["logged_prompts"] == 11 and data["train_prompts"] + data["heldout_prompts"] == 8
    assert data["heldout_prompts"] == 2 and data["train_sequences"] == data["train_prompts"]
    for side in ("acceptance_before", "acceptance_after"):
        assert report[side]["prompts"] == data["heldout_prompts"] and report[side]["num_drafts"] > 0
    assert json.loads((out / "training-report.json").read_text()) == report
    resolve_model(out)  # a loadable checkpoint with the tokenizer


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trtspec", "train", "draft", *args], capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=300)


@pytest.mark.process
def test_a_log_without_usable_prompts_is_a_one_line_error(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text('{"text": "no prompt field"}\nnot json\n')
    result = cli("--prompts", str(log), "--out", str(tmp_path / "out"))
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("Error: --prompts=") and "has no usable prompts" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 2 and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists() and not resume_dir(tmp_path / "out").exists()


@pytest.mark.process
def test_a_draft_of_another_vocabulary_is_a_one_line_error(tmp_path, random_pair):
    log = write_log(tmp_path / "log.jsonl", PROMPTS)
    result = cli("--draft", str(random_pair[1]), "--prompts", str(log), "--out", str(tmp_path / "out"))
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("Error: ") and "vocab" in result.stderr.splitlines()[0]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists() and not resume_dir(tmp_path / "out").exists()
