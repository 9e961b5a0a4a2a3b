"""Shared fixtures: a tiny random Llama pair written as HF checkpoints (fast, no embedded weights needed)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.tiers import guard, mark_process_tests, starts_processes

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("TRTSPEC_HOME", str(ROOT / ".pytest_cache" / "trtspec-home"))
if os.environ.get("PYTEST_XDIST_WORKER"):
    # `make test` runs several processes on the cores (pytest-xdist): each, and every server it starts, computes on
    # one thread instead of each spreading over every core (set before torch is imported; an explicit setting wins).
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def make_random_llama(path: Path, *, vocab: int = 64, hidden: int = 32, layers: int = 2, heads: int = 4,
                      kv_heads: int | None = None, seed: int = 0, tie: bool = False) -> Path:
    """Write a random-weight LlamaForCausalLM (fp32) to `path` and return it."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 2,
                         num_hidden_layers=layers, num_attention_heads=heads,
                         num_key_value_heads=kv_heads or heads, max_position_embeddings=256,
                         tie_word_embeddings=tie, bos_token_id=0, eos_token_id=1, pad_token_id=1)
    gen = torch.Generator().manual_seed(seed)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.2)
    model.save_pretrained(path, safe_serialization=True)
    return path


@pytest.fixture(scope="session")
def random_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from tests.shared_files import made_once

    def make(base: Path) -> None:
        make_random_llama(base / "target", hidden=48, layers=2, heads=4, kv_heads=2, seed=1)
        make_random_llama(base / "draft", hidden=16, layers=1, heads=2, seed=2)

    base = made_once(tmp_path_factory, "random_pair", make)
    return base / "target", base / "draft"


@pytest.fixture(scope="session")
@starts_processes
def standard_server(tmp_path_factory):
    """One tritonserver for the test modules that ask NVIDIA's models of the standard deployment (tests/conftest.py
    SHARED_SERVER has xdist run them in one process, one after the other): the torch bundle of the embedded pair
    (0.19.0 contract) deployed decoupled with STANDARD_ENGINE, plus `tensorrt_llm_failing` (the counting double
    answering every request with an INTERNAL error)."""
    from tests.servers import running
    from tests.triton.helpers import STANDARD_BATCH, STANDARD_ENGINE, build_example, counting_model
    from trtspec.triton.render import write_repository
    from trtspec.triton.repo import RepoSpec, plan_repository

    base = tmp_path_factory.mktemp("standard")
    bundle = build_example("tiny-torch", base / "bundle", trtllm={"version": "0.19.0"})
    spec = RepoSpec.from_build(bundle, "torch", decoupled=True, triton_max_batch_size=STANDARD_BATCH,
                               engine=STANDARD_ENGINE)
    plan = plan_repository(spec) | counting_model("tensorrt_llm_failing", decoupled=True, error="the engine failed")
    with running(write_repository(plan, base / "repo")) as server:
        yield server


# Test modules that share one session-wide server (`standard_server` above): under `--dist loadfile` they are one unit
# of work, so one xdist process runs them one after the other and starts the server once.
SHARED_SERVER = frozenset({"tests/triton/test_server_torch.py", "tests/triton/test_server_hardening.py",
                           "tests/sweep/test_triton_parity.py"})


# The slowest modules, slowest first (seconds in a quiet `make test`, 2026-12-02: 69, 56, 49, 44, 42, 39, 36, 35, 32,
# 28, 25, 24, 19 ...). They start first, so that no long module is left for the end while the other process idles;
# every other module keeps its place after them.
SLOW_FIRST = (
    "tests/test_readme_commands.py", "tests/test_readme_demos.py", "tests/trtllm_serve/test_monitor_e2e.py",
    "tests/ops/test_monitor_server.py",
    "tests/ops/test_live_control.py", "tests/test_wheel.py",
    "tests/dynamo/test_deployment.py", "tests/spec/test_suffix.py", "tests/spec/test_controls.py",
    "tests/spec/test_engine.py", "tests/triton/test_serve_signals.py", "tests/eagle/test_eagle_engine.py",
    "tests/triton/test_server_suffix.py", "tests/triton/test_server_hardening.py", "tests/triton/test_server_torch.py",
    "tests/triton/test_bls.py", "tests/build/test_crash.py", "tests/dynamo/test_same_build.py",
    "tests/sweep/test_sweep_kill.py", "tests/triton/test_server_torch_unary.py", "tests/triton/test_server_eagle.py",
    "tests/build/test_properties.py", "tests/triton/test_client.py", "tests/triton/test_demo_serve.py",
)


def pytest_configure(config: pytest.Config) -> None:
    """The tiers' guard (tests/tiers.py): a test not marked `process` that starts trtspec in a child fails."""
    guard.install()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    with guard.running(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef, request: pytest.FixtureRequest) -> object:
    with guard.setting_up(f"{fixturedef.argname}" + (f" ({fixturedef.baseid})" if fixturedef.baseid else "")):
        return (yield)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the `process` tier (tests/tiers.py) before `-m` deselects; then SLOW_FIRST's modules first, in its order
    (a stable sort: a module's tests stay together and in order)."""
    mark_process_tests(items)
    rank = {path: i for i, path in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """`--dist loadfile`, with the SHARED_SERVER modules as one file, in the collection's order (xdist would put the
    modules with the most tests first)."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    config.option.loadscopereorder = False

    class SharedServerScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            return "tests/triton/standard-server" if path in SHARED_SERVER else path

    return SharedServerScheduling(config, log)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Every server tests/servers.py stopped in the background has exited and left nothing behind."""
    from tests.servers import reap

    reap()

