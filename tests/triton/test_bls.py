"""The tensorrt_llm_bls model's draft-target loop in a real tritonserver, per TensorRT-LLM target, against a
deterministic test double, and the sweep's TensorRT-LLM draft-target cases, which run in it.

TensorRT-LLM cannot run here. The repository is rendered for the target as `trtspec deploy` renders it; then the
counting test double takes the places of `tensorrt_llm` and `tensorrt_llm_draft`. The double has the same tensor
names, spelled as the target spells them, and logs the inputs it receives. The BLS tokenizes through the rendered
`preprocessing` and `postprocessing` models. The ensemble stays unloaded, because it maps inputs the double lacks.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.servers import running
from tests.triton.helpers import CHARS, counting_model
from trtspec.contracts.engine import EngineConfig
from trtspec.errors import RequestError
from trtspec.targets import SUPPORTED_TARGETS, load_target
from trtspec.triton.build_output import EngineInfo
from trtspec.triton.client import TritonClient
from trtspec.triton.render import write_repository
from trtspec.triton.repo import RepoSpec, plan_repository

pytestmark = pytest.mark.triton
MODELS = ["preprocessing", "postprocessing", "tensorrt_llm", "tensorrt_llm_draft", "tensorrt_llm_bls"]


@pytest.fixture(scope="module", params=SUPPORTED_TARGETS)
def served(request, tmp_path_factory, tokenizer_dir):
    version = request.param
    base = tmp_path_factory.mktemp(f"bls-{version}")
    engines = {role: EngineInfo(role=role, path=base / "engines" / role, max_draft_len=8 if role == "target" else 0,
                                speculative_decoding_mode="draft_tokens_external" if role == "target" else None)
               for role in ("target", "draft")}
    spec = RepoSpec(backend="tensorrtllm", engine=EngineConfig(target=str(tokenizer_dir), method="draft_target",
                                                               default_k=4), tokenizer_dir=tokenizer_dir,
                    engines=engines, trtllm_version=version)
    plan = {rel: f for rel, f in plan_repository(spec).items() if not rel.startswith("tensorrt_llm/")
            and not rel.startswith("tensorrt_llm_draft/")}
    log = base / "target-inputs.log"
    plan |= counting_model("tensorrt_llm", decoupled=True, version=version, role="target", input_log=log)
    plan |= counting_model("tensorrt_llm_draft", decoupled=False, version=version, role="draft")
    repo = write_repository(plan, base / "repo")
    with running(repo, load_models=MODELS) as srv:
        yield srv, load_target(version), log
    shutil.rmtree(base, ignore_errors=True)


def counting(prompt_last: int, n: int) -> list[int]:
    out, last = [], prompt_last
    for _ in range(n):
        last = 3 + (last - 2) % 47
        out.append(last)
    return out


def logged(log: Path) -> list[dict]:
    lines = log.read_text().splitlines() if log.exists() else []
    log.unlink(missing_ok=True)
    return [json.loads(line) for line in lines]


def test_bls_draft_target_loop_returns_the_target_tokens(served):
    server, target, log = served
    prompt = "def f"
    expected = "".join(CHARS[t - 3] for t in counting(3 + CHARS.index("f"), 10))  # ids 3.. are CHARS in order
    logged(log)
    with TritonClient(server.grpc_url, model="tensorrt_llm_bls") as client:
        spec = client.generate(prompt, max_tokens=10, k=4, seed=7)
        calls = logged(log)
        plain = client.generate(prompt, max_tokens=10, k=0)
    assert spec.text == plain.text == expected
    # the seed reaches the engine under the target's name, on every call of the loop
    seed = target.request_names["seed"]
    assert calls and all(call.get(seed) == 7 for call in calls)
    assert not any({"seed", "random_seed"} - {seed} & set(call) for call in calls)
    if not target.has("acceptance_outputs"):  # 0.18.0: the BLS declares no acceptance outputs
        assert spec.total_draft_tokens is None and plain.acceptance_rate is None
        return
    # the draft is wrong at every third token: 2 of each 4 drafted are accepted, and the counters cover every round
    assert spec.total_draft_tokens > 0 and 0 < spec.total_accepted_draft_tokens < spec.total_draft_tokens
    assert spec.acceptance_rate == pytest.approx(spec.total_accepted_draft_tokens / spec.total_draft_tokens)
    assert plain.total_draft_tokens == 0  # the target engine's own counters: it had no draft


def test_bls_forwards_min_tokens_under_the_targets_name(served):
    server, target, log = served
    logged(log)
    with TritonClient(server.grpc_url, model="tensorrt_llm_bls") as client:
        inputs = {"text_input": np.array([[b"abc"]], dtype=object), "max_tokens": np.array([[3]], dtype=np.int32),
                  "min_tokens": np.array([[2]], dtype=np.int32)}  # the client respells it for the model
        out = client.infer("tensorrt_llm_bls", inputs, ["text_output"])
    # NVIDIA's default: the prompt is part of the output (exclude_input_in_output unset)
    continuation = "".join(CHARS[t - 3] for t in counting(3 + CHARS.index("c"), 3))
    assert out["text_output"].reshape(-1)[0].decode() == "abc" + continuation
    assert [call[target.request_names["min_tokens"]] for call in logged(log)] == [2]


def test_bls_refuses_what_it_cannot_do(served):
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    server, _, _ = served

    def raw(**arrays):
        inputs = []
        for name, (array, dtype) in arrays.items():
            tensor = grpcclient.InferInput(name, list(array.shape), dtype)
            tensor.set_data_from_numpy(array)
            inputs.append(tensor)
        return grpcclient.InferenceServerClient(server.grpc_url).infer("tensorrt_llm_bls", inputs)

    text, four = (np.array([[b"abc"]], dtype=object), "BYTES"), (np.array([[4]], dtype=np.int32), "INT32")
    with pytest.raises(InferenceServerException, match="streaming is not supported"):
        raw(text_input=text, max_tokens=four, num_draft_tokens=(np.array([[2]], dtype=np.int32), "INT32"),
            stream=(np.array([[True]]), "BOOL"))
    with pytest.raises(InferenceServerException, match="use_draft_logits=true is not supported"):
        raw(text_input=text, max_tokens=four, use_draft_logits=(np.array([[True]]), "BOOL"))
    with TritonClient(server.grpc_url, model="tensorrt_llm_bls") as client:
        # preprocessing's INVALID_ARG reaches the BLS as INTERNAL on tritonserver 2.51 (its python backend drops the
        # code of a BLS call's error), but tagged (trtspec.errors.BAD_INPUT_TAG): the BLS answers INVALID_ARG
        with pytest.raises(RequestError, match="preprocessing: empty prompt"):
            client.generate(" ", max_tokens=4, k=2)
        expected = "".join(CHARS[t - 3] for t in counting(3 + CHARS.index("c"), 3))
        assert client.generate("abc", max_tokens=3, k=2).text == expected


def test_sweep_runs_draft_target_in_the_bls_and_counts_every_iteration(served, tokenizer_dir, tmp_path):
    from transformers import AutoTokenizer

    from trtspec.errors import ServerError
    from trtspec.sweep.backend_triton import TritonBackend
    from trtspec.sweep.grid import SweepSpec
    from trtspec.sweep.prompts import PromptSuite

    server, target, _ = served
    spec = SweepSpec.build(model="served", via="triton", url=server.grpc_url, flavour="tensorrtllm",
                           methods=["draft_target"], drafts=["served"], k=[0, 4], suites=["code"], num_prompts=2,
                           max_new_tokens=12, timeout_s=30.0)
    suite = PromptSuite("s", tmp_path, ("def f", "abc"), "0")

    def sweep() -> list[dict]:
        backend = TritonBackend(tokenizer=AutoTokenizer.from_pretrained(tokenizer_dir))
        try:
            backend.preflight(spec)  # connects with spec.timeout_s, checks the BLS can report acceptance
            assert backend.client is not None and backend.client.timeout_s == 30.0
            return [backend.run_case(case, suite, spec) for case in spec.cases()]
        finally:
            backend.close()

    if not target.has("acceptance_outputs"):  # 0.18.0: refused before any request
        with pytest.raises(ServerError, match="declares no return_perf_metrics, acceptance_rate"):
            sweep()
        return
    plain, drafted = sweep()
    # output tokens: text_output re-encoded, 12 characters per request (the baseline goes through the BLS too)
    assert plain["output_tokens"] == drafted["output_tokens"] == 24 and plain["stats"]["source"] == "plain"
    stats = drafted["stats"]
    # per request, by hand: drafts of 4, 4, 4, then 2 (max_tokens) tokens; the draft is wrong at its third token, so
    # 2 + 2 + 2 + 2 accepted. The last iteration alone would be 2 of 2 (acceptance 1.0): the counts cover all four.
    assert stats["source"] == "bls" and (stats["num_draft_tokens"], stats["num_accepted_tokens"]) == (28, 16)
    assert stats["acceptance_rate"] == pytest.approx(16 / 28)
    assert stats["num_drafts_estimated"] and stats["num_drafts"] == 7  # 28 / 4: the last, shorter draft undercounted
    # a BLS whose config declares num_drafts returns the iterations it verified: the drafts are exact
    with TritonClient(server.grpc_url, model="tensorrt_llm_bls") as client:
        config = client.model_config("tensorrt_llm_bls")
        num_drafts = {"name": "num_drafts", "data_type": "TYPE_INT32", "dims": ["1"]}
        client.load_model("tensorrt_llm_bls", {**config, "output": [*config["output"], num_drafts]})
        try:
            _, drafted = sweep()
        finally:
            client.load_model("tensorrt_llm_bls")  # the repository's own config again
    stats = drafted["stats"]
    assert not stats["num_drafts_estimated"] and (stats["num_drafts"], stats["num_accepted_tokens"]) == (8, 16)
    assert stats["mean_acceptance_length"] == 3.0  # 1 + 16 / 8
