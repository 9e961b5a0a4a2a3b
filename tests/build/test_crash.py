"""kill -9 during `trtspec build`, then run it again: the result is the uninterrupted run's (files, manifest, logs).

Two builds of the embedded tiny pair: the torch bundle (build_configs/tiny-torch.yaml) and the conversion
(build_configs/tiny-draft-target.yaml --only convert), each killed at a few seeded points. A point is the N-th
file-system operation of the build (os.replace / link / mkdir / unlink / rmdir, shutil.rmtree, a file opened for
writing, the converter's checkpoint write), where the child sends itself SIGKILL, plus one kill from outside at a seeded
time. Between the kill and the re-run the output must be what docs/guarantees.md promises: absent (first build) or a
complete output (the previous one or the new one) once `recover_interrupted` ran, which the next build does first.
The killed runs and the reference runs (whose operations are counted) are children (tests/forked.py); the runs that
only have to end (a torch bundle's rerun, the k=4 build the k=2 one replaces) run in this process.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from multiprocessing.process import BaseProcess
from pathlib import Path

import pytest
import yaml

from tests import forked
from tests.cli_checks import run_cli
from trtspec.build.execute import recover_interrupted
from trtspec.build.manifest import Hasher

pytestmark = pytest.mark.process  # forked children (tests/forked.py)
ROOT = Path(__file__).resolve().parents[2]
SEED = 20260214
# Runs trtspec in the child; with CRASH_AT=N it SIGKILLs itself before the N-th file-system operation of the build
# (counted from the moment execute() starts), and it writes the number of operations to CRASH_COUNT when it ends.
CHILD = r"""
import builtins, io, os, shutil, signal, sys
state = {"armed": False, "n": 0}
kill_at = int(os.environ.get("CRASH_AT", "0"))

def hook(fn):
    def wrapped(*args, **kwargs):
        if state["armed"]:
            state["n"] += 1
            if state["n"] == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
        return fn(*args, **kwargs)
    return wrapped

for name in ("replace", "rename", "link", "mkdir", "unlink", "rmdir", "symlink"):
    setattr(os, name, hook(getattr(os, name)))
shutil.rmtree = hook(shutil.rmtree)
_open = io.open
def opener(file, mode="r", *args, **kwargs):
    if any(c in mode for c in "wax+"):
        return hook(_open)(file, mode, *args, **kwargs)
    return _open(file, mode, *args, **kwargs)
builtins.open = io.open = opener
import trtspec.build.convert
trtspec.build.convert.write_checkpoint = hook(trtspec.build.convert.write_checkpoint)  # without importing torch here
import trtspec.build.execute as execute_module
_execute = execute_module.execute
def execute(*args, **kwargs):
    state["armed"] = True
    return _execute(*args, **kwargs)
execute_module.execute = execute
try:
    from trtspec.cli.main import main
    main(sys.argv[1:])
finally:
    with _open(os.environ["CRASH_COUNT"], "w") as fh:
        fh.write(str(state["n"]))
"""


def child(argv: list[str], work: Path, *, kill_at: int = 0) -> BaseProcess:
    """`python -c CHILD ARGV` in `work` (tests/forked.py: forked with torch already imported, trtspec not)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CRASH_AT": str(kill_at), "CRASH_COUNT": str(work / "count")}
    return forked.start(CHILD, argv, cwd=work, env=env, stderr=work / "stderr")


def build_here(argv: list[str], work: Path) -> tuple[int, str]:
    """`trtspec ARGV` run to its end in this process, in `work` (only the run that is killed, and the reference run
    whose operations are counted, need a process of their own)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(work)
        code, _, err = run_cli(argv, limit=300)
    return code, err


def finish(proc: BaseProcess, timeout: float = 300) -> tuple[int, str]:
    proc.join(timeout=timeout)
    assert proc.exitcode is not None, f"the child ran past {timeout} s"
    return proc.exitcode, proc.stderr.read_text()


def normalized_manifest(out: Path) -> dict:
    text = (out / "trtspec-manifest.json").read_text().replace(str(out), "<OUT>")
    data = json.loads(text)
    data.pop("updated")
    data.pop("config_sha256")  # covers config.output, which differs between the two directories
    for step in data["steps"]:
        step["seconds"] = 0
    data["file_hashes"] = {k: v[2] for k, v in data["file_hashes"].items()}
    return data


def snapshot(out: Path) -> dict:
    """Everything a build output holds: each file's bytes (logs included), the manifest normalized."""
    files = {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*"))
             if p.is_file() and p.name != "trtspec-manifest.json"}
    return {"files": files, "manifest": normalized_manifest(out)}


def consistent(out: Path) -> dict:
    """A complete output: its manifest's done steps' outputs hash to what the manifest says (fresh hashes)."""
    manifest = json.loads((out / "trtspec-manifest.json").read_text())
    hasher = Hasher()
    for step in manifest["steps"]:
        if step["status"] == "done":
            assert {o: hasher.tree(out / o, o) for o in step["outputs"]} == step["outputs"], step["id"]
    return normalized_manifest(out)


