"""set-k's and rollout-draft's file side, without a server: the config.pbtxt edit is exact and refuses another
repository's model; a rollout plan names the versions and checks the draft; staging writes a complete version."""

from __future__ import annotations

import copy
import itertools
import json
import threading
import time
from pathlib import Path

import pytest

from trtspec.contracts.engine import EngineConfig
from trtspec.errors import ConfigError, IncompatibleModelsError, UsageError
from trtspec.triton.control import check_k, config_params, config_with_parameter, set_default_k
from trtspec.triton.render import validate_model_config, write_repository
from trtspec.triton.repo import RepoSpec, plan_repository
from trtspec.triton.rollout import plan_rollout, serves_latest, stage_version, with_versions
from trtspec.triton.served_config import VERSION_FILE, for_version

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def repo(tmp_path):
    from tests.triton.helpers import torch_bundle
    from trtspec.models import resolve_model

    bundle = torch_bundle(tmp_path / "bundle", resolve_model("tiny"), resolve_model("tiny-draft"), k=4)
    spec = RepoSpec.from_build(bundle, "torch", engine={"max_k": 6, "default_k": 3})
    return write_repository(plan_repository(spec), tmp_path / "repo")


def test_the_config_edit_changes_default_k_and_nothing_else(repo):
    path = repo / "tensorrt_llm" / "config.pbtxt"
    live = config_params(path)
    _, text = config_with_parameter(path, "default_k", "1", expect=live)
    old, new = validate_model_config(path.read_text()), validate_model_config(text)
    assert new.parameters["default_k"].string_value == "1" and old.parameters["default_k"].string_value == "3"
    new.parameters["default_k"].string_value = "3"
    assert new == old  # every other field, parameter and declaration as it was
    assert text.count("\n") == path.read_text().count("\n")  # comments and layout kept


def test_the_config_edit_refuses_another_repositorys_model(repo):
    path = repo / "tensorrt_llm" / "config.pbtxt"
    other = EngineConfig(target="/elsewhere/target", draft="/elsewhere/draft", default_k=3)
    with pytest.raises(UsageError, match="not the served model"):
        config_with_parameter(path, "default_k", "1", expect=other)
    with pytest.raises(UsageError, match="does not exist"):
        config_with_parameter(repo / "nosuch" / "config.pbtxt", "default_k", "1", expect=other)


@pytest.mark.parametrize("k, error", [(7, ConfigError), (-1, ConfigError)])
def test_k_outside_the_models_range_is_refused(k, error):
    with pytest.raises(error, match=r"must be in \[0, max_k=6\]"):
        check_k(EngineConfig(target="tiny", max_k=6), k, "tensorrt_llm")
    with pytest.raises(UsageError, match="method none"):
        check_k(EngineConfig(target="tiny", method="none"), 1, "tensorrt_llm_draft")


def test_rollout_plan_and_staged_version(repo, tmp_path):
    plan = plan_rollout(repo, ROOT / "trtspec" / "assets" / "models" / "tiny-draft")
    assert [(s.model, s.field, s.old_version, s.new_version) for s in plan.steps] == [
        ("tensorrt_llm_draft", "target", 1, 2), ("tensorrt_llm", "draft", 1, 2)]
    for step in plan.steps:
        version = stage_version(plan, step)
        assert sorted(p.name for p in version.iterdir()) == ["draft", "model.py", VERSION_FILE]
        assert (version / "model.py").read_bytes() == (repo / step.model / "1" / "model.py").read_bytes()
        assert json.loads((version / VERSION_FILE).read_text()) == {step.field: "draft"}
        params = for_version(config_params(repo / step.model / "config.pbtxt"), version)
        assert getattr(params, step.field) == str(version / "draft")
        with pytest.raises(UsageError, match="already exists"):
            stage_version(plan, step)
    assert not list(repo.glob("*/.*tmp*"))  # no staging left behind
    assert with_versions({"name": "m"}, [1, 2]) == {"name": "m", "version_policy": {"specific": {"versions": [1, 2]}}}
    # Triton's default policy (the latest version) lets a rollout load only the new version; any other is staged
    assert serves_latest({"name": "m"}) and serves_latest({"version_policy": {"latest": {"num_versions": 1}}})
    assert serves_latest({"version_policy": {"latest": {}}})
    assert not serves_latest({"version_policy": {"latest": {"num_versions": 2}}})
    assert not serves_latest(with_versions({"name": "m"}, [1])) and not serves_latest({"version_policy": {"all": {}}})


