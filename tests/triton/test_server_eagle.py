"""EAGLE-3 in the torch-flavour Triton repository: `trtspec build build_configs/tiny-eagle.yaml` copies the drafter
into the bundle (method eagle + eagle.eagle3, served as the reference engine's eagle3), `trtspec deploy --backend
torch` writes the served model's `eagle` (and, for a static tree, `eagle_choices`) parameters, and a real tritonserver
answers every prompt, alone and concurrently, with the target's own greedy tokens while accepting EAGLE drafts; a
dynamic tree's shape set at deploy (--eagle-topk) bounds what the served engine drafts."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.servers import running
from tests.triton import helpers
from tests.triton.helpers import build_example
from tests.triton.test_server_suffix import deploy, served_params
from trtspec.errors import ConfigError
from trtspec.triton.client import TritonClient

MAX_TOKENS = 40
PROMPTS = ["def parse_header(line):", "class Cache:\n    def get(self, key):", "import json\nwith open(path) as f:",
           "The quick brown fox"]
STATIC = [[0], [1], [0, 0], [0, 1], [0, 0, 0], [2], [0, 0, 0, 0]]
CONFIGS = Path(__file__).resolve().parents[2] / "build_configs"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    return build_example("tiny-eagle", tmp_path_factory.mktemp("eagle") / "bundle")


def build_static(out: Path) -> Path:
    """The example with a static tree (eagle.choices)."""
    from trtspec.build.execute import execute
    from trtspec.build.plan import plan_build
    from trtspec.build.preflight import run_preflight
    from trtspec.config import load_yaml, parse_build_spec

    data = load_yaml(CONFIGS / "tiny-eagle.yaml", what="a build config")
    data["eagle"]["choices"] = STATIC
    data["output"] = str(out)
    resolved = run_preflight(parse_build_spec(data))
    execute(plan_build(resolved), resolved, out, quiet=True)
    return out


def test_bundle_and_repository_carry_the_drafter(bundle, tmp_path):
    from trtspec.build.bundle import load_bundle

    info = load_bundle(bundle).engine
    assert info.method == "eagle3" and info.eagle == str(bundle / "eagle") and info.eagle_tree is None
    assert (bundle / "eagle" / "model.safetensors").is_file()
    code, output = deploy(bundle, tmp_path / "repo")
    assert code == 0, output
    params = served_params(tmp_path / "repo")
    assert params.method == "eagle3" and params.eagle == str(bundle / "eagle") and params.eagle_tree is None
    assert params.default_k == info.default_k == 8
    static = build_static(tmp_path / "static")
    assert deploy(static, tmp_path / "static-repo")[0] == 0
    params = served_params(tmp_path / "static-repo")
    assert sorted(map(list, params.eagle_tree.choices)) == sorted(STATIC) and params.default_k == 8


def test_eagle_1_2_drafters_are_refused_for_the_torch_backend(tmp_path):
    from trtspec.build.preflight import run_preflight
    from trtspec.config import load_yaml, parse_build_spec

    data = load_yaml(CONFIGS / "tiny-eagle.yaml", what="a build config")
    data["eagle"]["eagle3"] = False
    with pytest.raises(ConfigError, match=r"eagle.eagle3=False: the torch reference engine runs EAGLE-3 drafters"):
        run_preflight(parse_build_spec(data))


@pytest.fixture(scope="module")
def target_greedy():
    return helpers.target_greedy(MAX_TOKENS)


@pytest.fixture(scope="module")
def server(bundle, tmp_path_factory):
    """One tritonserver: the example deployed with --k 6, and beside it as `tensorrt_llm_chain` the engine model of a
    build shaped topk 2 / depth 3 deployed with --eagle-topk 1 (the dynamic tree cut to a chain)."""
    from tests.triton.test_eagle_tree_params import build_eagle
    from tests.triton.test_server_suffix import add_engine_model

    base = tmp_path_factory.mktemp("served-eagle")
    assert deploy(bundle, base / "repo", "--k", "6")[0] == 0
    shaped = build_eagle(base / "shaped", topk=2, depth=3)
    assert deploy(shaped, base / "chain", "--eagle-topk", "1")[0] == 0
    add_engine_model(base / "chain" / "tensorrt_llm", base / "repo", "tensorrt_llm_chain")
    with running(base / "repo") as server:
        yield server


@pytest.mark.triton
def test_served_eagle_is_the_targets_greedy_output(server, target_greedy):
    with TritonClient(server.grpc_url, model="tensorrt_llm") as client:
        alone = [client.generate(p, max_tokens=MAX_TOKENS) for p in PROMPTS]

    def one(prompt: str):
        with TritonClient(server.grpc_url, model="tensorrt_llm") as client:
            return client.generate(prompt, max_tokens=MAX_TOKENS)

    with ThreadPoolExecutor(len(PROMPTS)) as pool:  # in flight together: the engine batches them
        together = list(pool.map(one, PROMPTS))
    for prompt, a, b in zip(PROMPTS, alone, together, strict=True):
        want = target_greedy(prompt)
        assert a.token_ids == want and b.token_ids == want, prompt
    accepted = sum(c.total_accepted_draft_tokens for c in alone)
    drafted = sum(c.total_draft_tokens for c in alone)
    print(f"served eagle3: accepted {accepted} of {drafted} draft tokens over {len(PROMPTS)} prompts")
    assert 0 < accepted < drafted


@pytest.mark.triton
def test_served_dynamic_tree_follows_its_parameters(server, target_greedy):
    """The shaped bundle served with --eagle-topk 1 over the build's depth 3: a chain of at most 3 drafted nodes per
    target forward (the defaults, top-4 x 6 levels, would draft all k=8), and the target's greedy output."""
    with TritonClient(server.grpc_url, model="tensorrt_llm_chain") as client:
        outputs = [client.generate(p, max_tokens=MAX_TOKENS) for p in (PROMPTS[0], PROMPTS[3])]
    for prompt, out in zip((PROMPTS[0], PROMPTS[3]), outputs, strict=True):
        assert out.token_ids == target_greedy(prompt), prompt
        forwards = len(out.token_ids) - out.total_accepted_draft_tokens  # each forward adds its accepted + 1 tokens
        assert 0 < out.total_draft_tokens <= 3 * forwards, (out.total_draft_tokens, forwards)
