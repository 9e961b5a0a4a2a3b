"""The tensorrt_llm_bls model's draft-target loop in a real tritonserver, against a deterministic test double.

TensorRT-LLM cannot run here, so the BLS is pointed (through its tensorrt_llm_model_name and
tensorrt_llm_draft_model_name parameters) at a counting language model with the same tensor names.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.triton.helpers import CHARS
from trtspec.errors import ServerError
from trtspec.triton.client import TritonClient
from trtspec.triton.render import RepoFile, model_files, pbtxt_parameters, write_repository
from trtspec.triton.repo import CODEC
from trtspec.triton.server import TritonServer

DOUBLES = Path(__file__).parent / "doubles"
pytestmark = pytest.mark.triton


@pytest.fixture(scope="module")
def server(tmp_path_factory, tokenizer_dir):
    base = tmp_path_factory.mktemp("bls")
    bls = model_files("tensorrt_llm_bls", "tensorrt_llm_bls", {
        "triton_max_batch_size": 8, "decoupled": False, "instance_count": 1,
        "parameters": pbtxt_parameters({"tensorrt_llm_model_name": "counting_target",
                                        "tensorrt_llm_draft_model_name": "counting_draft",
                                        "tokenizer_dir": str(tokenizer_dir)})}, shared=CODEC)  # fmt: skip
    plan = dict(bls)
    for role in ("target", "draft"):
        config = (DOUBLES / "counting_lm" / "config.pbtxt").read_text()
        policy = "model_transaction_policy { decoupled: true }\n" if role == "target" else ""  # as rendered
        plan[f"counting_{role}/config.pbtxt"] = RepoFile(
            text=f'name: "counting_{role}"\n{policy}{config}\n'
                 f'parameters: {{ key: "role" value: {{ string_value: "{role}" }} }}')
        plan[f"counting_{role}/1/model.py"] = RepoFile(copy_from=DOUBLES / "counting_lm" / "1" / "model.py")
    repo = write_repository(plan, base / "repo")
    with TritonServer(repo) as srv:
        yield srv
    shutil.rmtree(base, ignore_errors=True)


def counting(prompt_last: int, n: int) -> list[int]:
    out, last = [], prompt_last
    for _ in range(n):
        last = 3 + (last - 2) % 47
        out.append(last)
    return out


def test_bls_draft_target_loop_returns_the_target_tokens(server):
    prompt = "def f"
    last = 3 + CHARS.index("f")  # the character tokenizer: ids 3.. are CHARS in order
    with TritonClient(server.grpc_url, model="tensorrt_llm_bls") as client:
        spec = client.generate(prompt, max_tokens=10, k=4)
        plain = client.generate(prompt, max_tokens=10, k=0)
    assert spec.token_ids == plain.token_ids == counting(last, 10)
    assert spec.text == "".join(CHARS[t - 3] for t in counting(last, 10))
    # the draft is wrong at every third token: 2 of each 4 drafted are accepted, and the counters cover every round
    assert spec.total_draft_tokens > 0 and 0 < spec.total_accepted_draft_tokens < spec.total_draft_tokens
    assert spec.acceptance_rate == pytest.approx(spec.total_accepted_draft_tokens / spec.total_draft_tokens)
    assert plain.total_draft_tokens == 0


def test_bls_refuses_streaming_speculation_and_empty_prompts(server):
    import numpy as np
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    inputs = []
    for name, array, dtype in (("text_input", np.array([[b"abc"]], dtype=object), "BYTES"),
                               ("max_tokens", np.array([[4]], dtype=np.int32), "INT32"),
                               ("num_draft_tokens", np.array([[2]], dtype=np.int32), "INT32"),
                               ("stream", np.array([[True]]), "BOOL")):
        tensor = grpcclient.InferInput(name, list(array.shape), dtype)
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    with pytest.raises(InferenceServerException, match="streaming is not supported"):
        grpcclient.InferenceServerClient(server.grpc_url).infer("tensorrt_llm_bls", inputs)
    with TritonClient(server.grpc_url, model="tensorrt_llm_bls") as client:
        with pytest.raises(ServerError, match="empty prompt"):
            client.generate(" ", max_tokens=4, k=2)
        assert client.generate("abc", max_tokens=3, k=2).token_ids == counting(3 + CHARS.index("c"), 3)
