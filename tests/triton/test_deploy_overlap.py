"""`trtspec deploy --force` replaces only a repository trtspec rendered, and never a directory that holds, is, or lies
inside the build it reads."""

from __future__ import annotations

import pytest

from tests.build.helpers import write_config
from tests.cli_checks import cli
from trtspec.triton.render import MARKER, check_destination


@pytest.fixture()
def bundle(tmp_path):
    config = write_config(tmp_path / "c.yaml", target="tiny", method="ngram", k=2, backend="torch",
                          engine={"dtype": "float32", "max_input_len": 64, "max_seq_len": 128})
    out = tmp_path / "work" / "build" / "tiny"
    assert cli("build", config, "--out", out) == 0
    (tmp_path / "work" / "notes.txt").write_text("user file")
    return out


def snapshot(root):
    return sorted((p.relative_to(root).as_posix(), p.read_bytes() if p.is_file() else b"")
                  for p in root.rglob("*"))


@pytest.mark.parametrize("where", ["build", "parent", "grandparent", "inside"])
def test_force_refuses_out_overlapping_the_build(bundle, tmp_path, capsys, where):
    out = {"build": bundle, "parent": bundle.parent, "grandparent": bundle.parent.parent,
           "inside": bundle / "repo"}[where]
    before = snapshot(tmp_path)
    capsys.readouterr()
    assert cli("deploy", "--backend", "torch", "--build", bundle, "--out", out, "--force") == 2
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if line.startswith("Error:")] == [err.splitlines()[0]]
    assert "which the repository reads" in err and "Traceback" not in err
    assert snapshot(tmp_path) == before  # the build and the user's files are untouched


def test_force_replaces_only_a_repository_trtspec_rendered(bundle, tmp_path, capsys):
    mine = tmp_path / "repo"
    assert cli("deploy", "--backend", "torch", "--build", bundle, "--out", mine) == 0
    assert (mine / MARKER).is_file()
    assert cli("deploy", "--backend", "torch", "--build", bundle, "--out", mine) == 2  # exists, no --force
    (mine / "stale.txt").write_text("x")
    assert cli("deploy", "--backend", "torch", "--build", bundle, "--out", mine, "--force") == 0
    assert not (mine / "stale.txt").exists() and (mine / MARKER).is_file()
    user = tmp_path / "user"
    user.mkdir()
    (user / "data.txt").write_text("keep me")
    capsys.readouterr()
    assert cli("deploy", "--backend", "torch", "--build", bundle, "--out", user, "--force") == 2
    assert "not a model repository trtspec rendered" in capsys.readouterr().err
    assert (user / "data.txt").read_text() == "keep me" and sorted(p.name for p in user.iterdir()) == ["data.txt"]
    file_out = tmp_path / "file"
    file_out.write_text("a file")
    assert cli("deploy", "--backend", "torch", "--build", bundle, "--out", file_out, "--force") == 2
    assert file_out.read_text() == "a file"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli("deploy", "--backend", "torch", "--build", bundle, "--out", empty, "--force") == 0


def test_check_destination_resolves_symlinks_and_dots(tmp_path):
    build = tmp_path / "b"
    build.mkdir()
    (tmp_path / "link").symlink_to(tmp_path)
    for out in (tmp_path / "link" / "b", tmp_path / "b" / ".." / "b", tmp_path / "link"):
        with pytest.raises(Exception, match="which the repository reads"):
            check_destination(out, force=True, keep=[build])
    assert check_destination(tmp_path / "repo", keep=[build]) == (tmp_path / "repo").resolve()
