"""A real tritonserver (CPU) serving the torch-flavour repository: the reference engine behind the Python backend.

One server per module. Over gRPC: greedy output equals the in-process engine, streaming is incremental, concurrent
clients all get correct results, the Prometheus metrics move, and bad requests get clear errors while the server
keeps serving. The repository is deployed from the torch bundle of the embedded pair (build_configs/tiny-torch.yaml).
"""

from __future__ import annotations

import re
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from trtspec.errors import ServerError
from trtspec.triton.client import Completion, TritonClient
from trtspec.triton.render import write_repository
from trtspec.triton.repo import RepoSpec, plan_repository
from trtspec.triton.server import TritonServer

pytestmark = pytest.mark.triton
ROOT = Path(__file__).resolve().parents[2]
K = 3
MAX_K = 6
MAX_TOKENS = 12
PROMPTS = ["def add(a, b):", "import os", "for i in range(3):", "x = 1 + 2", "print(x)", "class a:", "y = (1, 2)",
           "return x"]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    """The torch bundle of the embedded pair, built the way `trtspec build build_configs/tiny-torch.yaml` builds it."""
    from trtspec.build.execute import execute
    from trtspec.build.plan import plan_build
    from trtspec.build.preflight import run_preflight
    from trtspec.config import load_build_spec

    out = tmp_path_factory.mktemp("torch") / "bundle"
    spec = load_build_spec(ROOT / "build_configs" / "tiny-torch.yaml", overrides={"output": str(out)})
    resolved = run_preflight(spec)
    execute(plan_build(resolved), resolved, out, quiet=True)
    return out


@pytest.fixture(scope="module")
def server(bundle):
    spec = RepoSpec.from_build(bundle, "torch", max_k=MAX_K, default_k=K, max_input_len=64, max_output_len=64)
    repo = write_repository(plan_repository(spec), bundle.parent / "repo")
    with TritonServer(repo) as srv:
        yield srv


@pytest.fixture(scope="module")
def engine():
    from trtspec.spec.engine import SpecEngine

    return SpecEngine.from_pretrained(target="tiny", draft="tiny-draft", max_k=MAX_K)


@pytest.fixture(scope="module")
def want(engine) -> dict[str, tuple[list[int], str]]:
    """In-process greedy outputs (token ids, text) of every prompt: what the server must return."""
    from trtspec.spec.params import SamplingParams, SpecParams

    outs = engine.generate(PROMPTS, sampling=SamplingParams(max_new_tokens=MAX_TOKENS),
                           spec=SpecParams(method="draft_target", k=K))
    return {prompt: (o.token_ids, o.text) for prompt, o in zip(PROMPTS, outs, strict=True)}


def test_greedy_output_equals_in_process_engine(server, engine, want):
    ids, text = want[PROMPTS[0]]
    with TritonClient(server.grpc_url, model="ensemble") as client:
        out = client.generate(PROMPTS[0], max_tokens=MAX_TOKENS, k=K)
    assert out.token_ids == ids and out.text == text
    with TritonClient(server.grpc_url, model="trtspec_engine") as client:
        core = client.generate(engine.encode(PROMPTS[0]), max_tokens=MAX_TOKENS, k=K)
    assert core.token_ids == ids
    assert core.total_draft_tokens > 0 and core.num_drafts > 0
    assert core.acceptance_rate == pytest.approx(core.total_accepted_draft_tokens / core.total_draft_tokens)
    assert core.mean_acceptance_length == pytest.approx(1 + core.total_accepted_draft_tokens / core.num_drafts)


def test_streaming_returns_tokens_incrementally(server, want):
    ids, text = want[PROMPTS[1]]
    with TritonClient(server.grpc_url, model="ensemble") as client:
        chunks = list(client.stream(PROMPTS[1], max_tokens=MAX_TOKENS, k=K))
    assert len(chunks) >= 2, "a streamed request must arrive in several responses"
    assert all(len(c.token_ids) <= K + 1 for c in chunks)  # one engine step each: accepted + 1
    assert [t for c in chunks for t in c.token_ids] == ids
    assert "".join(c.text for c in chunks) == text
    final = Completion.from_chunks(chunks)  # the last response carries the counters of the whole request
    assert final.num_drafts is not None and final.total_draft_tokens >= final.num_drafts > 0


def test_concurrent_clients_all_get_correct_results(server, want):
    def ask(prompt):
        with TritonClient(server.grpc_url, model="ensemble") as client:
            return client.generate(prompt, max_tokens=MAX_TOKENS, k=K)

    with ThreadPoolExecutor(max_workers=8) as pool:
        got = list(pool.map(ask, PROMPTS))
    assert [(o.token_ids, o.text) for o in got] == [want[p] for p in PROMPTS]


def _metrics(server) -> dict[str, float]:
    with urllib.request.urlopen(server.metrics_url, timeout=10) as response:
        text = response.read().decode()
    values = {}
    for line in text.splitlines():
        match = re.match(r"(trtspec_spec_decode_\w+)(\{[^}]*\})? ([0-9.e+-]+)$", line)
        if match:
            position = re.search(r'position="(\d+)"', match.group(2) or "")
            key = match.group(1) + (f"[{position.group(1)}]" if position else "")
            values[key] = float(match.group(3))
    return values


