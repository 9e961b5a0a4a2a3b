"""Inputs that used to end in a traceback or a wrong success are one-line errors with a documented exit code: config
files in other encodings or nested 20,000 levels, out-of-range counts and floats, TP sizes the model cannot split
into, out-of-vocabulary tree ranks, choices files that are not choices (never echoed), truncated weights, and a full
disk during build and convert."""

from __future__ import annotations

import codecs
import errno
import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.build.helpers import make_medusa_heads, write_config
from trtspec.build.checkpoint import check_weights
from trtspec.cli.main import main
from trtspec.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "trtspec" / "assets" / "models" / "tiny"


def run(argv: list[object], capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        main([str(a) for a in argv])
        code = 0
    except SystemExit as exc:
        code = int(exc.code)
    out, err = capsys.readouterr()
    return code, out, err


def one_error(err: str) -> str:
    """The stderr of a failure: exactly one `Error:` line (and optionally one `Hint:` line), no traceback."""
    assert "Traceback" not in err and "Error: " in err, err
    lines = err[err.index("Error: "):].strip().splitlines()  # after any progress display
    assert len(lines) <= 2 and all(line.startswith("Hint: ") for line in lines[1:]), err
    return lines[0]


@pytest.mark.parametrize("content, words", [
    (codecs.BOM_UTF16_LE + "target: tiny\n".encode("utf-16-le"), ["UTF-16", "save it as UTF-8"]),
    ("target: tiny\n".encode("utf-16-be"), ["NUL bytes"]),
    ("target: tïny\n".encode("latin-1"), ["not UTF-8", "0xef"]),
    (b"a: " + b"[" * 20000 + b"]" * 20000 + b"\n", ["nests deeper"]),
    (b"target: tiny\nx: &a [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n" + b"".join(
        b"x%d: &a%d [" % (i, i) + b", ".join([b"*a" if i == 0 else b"*a%d" % (i - 1)] * 10) + b"]\n"
        for i in range(8)), ["far larger"]),
    (b"target: tiny\nwhen: 2024-13-45\n", ["YAML cannot read"]),
    (b"target: tiny\nengine: {max_batch_size: [\n", ["not valid YAML", "line"]),
    (b"\x00" * 2_000_000, ["larger than"]),
])  # fmt: skip
def test_config_files_that_are_not_build_configs(tmp_path, capsys, content, words):
    path = tmp_path / "c.yaml"
    path.write_bytes(content)
    code, _, err = run(["build", path, "--dry-run"], capsys)
    line = one_error(err)
    assert code == 2 and str(path) in line and all(w in err for w in words), err


def test_a_config_that_is_a_fifo_is_refused_without_opening_it(tmp_path):
    from tests.cli_checks import assert_clean_failure, run_cli

    path = tmp_path / "c.yaml"
    os.mkfifo(path)  # opening it would wait for a writer
    code, _, err = run_cli(["build", str(path), "--dry-run"], limit=20)
    assert_clean_failure(code, err, frozenset({2}))
    assert f"config={str(path)!r}: is a FIFO (named pipe), not a regular file" in err, err


@pytest.mark.parametrize("fields, field, words", [
    ({"engine": {"tp_size": 10**6}}, "engine.tp_size", ["num_attention_heads=6"]),
    ({"engine": {"tp_size": 10**10}}, "engine.tp_size", ["less than or equal to 2147483647"]),
    ({"engine": {"tp_size": 4}}, "engine.tp_size", ["num_attention_heads=6", "1, 2, 3, 6"]),
    ({"engine": {"pp_size": 7}}, "engine.pp_size", ["num_hidden_layers=6"]),
    ({"engine": {"max_batch_size": 10**12}}, "engine.max_batch_size", ["2147483647"]),
    ({"engine": {"max_batch_size": 10**40}}, "engine.max_batch_size", ["2147483647"]),
    ({"gpu": {"memory_gib": float("inf")}}, "gpu.memory_gib", ["finite"]),
    ({"gpu": {"memory_gib": float("nan")}}, "gpu.memory_gib", ["finite"]),
    ({"gpu": {"memory_gib": 80, "reserve_gib": float("inf")}}, "gpu.reserve_gib", ["finite"]),
    ({"kv_cache": {"free_gpu_memory_fraction": float("nan")}}, "kv_cache.free_gpu_memory_fraction", ["finite"]),
    ({"output": ""}, "output", ["empty"]),
    ({"output": "a\0b"}, "output", ["NUL"]),
    ({"output": "x" * 300}, "output", ["longer than"]),
    ({"k": 2, "max_draft_len": 4, "method": "draft_target", "draft": "tiny-draft"}, "k", ["max_draft_len"]),
    ({"trtllm": 5, "trtllm_version": "0.19.0"}, "trtllm", ["not a mapping"]),
    ({"trtllm": {"version": "9" * 5000}}, "trtllm.version", ["not a TensorRT-LLM version"]),
])  # fmt: skip
def test_out_of_range_values_are_refused_in_dry_run(tmp_path, capsys, fields, field, words):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"target": "tiny", **fields}))
    code, _, err = run(["build", path, "--dry-run"], capsys)
    line = one_error(err)
    assert code == 2 and line.startswith(f"Error: {field}=") and all(w in err for w in words), err
    assert len(line) < 400


