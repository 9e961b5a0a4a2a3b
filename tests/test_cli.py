import json
import subprocess
import sys

from click.testing import CliRunner

from trtspec.cli.main import cli, main


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trtspec", *args], capture_output=True, text=True, timeout=120)


def test_help_and_version():
    result = CliRunner().invoke(cli, ["--help"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "doctor" in result.output
    result = CliRunner().invoke(cli, ["--version"], catch_exceptions=False)
    assert result.exit_code == 0 and "trtspec" in result.output


def test_doctor_reports_tensorrt_llm_unavailable_without_traceback():
    proc = run_cli("doctor", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    checks = {c["name"]: c for c in json.loads(proc.stdout)}
    assert checks["torch"]["ok"] and checks["tritonserver"]["ok"]
    trt = checks["tensorrt_llm"]
    assert not trt["required"]
    if not trt["ok"]:
        assert "unavailable" in trt["detail"] and "Traceback" not in proc.stderr
    assert checks["model tiny"]["ok"] and checks["model tiny-draft"]["ok"]


def test_unknown_model_exits_2_with_path_and_no_traceback():
    proc = run_cli("models", "no-such-model")
    assert proc.returncode == 2
    assert "no-such-model" in proc.stderr and "Hint:" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_directory_without_config_names_missing_file(tmp_path):
    proc = run_cli("models", str(tmp_path))
    assert proc.returncode == 2
    assert str(tmp_path / "config.json") in proc.stderr and "missing" in proc.stderr


def test_debug_shows_traceback(tmp_path):
    proc = run_cli("--debug", "models", str(tmp_path))
    assert proc.returncode != 0 and "Traceback" in proc.stderr


def test_main_maps_errors_to_exit_code(tmp_path, capsys):
    try:
        main(["models", str(tmp_path / "nope")])
    except SystemExit as exc:
        assert exc.code == 2
    assert "Error:" in capsys.readouterr().err
