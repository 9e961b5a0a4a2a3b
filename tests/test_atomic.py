"""trtspec.atomic, the one definition of temp-then-rename writes: a write that fails or is killed leaves the old file
whole, a finished one replaces it, no temp file survives a failure, a new file has the permissions of a plain open()
and a replaced one keeps its mode, a symbolic link is written through, a FIFO, device or directory is refused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trtspec.atomic import atomic_path, replace_dir, write_bytes, write_json, write_text
from trtspec.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]


def temps(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_a_write_replaces_the_file_and_leaves_no_temp(tmp_path):
    path = tmp_path / "report.md"
    write_text(path, "old\n")
    write_text(path, "new: ünïcode\n")
    assert path.read_text(encoding="utf-8") == "new: ünïcode\n"
    assert temps(tmp_path) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["report.md"]


def test_an_interrupted_write_leaves_the_old_file_intact(tmp_path):
    path = tmp_path / "config.json"
    write_json(path, {"k": 4})
    with pytest.raises(RuntimeError, match="disk on fire"), atomic_path(path) as tmp:
        tmp.write_text('{"k": ')  # half written
        raise RuntimeError("disk on fire")
    assert json.loads(path.read_text()) == {"k": 4}
    assert temps(tmp_path) == []


def test_a_write_killed_mid_way_leaves_the_old_file_intact(tmp_path):
    """kill -9 while the writer is half-way: the destination is still the old, whole file (the temp stays behind)."""
    path = tmp_path / "checkpoint.bin"
    write_bytes(path, b"old" * 1000)
    script = textwrap.dedent(f"""
        import sys, time
        from trtspec.atomic import atomic_path
        with atomic_path({str(path)!r}) as tmp:
            with open(tmp, "wb") as f:
                f.write(b"new" * 500)
                f.flush()
                print("half", flush=True)
                time.sleep(60)
                f.write(b"new" * 500)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "half"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert path.read_bytes() == b"old" * 1000
    (left,) = temps(tmp_path)  # a killed writer's temp: named after the file, never the file itself
    assert left.startswith(".checkpoint.bin.") and (tmp_path / left).read_bytes() == b"new" * 500


def test_publish_on_error_keeps_a_failed_commands_log(tmp_path):
    log = tmp_path / "step.log"
    with pytest.raises(OSError), atomic_path(log, publish_on_error=True) as tmp:
        tmp.write_text("$ convert\nTraceback ...\n")
        raise OSError("the command failed")
    assert log.read_text() == "$ convert\nTraceback ...\n" and temps(tmp_path) == []


def test_a_new_file_has_the_permissions_of_a_plain_open(tmp_path):
    old = os.umask(0o027)
    try:
        write_text(tmp_path / "a", "x")
        with open(tmp_path / "b", "w") as f:
            f.write("x")
    finally:
        os.umask(old)
    assert (tmp_path / "a").stat().st_mode & 0o777 == (tmp_path / "b").stat().st_mode & 0o777 == 0o640


@pytest.mark.parametrize("mode", [0o444, 0o600, 0o755], ids=oct)
def test_a_replaced_file_keeps_its_mode(tmp_path, mode):
    path = tmp_path / "build.yaml"
    path.write_text("old\n")
    path.chmod(mode)
    write_text(path, "new\n")
    assert path.read_text() == "new\n" and path.stat().st_mode & 0o777 == mode and temps(tmp_path) == []


def test_a_symlink_is_written_through_to_its_file(tmp_path):
    """The link stays a link; the file at the end of the chain is replaced, its temp beside it (the rename stays
    within one directory), and keeps its mode."""
    real_dir, link_dir = tmp_path / "configs", tmp_path / "work"
    real_dir.mkdir()
    link_dir.mkdir()
    real = real_dir / "build.yaml"
    real.write_text("old\n")
    real.chmod(0o640)
    (link_dir / "middle.yaml").symlink_to(real)
    link = link_dir / "build.yaml"
    link.symlink_to("middle.yaml")  # relative, through a second link
    with atomic_path(link) as tmp:
        assert tmp.parent == real_dir
        tmp.write_text("new\n")
    assert link.is_symlink() and os.readlink(link) == "middle.yaml" and (link_dir / "middle.yaml").is_symlink()
    assert real.read_text() == "new\n" and real.stat().st_mode & 0o777 == 0o640
    assert temps(real_dir) == temps(link_dir) == []
    dangling = link_dir / "new.yaml"
    dangling.symlink_to(real_dir / "new.yaml")
    write_text(dangling, "made\n")  # a dangling link creates the file it names
    assert dangling.is_symlink() and (real_dir / "new.yaml").read_text() == "made\n"


