"""`trtspec serve` leaves nothing behind: SIGTERM while models load, SIGHUP once ready, SIGKILL of `trtspec serve`
itself; and a busy port is refused (exit 2, naming the port and its owner) before anything starts.

Each case runs the real CLI on a one-model repository (the counting test double: the Python backend, no torch) and
then checks that no process of the server's process group is left and its trtspec-triton-* work directory is gone.

An open client gRPC stream holds tritonserver 2.51's shutdown: after it unloads its models, its gRPC server waits for
every open stream (even an idle one) until killed, and a stream that has sent a request to a non-decoupled model keeps
that model loaded until the exit timeout. The teardown is timed with such a stream open: after SIGKILL of `trtspec
serve` and after Ctrl-C, nothing is left within 10 s.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from tests.triton.helpers import counting_model
from trtspec.supervise import group_members
from trtspec.triton.render import write_repository
from trtspec.triton.server import Ports

pytestmark = pytest.mark.triton


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """The counting double as a non-decoupled `counting_lm` with the tensorrt_llm model's inputs and outputs."""
    return write_repository(counting_model("counting_lm", decoupled=False), tmp_path_factory.mktemp("repo") / "repo")


def _serve(repo: Path, ports: Ports) -> subprocess.Popen:
    argv = [sys.executable, "-m", "trtspec", "serve", str(repo), "--grpc-port", str(ports.grpc), "--http-port",
            str(ports.http), "--metrics-port", str(ports.metrics)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _children(pid: int) -> list[tuple[int, str]]:
    out = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
                if ppid == pid:
                    out.append((int(proc.name), (proc / "cmdline").read_bytes().decode(errors="replace")))
            except (OSError, ValueError, IndexError):
                continue
    return out


def _supervisor(serve: subprocess.Popen, timeout: float = 60) -> tuple[int, Path]:
    """The supervisor `trtspec serve` started (pid = its process group) and its work directory."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid, cmdline in _children(serve.pid):
            argv = cmdline.split("\0")
            if "trtspec.supervise" in argv:
                return pid, Path(argv[argv.index("--workdir") + 1])
        time.sleep(0.05)
    raise AssertionError("trtspec serve started no supervisor")


def _wait_for_line(serve: subprocess.Popen, text: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = serve.stdout.readline()
        if text in line:
            return
        assert line or serve.poll() is None, f"trtspec serve exited ({serve.poll()}) before {text!r}"
    raise AssertionError(f"no {text!r} within {timeout} s")


def _assert_nothing_left(group: int, workdir: Path, timeout: float = 40) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and (group_members(group) or workdir.exists()):
        time.sleep(0.2)
    left = group_members(group)
    for pid in left:  # never leave them to the next test, even when failing
        os.kill(pid, signal.SIGKILL)
    assert not left, f"processes left behind: {left}"
    assert not workdir.exists(), f"work directory left behind: {workdir}"


def test_sigterm_while_models_load(repo):
    serve = _serve(repo, Ports.free())
    group, workdir = _supervisor(serve)
    serve.send_signal(signal.SIGTERM)  # the server is not ready yet: models are loading
    assert serve.wait(timeout=60) == 128 + signal.SIGTERM
    _assert_nothing_left(group, workdir)


def test_sighup_once_ready(repo):
    serve = _serve(repo, Ports.free())
    group, workdir = _supervisor(serve)
    _wait_for_line(serve, "tritonserver ready")
    serve.send_signal(signal.SIGHUP)
    out, _ = serve.communicate(timeout=60)
    assert serve.returncode == 0 and "tritonserver exited (0)" in out, out
    _assert_nothing_left(group, workdir)


def test_sigkill_of_trtspec_serve(repo):
    serve = _serve(repo, Ports.free())
    group, workdir = _supervisor(serve)
    _wait_for_line(serve, "tritonserver ready")
    serve.kill()
    serve.wait(timeout=10)
    _assert_nothing_left(group, workdir)


class OpenStream:
    """A gRPC client stream to the server, kept open: idle, or after one request answered by `counting_lm` (which
    then stays loaded until tritonserver's exit timeout)."""

    def __init__(self, grpc_port: int, *, request: bool) -> None:
        import tritonclient.grpc as grpcclient

        self.client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
        answered, errors = threading.Event(), []
        self.client.start_stream(callback=lambda result, error: (errors.append(error), answered.set()))
        if not request:
            return
        tensors = {"input_ids": np.array([[5, 6, 7]], np.int32), "input_lengths": np.array([[3]], np.int32),
                   "request_output_len": np.array([[4]], np.int32)}
        inputs = []
        for name, value in tensors.items():
            tensor = grpcclient.InferInput(name, list(value.shape), "INT32")
            tensor.set_data_from_numpy(value)
            inputs.append(tensor)
        self.client.async_stream_infer("counting_lm", inputs)
        assert answered.wait(30) and errors == [None], errors

    def close(self) -> None:
        self.client.stop_stream(cancel_requests=True)
        self.client.close()


def _teardown_with_a_stream_open(repo: Path, stop, *, request: bool) -> tuple[float, subprocess.Popen, str]:
    """Serve `repo`, open a client stream (OpenStream), then `stop(serve)` (returns serve's output) and time it until
    no process of the server's group and no work directory is left: (seconds, serve, output)."""
    ports = Ports.free()
    serve = _serve(repo, ports)
    group, workdir = _supervisor(serve)
    _wait_for_line(serve, "tritonserver ready")
    stream = OpenStream(ports.grpc, request=request)
    try:
        start = time.monotonic()
        out = stop(serve)
        _assert_nothing_left(group, workdir, timeout=30)
        seconds = time.monotonic() - start
    finally:
        stream.close()
    return seconds, serve, out


def _sigkill(serve: subprocess.Popen) -> str:
    serve.kill()
    serve.wait(timeout=10)
    return ""


def _ctrl_c(serve: subprocess.Popen) -> str:
    serve.send_signal(signal.SIGINT)
    return serve.communicate(timeout=60)[0]


def test_sigkill_of_trtspec_serve_with_a_client_stream_open_tears_down_within_10_s(repo):
    seconds, _, _ = _teardown_with_a_stream_open(repo, _sigkill, request=True)
    assert seconds < 10, f"the server group took {seconds:.1f} s to go after SIGKILL of trtspec serve"


def test_ctrl_c_with_an_idle_client_stream_open_stops_within_10_s_and_exits_0(repo):
    """The models unload at once; the supervisor then ends tritonserver's wait on the stream (a clean stop)."""
    seconds, serve, out = _teardown_with_a_stream_open(repo, _ctrl_c, request=False)
    assert seconds < 10, f"the server group took {seconds:.1f} s to go after Ctrl-C"
    assert serve.returncode == 0, out


def test_busy_port_is_refused_with_its_owner(repo):
    ports = Ports.free()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", ports.http))
        busy.listen()
        serve = _serve(repo, ports)
        out, _ = serve.communicate(timeout=60)
    assert serve.returncode == 2, out
    assert f"--http-port={ports.http}: the port is in use by pid {os.getpid()}" in out
    assert not _children(serve.pid)


def test_a_server_that_dies_by_itself_is_reported_with_its_log_kept(repo):
    """A crash (tritonserver SIGKILLed, nobody asked it to stop): the supervisor keeps the log beside the removed
    work directory and TritonServer.stop() warns with that path; a requested stop keeps nothing."""
    from trtspec.supervise import kept_log
    from trtspec.triton.server import TritonServer

    server = TritonServer(repo).start()
    try:
        workdir = server._workdir
        group = server.process.pid
        (tritonserver,) = [pid for pid, argv in _children(server.process.pid) if "tritonserver" in argv]
        os.kill(tritonserver, signal.SIGKILL)
        server.process.wait(timeout=60)
        with pytest.warns(RuntimeWarning, match=r"exited by itself with code 137; its log: .*\.log"):
            server.stop()
        kept = Path(kept_log(str(workdir)))
        assert "Started GRPCInferenceService" in kept.read_text(), kept
        kept.unlink()
        _assert_nothing_left(group, workdir)
    finally:
        server.stop()
    stopped = TritonServer(repo).start()
    workdir, group = stopped._workdir, stopped.process.pid
    asked = time.monotonic()
    assert stopped.stop(wait=False) is None and time.monotonic() - asked < 1  # asked, not waited for
    assert stopped.join() == 0  # a requested stop: exit code 0, and nothing kept
    _assert_nothing_left(group, workdir)
    assert not Path(kept_log(str(workdir))).exists()
