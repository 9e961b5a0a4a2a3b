"""A real tritonserver (CPU) serving the embedded pair (torch flavour, decoupled), changed while clients stream:
`set-k` reloads tensorrt_llm with a new default k (then `set-schedule` with a schedule, which the reloaded model's
configuration reports), `rollout-draft` serves a new draft as version 2 of the models that load it. Every request sent during either change succeeds, and the change shows in responses, in the repository
index and in the Prometheus series. Bad input (a k above max_k, a draft of another vocabulary) changes nothing.
The same deployment logs every prompt (sample rate 1), and the log holds what the clients sent.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.servers import running
from trtspec.contracts.prompt_log import read_prompt_log
from trtspec.contracts.schedule import SpecSchedule
from trtspec.errors import ConfigError, IncompatibleModelsError
from trtspec.triton.client import TritonClient
from trtspec.triton.control import set_default_k, set_schedule
from trtspec.triton.render import write_repository
from trtspec.triton.repo import RepoSpec, plan_repository
from trtspec.triton.rollout import execute_rollout, plan_rollout

pytestmark = pytest.mark.triton
ROOT = Path(__file__).resolve().parents[2]
K, NEW_K, MAX_K = 3, 1, 6
MAX_TOKENS = 16
PROMPTS = ["def add(a, b):\n    return", "import os\n\n", "for i in range(3):\n", "class Point:\n    def"]


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    """(server, repo, log dir): the tiny-torch bundle deployed decoupled, k 3, every prompt logged."""
    from trtspec.build.execute import execute
    from trtspec.build.plan import plan_build
    from trtspec.build.preflight import run_preflight
    from trtspec.config import load_build_spec

    base = tmp_path_factory.mktemp("live")
    spec = load_build_spec(ROOT / "build_configs" / "tiny-torch.yaml", overrides={"output": str(base / "bundle")})
    resolved = run_preflight(spec)
    execute(plan_build(resolved), resolved, base / "bundle", quiet=True)
    repo_spec = RepoSpec.from_build(base / "bundle", "torch", decoupled=True, engine={"max_k": MAX_K, "default_k": K, "log_prompts": base / "log", "log_sample_rate": 1.0})
    repo = write_repository(plan_repository(repo_spec), base / "repo")
    with running(repo) as server:
        yield server, repo, base / "log"


@dataclass
class Done:
    start: float
    end: float
    error: str | None = None
    draft_tokens: int = 0
    drafts: int = 0


class Load:
    """`clients` threads streaming requests to tensorrt_llm back to back until the block ends."""

    def __init__(self, url: str, clients: int) -> None:
        self.url, self.clients, self.done = url, clients, []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(i,)) for i in range(clients)]

    def _run(self, index: int) -> None:
        client = TritonClient(self.url, model="tensorrt_llm")
        n = 0
        while not self._stop.is_set():
            start = time.monotonic()
            try:
                out = client.stream_completion(PROMPTS[(index + n) % len(PROMPTS)], max_tokens=MAX_TOKENS)
                self.done.append(Done(start, time.monotonic(), None, out.total_draft_tokens or 0, out.num_drafts or 0))
            except Exception as exc:  # every failure is recorded; the test asserts there are none
                self.done.append(Done(start, time.monotonic(), repr(exc)))
            n += 1
        client.close()

    def wait_for(self, count: int, after: float = 0.0, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while sum(d.start >= after for d in self.done) < count and time.monotonic() < deadline:
            time.sleep(0.1)

    def __enter__(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=300)


def series(server, name: str) -> dict[str, float]:
    """Labels -> value of the tensorrt_llm samples of one trtspec_spec_decode_* series."""
    with urllib.request.urlopen(server.metrics_url, timeout=10) as response:
        body = response.read().decode()
    found = {}
    for match in re.finditer(rf'^trtspec_spec_decode_{name}\{{([^}}]*)\}} ([0-9.e+-]+)$', body, re.M):
        if 'model="tensorrt_llm"' in match.group(1):
            found[match.group(1)] = float(match.group(2))
    return found


def by_version(values: dict[str, float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for labels, value in values.items():
        version = re.search(r'version="(\d+)"', labels).group(1)
        out[version] = out.get(version, 0.0) + value
    return out


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_bad_k_and_bad_draft_change_nothing(deployment, random_pair):
    server, repo, _ = deployment
    config = repo / "tensorrt_llm" / "config.pbtxt"
    before = digest(config)
    with pytest.raises(ConfigError, match=rf"k=7: must be in \[0, max_k={MAX_K}\]"):
        set_default_k(server.grpc_url, "tensorrt_llm", MAX_K + 1, repo=repo)
    with pytest.raises(IncompatibleModelsError):  # the random test draft: vocabulary 64, not the target's 4096
        plan_rollout(repo, random_pair[1])
    assert digest(config) == before and sorted(p.name for p in (repo / "tensorrt_llm").iterdir()) == ["1", "config.pbtxt"]
    with TritonClient(server.grpc_url, model="tensorrt_llm") as client:
        assert client.model_parameters("tensorrt_llm")["default_k"] == str(K)
        assert client.model_versions("tensorrt_llm") == {1: "READY"}


def test_prompt_log_holds_the_prompts_sent(deployment):
    server, _, log = deployment
    with TritonClient(server.grpc_url, model="tensorrt_llm") as client:
        for prompt in PROMPTS:
            client.generate(prompt, max_tokens=4)
        ids = [client.tokenize(p)[0] for p in PROMPTS]
    logged, skipped = read_prompt_log(log)
    assert skipped == 0
    got = [item.prompt_ids for item in logged[-len(PROMPTS):]]
    assert got == [tuple(i) for i in ids]
    assert [item.prompt for item in logged[-len(PROMPTS):]] == PROMPTS  # decoded text of the same ids
    line = json.loads((log / "prompts.jsonl").read_text().splitlines()[-1])
    assert line["model"] == "tensorrt_llm" and line["version"] == "1" and line["max_tokens"] == 4


def test_set_k_reloads_live_and_no_request_fails(deployment):
    server, repo, _ = deployment
    drafted_before = sum(series(server, "num_draft_tokens").values())
    with Load(server.grpc_url, clients=2) as load:  # two back-to-back streams: always a request in flight
        load.wait_for(4)
        started = time.monotonic()
        change = set_default_k(server.grpc_url, "tensorrt_llm", NEW_K, repo=repo)
        finished = time.monotonic()
        load.wait_for(4, after=finished)
    assert [d.error for d in load.done if d.error] == []
    assert change.old_k == K and change.new_k == NEW_K and change.persisted == repo / "tensorrt_llm" / "config.pbtxt"
    during = [d for d in load.done if d.start < finished and d.end > started]  # ran while the new instance loaded
    at_swap = [d for d in load.done if d.start < finished < d.end]  # in flight when the reload returned
    assert len(during) >= 4 and at_swap, "the reload must happen under load"
    old = [d for d in load.done if d.end < started]
    new = [d for d in load.done if d.start > finished]
    assert old and all(d.draft_tokens > d.drafts for d in old)  # k = 3: several draft tokens per draft
    assert new and all(d.draft_tokens == d.drafts > 0 for d in new)  # k = 1: one draft token per draft
    assert 'key: "default_k" value: { string_value: "1" }' in change.persisted.read_text()
    with TritonClient(server.grpc_url, model="tensorrt_llm") as client:
        assert client.model_parameters("tensorrt_llm")["default_k"] == str(NEW_K)
    assert server.alive() and sum(series(server, "num_draft_tokens").values()) > drafted_before
    # the schedule's parameters reach the reloaded model's configuration (k 1 up to 3 running requests, then none;
    # a gate that never closes: acceptance lengths are >= 1); the rollout below still drafts at 2 clients
    schedule = SpecSchedule(((1, NEW_K), (4, 0)), 8, 32, 1.0)
    change = set_schedule(server.grpc_url, "tensorrt_llm", schedule, repo=repo)
    assert (change.old, change.new, change.new_k) == (None, schedule, NEW_K)
    with TritonClient(server.grpc_url, model="tensorrt_llm") as client:
        params = client.model_parameters("tensorrt_llm")
    assert {k: params.get(k) for k in schedule.to_parameters()} == schedule.to_parameters()
    assert params["draft_len_schedule"] == "1:1,4:0" and params["default_k"] == str(NEW_K)
    assert 'key: "max_concurrency" value: { string_value: "8" }' in change.persisted.read_text()


def test_rollout_serves_the_new_draft_as_version_2_and_no_request_fails(deployment, tmp_path):
    server, repo, _ = deployment
    new_draft = shutil.copytree(ROOT / "trtspec" / "assets" / "models" / "tiny-draft", tmp_path / "draft")
    config = {m: digest(repo / m / "config.pbtxt") for m in ("tensorrt_llm", "tensorrt_llm_draft")}
    plan = plan_rollout(repo, new_draft)
    assert [(s.model, s.old_version, s.new_version) for s in plan.steps] == [
        ("tensorrt_llm_draft", 1, 2), ("tensorrt_llm", 1, 2)]
    with Load(server.grpc_url, clients=2) as load:  # two streams: the two new versions load beside them
        load.wait_for(4)
        execute_rollout(plan, server.grpc_url)
        finished = time.monotonic()
        load.wait_for(4, after=finished)
    assert [d.error for d in load.done if d.error] == []
    with TritonClient(server.grpc_url, model="tensorrt_llm") as client:
        for model in ("tensorrt_llm", "tensorrt_llm_draft"):
            assert client.model_versions(model) == {1: "UNAVAILABLE", 2: "READY"}, model
            assert (repo / model / "2" / "draft" / "model.safetensors").is_file()
            assert json.loads((repo / model / "2" / "trtspec-version.json").read_text()) == {
                "tensorrt_llm_draft": {"target": "draft"}, "tensorrt_llm": {"draft": "draft"}}[model]
        assert client.model_parameters("tensorrt_llm")["default_k"] == str(NEW_K)  # the live k survives
    assert {m: digest(repo / m / "config.pbtxt") for m in config} == config
    drafted = by_version(series(server, "num_draft_tokens"))
    assert drafted.get("2", 0) > 0  # version 2 drafts: the requests after the rollout ran on it
