"""The llmapi repository (the PyTorch workflow's Triton model, trtspec.triton.llmapi) against the target's facts, and a
real tritonserver (CPU) serving its torch flavour for the embedded pair, asked the way NVIDIA documents it.

Without a server: the rendered config.pbtxt's inputs and outputs (names, data types, dims, optional flags) equal the
facts of TensorRT-LLM 1.2.1 on both flavours, and the TensorRT-LLM flavour's model.yaml holds the model, backend
pytorch, parallelism, the build's own LLM-API options and triton_config, every key one the release reads; a
throwaway mutation of each fails the diff. `trtspec deploy` renders both flavours (the llmapi form is the default for
a PyTorch-workflow build), and the TensorRT-LLM flavour's model.py runs NVIDIA's own from its directory. One server for the module (decoupled, as streaming needs): HTTP generate
at temperature 0 returns the target's greedy text (trtspec generate --method none) and the engine's acceptance
counts, generate_stream sends the text so far, `trtspec generate --url` finds the model and its form and answers the
same greedy text, and inputs the model cannot honour (a later release's input, best_of,
text that is not UTF-8, two prompts in one request) are refused by name (gRPC INVALID_ARGUMENT, HTTP 400) while the
server keeps serving.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from tests.servers import running
from tests.triton.helpers import target_greedy, write_manifest
from tests.triton.nvidia_requests import http_generate
from trtspec.targets.triton_llmapi import llmapi_facts
from trtspec.triton import llmapi
from trtspec.triton.render import validate_model_config, write_repository
from trtspec.triton.repo import RepoSpec, plan_repository

VERSION = "1.2.1"
K = 3
MAX_TOKENS = 10
PROMPTS = ["def add(a, b):", "import os", "for i in range(3):"]


def _declared(text: str) -> dict[str, dict[str, tuple]]:
    """{"inputs": {name: (dtype, dims, optional)}, "outputs": {name: (dtype, dims)}} of a rendered config.pbtxt."""
    from tritonclient.grpc import model_config_pb2

    config = validate_model_config(text)
    dtype = model_config_pb2.DataType.Name
    return {"inputs": {t.name: (dtype(t.data_type), list(t.dims), t.optional) for t in config.input},
            "outputs": {t.name: (dtype(t.data_type), list(t.dims)) for t in config.output}}


def _facts() -> dict[str, dict[str, tuple]]:
    facts = llmapi_facts(VERSION)
    assert facts is not None
    return {"inputs": {t.name: (t.data_type, list(t.dims), t.optional) for t in facts.inputs},
            "outputs": {t.name: (t.data_type, list(t.dims)) for t in facts.outputs}}


@pytest.fixture(scope="module")
def pytorch_build(tmp_path_factory) -> Path:
    """A PyTorch-workflow build output of the embedded pair for TensorRT-LLM 1.2.1: its manifest (no engines) and the
    LLM-API options file the build planner writes."""
    from trtspec.build.plan import LLM_API_FILE, engine_config, plan_build
    from trtspec.build.preflight import run_preflight
    from trtspec.config import load_build_spec

    out = tmp_path_factory.mktemp("pytorch") / "build"
    spec = load_build_spec(Path(__file__).resolve().parents[2] / "build_configs" / "tiny-torch.yaml",
                           overrides={"backend": "tensorrtllm", "trtllm": {"version": VERSION}, "output": str(out)})
    resolved = run_preflight(spec)
    plan = plan_build(resolved)
    (step,) = [s for s in plan.steps if s.outputs == (LLM_API_FILE,)]
    (out / LLM_API_FILE).parent.mkdir(parents=True)
    (out / LLM_API_FILE).write_text(step.content or "")
    return write_manifest(out, {"format": "trtspec-manifest/1", "backend": "tensorrtllm", "method": plan.method,
                                "config": spec.model_dump(mode="json"), "engine": engine_config(resolved).to_dict(),
                                "engines": {}, "llm_api": LLM_API_FILE})


def test_config_pbtxt_and_model_yaml_are_the_targets(pytorch_build, torch_bundle):
    want = _facts()
    spec = RepoSpec.from_build(pytorch_build, "tensorrtllm")
    assert spec.form == "llmapi" and spec.trtllm_version == VERSION  # the default for a PyTorch-workflow build
    plan = plan_repository(spec)
    assert sorted(p for p in plan if p.startswith("tensorrt_llm/")) == [
        "tensorrt_llm/1/model.py", "tensorrt_llm/1/model.yaml", "tensorrt_llm/config.pbtxt"]
    text = plan["tensorrt_llm/config.pbtxt"].text or ""
    assert _declared(text) == want
    config = validate_model_config(text)  # NVIDIA's model.py sets max_batch_size and the policy from model.yaml
    assert config.max_batch_size == 0 and not config.HasField("model_transaction_policy")
    torch_spec = RepoSpec.from_build(torch_bundle, "torch", form="llmapi", trtllm_version=VERSION)
    assert _declared(plan_repository(torch_spec)["tensorrt_llm/config.pbtxt"].text or "") == want
    mutated = text.replace('"sampling_param_top_k" data_type: TYPE_INT32', '"sampling_param_top_k" data_type: TYPE_INT64')
    assert _declared(mutated) != want  # a throwaway mutation fails the diff

    import yaml

    data = yaml.safe_load(plan["tensorrt_llm/1/model.yaml"].text or "")
    options = yaml.safe_load((pytorch_build / "llm-api" / "extra_llm_api_options.yaml").read_text())
    assert {k: data[k] for k in ("model", "backend", "tensor_parallel_size", "pipeline_parallel_size")} == {
        "model": str(spec.engine.target), "backend": "pytorch", "tensor_parallel_size": 1, "pipeline_parallel_size": 1}
    assert data["speculative_config"] == options["speculative_config"]  # the build's own options, not re-derived
    assert {k: data[k] for k in options} == options
    assert data["triton_config"] == {"max_batch_size": 0, "decoupled": False}
    facts = llmapi_facts(VERSION)
    assert facts is not None and llmapi.model_yaml_problems(data, facts) == []
    assert llmapi.model_yaml_problems({**data, "speculative_decoding": 1}, facts)  # a throwaway unknown key fails
    shim = (plan["tensorrt_llm/1/model.py"].copy_from or Path()).read_text()
    assert llmapi.NVIDIA_MODEL_DIR in shim and "TritonPythonModel" in shim
    record = json.loads(plan["trtspec-repo.json"].text or "")
    assert record["models"] == ["tensorrt_llm"] and "llmapi" in record["templates"]


def test_a_target_without_llmapi_facts_is_refused(torch_bundle):
    from trtspec.errors import ConfigError

    with pytest.raises(ConfigError, match="1.2.1"):
        RepoSpec.from_build(torch_bundle, "torch", form="llmapi", trtllm_version="0.19.0")


def test_deploy_cli_dry_run_lists_the_llmapi_model(torch_bundle, tmp_path):
    from click.testing import CliRunner

    from trtspec.cli.main import cli

    result = CliRunner().invoke(cli, ["deploy", "--backend", "torch", "--build", str(torch_bundle), "--out",
                                      str(tmp_path / "repo"), "--form", "llmapi", "--trtllm-version", VERSION,
                                      "--decoupled", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "llmapi form" in result.output and "tensorrt_llm/1/model.py" in result.output
    assert "ensemble" not in result.output and "/v2/models/tensorrt_llm/generate_stream" in result.output


def test_deploy_cli_renders_the_tensorrtllm_flavour_of_a_pytorch_build(pytorch_build, tmp_path):
    from click.testing import CliRunner

    from trtspec.cli.main import cli

    result = CliRunner().invoke(cli, ["deploy", "--backend", "tensorrtllm", "--build", str(pytorch_build), "--out",
                                      str(tmp_path / "repo")])
    assert result.exit_code == 0, result.output
    assert "llmapi form" in result.output and llmapi.NVIDIA_MODEL_DIR in result.output
    assert sorted(p.name for p in (tmp_path / "repo" / "tensorrt_llm" / "1").iterdir()) == ["model.py", "model.yaml"]


def test_the_tensorrtllm_flavours_model_py_runs_nvidias_from_its_directory(tmp_path, monkeypatch):
    """1/model.py copies nothing: it loads NVIDIA's model.py (and its helpers module) from the container's directory,
    or from TRTSPEC_NVIDIA_LLMAPI_DIR; without one it says where it looked."""
    import importlib.util
    import sys

    from trtspec.triton.render import template_root

    shim = template_root() / "common" / llmapi.SHIMS["tensorrtllm"]["model.py"]

    def load():
        spec = importlib.util.spec_from_file_location("shim_under_test", shim)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    nvidia = tmp_path / "llmapi" / "tensorrt_llm" / "1"
    nvidia.mkdir(parents=True)
    (nvidia / "helpers.py").write_text("NAME = 'helpers'\n")
    (nvidia / "model.py").write_text("from helpers import NAME\nclass TritonPythonModel:\n    source = NAME\n")
    monkeypatch.setenv("TRTSPEC_NVIDIA_LLMAPI_DIR", str(nvidia))
    monkeypatch.setattr(sys, "path", list(sys.path))
    assert load().TritonPythonModel.source == "helpers"
    sys.modules.pop("helpers", None)  # the fake's, imported by name as NVIDIA's model.py imports its own
    monkeypatch.setenv("TRTSPEC_NVIDIA_LLMAPI_DIR", str(tmp_path / "absent"))
    with pytest.raises(ImportError, match="absent"):
        load()


# --- request parsing, without a server ---------------------------------------------------------------------------


def _parse(**tensors):
    import numpy as np

    from trtspec.contracts.engine import EngineConfig
    from trtspec.triton.llmapi_request import parse_llmapi_request

    params = EngineConfig(target="tiny", method="draft_target", max_k=4, default_k=K, max_input_len=64,
                          max_output_len=64)
    arrays = {name: np.asarray(value, dtype=object if name in ("text_input", "sampling_param_stop") else None)
              for name, value in {"text_input": [b"def add(a, b):"], **tensors}.items()}
    return parse_llmapi_request(arrays.get, params, encode=lambda text: list(text.encode()),
                                encode_words=lambda text: list(text.encode()), end_id=1, decoupled=True)


@pytest.mark.parametrize(("tensors", "words"), [
    ({"text_input": [b"def \xff(a):"]}, "text_input is not UTF-8 text (byte 0xff at offset 4)"),
    ({"sampling_param_stop": [b"ok", b"\xc3("]}, "sampling_param_stop is not UTF-8 text (byte 0xc3 at offset 0)"),
    ({"text_input": [b"one", b"two"]}, "text_input has 2 prompts: the llmapi model takes one prompt per request"),
])  # fmt: skip
def test_requests_the_llmapi_model_cannot_read_are_refused_by_name(tensors, words):
    from trtspec.errors import RequestError

    with pytest.raises(RequestError) as err:
        _parse(**tensors)
    assert words in str(err.value)
    assert _parse(sampling_param_stop=[b"ok", "caf\u00e9".encode()]).stop_strings == ("ok", "caf\u00e9")


# --- a real tritonserver -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(torch_bundle):
    spec = RepoSpec.from_build(torch_bundle, "torch", form="llmapi", trtllm_version=VERSION, decoupled=True,
                               engine={"max_k": 4, "default_k": K, "max_input_len": 64, "max_output_len": 64})
    repo = write_repository(plan_repository(spec), torch_bundle.parent / "llmapi-repo")
    with running(repo) as srv:
        yield srv


@pytest.fixture(scope="module")
def engine():
    from trtspec.spec.engine import SpecEngine

    return SpecEngine.from_pretrained(target="tiny", draft="tiny-draft", max_k=4)


def _engine_counts(engine, prompt: str) -> tuple[int, int]:
    """(accepted, drafted) of the in-process engine for `prompt`: draft_target, k=K, greedy."""
    from trtspec.spec.params import SpecParams, trtllm_sampling_params

    sampling = trtllm_sampling_params(max_new_tokens=MAX_TOKENS, temperature=0.0, end_id=engine.tokenizer.eos_token_id)
    (out,) = engine.generate([prompt], sampling=sampling, spec=SpecParams(method="draft_target", k=K))
    return out.stats.num_accepted_tokens, out.stats.num_draft_tokens


@pytest.mark.triton
def test_http_generate_at_temperature_0_is_the_greedy_text_with_the_engines_counts(server, engine):
    greedy = target_greedy(MAX_TOKENS)
    prompt = PROMPTS[0]
    body = {"text_input": prompt, "sampling_param_max_tokens": MAX_TOKENS, "sampling_param_temperature": 0.0,
            "sampling_param_return_perf_metrics": True, "return_finish_reason": True, "return_stop_reason": True}
    (answer,) = http_generate(server.http_url, "tensorrt_llm", body)
    assert answer["model_name"] == "tensorrt_llm", answer
    assert answer["text_output"] == engine.decode(engine.encode(prompt) + greedy(prompt))  # the prompt, then greedy
    assert answer["finish_reason"] in ("length", "stop") and answer["stop_reason"] == "None"
    accepted, drafted = _engine_counts(engine, prompt)
    assert drafted > 0
    assert (answer["total_accepted_draft_tokens"], answer["total_draft_tokens"]) == (accepted, drafted)
    assert answer["acceptance_rate"] == pytest.approx(accepted / drafted)
    assert answer["first_token_time_ns"] >= answer["arrival_time_ns"] > 0
    (plain,) = http_generate(server.http_url, "tensorrt_llm", {
        "text_input": PROMPTS[1], "sampling_param_max_tokens": MAX_TOKENS, "sampling_param_temperature": 0.0,
        "sampling_param_exclude_input_from_output": True})
    assert plain["text_output"] == engine.decode(greedy(PROMPTS[1]))
    assert "acceptance_rate" not in plain and "finish_reason" not in plain  # only what the request asks for


@pytest.mark.triton
def test_generate_stream_sends_the_text_so_far(server, engine):
    greedy = target_greedy(MAX_TOKENS)
    prompt = PROMPTS[2]
    events = http_generate(server.http_url, "tensorrt_llm", {
        "text_input": prompt, "streaming": True, "sampling_param_max_tokens": MAX_TOKENS,
        "sampling_param_temperature": 0.0, "sampling_param_exclude_input_from_output": True,
        "return_finish_reason": True}, stream=True)
    texts = [e["text_output"] for e in events]
    assert len(events) >= 2 and all(b.startswith(a) for a, b in zip(texts, texts[1:], strict=False))
    assert texts[-1] == engine.decode(greedy(prompt))
    assert [e["finish_reason"] for e in events][-1] in ("length", "stop")
    assert all(e["finish_reason"] == "None" for e in events[:-1])


@pytest.mark.triton
def test_inputs_the_engine_cannot_honour_are_refused_by_name(server, engine):
    base = {"text_input": PROMPTS[0], "sampling_param_max_tokens": 4}
    for extra, name in (({"image_url": "http://x/y.png"}, "image_url"), ({"lora_id": 1}, "lora_id"),
                        ({"sampling_param_best_of": 2}, "sampling_param_best_of"),
                        ({"sampling_param_max_tokens": 100000}, "sampling_param_max_tokens")):
        (answer,) = http_generate(server.http_url, "tensorrt_llm", {**base, **extra})
        assert answer.get("status") == 400 and name in answer["error"], (name, answer)
    (answer,) = http_generate(server.http_url, "tensorrt_llm", base)
    assert "error" not in answer and answer["text_output"].startswith(PROMPTS[0]), answer  # the server keeps serving


@pytest.mark.triton
def test_generate_url_finds_the_llmapi_model_and_answers_the_greedy_text(server, engine):
    """No --model: the repository serves tensorrt_llm alone, in the llmapi form (text_input [1], sampling_param_*),
    unary and streamed; a k per request is refused (the llmapi model has no num_draft_tokens)."""
    from tests.cli_checks import assert_clean_failure, run_cli

    greedy = target_greedy(MAX_TOKENS)
    prompt = PROMPTS[1]
    argv = ["generate", "--url", server.grpc_url, "--max-new-tokens", str(MAX_TOKENS), "--json"]
    for stream in ([], ["--stream"]):
        code, out, err = run_cli([*argv, *stream, prompt], limit=120)
        assert code == 0, err
        record = json.loads(out)
        assert (record["model"], record["form"]) == ("tensorrt_llm", "llmapi"), record
        assert record["text"] == engine.decode(greedy(prompt)) and record["total_draft_tokens"] > 0, record
        assert record["responses"] >= (2 if stream else 1)
    code, out, err = run_cli(["generate", "--url", server.grpc_url, "--max-new-tokens", "4", prompt], limit=120)
    assert code == 0 and "model=tensorrt_llm (llmapi form)" in out, (out, err)
    code, _, err = run_cli([*argv, "--k", "2", prompt], limit=120)
    assert_clean_failure(code, err, frozenset({2}))
    assert "the llmapi model" in err and "no per-request k" in err, err


@pytest.mark.triton
def test_text_that_is_not_utf8_and_batched_prompts_are_refused_by_name(server):
    """Over gRPC (INVALID_ARGUMENT: RequestError) and HTTP (400, the bad-input tag), one line naming the input, no
    traceback; the server keeps serving."""
    import urllib.error
    import urllib.request

    import numpy as np

    from trtspec.errors import RequestError
    from trtspec.triton.client import TritonClient

    one = np.array([4], dtype=np.int32)
    bad = {"text_input": (np.array([b"def \xff(a):"], dtype=object), "text_input is not UTF-8 text (byte 0xff"),
           "stop": (np.array([b"ok", b"\xc3("], dtype=object), "sampling_param_stop is not UTF-8 text (byte 0xc3"),
           "batch": (np.array([b"import os", b"def f():"], dtype=object), "text_input has 2 prompts")}
    with TritonClient(server.grpc_url, model=None) as client:
        for case, (array, words) in bad.items():
            name = "sampling_param_stop" if case == "stop" else "text_input"
            inputs = {"text_input": np.array([PROMPTS[0].encode()], dtype=object), name: array,
                      "sampling_param_max_tokens": one}
            with pytest.raises(RequestError) as err:
                client.infer("tensorrt_llm", inputs, ["text_output"])
            assert words in str(err.value) and "Traceback" not in str(err.value), (case, err.value)
        for raw, words in ((b'{"text_input": "def \xff(a):", "sampling_param_max_tokens": 4}', "text_input is not"),
                           (b'{"text_input": "x", "sampling_param_stop": ["\xc3("], "sampling_param_max_tokens": 4}',
                            "sampling_param_stop is not")):
            request = urllib.request.Request(f"{server.http_url}/v2/models/tensorrt_llm/generate", data=raw,
                                             method="POST")
            with pytest.raises(urllib.error.HTTPError) as http:
                urllib.request.urlopen(request, timeout=60)
            body = http.value.read().decode(errors="replace")
            assert http.value.code == 400 and words in body and "[INVALID_ARG]" in body, body
            assert "Traceback" not in body and ".py" not in body, body
        out = client.infer("tensorrt_llm", {"text_input": np.array([PROMPTS[0].encode()], dtype=object),
                                            "sampling_param_max_tokens": one}, ["text_output"])
        assert out["text_output"][0].decode().startswith(PROMPTS[0])  # the server keeps serving
        # memory stays flat under a stream of them (tritonserver and its Python stubs: the server's process group)
        before = _group_rss_mib(server.process.pid)
        for _ in range(40):
            for case, (array, _words) in bad.items():
                name = "sampling_param_stop" if case == "stop" else "text_input"
                with pytest.raises(RequestError):
                    client.infer("tensorrt_llm", {"text_input": np.array([PROMPTS[0].encode()], dtype=object),
                                                  name: array, "sampling_param_max_tokens": one}, ["text_output"])
        assert _group_rss_mib(server.process.pid) - before < 64, (before, _group_rss_mib(server.process.pid))


def _group_rss_mib(group: int) -> float:
    """Resident memory of every process in process group `group`, MiB (/proc)."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == group:  # pgrp
                total += int(fields[21]) * os.sysconf("SC_PAGE_SIZE")  # rss, pages
        except (OSError, IndexError, ValueError):
            continue
    return total / (1 << 20)