def test_tree_ranks_beyond_the_vocabulary_are_refused_by_build(tmp_path, capsys):
    heads = make_medusa_heads(tmp_path / "heads", num_heads=2, hidden=384, vocab=4096)
    for choices, ok in (([[0], [4095]], True), ([[0], [4096]], False), ([[0], [0, 10**30]], False)):
        path = write_config(tmp_path / "c.yaml", target="tiny", method="medusa",
                            medusa={"heads": str(heads), "choices": choices},
                            engine={"max_input_len": 64, "max_seq_len": 128})
        code, _, err = run(["build", path, "--dry-run"], capsys)
        if ok:
            assert code == 0, err
        else:
            assert code == 2 and one_error(err).startswith("Error: medusa.choices="), err


def test_choices_files_are_named_never_echoed(tmp_path, capsys):
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0:TOPSECRET:/root:/bin/bash\nuser:x:1000:1000::/home/user:/bin/sh\n")
    binary = tmp_path / "blob"
    binary.write_bytes(bytes(range(256)) * 4)
    mapping = tmp_path / "map.yaml"
    mapping.write_text("password: TOPSECRET\n")
    bad_rank = tmp_path / "ranks.json"
    bad_rank.write_text('[[0], ["TOPSECRET"]]')
    heads = make_medusa_heads(tmp_path / "heads", num_heads=2, hidden=384, vocab=4096)
    for path in (secret, binary, mapping, bad_rank):
        for argv in (["generate", "--method", "medusa", "--choices", path, "--max-new-tokens", "2", "x"],
                     ["build", write_config(tmp_path / "c.yaml", target="tiny", method="medusa",
                                            medusa={"heads": str(heads), "choices": str(path)}), "--dry-run"]):
            code, out, err = run(argv, capsys)
            line = one_error(err)
            assert code == 2 and str(path) in line and "TOPSECRET" not in out + err and "root:" not in err, err


def test_a_utf16_choices_file_gets_the_config_files_errors(tmp_path, capsys):
    # one reader for every small user file (trtspec/textfile.py): a choices file saved as UTF-16 is named as such,
    # with the conversion that fixes it, as a build config would be
    path = tmp_path / "tree.json"
    path.write_bytes(codecs.BOM_UTF16_LE + "[[0], [1]]".encode("utf-16-le"))
    code, _, err = run(["generate", "--method", "medusa", "--choices", str(path), "--max-new-tokens", "2", "x"], capsys)
    line = one_error(err)
    assert code == 2 and str(path) in line and "UTF-16" in line and "tree-utf8.json" in err, err


def test_generate_refuses_out_of_vocabulary_choices(capsys):
    code, _, err = run(["generate", "--method", "medusa", "--choices", "[[0], [100000]]", "--max-new-tokens", "2",
                        "x"], capsys)
    assert code == 2 and "vocabulary has 4096 tokens" in one_error(err)


def truncated_copy(src: Path, dst: Path, cut: int) -> Path:
    shutil.copytree(src, dst)
    weights = dst / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[:cut] if cut > 0 else data + b"\0" * -cut)
    return dst