def test_metrics_endpoint_shows_acceptance_counters_moving(server, engine):
    before = _metrics(server)
    with TritonClient(server.grpc_url, model="trtspec_engine") as client:
        out = client.generate(engine.encode(PROMPTS[2]), max_tokens=MAX_TOKENS, k=K)
    after = _metrics(server)
    drafts = after["trtspec_spec_decode_num_drafts"] - before.get("trtspec_spec_decode_num_drafts", 0)
    assert drafts == out.num_drafts > 0
    assert (after["trtspec_spec_decode_num_draft_tokens"] - before.get("trtspec_spec_decode_num_draft_tokens", 0)
            == out.total_draft_tokens)
    assert (after["trtspec_spec_decode_num_accepted_tokens"] - before.get("trtspec_spec_decode_num_accepted_tokens", 0)
            == out.total_accepted_draft_tokens)
    per_pos = sum(v for k, v in after.items() if k.startswith("trtspec_spec_decode_num_accepted_tokens_per_pos"))
    assert per_pos == after["trtspec_spec_decode_num_accepted_tokens"]
    total_drafts, accepted = after["trtspec_spec_decode_num_drafts"], after["trtspec_spec_decode_num_accepted_tokens"]
    assert after["trtspec_spec_decode_mean_acceptance_length"] == pytest.approx(1 + accepted / total_drafts)


def _raw(server, model, tensors):
    """Send raw tensors on a stream (the models are decoupled) and return the error message or None."""
    import queue

    import tritonclient.grpc as grpcclient

    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: results.put(error))
    inputs = []
    for name, (array, dtype) in tensors.items():
        tensor = grpcclient.InferInput(name, list(array.shape), dtype)
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    client.async_stream_infer(model, inputs)
    error = results.get(timeout=60)
    client.stop_stream()
    return None if error is None else str(error)


def _core(ids, **extra):
    ids = np.asarray([ids], dtype=np.int32)
    tensors = {"input_ids": (ids, "INT32"), "input_lengths": (np.array([[ids.shape[1]]], dtype=np.int32), "INT32"),
               "request_output_len": (np.array([[4]], dtype=np.int32), "INT32")}
    for name, (value, dtype) in extra.items():
        tensors[name] = (np.array([[value]], dtype={"INT32": np.int32, "FP32": np.float32}[dtype]), dtype)
    return tensors


@pytest.mark.parametrize("case, build, message", [
    ("missing input_lengths", lambda: {k: v for k, v in _core([3, 4]).items() if k != "input_lengths"},
     "input_lengths"),
    ("wrong dtype", lambda: {**_core([3, 4]), "input_ids": (np.array([[3.0, 4.0]], dtype=np.float32), "FP32")},
     "input_ids"),
    ("empty prompt", lambda: {**_core([3]), "input_lengths": (np.array([[0]], dtype=np.int32), "INT32")},
     "empty prompt"),
    ("over-long prompt", lambda: _core([3] * 65), "more than max_input_len=64"),
    ("negative temperature", lambda: _core([3, 4], temperature=(-1.0, "FP32")), "temperature=-1.0: must be >= 0"),
    ("top_p zero", lambda: _core([3, 4], runtime_top_p=(0.0, "FP32")), "top_p=0.0: must be in (0, 1]"),
    ("k above max", lambda: _core([3, 4], num_draft_tokens=(MAX_K + 1, "INT32")),
     f"num_draft_tokens (k)={MAX_K + 1}: must be in [0, {MAX_K}]"),
    ("token out of vocab", lambda: _core([3, 10**6]), "outside the vocabulary"),
    ("zero output length", lambda: {**_core([3]), "request_output_len": (np.array([[0]], dtype=np.int32), "INT32")},
     "request_output_len=0"),
])  # fmt: skip
def test_bad_requests_get_clear_errors(server, case, build, message):
    error = _raw(server, "trtspec_engine", build())
    assert error is not None and message in error, f"{case}: {error}"


def test_server_keeps_serving_after_bad_requests(server, want):
    with TritonClient(server.grpc_url, model="ensemble") as client:
        with pytest.raises(ServerError, match="empty prompt"):
            client.generate("   ", max_tokens=4)
        with pytest.raises(ServerError, match="must be in"):
            client.generate(PROMPTS[0], max_tokens=4, k=MAX_K + 5)
        out = client.generate(PROMPTS[0], max_tokens=MAX_TOKENS, k=K)
    assert server.alive() and out.token_ids == want[PROMPTS[0]][0]


def test_generate_cli_talks_to_the_server(server, want):
    import json

    from click.testing import CliRunner

    from trtspec.cli.main import cli

    ids, text = want[PROMPTS[3]]
    args = ["generate", "--url", server.grpc_url, "--k", str(K), "--max-new-tokens", str(MAX_TOKENS)]
    result = CliRunner().invoke(cli, [*args, "--stream", PROMPTS[3]], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert result.output.startswith(text) and "model=ensemble" in result.output and "acceptance rate" in result.output
    result = CliRunner().invoke(cli, [*args, "--json", PROMPTS[3]], catch_exceptions=False)
    record = json.loads(result.output)
    assert record["token_ids"] == ids and record["text"] == text and record["num_drafts"] > 0