@pytest.mark.triton
def test_a_stop_string_ends_the_request_and_is_left_out(server, engine):
    greedy = target_greedy(MAX_TOKENS)
    prompt = PROMPTS[0]
    tokens = greedy(prompt)
    full = engine.decode(tokens)
    # a generated token whose text the tokenizer turns back into that token, first seen at its own position
    at = next(i for i, t in enumerate(tokens[1:], 1) if engine.tokenizer.encode(engine.decode([t]),
              add_special_tokens=False) == [t] and engine.decode(tokens[:i + 1]).find(engine.decode([t])) ==
              len(engine.decode(tokens[:i])))
    stop = engine.decode([tokens[at]])
    (answer,) = http_generate(server.http_url, "tensorrt_llm", {
        "text_input": prompt, "sampling_param_max_tokens": MAX_TOKENS, "sampling_param_temperature": 0.0,
        "sampling_param_exclude_input_from_output": True, "sampling_param_stop": [stop], "return_stop_reason": True,
        "return_finish_reason": True})
    assert answer["text_output"] == full[: full.index(stop)], (answer, full, stop)
    assert (answer["finish_reason"], answer["stop_reason"]) == ("stop", stop)


def test_the_server_spec_is_decoupled_llmapi(torch_bundle):
    spec = RepoSpec.from_build(torch_bundle, "torch", form="llmapi", trtllm_version=VERSION)
    assert spec.model_names == ["tensorrt_llm"] and spec.world_size == 1
    assert replace(spec, form="inflight").model_names[0] == "preprocessing"