@pytest.mark.parametrize("cut", [4, 100, -1, "half", "last-byte"])
def test_truncated_weights_are_refused_by_preflight_and_torch_build(tmp_path, capsys, cut):
    size = (TINY / "model.safetensors").stat().st_size
    cut = {"half": size // 2, "last-byte": size - 1}.get(cut, cut)
    target = truncated_copy(TINY, tmp_path / "t", cut)
    with pytest.raises(ConfigError) as info:
        check_weights(target, field="target")
    assert "model.safetensors" in info.value.message
    for extra in (["--dry-run"], []):
        config = write_config(tmp_path / "c.yaml", target=str(target), method="ngram", k=2, backend="torch",
                              engine={"dtype": "float32", "max_input_len": 64, "max_seq_len": 128})
        code, _, err = run(["build", config, "--out", tmp_path / "out", *extra], capsys)
        assert code == 2 and "model.safetensors" in one_error(err), err
        assert not (tmp_path / "out").exists()


def test_disk_full_during_torch_build_is_one_line_and_leaves_no_trace(tmp_path, capsys, monkeypatch):
    from trtspec.build import execute

    config = write_config(tmp_path / "c.yaml", target="tiny", method="ngram", k=2, backend="torch",
                          engine={"dtype": "float32", "max_input_len": 64, "max_seq_len": 128})
    out = tmp_path / "out"
    assert run(["build", config, "--out", out], capsys)[0] == 0
    before = sorted(p.relative_to(out).as_posix() for p in out.rglob("*"))

    def full(src: str, dst: str) -> str:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), dst)

    monkeypatch.setattr(execute, "_link_or_copy", full)
    code, _, err = run(["build", config, "--out", out, "--backend", "torch"], capsys)
    assert code == 1 and "No space left on device" in one_error(err) and "free space" in err
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == before
    assert not list(tmp_path.glob(".out.trtspec-*"))


def test_disk_full_during_convert_is_one_line(tmp_path, capsys, monkeypatch):
    import safetensors.torch
    from safetensors import SafetensorError

    def full(*args, **kwargs):
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(safetensors.torch, "save_file", full)
    config = write_config(tmp_path / "c.yaml", target="tiny", method="none",
                          engine={"dtype": "float16", "max_input_len": 64, "max_seq_len": 128})
    code, _, err = run(["build", config, "--only", "convert", "--out", tmp_path / "out"], capsys)
    line = one_error(err)
    assert code == 1 and "No space left on device" in line and "rank0.safetensors" in line, err
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.trtspec-*"))
    assert json.loads((tmp_path / "out.trtspec-failed.json").read_text())["error"] == line.removeprefix("Error: ")


@pytest.mark.process
def test_file_size_limit_during_convert_in_a_subprocess(tmp_path):
    """A real write failure (RLIMIT_FSIZE: EFBIG, the same path as ENOSPC) in `trtspec build ... --only convert`."""
    config = write_config(tmp_path / "c.yaml", target="tiny", method="none",
                          engine={"dtype": "float32", "max_input_len": 64, "max_seq_len": 128})

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "trtspec", "build", str(config), "--only", "convert", "--out",
                           str(tmp_path / "out")], capture_output=True, text=True, env=env, preexec_fn=limit,
                          timeout=300)
    line = one_error(proc.stderr)
    assert proc.returncode == 1 and "File too large" in line, proc.stderr
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.trtspec-*"))


def test_output_that_would_clobber_or_overlap_is_refused(tmp_path, capsys):
    target = shutil.copytree(TINY, tmp_path / "models" / "tiny")
    config = write_config(tmp_path / "c.yaml", target=str(target), method="ngram", k=2, backend="torch",
                          engine={"dtype": "float32", "max_input_len": 64, "max_seq_len": 128})
    user = tmp_path / "home"
    user.mkdir()
    (user / "notes.txt").write_text("mine")
    a_file = tmp_path / "file"
    a_file.write_text("x")
    for out, words in ((user, "not a trtspec build output"), (a_file, "is a file"),
                       (target, "overlaps the input"), (target / "out", "overlaps the input"),
                       (tmp_path / "models", "overlaps the input")):
        before = sorted((p.as_posix(), p.stat().st_size) for p in tmp_path.rglob("*") if p.is_file())
        code, _, err = run(["build", config, "--out", out], capsys)
        assert code == 2 and words in one_error(err), err
        assert sorted((p.as_posix(), p.stat().st_size) for p in tmp_path.rglob("*") if p.is_file()) == before
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run(["build", config, "--out", empty], capsys)[0] == 0


def test_an_unexpected_os_error_is_one_line_exit_1(capsys, monkeypatch):
    import trtspec.resources

    def broken() -> list[str]:
        raise OSError(errno.EIO, os.strerror(errno.EIO), "/some/where")

    monkeypatch.setattr(trtspec.resources, "example_names", broken)
    code, _, err = run(["build", "--list-examples"], capsys)
    assert code == 1 and one_error(err) == "Error: Input/output error (/some/where)"
