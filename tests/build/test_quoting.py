"""Printed and stored commands are shell lines built from argv: hostile output paths, pasted into a shell, run the
intended command with the intended arguments and nothing else (`cd OUT && trtllm-build ...`, `trtspec serve OUT`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.build.helpers import write_config
from tests.cli_checks import cli

HOSTILE = ["o;touch PWNED;#", "o $(touch PWNED)", "o `touch PWNED`", "o'\"; touch PWNED; echo '", "o\ntouch PWNED",
           "o && touch PWNED", "o|touch PWNED", "o\\'$HOME*", "-o"]
SHELLS = [s for s in ("bash", "sh") if shutil.which(s)]
# The converted model: a local checkpoint directory (the embedded draft's, 1.7M parameters; no random pair to make)
MODEL = Path(__file__).resolve().parents[2] / "trtspec" / "assets" / "models" / "tiny-draft"
# A stand-in for the real tool: records its working directory and its arguments, one per NUL-terminated field.
RECORDER = """#!/usr/bin/env python3
import os, sys
with open(os.environ["RECORD"], "ab") as fh:
    fh.write(b"\\0".join(os.fsencode(a) for a in [os.getcwd(), *sys.argv[1:]]) + b"\\0\\n")
"""


def paste(line: str, shell: str, tmp_path: Path, tools: list[str]) -> list[list[str]]:
    """Run `line` as a user pasting it would, with `tools` replaced by the recorder; return what each call saw."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in tools:
        (bin_dir / tool).write_text(RECORDER)
        (bin_dir / tool).chmod(0o755)
    record = tmp_path / "record"
    record.unlink(missing_ok=True)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "RECORD": str(record)}
    proc = subprocess.run([shell, "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, (line, proc.stderr)
    calls = record.read_bytes().split(b"\0\n")[:-1] if record.exists() else []
    return [[os.fsdecode(a) for a in call.split(b"\0")] for call in calls]


def no_side_effects(root: Path) -> None:
    assert not [p for p in root.rglob("PWNED")], "a pasted command ran something else"


@pytest.mark.skipif(not SHELLS, reason="no POSIX shell")
@pytest.mark.parametrize("name", HOSTILE)
def test_pending_trtllm_build_lines_paste_safely(name, tmp_path, capsys):
    config = write_config(tmp_path / "c.yaml", target=str(MODEL), method="none",
                          engine={"dtype": "float32", "max_input_len": 8, "max_seq_len": 16})
    out = tmp_path / "work" / name
    out.parent.mkdir()
    capsys.readouterr()
    assert cli("build", config, "--only", "convert", "--out", out, "--json") == 0
    printed = json.loads(capsys.readouterr().out)["pending"]
    manifest = json.loads((out / "trtspec-manifest.json").read_text())
    assert printed == manifest["pending"] and [p["id"] for p in printed] == ["engine-target"]
    pending = printed[0]
    assert pending["cwd"] == str(out) and pending["argv"][0] == "trtllm-build"
    for shell in SHELLS:
        calls = paste(pending["command"], shell, tmp_path, ["trtllm-build"])
        assert calls == [[str(out), *pending["argv"][1:]]]
        no_side_effects(tmp_path)
    # the human-readable form prints the same line
    cli("build", config, "--only", "convert", "--out", out)
    assert pending["command"] in capsys.readouterr().out
    no_side_effects(tmp_path)


@pytest.mark.skipif(not SHELLS, reason="no POSIX shell")
@pytest.mark.slow
def test_deploy_serve_line_pastes_safely(tmp_path, capsys, monkeypatch):
    bundle = tmp_path / "bundle"
    config = write_config(tmp_path / "c.yaml", target="tiny", draft="tiny-draft", method="draft_target", k=2,
                          backend="torch", engine={"dtype": "float32", "max_input_len": 64, "max_seq_len": 128})
    assert cli("build", config, "--out", bundle) == 0
    for i, name in enumerate(HOSTILE):
        work = tmp_path / f"work{i}"
        work.mkdir()
        monkeypatch.chdir(work)  # --out relative, as typed: `-o` must not become an option of `trtspec serve`
        capsys.readouterr()
        assert cli("deploy", "--backend", "torch", "--build", bundle, "--out", name) == 0
        printed = capsys.readouterr().out
        line = printed.split("Serve it with:\n", 1)[1].removeprefix("  ").removesuffix("\n")
        for shell in SHELLS:
            calls = paste(line, shell, work, ["trtspec"])
            assert len(calls) == 1 and calls[0][1] == "serve" and len(calls[0]) == 3, calls
            assert (Path(calls[0][0]) / calls[0][2]).resolve() == (work / name).resolve()
            assert not calls[0][2].startswith("-")
        no_side_effects(tmp_path)
