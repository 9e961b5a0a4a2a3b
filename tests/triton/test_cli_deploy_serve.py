"""`trtspec deploy` and `trtspec serve` on the command line (no server started here)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.triton.helpers import trt_manifest, write_manifest
from trtspec.cli.main import cli, main
from trtspec.triton.server import Ports

ROOT = Path(__file__).resolve().parents[2]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "trtspec", *args], capture_output=True, text=True, timeout=120,
                          env=env)


def test_deploy_renders_and_prints_the_serve_command(tmp_path, tokenized_pair):
    build = write_manifest(tmp_path / "build", trt_manifest("medusa", tokenized_pair[0], max_draft_len=63, heads=4,
                                                            tp=2))
    out = tmp_path / "repo"
    result = CliRunner().invoke(cli, ["deploy", "--backend", "tensorrtllm", "--build", str(build), "--out", str(out)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert (out / "tensorrt_llm" / "config.pbtxt").is_file() and (out / "preprocessing/1/text_codec.py").is_file()
    assert f"trtspec serve {out}" in result.output
    assert "mpirun --allow-run-as-root -n 1" in result.output and "world size 2" in result.output
    assert "not built yet" in result.output  # the engines are pending on this machine
    dry = tmp_path / "dry"
    result = CliRunner().invoke(cli, ["deploy", "--backend", "tensorrtllm", "--build", str(build), "--out", str(dry),
                                      "--dry-run"], catch_exceptions=False)
    assert result.exit_code == 0 and "Would write" in result.output and not dry.exists()


@pytest.mark.process
def test_deploy_refuses_a_build_without_manifest(tmp_path):
    proc = run_cli("deploy", "--backend", "torch", "--build", str(tmp_path), "--out", str(tmp_path / "repo"))
    assert proc.returncode == 2, proc.stderr
    assert "no trtspec-manifest.json" in proc.stderr and "Hint: run `trtspec build" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "repo").exists()


@pytest.mark.process
def test_deploy_refuses_lookahead_that_does_not_match_the_engine(tmp_path, tokenized_pair):
    build = write_manifest(tmp_path / "build", trt_manifest("lookahead", tokenized_pair[0], max_draft_len=23,
                                                            lookahead=(4, 4, 4)))
    proc = run_cli("deploy", "--backend", "tensorrtllm", "--build", str(build), "--out", str(tmp_path / "repo"),
                   "--lookahead", "7,7,7")
    assert proc.returncode == 2, proc.stderr
    assert "needs max_draft_len=83 but the target engine has 23" in proc.stderr


@pytest.mark.process
def test_serve_refuses_tensorrtllm_repo_without_its_backend_and_dry_runs(tmp_path, tokenized_pair):
    build = write_manifest(tmp_path / "build", trt_manifest("none", tokenized_pair[0]))
    repo = tmp_path / "repo"
    assert CliRunner().invoke(cli, ["deploy", "--backend", "tensorrtllm", "--build", str(build), "--out",
                                    str(repo)]).exit_code == 0
    proc = run_cli("serve", str(repo))
    assert proc.returncode == 3 and "no tensorrtllm backend" in proc.stderr, proc.stderr
    result = CliRunner().invoke(cli, ["serve", str(repo), "--dry-run", "--grpc-port", "9101", "--load-model",
                                      "preprocessing"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "--grpc-port=9101" in result.output and "--load-model=preprocessing" in result.output


@pytest.mark.triton
def test_serve_runs_until_interrupted_and_stops_cleanly(tmp_path, tokenized_pair):
    build = write_manifest(tmp_path / "build", trt_manifest("none", tokenized_pair[0]))
    repo = tmp_path / "repo"
    assert CliRunner().invoke(cli, ["deploy", "--backend", "tensorrtllm", "--build", str(build), "--out",
                                    str(repo)]).exit_code == 0
    ports = Ports.free()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "trtspec", "serve", str(repo), "--load-model", "preprocessing",
                             "--grpc-port", str(ports.grpc), "--http-port", str(ports.http), "--metrics-port",
                             str(ports.metrics)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        assert "tritonserver ready" in line and f"127.0.0.1:{ports.grpc}" in line, line + proc.stderr.read()
        with urllib.request.urlopen(f"http://127.0.0.1:{ports.http}/v2/health/ready", timeout=5) as response:
            assert response.status == 200
        proc.send_signal(signal.SIGINT)  # Ctrl-C: forwarded to tritonserver as SIGTERM
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0 and "tritonserver exited (0)" in out
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{ports.http}/v2/health/ready", timeout=2)


@pytest.mark.process
def test_serve_dry_run_checks_what_a_start_would(tmp_path, tokenized_pair):
    """--dry-run prints the command only when a real start would get past its checks: free ports, a readable
    repository record whose models are there, the models asked for with --load-model, the binary."""
    import json
    import shutil
    import socket

    build = write_manifest(tmp_path / "build", trt_manifest("none", tokenized_pair[0]))
    repo = tmp_path / "repo"
    assert CliRunner().invoke(cli, ["deploy", "--backend", "tensorrtllm", "--build", str(build), "--out",
                                    str(repo)]).exit_code == 0
    ports = Ports.free()
    base = ["serve", str(repo), "--dry-run", "--grpc-port", str(ports.grpc), "--http-port", str(ports.http),
            "--metrics-port", str(ports.metrics), "--load-model", "preprocessing"]
    proc = run_cli(*base)
    assert proc.returncode == 0 and f"--grpc-port={ports.grpc}" in proc.stdout, proc.stderr
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", ports.http))
        busy.listen()
        proc = run_cli(*base)
    assert proc.returncode == 2 and f"--http-port={ports.http}: the port is in use" in proc.stderr, proc.stderr
    assert "tritonserver" not in proc.stdout
    proc = run_cli(*base[:-1], "nosuchmodel")
    assert proc.returncode == 2 and "--load-model nosuchmodel" in proc.stderr and not proc.stdout, proc.stderr
    shutil.rmtree(repo / "postprocessing")
    proc = run_cli(*base[:-2])
    assert proc.returncode == 2 and "model postprocessing" in proc.stderr and not proc.stdout, proc.stderr
    (repo / "trtspec-repo.json").write_text(json.dumps(["not", "an", "object"]))
    proc = run_cli(*base)
    assert proc.returncode == 2 and "is not a JSON object" in proc.stderr and not proc.stdout, proc.stderr
    (repo / "trtspec-repo.json").write_text("{")
    proc = run_cli(*base)
    assert proc.returncode == 2 and "is not UTF-8 JSON" in proc.stderr and not proc.stdout, proc.stderr


def test_deploy_draft_runtime_reaches_the_torch_flavours_engine_and_is_refused_on_tensorrtllm(tmp_path, random_pair,
                                                                                            tokenized_pair, capsys):
    from tests.triton.helpers import torch_bundle
    from trtspec.triton.repo import RepoSpec, plan_repository

    bundle = torch_bundle(tmp_path / "bundle", *random_pair)
    plain = plan_repository(RepoSpec.from_build(bundle, "torch"))
    onnx = plan_repository(RepoSpec.from_build(bundle, "torch", engine={"draft_runtime": "onnx"}))
    assert 'key: "draft_runtime"' not in plain["tensorrt_llm/config.pbtxt"].text  # unset: the repository reads the same
    assert 'key: "draft_runtime"' in onnx["tensorrt_llm/config.pbtxt"].text
    assert 'string_value: "onnx"' in onnx["tensorrt_llm/config.pbtxt"].text.split('key: "draft_runtime"')[1][:80]
    # the BLS's draft model runs the draft as its target, in torch: unchanged
    assert onnx["tensorrt_llm_draft/config.pbtxt"].text == plain["tensorrt_llm_draft/config.pbtxt"].text
    build = write_manifest(tmp_path / "build", trt_manifest("draft_target", tokenized_pair[0], max_draft_len=4,
                                                            draft=True))
    with pytest.raises(SystemExit) as exit_info:
        main(["deploy", "--backend", "tensorrtllm", "--build", str(build), "--out", str(tmp_path / "repo"),
              "--draft-runtime", "onnx"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and not (tmp_path / "repo").exists() and "Traceback" not in err
    assert err.startswith("Error: --draft-runtime='onnx': chooses what runs the reference engine's draft model")
    assert "Hint: deploy with --backend torch, or leave --draft-runtime out" in err