@pytest.mark.parametrize("kind", ["fifo", "directory", "link to a fifo"])
def test_a_destination_that_is_not_a_regular_file_is_refused_before_anything_is_opened(tmp_path, kind):
    target = tmp_path / "target"
    if kind == "directory":
        target.mkdir()
    else:
        os.mkfifo(target)  # opening it for writing would block until a reader came
    path = target
    if kind.startswith("link"):
        path = tmp_path / "link"
        path.symlink_to(target)
    with pytest.raises(UsageError) as err:
        write_text(path, "x")
    words = "a directory" if kind == "directory" else "a FIFO (named pipe)"
    assert str(err.value).startswith(f"{path}") and f"is {words}, not a regular file" in str(err.value)
    assert err.value.exit_code == 2 and err.value.hint
    assert (target.is_dir() if kind == "directory" else target.is_fifo()) and temps(tmp_path) == []


def test_a_writer_that_takes_a_file_name_writes_through_the_temp(tmp_path):
    path = tmp_path / "state.pt"
    with atomic_path(path) as tmp:
        assert tmp.parent == tmp_path and tmp.exists() and not path.exists()  # beside it: the rename is atomic
        tmp.write_bytes(b"\x00\x01")
    assert path.read_bytes() == b"\x00\x01"


def test_replace_dir_swaps_a_directory_whole(tmp_path):
    out, staging = tmp_path / "repo", tmp_path / ".repo.staging"
    out.mkdir()
    (out / "old.txt").write_text("old")
    staging.mkdir()
    (staging / "new.txt").write_text("new")
    replace_dir(staging, out)
    assert [p.name for p in out.iterdir()] == ["new.txt"] and not staging.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["repo"]  # the old directory, renamed aside, is gone
    fresh = tmp_path / ".fresh.staging"
    fresh.mkdir()
    replace_dir(fresh, tmp_path / "fresh")  # no earlier output: one rename
    assert (tmp_path / "fresh").is_dir() and not fresh.exists()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(old=st.binary(max_size=2000), new=st.binary(max_size=2000), fail=st.booleans())
def test_the_file_holds_exactly_the_old_or_the_new_contents(tmp_path, old, new, fail):
    path = tmp_path / "f.bin"
    write_bytes(path, old)
    try:
        with atomic_path(path) as tmp:
            tmp.write_bytes(new[: len(new) // 2])
            if fail:
                raise ValueError("interrupted")
            with open(tmp, "ab") as f:
                f.write(new[len(new) // 2 :])
    except ValueError:
        pass
    assert path.read_bytes() == (old if fail else new)
    assert temps(tmp_path) == []


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                         lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
                         max_leaves=12),
       ensure_ascii=st.booleans())
def test_write_json_round_trips(tmp_path, data, ensure_ascii):
    path = tmp_path / "d.json"
    write_json(path, data, ensure_ascii=ensure_ascii)
    text = path.read_text(encoding="utf-8")
    assert json.loads(text) == data and text.endswith("\n")


def test_a_slow_reader_never_sees_half_a_file(tmp_path):
    """Readers polling while a writer rewrites the file see only whole versions."""
    path = tmp_path / "live.json"
    write_json(path, {"n": 0, "pad": "x" * 50_000})
    writer = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        from trtspec.atomic import write_json
        for n in range(1, 200):
            write_json({str(path)!r}, {{"n": n, "pad": "x" * 50_000}})
    """)], env={**os.environ, "PYTHONPATH": str(ROOT)})
    seen = set()
    deadline = time.monotonic() + 60
    while writer.poll() is None and time.monotonic() < deadline:
        seen.add(json.loads(path.read_text())["n"])  # a torn read would raise here
    writer.wait(timeout=60)
    assert json.loads(path.read_text())["n"] == 199 and seen