def test_rollout_refuses_a_draft_of_another_vocabulary_before_writing(repo, random_pair):
    before = sorted(p.relative_to(repo) for p in repo.rglob("*"))
    with pytest.raises(IncompatibleModelsError):
        plan_rollout(repo, random_pair[1])
    assert sorted(p.relative_to(repo) for p in repo.rglob("*")) == before


def test_rollout_refuses_a_tensorrtllm_repository(tmp_path):
    (tmp_path / "trtspec-repo.json").write_text(json.dumps({"backend": "tensorrtllm"}))
    with pytest.raises(UsageError, match="backend is 'tensorrtllm'"):
        plan_rollout(tmp_path, ROOT / "trtspec" / "assets" / "models" / "tiny-draft")


class FakeServer:
    """The part of a Triton server set_default_k talks to (through trtspec's TritonClient, replaced at its seam):
    one model's live configuration; a reload takes a while, as Triton's does, so racing callers overlap."""

    def __init__(self, config: dict) -> None:
        self.config, self.lock, self.reloads = config, threading.Lock(), 0

    def client(self, url, model=None, timeout_s=None):
        server = self

        class Client:
            def __enter__(self):
                return self

            def __exit__(self, *exc):
                pass

            def model_config(self, model):
                with server.lock:
                    return copy.deepcopy(server.config)

            def load_model(self, model, config):
                time.sleep(0.2)
                with server.lock:
                    server.config, server.reloads = copy.deepcopy(config), server.reloads + 1

            def model_parameters(self, model):
                return {k: v["string_value"] for k, v in self.model_config(model)["parameters"].items()}

        return Client()


