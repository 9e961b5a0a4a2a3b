"""`trtspec sweep` / `trtspec report` on bad input: one-line errors with exit 2, never a traceback; a sweep whose
cases failed exits 1 (the failures are error records in --out)."""

from __future__ import annotations

import pytest

from tests.sweep.fakes import FakeSweepBackend
from trtspec.cli.main import main


def run(argv: list[str], capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as info:
        main(argv)
    captured = capsys.readouterr()
    return info.value.code, captured.out + captured.err


@pytest.mark.parametrize("flags, message", [
    (["--temperature", "nan"], "--temperature='nan' holds a value that is not finite"),
    (["--temperature", "0,inf"], "--temperature='0,inf' holds a value that is not finite"),
    (["--k", "1,,2"], "--k='1,,2' has an empty item"),
    (["--method", ""], "--method='' has an empty item"),
    (["--suite", "code,"], "--suite='code,' has an empty item"),
    (["--draft-runtime", "tvm"], "'tvm' is not one of 'torch', 'onnx'"),
    (["--method", "ngram", "--draft-runtime", "onnx"],
     "draft_runtime='onnx': runs the draft model, and no method of the sweep has one"),
])  # fmt: skip
def test_bad_lists_are_refused(tmp_path, capsys, flags, message):
    code, out = run(["sweep", "--out", str(tmp_path / "r.jsonl"), *flags], capsys)
    assert code == 2 and message in out and "Traceback" not in out


@pytest.mark.parametrize("content, message", [
    (b"\x00\xffgarbage\n\x00\n", ":1: not a JSON record"),
    (b'{"a": 1}\n{"kind": "case", "id": "x"}\n', ":1: a JSON value without the record fields kind and id"),
])  # fmt: skip
def test_out_that_is_not_a_results_file(tmp_path, capsys, content, message):
    out = tmp_path / "garbage.jsonl"
    out.write_bytes(content)
    code, text = run(["sweep", "--out", str(out), "--num-prompts", "1", "--max-new-tokens", "2"], capsys)
    assert code == 2 and message in text
    assert out.read_bytes() == content  # nothing appended to a file that is not ours


PARAMS = ('"params": {"method": "none", "model": "m", "suite": "code", "k": 0, "concurrency": 1, "temperature": 0, '
          '"max_new_tokens": 4}')


@pytest.mark.parametrize("fields, message", [
    ('"params": {}', "r.jsonl:1: params.method is missing"),
    (PARAMS, "r.jsonl:1: metrics is missing"),
    (PARAMS + ', "metrics": []', "r.jsonl:1: metrics=[]: must be an object"),
])  # fmt: skip
def test_report_on_a_case_without_params_or_metrics(tmp_path, capsys, fields, message):
    path = tmp_path / "r.jsonl"
    path.write_text('{"kind": "case", "id": "x", "status": "ok", ' + fields + "}\n")
    code, text = run(["report", str(path), "--out", str(tmp_path / "rep")], capsys)
    assert code == 2 and message in text and "Traceback" not in text, text


def test_a_sweep_whose_cases_fail_exits_1(tmp_path, capsys, monkeypatch):
    import trtspec.sweep.runner as runner

    real = runner.run_sweep
    monkeypatch.setattr(runner, "run_sweep", lambda spec, out, **kw: real(
        spec, out, backend=FakeSweepBackend(fail_methods=["ngram", "draft_target"]), **kw))
    code, text = run(["sweep", "--out", str(tmp_path / "r.jsonl"), "--method", "ngram", "--k", "0,1",
                      "--num-prompts", "1", "--max-new-tokens", "2", "--no-progress"], capsys)
    assert code == 1 and "1 failed" in text and "failed: " in text
