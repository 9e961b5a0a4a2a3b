"""Re-running a build into the same output: a step is skipped only while everything it reads is unchanged; files made
for another config never survive; staging left by killed runs is cleaned; logs are written like other outputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.build.helpers import write_config
from trtspec.build.bundle import load_bundle
from trtspec.build.execute import execute, recover_interrupted
from trtspec.build.plan import plan_build
from trtspec.build.preflight import run_preflight
from trtspec.config import load_build_spec
from trtspec.errors import BuildError

# trtllm-build stand-in: writes <output_dir>/config.json with the flags it got (fails when FAIL_BUILD is set).
FAKE_TRTLLM_BUILD = """#!/usr/bin/env python3
import json, os, sys
args = sys.argv[1:]
print("fake trtllm-build", *args)
if os.environ.get("FAIL_BUILD"):
    sys.exit(7)
out = args[args.index("--output_dir") + 1]
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "config.json"), "w") as fh:
    json.dump({"args": args}, fh)
"""


def build(config: Path, out: Path, *, only: str | None = None, trtllm: bool = False, **overrides):
    spec = load_build_spec(config, overrides={"output": str(out), **overrides})
    resolved = run_preflight(spec)
    return execute(plan_build(resolved), resolved, out, only=only, trtllm=trtllm, quiet=True)


def manifest(out: Path) -> dict:
    return json.loads((out / "trtspec-manifest.json").read_text())


@pytest.fixture()
def fake_trtllm_build(tmp_path, monkeypatch):
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    (bin_dir / "trtllm-build").write_text(FAKE_TRTLLM_BUILD)
    (bin_dir / "trtllm-build").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_torch_bundle_follows_a_changed_k(random_pair, tmp_path):
    target, draft = random_pair
    config = write_config(tmp_path / "c.yaml", target=str(target), draft=str(draft), method="draft_target", max_draft_len=4,
                          backend="torch", engine={"dtype": "float32", "max_input_len": 64, "max_seq_len": 128})
    out = tmp_path / "bundle"
    build(config, out)
    assert load_bundle(out).engine.default_k == 4
    again = build(config, out, max_draft_len=2)
    assert "write-bundle" in again.done and {"copy-target", "copy-draft"} <= set(again.skipped)
    assert load_bundle(out).engine.default_k == 2 and manifest(out)["derived"]["max_draft_len"] == 2
    # unchanged config: everything skipped
    assert set(build(config, out, max_draft_len=2).skipped) == {"copy-target", "copy-draft", "write-bundle"}


def test_method_change_removes_files_of_the_old_plan(random_pair, tmp_path):
    target, draft = random_pair
    config = write_config(tmp_path / "c.yaml", target=str(target), draft=str(draft), method="draft_target", max_draft_len=4,
                          backend="torch", engine={"dtype": "float32", "max_input_len": 64, "max_seq_len": 128})
    out = tmp_path / "bundle"
    build(config, out)
    assert (out / "draft").is_dir()
    build(config, out, method="ngram", draft=None)
    assert not (out / "draft").exists() and load_bundle(out).engine.method == "ngram" and load_bundle(out).engine.draft is None
    assert [s["id"] for s in manifest(out)["steps"]] == ["copy-target", "write-bundle"]


def test_llm_api_file_and_pending_engines_follow_a_changed_k(random_pair, tmp_path):
    target, draft = random_pair
    config = write_config(tmp_path / "c.yaml", target=str(target), draft=str(draft), method="draft_target", max_draft_len=4,
                          engine={"dtype": "float32", "max_input_len": 64, "max_seq_len": 128},
                          trtllm={"version": "1.2.1"}, workflow="engine")
    out = tmp_path / "out"
    build(config, out, only="convert")
    options = out / "llm-api" / "extra_llm_api_options.yaml"
    assert "max_draft_len: 4" in options.read_text()
    again = build(config, out, only="convert", max_draft_len=2)
    assert "write-llm-api" in again.done and {"convert-target", "convert-draft"} <= set(again.skipped)
    assert "max_draft_len: 2" in options.read_text()
    engine = next(p for p in manifest(out)["pending"] if p["id"] == "engine-target")
    assert "--max_draft_len 2" in engine["command"]


def test_engines_built_elsewhere_are_kept_until_their_inputs_change(random_pair, tmp_path, fake_trtllm_build):
    target, draft = random_pair
    config = write_config(tmp_path / "c.yaml", target=str(target), draft=str(draft), method="draft_target", max_draft_len=4,
                          engine={"dtype": "float32", "max_input_len": 64, "max_seq_len": 128})
    out = tmp_path / "out"
    build(config, out, only="convert")
    built = build(config, out, only="engines", trtllm=True)  # "inside the container"
    assert set(built.done) == {"engine-target", "engine-draft"}
    assert "--max_draft_len 4" in (out / "logs" / "engine-target.log").read_text()
    # back here (no TensorRT-LLM), same config: the engines stay done, nothing is pending
    here = build(config, out)
    assert not here.pending and {"engine-target", "engine-draft"} <= set(here.skipped)
    # k changes: the old target engine is removed and its step pending with the new command; the draft engine does
    # not depend on k (same command, same converted draft) and stays
    changed = build(config, out, only="convert", max_draft_len=2)
    assert [p["id"] for p in changed.pending] == ["engine-target"]
    assert not (out / "engines" / "target").exists() and not (out / "logs" / "engine-target.log").exists()
    steps = {s["id"]: s for s in manifest(out)["steps"]}
    assert steps["engine-draft"]["status"] == "done" and (out / "engines" / "draft" / "config.json").is_file()
    assert steps["engine-target"]["status"] == "pending" and "--max_draft_len 2" in steps["engine-target"]["command"]


def test_modified_output_or_input_is_redone(random_pair, tmp_path):
    target, draft = random_pair
    config = write_config(tmp_path / "c.yaml", target=str(target), method="none",
                          engine={"dtype": "float32", "max_input_len": 8, "max_seq_len": 16})
    out = tmp_path / "out"
    first = build(config, out, only="convert")
    record = next(s for s in manifest(out)["steps"] if s["id"] == "convert-target")
    assert record["key"] and record["code"].startswith("trtspec ") and " converter " in record["code"]
    assert first.done == ["convert-target"] and build(config, out, only="convert").skipped == ["convert-target"]
    ckpt_config = out / "checkpoints" / "target" / "config.json"
    ckpt_config.write_text(ckpt_config.read_text().replace('"float32"', '"float16"'))  # an output edited by hand
    assert build(config, out, only="convert").done == ["convert-target"]
    assert json.loads(ckpt_config.read_text())["dtype"] == "float32"


def test_a_failed_rerun_does_not_touch_the_logs_of_the_output(random_pair, tmp_path, fake_trtllm_build, monkeypatch):
    config = write_config(tmp_path / "c.yaml", target=str(random_pair[0]), method="none",
                          engine={"dtype": "float32", "max_input_len": 8, "max_seq_len": 16})
    out = tmp_path / "out"
    build(config, out, only="convert")
    build(config, out, only="engines", trtllm=True)
    log = out / "logs" / "engine-target.log"
    before = log.read_text()
    monkeypatch.setenv("FAIL_BUILD", "1")
    with pytest.raises(BuildError, match="exit code 7") as err:
        build(config, out, only="engines", trtllm=True, engine={"dtype": "float32", "max_input_len": 8,
                                                                 "max_seq_len": 32})
    assert "\n" not in err.value.message and "fake trtllm-build" in err.value.message
    assert log.read_text() == before and "--max_seq_len 16" in before  # the output's log still describes its engine
    assert "--max_seq_len 32" in (tmp_path / "out.trtspec-failed.log").read_text()
    assert not list(tmp_path.glob(".out.trtspec-*"))
    monkeypatch.delenv("FAIL_BUILD")
    build(config, out, only="engines", trtllm=True, engine={"dtype": "float32", "max_input_len": 8, "max_seq_len": 32})
    assert "--max_seq_len 32" in log.read_text() and not list(tmp_path.glob("out.trtspec-failed.*"))


def test_staging_of_killed_runs_is_removed(random_pair, tmp_path):
    config = write_config(tmp_path / "c.yaml", target=str(random_pair[0]), method="none", backend="torch",
                          engine={"dtype": "float32", "max_input_len": 8, "max_seq_len": 16})
    out = tmp_path / "out"
    dead, alive = dead_pid(), os.getppid()
    for pid in (dead, alive):
        (tmp_path / f".out.trtspec-tmp-{pid}" / "target").mkdir(parents=True)
    (tmp_path / f".out.trtspec-old-{dead}").mkdir()
    (tmp_path / ".other.trtspec-tmp-1").mkdir()  # another output's staging: not ours to touch
    build(config, out)
    left = sorted(p.name for p in tmp_path.glob(".*"))
    assert left == [".other.trtspec-tmp-1", f".out.trtspec-tmp-{alive}"]  # a live run's staging stays


@pytest.mark.parametrize("cut", ["after-first-rename", "before-cleanup"])
def test_a_swap_cut_by_a_kill_is_finished(random_pair, tmp_path, cut):
    config = write_config(tmp_path / "c.yaml", target=str(random_pair[0]), method="none", backend="torch",
                          engine={"dtype": "float32", "max_input_len": 8, "max_seq_len": 16})
    out = tmp_path / "out"
    build(config, out)
    old_bundle = (out / "trtspec-bundle.json").read_text()
    # what a run killed inside replace_dir (trtspec.atomic) leaves: the old output renamed aside and the complete new one staged
    pid = dead_pid()
    staged = tmp_path / f".out.trtspec-tmp-{pid}"
    build(config, staged, max_draft_len=None, engine={"dtype": "float32", "max_input_len": 8, "max_seq_len": 12})
    new_bundle = (staged / "trtspec-bundle.json").read_text()
    os.replace(out, tmp_path / f".out.trtspec-old-{pid}")
    if cut == "before-cleanup":
        os.replace(staged, out)
    recover_interrupted(out)
    assert (out / "trtspec-bundle.json").read_text() == new_bundle != old_bundle
    assert not list(tmp_path.glob(".out.trtspec-*"))