def test_racing_set_k_calls_run_one_after_another_and_report_the_k_they_replaced(repo, monkeypatch):
    """Four set-k calls at once (k = 1, 2, 3, 4) on a model at k 3: each reports the k it really replaced, so the
    reports chain from 3 through every new k, and the server and the repository end at the last one."""
    from google.protobuf.json_format import MessageToDict

    import trtspec.triton.client

    path = repo / "tensorrt_llm" / "config.pbtxt"
    server = FakeServer(MessageToDict(validate_model_config(path.read_text()), preserving_proto_field_name=True))
    monkeypatch.setattr(trtspec.triton.client, "TritonClient", server.client)
    url = "127.0.0.1:1"  # no server: its lock file is this test's own
    changes, start = [], threading.Barrier(4)

    def one(k: int) -> None:
        start.wait()
        changes.append(set_default_k(url, "tensorrt_llm", k, repo=repo))

    threads = [threading.Thread(target=one, args=(k,)) for k in (1, 2, 3, 4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert server.reloads == 4 and len(changes) == 4
    # serialized: some order of the four changes chains from 3, each replacing the k the one before set (a k may
    # come back, e.g. 3 -> 1, 1 -> 4, 4 -> 3, 3 -> 2); racing calls all report "3 -> X"
    pairs = [(c.old_k, c.new_k) for c in changes]
    orders = [order for order in itertools.permutations(pairs)
              if order[0][0] == 3 and all(a[1] == b[0] for a, b in itertools.pairwise(order))]
    assert orders, pairs
    k = orders[0][-1][1]
    assert all(order[-1][1] == k for order in orders)
    assert server.config["parameters"]["default_k"]["string_value"] == str(k)
    assert config_params(path).default_k == k  # the repository holds the server's k, not an earlier writer's


def _swap_two_tokens(path: Path) -> None:
    """Same size, another tokenizer: two tokens trade ids."""
    data = json.loads((path / "tokenizer.json").read_text())
    vocab = data["model"]["vocab"]
    (a, ia), (b, ib) = sorted(vocab.items(), key=lambda item: item[1])[300:302]
    vocab[a], vocab[b] = ib, ia
    (path / "tokenizer.json").write_text(json.dumps(data))


@pytest.mark.parametrize(("change", "message"), [
    (_swap_two_tokens, "differs from the target's"),
    (lambda path: (path / "generation_config.json").write_text(json.dumps(
        {**json.loads((path / "generation_config.json").read_text()), "eos_token_id": 7})), "eos_token_id differs"),
], ids=["tokens", "eos"])
def test_rollout_draft_refuses_a_draft_with_another_tokenizer_as_build_does(repo, tmp_path, change, message):
    """A draft of the target's vocabulary size whose tokenizer maps ids to other tokens (or whose EOS differs): exit 2
    naming the draft and the difference, nothing written."""
    import shutil

    from tests.cli_checks import assert_clean_failure, run_cli

    draft = shutil.copytree(ROOT / "trtspec" / "assets" / "models" / "tiny-draft", tmp_path / "other-draft")
    change(draft)
    before = sorted(p.relative_to(repo) for p in repo.rglob("*"))
    code, _, err = run_cli(["rollout-draft", "--repo", str(repo), "--draft", str(draft), "--dry-run"])
    assert code == 2 and message in err and "other-draft" in err, err
    assert_clean_failure(code, err)
    assert sorted(p.relative_to(repo) for p in repo.rglob("*")) == before


@pytest.fixture
def served(repo, monkeypatch):
    """A fake server serving the repository's tensorrt_llm (its config.pbtxt as Triton reads it)."""
    from google.protobuf.json_format import MessageToDict

    import trtspec.triton.client

    path = repo / "tensorrt_llm" / "config.pbtxt"
    server = FakeServer(MessageToDict(validate_model_config(path.read_text()), preserving_proto_field_name=True))
    monkeypatch.setattr(trtspec.triton.client, "TritonClient", server.client)
    return server


def _live_parameters(server: FakeServer) -> dict[str, str]:
    return {k: v["string_value"] for k, v in server.config["parameters"].items()}


def test_set_schedule_changes_the_live_model_and_the_repository_and_back(repo, served):
    """A schedule with every field (and the default k) in one reload: the live configuration and config.pbtxt carry
    exactly its parameters, every other line as it was; `set-schedule --max-concurrency none` changes that field only,
    `--no-gate` the gate's; `--clear` removes the schedule, and the file is byte for byte the deployed one again."""
    from tests.cli_checks import run_cli
    from trtspec.contracts.schedule import SpecSchedule
    from trtspec.triton.control import set_schedule

    path = repo / "tensorrt_llm" / "config.pbtxt"
    deployed = path.read_text()
    schedule = SpecSchedule(((1, 6), (4, 2), (16, 0)), 24, 32, 1.3, 8)
    change = set_schedule("127.0.0.1:1", "tensorrt_llm", schedule, default_k=6, repo=repo)
    assert (change.old, change.new, change.old_k, change.new_k, change.persisted) == (None, schedule, 3, 6, path)
    want = {"draft_len_schedule": "1:6,4:2,16:0", "max_concurrency": "24", "acceptance_window": "32",
            "acceptance_length_threshold": "1.3", "gate_probe_every": "8", "default_k": "6"}
    assert {k: _live_parameters(served)[k] for k in want} == want
    assert config_params(path).schedule == schedule and config_params(path).default_k == 6
    old_lines, new_lines = deployed.splitlines(), path.read_text().splitlines()
    assert [line for line in new_lines if line not in old_lines] == [  # default_k in its line, the rest appended
        'parameters: { key: "default_k" value: { string_value: "6" } }',
        'parameters: { key: "draft_len_schedule" value: { string_value: "1:6,4:2,16:0" } }',
        'parameters: { key: "max_concurrency" value: { string_value: "24" } }',
        'parameters: { key: "acceptance_window" value: { string_value: "32" } }',
        'parameters: { key: "acceptance_length_threshold" value: { string_value: "1.3" } }',
        'parameters: { key: "gate_probe_every" value: { string_value: "8" } }']
    assert [line for line in old_lines if line not in new_lines] == [
        'parameters: { key: "default_k" value: { string_value: "3" } }']

    code, out, err = run_cli(["set-schedule", "127.0.0.1:1", "tensorrt_llm", "--max-concurrency", "none",
                              "--repo", str(repo)])
    assert code == 0, err
    assert "-> k=6 draft_len_schedule=1:6,4:2,16:0 acceptance_window=32" in out and f"written to {path}" in out
    assert "max_concurrency" not in _live_parameters(served) and "max_concurrency" not in path.read_text()
    assert config_params(path).schedule == SpecSchedule(((1, 6), (4, 2), (16, 0)), None, 32, 1.3, 8)
    assert run_cli(["set-schedule", "127.0.0.1:1", "tensorrt_llm", "--no-gate", "--repo", str(repo)])[0] == 0
    assert config_params(path).schedule == SpecSchedule(((1, 6), (4, 2), (16, 0)))
    assert not {"acceptance_window", "gate_probe_every"} & set(_live_parameters(served))

    code, out, err = run_cli(["set-schedule", "127.0.0.1:1", "tensorrt_llm", "--clear", "--k", "3",
                              "--repo", str(repo), "--json"])
    assert code == 0, err
    assert json.loads(out)["new"] == {"default_k": 3, "schedule": None}
    assert path.read_text() == deployed
    assert not {"draft_len_schedule", "acceptance_window"} & set(_live_parameters(served)) and served.reloads == 4


BAD_SCHEDULES = [  # (set-schedule flags, what the one error line says)
    (["--draft-len-schedule", "2:4"], "--draft-len-schedule='2:4': must contain batch size 1"),
    (["--draft-len-schedule", "1:4,0:2"], "--draft-len-schedule[0]=0: a batch-size key must be an integer in [1,"),
    (["--draft-len-schedule", "1:7"], "--draft-len-schedule[1]=7: a draft length must be an integer >= 0, at most "
                                      "max_draft_len 6"),
    (["--draft-len-schedule", "1:4,4:-1"], "--draft-len-schedule[4]=-1: a draft length must be an integer >= 0"),
    (["--draft-len-schedule", "1:4,2.5:2"], "entry '2.5:2' is not BATCH:DRAFT_LEN with two integers"),
    (["--draft-len-schedule", "1:4,1:2"], "--draft-len-schedule[1]=1: is given twice"),
    (["--max-concurrency", "1.5"], "--max-concurrency='1.5': is not an integer"),
    (["--acceptance-window", "32", "--acceptance-length-threshold", "nan"],
     "--acceptance-length-threshold=nan: must be a finite number >= 0"),
    (["--acceptance-window", "32", "--acceptance-length-threshold", "inf"], "must be a finite number >= 0"),
    (["--acceptance-window", "0", "--acceptance-length-threshold", "1.3"],
     "--acceptance-window=0: a gate with acceptance_length_threshold needs a window of at least 1"),
    (["--acceptance-window", "-3", "--acceptance-length-threshold", "1.3"], "--acceptance-window=-3: must be an integer"),
    (["--acceptance-length-threshold", "1.3"], "needs a window of at least 1"),
    (["--draft-len-schedule", "1:4", "--k", "7"], "--k=7: must be in [0, max_k=6]"),
    (["--draft-len-schedule", "1:4", "--no-gate", "--acceptance-window", "4"], "--no-gate removes the gate"),
]


def test_set_schedule_refuses_bad_input_naming_the_entry_and_the_rule(repo, served):
    """Each bad schedule exits 2 in one line naming the flag (the entry) and the rule; nothing is reloaded or written."""
    from tests.cli_checks import assert_clean_failure, run_cli

    before = (repo / "tensorrt_llm" / "config.pbtxt").read_text()
    for args, needle in BAD_SCHEDULES:
        code, _, err = run_cli(["set-schedule", "127.0.0.1:1", "tensorrt_llm", *args, "--repo", str(repo)])
        assert code == 2 and needle in err, (args, err)
        assert_clean_failure(code, err)
    assert served.reloads == 0 and (repo / "tensorrt_llm" / "config.pbtxt").read_text() == before


def test_set_schedule_dry_run_and_nothing_to_set_change_nothing(repo, served):
    from tests.cli_checks import run_cli

    before = (repo / "tensorrt_llm" / "config.pbtxt").read_text()
    code, out, err = run_cli(["set-schedule", "127.0.0.1:1", "tensorrt_llm", "--draft-len-schedule", "1:6,8:2",
                              "--repo", str(repo), "--dry-run"])
    assert code == 0 and "would change k=3 -> k=3 draft_len_schedule=1:6,8:2" in out, err
    assert "default k 3 is below the schedule's draft length 6" in out  # the schedule caps k: say so
    code, _, err = run_cli(["set-schedule", "127.0.0.1:1", "tensorrt_llm"])
    assert code == 2 and "nothing to set" in err
    assert served.reloads == 0 and (repo / "tensorrt_llm" / "config.pbtxt").read_text() == before