def crash_and_rerun(argv: list[str], work: Path, out: Path, reference: dict, *, expected_code: int,
                    kill_points: list[int], timed: list[float], previous: dict | None, in_process: bool) -> None:
    for point, delay in [(p, None) for p in kill_points] + [(0, d) for d in timed]:
        proc = child(argv, work, kill_at=point)
        if delay is not None:
            time.sleep(delay)
            proc.kill()  # SIGKILL
        code, err = finish(proc)
        label = f"kill at operation {point}" if delay is None else f"kill after {delay:.2f} s"
        if code != -signal.SIGKILL:  # the timed kill may come after the end; an operation kill may not
            assert delay is not None and code == expected_code, (label, code, err)
        # what the next run sees first: the previous output, the new one, or (first build) nothing
        recover_interrupted(out)
        if out.exists():
            state = consistent(out)
            assert state in [m for m in (reference["manifest"], previous) if m is not None], label
        else:
            assert previous is None, f"{label}: the previous output is gone"
        # the torch bundle's rerun in this process; the conversion's in a child too (it imports torch, which this
        # process has not: a child forked with torch already imported costs less)
        rerun, err = build_here(argv, work) if in_process else finish(child(argv, work))
        assert rerun == expected_code, (label, err)
        assert snapshot(out) == reference, label
        assert not [p.name for p in out.parent.iterdir() if ".trtspec-" in p.name and "failed" not in p.name], label


def reference_run(argv: list[str], work: Path, out: Path, expected_code: int) -> tuple[dict, int]:
    code, err = finish(child(argv, work))
    assert code == expected_code, err
    return snapshot(out), int((work / "count").read_text())


def config(work: Path, name: str, **changes) -> Path:
    doc = yaml.safe_load((ROOT / "build_configs" / f"{name}.yaml").read_text())
    doc.update(changes)
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.slow
def test_torch_bundle_build_survives_kill_9(tmp_path):
    rng = random.Random(SEED)
    ref_dir, work = tmp_path / "ref", tmp_path / "work"
    ref_dir.mkdir()
    work.mkdir()
    reference, ops = reference_run(["build", str(config(ref_dir, "tiny-torch")), "--out", str(ref_dir / "out")],
                                   ref_dir, ref_dir / "out", 0)
    assert ops > 5
    argv = ["build", str(config(work, "tiny-torch")), "--out", str(work / "out")]
    points = sorted(rng.sample(range(1, ops + 1), 3))
    crash_and_rerun(argv, work, work / "out", reference, expected_code=0, kill_points=points, timed=[],
                    previous=None, in_process=True)


@pytest.mark.slow
def test_torch_bundle_rebuild_with_a_new_k_survives_kill_9(tmp_path):
    """Killed while replacing an output made with k=4 by one with k=2: the k=4 output or the k=2 one, never a mix."""
    rng = random.Random(SEED + 1)
    ref_dir, work = tmp_path / "ref", tmp_path / "work"
    ref_dir.mkdir()
    work.mkdir()
    reference, ops = reference_run(["build", str(config(ref_dir, "tiny-torch", max_draft_len=2)), "--out",
                                    str(ref_dir / "out")], ref_dir, ref_dir / "out", 0)
    for point in sorted(rng.sample(range(1, ops + 1), 2)):
        out = work / "out"
        code, err = build_here(["build", str(config(work, "tiny-torch")), "--out", str(out)], work)
        assert code == 0, err
        previous = consistent(out)
        argv = ["build", str(config(work, "tiny-torch", max_draft_len=2)), "--out", str(out)]
        crash_and_rerun(argv, work, out, reference, expected_code=0, kill_points=[point], timed=[],
                        previous=previous, in_process=True)


@pytest.mark.slow
def test_convert_survives_kill_9(tmp_path):
    rng = random.Random(SEED + 2)
    ref_dir, work = tmp_path / "ref", tmp_path / "work"
    ref_dir.mkdir()
    work.mkdir()
    started = time.monotonic()
    reference, ops = reference_run(["build", str(config(ref_dir, "tiny-draft-target")), "--only", "convert", "--out",
                                    str(ref_dir / "out")], ref_dir, ref_dir / "out", 0)
    duration = time.monotonic() - started
    assert {"checkpoints/target/rank0.safetensors", "checkpoints/draft/rank0.safetensors",
            "logs/convert-target.log"} <= set(reference["files"])
    argv = ["build", str(config(work, "tiny-draft-target")), "--only", "convert", "--out", str(work / "out")]
    points = sorted(rng.sample(range(1, ops + 1), 3))
    crash_and_rerun(argv, work, work / "out", reference, expected_code=0, kill_points=points,
                    timed=[rng.uniform(0.5, 1.0) * duration], previous=None, in_process=False)
