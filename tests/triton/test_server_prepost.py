"""A real tritonserver (nvidia-pytriton's binary, CPU) serving the Python models of a TensorRT-LLM-flavour repository.

The tensorrt_llm models stay unloaded (explicit model control): there is no TensorRT-LLM backend on this machine.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.servers import running
from tests.triton.helpers import trt_manifest, write_manifest
from trtspec.errors import ServerError
from trtspec.triton.render import write_repository
from trtspec.triton.repo import RepoSpec, plan_repository
from trtspec.triton.server import Ports, TritonServer, plan_launch

PROMPT = "def add(a, b):\n    return a + b"


@pytest.fixture(scope="module")
def trt_repo(tmp_path_factory, tokenized_pair) -> Path:
    base = tmp_path_factory.mktemp("trt")
    build = write_manifest(base / "build", trt_manifest("draft_target", tokenized_pair[0], max_draft_len=4, draft=True))
    return write_repository(plan_repository(RepoSpec.from_build(build, "tensorrtllm")), base / "repo")


@pytest.fixture(scope="module")
def server(trt_repo):
    with running(trt_repo, load_models=["preprocessing", "postprocessing"]) as srv:
        yield srv


def _infer(url, model, tensors):
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url)
    inputs = []
    for name, (array, dtype) in tensors.items():
        tensor = grpcclient.InferInput(name, list(array.shape), dtype)
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return client.infer(model, inputs)


@pytest.mark.triton
def test_preprocessing_and_postprocessing_round_trip(server, tokenizer_dir):
    from transformers import AutoTokenizer

    expected = AutoTokenizer.from_pretrained(tokenizer_dir).encode(PROMPT)
    result = _infer(server.grpc_url, "preprocessing", {
        "QUERY": (np.array([[PROMPT.encode()]], dtype=object), "BYTES"),
        "REQUEST_OUTPUT_LEN": (np.array([[16]], dtype=np.int32), "INT32")})  # fmt: skip
    ids = result.as_numpy("INPUT_ID")  # [1, prompt_len]
    assert ids.tolist() == [expected]
    assert result.as_numpy("REQUEST_INPUT_LEN").tolist() == [[len(expected)]]
    assert result.as_numpy("OUT_END_ID").tolist() == [[1]]  # </s>
    decoded = _infer(server.grpc_url, "postprocessing", {
        "TOKENS_BATCH": (ids.reshape(1, 1, -1), "INT32"),
        "SEQUENCE_LENGTH": (np.array([[ids.shape[1]]], dtype=np.int32), "INT32")})  # fmt: skip
    assert decoded.as_numpy("OUTPUT").reshape(-1)[0].decode() == PROMPT


@pytest.mark.triton
def test_bad_preprocessing_requests_get_errors_and_server_stays_up(server):
    from tritonclient.utils import InferenceServerException

    with pytest.raises(InferenceServerException, match="empty prompt"):
        _infer(server.grpc_url, "preprocessing", {
            "QUERY": (np.array([[b"   "]], dtype=object), "BYTES"),
            "REQUEST_OUTPUT_LEN": (np.array([[4]], dtype=np.int32), "INT32")})  # fmt: skip
    with pytest.raises(InferenceServerException, match=r"QUERY is not UTF-8 text \(byte 0xff at offset 4\)") as err:
        _infer(server.grpc_url, "preprocessing", {
            "QUERY": (np.array([[b"def \xff(a):"]], dtype=object), "BYTES"),
            "REQUEST_OUTPUT_LEN": (np.array([[4]], dtype=np.int32), "INT32")})  # fmt: skip
    assert err.value.status() == "StatusCode.INVALID_ARGUMENT"
    with pytest.raises(InferenceServerException, match="REQUEST_OUTPUT_LEN"):  # wrong dtype: Triton refuses it
        _infer(server.grpc_url, "preprocessing", {
            "QUERY": (np.array([[b"x"]], dtype=object), "BYTES"),
            "REQUEST_OUTPUT_LEN": (np.array([[4.0]], dtype=np.float32), "FP32")})  # fmt: skip
    assert server.alive() and server.ready()


@pytest.mark.triton
def test_engine_models_are_left_unloaded(server):
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(server.grpc_url)
    assert client.is_model_ready("preprocessing") and client.is_model_ready("postprocessing")
    assert not client.is_model_ready("tensorrt_llm") and not client.is_model_ready("ensemble")


def test_launch_plan_for_the_bundled_binary(trt_repo, tmp_path):
    plan = plan_launch(trt_repo, ports=Ports(1, 2, 3), backend_dir=tmp_path, load_models=["preprocessing"])
    assert "--model-control-mode=explicit" in plan.argv and "--load-model=preprocessing" in plan.argv
    assert "--grpc-address=127.0.0.1" in plan.argv and "--grpc-port=1" in plan.argv
    env = plan.environment({"LD_LIBRARY_PATH": "/x"})
    import sysconfig

    assert env["LD_LIBRARY_PATH"].split(":")[0] == sysconfig.get_config_var("LIBDIR")
    assert env["LD_LIBRARY_PATH"].endswith(":/x")
    full = plan_launch(trt_repo, ports=Ports(), binary=Path("/opt/tritonserver/bin/tritonserver"))
    assert full.env_set == {"PYTHONUTF8": "1", "TRTLLM_ORCHESTRATOR": "1"}  # draft + target in one server


def test_multi_gpu_repository_prints_an_mpirun_launch(trt_repo):
    from trtspec.contracts.repository import RepoRecord

    record = RepoRecord.read(trt_repo).model_copy(update={"world_size": 2, "models": ("tensorrt_llm",)})
    plan = plan_launch(trt_repo, ports=Ports(), binary=Path("/opt/tritonserver/bin/tritonserver"), record=record)
    assert plan.argv[:2] == ["mpirun", "--allow-run-as-root"] and plan.argv.count("-n") == 2
    assert "shm-region-prefix-name=prefix1_" in plan.shell() and "world size 2" in plan.note


@pytest.mark.triton
def test_failed_start_reports_the_log(tmp_path):
    bad = tmp_path / "repo" / "broken"
    (bad / "1").mkdir(parents=True)
    (bad / "config.pbtxt").write_text('name: "broken"\nbackend: "python"\n')  # no model.py
    with pytest.raises(ServerError, match="broken"):
        TritonServer(tmp_path / "repo", startup_timeout=60).start()
