"""Acting through the controls each deployment form has (issue 43 item 3): a proposal becomes, per form, the exact
change that applies it (contracts.control.PlannedChange), on files the tests make with trtspec itself:

- trtllm-serve: a PyTorch-workflow `trtspec build` of the embedded pair (TensorRT-LLM 1.2.1): a new options file
  (diff_llm_api-clean) and the build's own serve command naming it;
- Triton llmapi: `trtspec deploy` of that build: model.yaml + the model-control load whose `config` parses as
  Triton's ModelConfig;
- Triton inflight batcher: `trtspec build --only convert` of the engine workflow (draft-target, Medusa) and its
  deploy: per-request k, a tree of k nodes + reload, a rebuild above max_draft_len, the schedule refused with the
  facts' reason;
- Dynamo: `trtspec k8s` output (1.3.0rc29): engine configs + a DynamoGraphDeployment that `dynamo.k8s.validate`
  accepts, whose worker pod template changes (the rolling update).

The monitor's `--deployment` shows the plan after a drift (a scraper fed shifted acceptance, no server) and `--apply`
writes exactly the planned files. All in-process, no server: a few seconds.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml

from tests.cli_checks import run_cli
from trtspec.contracts.control import HOWS, PlannedChange, SpeculationChange
from trtspec.contracts.schedule import SpecSchedule
from trtspec.targets import diff_llm_api

ROOT = Path(__file__).resolve().parents[2]
FACTS = json.loads((ROOT / "trtspec/targets/serving-observability.json").read_text())
SCHEDULE_CONFIG = {
    "name": "tiny-draft-target", "method": "draft_target", "target": "tiny", "draft": "tiny-draft",
    "max_draft_len": 4, "workflow": "pytorch", "trtllm": {"version": "1.2.1"},
    "engine": {"max_batch_size": 8, "max_input_len": 128, "max_seq_len": 256, "max_num_tokens": 1024},
    "llm_api": {"draft_len_schedule": {1: 4, 4: 2}, "max_concurrency": 6},
}


def _cli(*args: object) -> tuple[int, str, str]:
    return run_cli([str(a) for a in args])


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text(errors="replace") for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict[str, Path]:
    """Every deployment form's files, made by trtspec's own commands."""
    base = tmp_path_factory.mktemp("forms")
    config = base / "tiny-dt.yaml"
    config.write_text(yaml.safe_dump(SCHEDULE_CONFIG))
    out = {"config": config, "build": base / "build", "llmapi": base / "llmapi", "engine": base / "engine",
           "inflight": base / "inflight", "medusa_build": base / "medusa-build", "medusa": base / "medusa",
           "k8s": base / "k8s", "disagg": base / "k8s-disagg", "torch_build": base / "torch-build",
           "torch": base / "torch"}
    for argv in (["build", config, "--out", out["build"]],
                 ["deploy", "--backend", "tensorrtllm", "--build", out["build"], "--out", out["llmapi"]],
                 ["build", ROOT / "build_configs/tiny-draft-target.yaml", "--only", "convert", "--out", out["engine"]],
                 ["deploy", "--backend", "tensorrtllm", "--build", out["engine"], "--out", out["inflight"]],
                 ["build", ROOT / "build_configs/tiny-medusa.yaml", "--only", "convert", "--out", out["medusa_build"]],
                 ["deploy", "--backend", "tensorrtllm", "--build", out["medusa_build"], "--out", out["medusa"]],
                 ["k8s", config, "--out", out["k8s"]],
                 ["k8s", config, "--mode", "disagg", "--api-version", "v1alpha1", "--out", out["disagg"]],
                 ["build", ROOT / "build_configs/tiny-torch.yaml", "--out", out["torch_build"]],
                 ["deploy", "--backend", "torch", "--build", out["torch_build"], "--out", out["torch"]]):
        code, _, err = _cli(*argv)
        assert code == 0, (argv, err)
    return out


# --- the contract ---------------------------------------------------------------------------------------------------


def test_planned_change_round_trips_and_quotes_its_commands():
    change = PlannedChange("trtllm-serve", "m", "k=4", "k=2", "restart", files={"/a b/x.yaml": "x: 1\n"},
                           diffs={"/a b/x.yaml": "--- a\n+++ b\n"},
                           commands=(("trtllm-serve", "/models/it's here", "--extra_llm_api_options", "a b.yaml"),),
                           cwd="/out dir", notes=("n",), refused=("r",))
    again = PlannedChange.from_dict(json.loads(json.dumps(change.to_dict())))
    assert again == change and again.to_dict() == change.to_dict()
    (line,) = change.command_lines()
    assert line == "cd '/out dir' && trtllm-serve '/models/it'\"'\"'s here' --extra_llm_api_options 'a b.yaml'"
    assert shlex.split(line)[3:] == list(change.commands[0])
    with pytest.raises(ValueError):
        PlannedChange("kubernetes", "m", "", "", "restart")
    with pytest.raises(ValueError):
        PlannedChange("torch", "m", "", "", "soon")
    assert set(HOWS) >= {"live", "reload", "restart", "rolling update", "rebuild"}


@pytest.mark.parametrize("version, release_form, canonical", [
    ("1.2.1", {1: 4, 4: 2}, {1: 4, 4: 2}),
    ("1.3.0rc29", {3: 4, 6: 2}, {1: 4, 4: 2, 7: 0}),
    ("1.3.0rc29", {4: 4, 8: 2, 32: 1}, {1: 4, 5: 2, 9: 1, 33: 0}),  # NVIDIA's get_draft_len_for_batch_size vector
])
def test_a_release_schedule_reads_back_as_the_canonical_one(version, release_form, canonical):
    from trtspec.targets.controls import release

    rel = release(version)
    assert rel.canonical_schedule(release_form, None) == (canonical, None)
    for batch in range(1, 40):  # the same draft length at every batch size
        want = next(v for k, v in sorted(canonical.items(), reverse=True) if k <= batch)
        assert rel.lookup(release_form, batch, 4) == want
    top = max(release_form)
    assert rel.release_schedule(canonical, None, top) == (release_form, None)


# --- trtllm-serve ----------------------------------------------------------------------------------------------------


def test_trtllm_serve_plan_is_a_new_options_file_and_the_builds_serve_command(made):
    from trtspec.build.change import CHANGED_FILE, plan_serve_change
    from trtspec.targets.llm_api import diff_serve_argv

    build = made["build"]
    manifest = json.loads((build / "trtspec-manifest.json").read_text())
    proposal = SpecSchedule(draft_len=((1, 3), (4, 1)), max_concurrency=6, acceptance_window=32,
                            acceptance_length_threshold=0.5)
    plan = plan_serve_change(build, SpeculationChange(default_k=3, schedule=proposal, replace_schedule=True), model="m")
    assert (plan.form, plan.how, plan.refused) == ("trtllm-serve", "restart", ())
    assert plan.summary == ("k=4 draft_len_schedule=1:4,4:2 max_concurrency=6 -> k=3 draft_len_schedule=1:3,4:1 "
                            "max_concurrency=6 acceptance_window=32 acceptance_length_threshold=0.5")
    (path, text), = plan.files.items()
    assert path == str(build / CHANGED_FILE)
    options = yaml.safe_load(text)
    assert diff_llm_api(options, "1.2.1") == []
    before = yaml.safe_load((build / manifest["llm_api"]).read_text())
    assert {k: v for k, v in options.items() if k != "speculative_config"} == \
        {k: v for k, v in before.items() if k != "speculative_config"}
    assert options["speculative_config"] == {**before["speculative_config"], "max_draft_len": 3,
                                             "draft_len_schedule": {1: 3, 4: 1}, "acceptance_window": 32,
                                             "acceptance_length_threshold": 0.5}
    serve = manifest["serve"]["trtllm-serve"]
    (argv,) = plan.commands
    assert list(argv) == [a if a != manifest["llm_api"] else CHANGED_FILE for a in serve["argv"]]
    assert diff_serve_argv(list(argv), "1.2.1") == [] and plan.cwd == serve["cwd"]
    assert shlex.split(plan.command_lines()[0]) == ["cd", serve["cwd"], "&&", *argv]
    assert plan.diffs[path].startswith(f"--- a{build / manifest['llm_api']}\n+++ b{path}\n")


def test_a_release_rule_the_change_breaks_is_refused_naming_the_key(made):
    from trtspec.build.change import plan_serve_change
    from trtspec.errors import ConfigError

    with pytest.raises(ConfigError, match=r"draft_len_schedule\[1\].*max_draft_len 2"):
        plan_serve_change(made["build"], SpeculationChange(default_k=2))  # the served schedule drafts 4 at batch 1
    with pytest.raises(ConfigError, match="acceptance_rate_window_size.*1.3.0rc29's gate"):
        plan_serve_change(made["build"], SpeculationChange(schedule=SpecSchedule(
            draft_len=((1, 4),), acceptance_rate_window_size=64, acceptance_rate_threshold=0.3), replace_schedule=True))


def test_set_schedule_on_trtllm_serve_writes_only_the_planned_file(made, tmp_path):
    import shutil

    build = tmp_path / "build"
    shutil.copytree(made["build"], build)
    before = _tree(build)
    code, out, err = _cli("set-schedule", "--deployment", f"trtllm-serve:{build}", "--draft-len-schedule", "1:3,4:1",
                          "--dry-run", "--json")
    assert code == 0, err
    document = json.loads(out)
    assert document["dry_run"] and document["written"] == [] and _tree(build) == before
    code, out, err = _cli("set-schedule", "--deployment", f"trtllm-serve:{build}", "--draft-len-schedule", "1:3,4:1")
    assert code == 0, err
    after = _tree(build)
    (new,) = set(after) - set(before)
    assert {k: v for k, v in after.items() if k != new} == before  # the build's own files untouched
    assert f"wrote {build / new}" in out and "$ cd " in out and "--extra_llm_api_options" in out
    # the next change starts from the file written last
    code, out, err = _cli("set-k", "3", "--deployment", f"trtllm-serve:{build}", "--json")
    assert code == 0 and json.loads(out)["planned_change"]["files"] == {} and _tree(build) == after  # served now
    code, out, err = _cli("set-k", "2", "--deployment", f"trtllm-serve:{build}", "--dry-run")
    assert code == 2 and "draft_len_schedule[1]=3" in err and "max_draft_len 2" in err  # a schedule starts at k
    code, out, err = _cli("set-schedule", "--deployment", f"trtllm-serve:{build}", "--k", "2",
                          "--draft-len-schedule", "1:2", "--dry-run", "--json")
    assert code == 0, err
    plan = json.loads(out)["planned_change"]
    assert plan["old"].startswith("k=3 draft_len_schedule=1:3,4:1") and plan["new"].startswith("k=2 draft_len_schedule=1:2")


# --- Triton: llmapi ----------------------------------------------------------------------------------------------


def test_llmapi_plan_is_model_yaml_and_a_forced_reload(made):
    from google.protobuf import json_format
    from tritonclient.grpc import model_config_pb2

    from trtspec.triton import llmapi
    from trtspec.triton.change import plan_llmapi_change, repository_form

    repo = made["llmapi"]
    assert repository_form(repo) == "triton-llmapi"
    plan = plan_llmapi_change(repo, SpeculationChange(default_k=2, schedule=SpecSchedule(draft_len=((1, 2),)),
                                                      replace_schedule=True), http_url="triton:8000")
    assert plan.how == "reload" and plan.summary == "k=4 draft_len_schedule=1:4,4:2 max_concurrency=6 -> k=2 " \
                                                    "draft_len_schedule=1:2"
    model_yaml = yaml.safe_load(plan.files[str(repo / "tensorrt_llm/1/model.yaml")])
    facts = llmapi.facts_for("1.2.1")
    assert llmapi.model_yaml_problems(model_yaml, facts) == []
    assert model_yaml["speculative_config"]["draft_len_schedule"] == {1: 2}
    assert "max_concurrency" not in model_yaml["speculative_config"]
    body = json.loads(plan.files[str(repo / "trtspec-reload-tensorrt_llm.json")])
    config = json_format.Parse(body["parameters"]["config"], model_config_pb2.ModelConfig())
    assert config.name == "tensorrt_llm" and config.backend == "python"
    load, ready = plan.commands
    assert load[:5] == ("curl", "-sS", "--fail-with-body", "-X", "POST")
    assert "http://triton:8000/v2/repository/models/tensorrt_llm/load" in load
    assert ready[-1] == "http://triton:8000/v2/models/tensorrt_llm/ready"
    # the facts the plan rests on: the model re-reads model.yaml at every load; 1.2.1 zeroes the outputs (said)
    form = FACTS["forms"]["triton_llmapi"]
    assert form["reload"]["rereads_model_yaml"] is True and "config" in form["reload"]["how"]
    assert form["acceptance"]["per_request_outputs"]["validity"]["1.2.1"].startswith("ZEROED")
    assert any("zeroes" in note and "1.2.1" in note for note in plan.notes)


# --- Triton: inflight batcher ----------------------------------------------------------------------------------------


def test_inflight_draft_target_k_is_per_request_a_schedule_is_refused_and_above_the_engine_a_rebuild(made, tmp_path):
    from trtspec.config import load_build_spec
    from trtspec.triton.change import NO_RUNTIME_GATE, plan_inflight_change, repository_form

    repo = made["inflight"]
    assert repository_form(repo) == "triton-inflight"
    live = plan_inflight_change(repo, SpeculationChange(default_k=2))
    assert (live.how, live.files, live.commands) == ("live", {}, ())
    assert any("num_draft_tokens=2" in note for note in live.notes)
    facts = FACTS["forms"]["triton_tensorrtllm"]
    bls = next(c for c in facts["controls"] if c["knob"] == "num_draft_tokens")
    assert "max_draft_len" in bls["bound"] and "per request" in bls["change"]
    schedule = plan_inflight_change(repo, SpeculationChange(default_k=3, schedule=SpecSchedule(
        draft_len=((1, 3), (4, 1))), replace_schedule=True))
    assert schedule.how == "live" and schedule.refused == (f"draft_len_schedule=1:3,4:1: {NO_RUNTIME_GATE}",)
    assert "no draft_len_schedule, max_concurrency or acceptance gate" in facts["no_runtime_gate"]
    rebuild = plan_inflight_change(repo, SpeculationChange(default_k=6))
    assert rebuild.how == "rebuild"
    (config_path, text), = rebuild.files.items()
    assert config_path == str(repo / "trtspec-rebuild-k6.yaml") and not Path(config_path).exists()  # planned only
    (tmp_path / "k6.yaml").write_text(text)
    spec = load_build_spec(tmp_path / "k6.yaml")
    assert spec.max_draft_len == 6 and spec.method == "draft_target"
    build, deploy = rebuild.commands
    assert build == ("trtspec", "build", config_path, "--out", f"{made['engine']}-k6")
    assert deploy[:6] == ("trtspec", "deploy", "--backend", "tensorrtllm", "--build", f"{made['engine']}-k6")
    code, out, err = _cli("build", tmp_path / "k6.yaml", "--dry-run")
    assert code == 0 and "--max_draft_len 6" in out, err


def test_inflight_medusa_k_is_a_tree_of_k_nodes_and_a_reload(made):
    from trtspec import choices
    from trtspec.triton.change import plan_inflight_change
    from trtspec.triton.render import validate_model_config

    repo = made["medusa"]
    plan = plan_inflight_change(repo, SpeculationChange(default_k=3))
    assert plan.how == "reload"
    text = plan.files[str(repo / "tensorrt_llm/config.pbtxt")]
    tree = choices.parse(validate_model_config(text).parameters["medusa_choices"].string_value, "medusa_choices")
    assert len(tree) == 3 and all(len(c) == 1 or list(c[:-1]) in [list(p) for p in tree] for c in tree)
    assert [line for line in plan.diffs[str(repo / "tensorrt_llm/config.pbtxt")].splitlines()
            if line.startswith(("+p", "-p"))] != [] and "medusa_choices" in plan.diffs[str(repo / "tensorrt_llm/config.pbtxt")]
    knob = next(c for c in FACTS["forms"]["triton_tensorrtllm"]["controls"] if c["knob"].startswith("medusa_choices"))
    assert "reload" in knob["change"]


# --- Dynamo ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["k8s", "disagg"])
def test_dynamo_plan_rolls_the_workers_and_passes_the_wheels_facts(made, which):
    from trtspec.dynamo.change import plan_k8s_change
    from trtspec.dynamo.k8s import CONFIG_HASH_ENV, DynamoRender, validate

    out = made[which]
    change = SpeculationChange(default_k=3, schedule=SpecSchedule(draft_len=((1, 3), (4, 1)),
                                                                 acceptance_rate_window_size=64,
                                                                 acceptance_rate_threshold=0.25),
                               replace_schedule=True)
    plan = plan_k8s_change(out, change, model="tiny-draft-target")
    assert plan.how == "rolling update" and plan.commands[0] == ("kubectl", "apply", "-f", str(out / "dynamo-graph.yaml"))
    graph = plan.files[str(out / "dynamo-graph.yaml")]
    docs = list(yaml.safe_load_all(graph))
    assert validate(DynamoRender(files={}, manifest=docs)) == []
    configmap, dgd = docs
    for rel, options in configmap["data"].items():
        options = yaml.safe_load(options)
        assert diff_llm_api(options, "1.3.0rc29") == []
        assert options["speculative_config"]["draft_len_schedule"] == {3: 3, 8: 1}  # 1.3's upper-bound keys
        assert yaml.safe_load(plan.files[str(out / "engine_configs" / rel)]) == options
    old = list(yaml.safe_load_all((out / "dynamo-graph.yaml").read_text()))[1]

    def hashes(graph: dict) -> list[str]:
        containers = ([c for comp in graph["spec"].get("components", []) for c in comp["podTemplate"]["spec"]["containers"]]
                      + [s["extraPodSpec"]["mainContainer"] for s in graph["spec"].get("services", {}).values()])
        return [e["value"] for c in containers for e in c.get("env", []) if e["name"] == CONFIG_HASH_ENV]

    assert hashes(old) and hashes(dgd) and set(hashes(old)).isdisjoint(hashes(dgd))  # every worker's pod template
    facts = FACTS["forms"]["dynamo_trtllm"]["controls"][1]
    assert "rolling update" in facts["change_k8s"] and "no rollout" in facts["caveat"]
    assert "--- a" in plan.diffs[str(out / "dynamo-graph.yaml")]


# --- the torch flavour ---------------------------------------------------------------------------------------------


def test_the_torch_flavour_keeps_its_live_reload(made, tmp_path):
    from trtspec.cli._deployment import plan, read_deployment
    from trtspec.sweep.baseline import from_results

    deployment = read_deployment(("triton", str(made["torch"])))
    assert deployment.form == "torch" and deployment.live
    change = plan(deployment, SpeculationChange(default_k=2, schedule=SpecSchedule(draft_len=((1, 2), (4, 1))),
                                                replace_schedule=True), model="tensorrt_llm", url="127.0.0.1:8001")
    assert change.how == "live" and change.files == {}
    assert change.commands == (("trtspec", "set-schedule", "127.0.0.1:8001", "tensorrt_llm", "--clear",
                                "--draft-len-schedule", "1:2,4:1", "--k", "2", "--repo", str(made["torch"])),)
    baseline = from_results(ROOT / "docs/sweep/results.jsonl", method="draft_target", k=4, max_k=8,
                            temperature=0.0).write(tmp_path / "b.json")
    code, _, err = _cli("monitor", "--metrics", "127.0.0.1:1", "--baseline", baseline, "--deployment",
                        f"triton:{made['torch']}", "--apply", "--once")
    assert code == 2 and "--apply needs --url" in err  # its reload is live, through Triton's gRPC port


# --- bad input -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("deployment, needle", [
    ("kubernetes:/tmp", "names no deployment form"),
    ("trtllm-serve", "is not FORM:PATH"),
    ("trtllm-serve:{llmapi}", "not a trtspec build output"),
    ("trtllm-serve:{engine}", "an engine-workflow build"),
    ("triton:{build}", "not a repository trtspec rendered"),
    ("dynamo-k8s:{build}", "not what `trtspec k8s` wrote"),
])
def test_bad_deployments_are_one_line_errors_naming_the_flag(made, deployment, needle):
    code, _, err = _cli("set-k", "2", "--deployment", deployment.format(**made), "--dry-run")
    lines = err.strip().splitlines()
    assert code == 2 and lines[0].startswith("Error: --deployment=") and needle in lines[0], err
    assert len(lines) == 2 and lines[1].startswith("Hint: ")


def test_a_schedule_on_the_inflight_batcher_is_refused_and_nothing_is_written(made):
    before = _tree(made["inflight"])
    code, _, err = _cli("set-schedule", "--deployment", f"triton:{made['inflight']}", "--max-concurrency", "4")
    assert code == 2 and "no draft_len_schedule, max_concurrency or acceptance gate" in err
    assert _tree(made["inflight"]) == before
    code, _, err = _cli("set-schedule", "--deployment", f"trtllm-serve:{made['build']}", "--gate-probe-every", "8",
                        "--dry-run")
    assert code == 2 and err.startswith("Error: --gate-probe-every=") and "no LLM-API form" in err


# --- the monitor ----------------------------------------------------------------------------------------------------


def _drifting_scraper(monkeypatch) -> None:
    """`trtspec monitor`'s scraper, fed draft-target traffic whose acceptance has collapsed (no server)."""
    import time

    from tests.ops.test_window import exposition, stats_of
    from trtspec.ops import scrape

    calls = {"n": 0}

    def scraper(urls, **_):
        def scrape_once():
            calls["n"] += 1
            return scrape.parse(exposition(stats_of([(4, 0)] * (400 * calls["n"]) + [(4, 1)] * (40 * calls["n"]))),
                                time.monotonic(), source="fake")
        return scrape_once

    monkeypatch.setattr(scrape, "scraper", scraper)


def test_monitor_shows_the_trtllm_serve_plan_after_a_drift_and_apply_writes_only_it(made, tmp_path, monkeypatch):
    import shutil

    from trtspec.sweep.baseline import from_results

    build = tmp_path / "build"
    shutil.copytree(made["build"], build)
    baseline = from_results(ROOT / "docs/sweep/results.jsonl", method="draft_target", k=4, max_k=8,
                            temperature=0.0).write(tmp_path / "b.json")
    _drifting_scraper(monkeypatch)
    args = ["monitor", "--metrics", "fake:1", "--baseline", str(baseline), "--deployment", f"trtllm-serve:{build}",
            "--once", "--window", "1s", "--interval", "0.2s", "--json"]
    before = _tree(build)
    code, out, err = _cli(*args)
    assert code == 0, err
    (report,) = json.loads(out)
    assert report["drift"]["drifted"], report["drift"]
    plan = PlannedChange.from_dict(report["planned_change"])
    assert plan.form == "trtllm-serve" and plan.how == "restart" and plan.files and _tree(build) == before
    code, out, err = _cli(*args, "--apply")
    assert code == 0, err
    (report,) = json.loads(out)
    plan = PlannedChange.from_dict(report["planned_change"])
    after = _tree(build)
    assert {str(build / rel) for rel in set(after) - set(before)} == set(plan.files)
    assert {k: v for k, v in after.items() if k in before} == before
    assert "applied: tensorrt_llm (trtllm-serve, takes effect by restart)" in err and "$ cd " in err
    options = yaml.safe_load(next(iter(plan.files.values())))
    assert diff_llm_api(options, "1.2.1") == []


def test_the_plan_starts_from_what_the_deployment_serves_for_a_source_without_method_labels(made, tmp_path,
                                                                                            monkeypatch):
    """trtllm-serve's /metrics names no method: with --deployment, what the model serves is read from the files
    anyway, so the proposal starts from the served speculation (not from nothing)."""
    import copy
    import time

    from trtspec.contracts.iteration import IterationStats
    from trtspec.contracts.trtllm_iterations import iteration_row
    from trtspec.ops import scrape
    from trtspec.ops.iterations import IterationPage
    from trtspec.ops.sample import ModelId, Sample
    from trtspec.sweep.baseline import from_results

    page, calls = IterationPage("fake", ModelId("tensorrt_llm")), {"n": 0}

    def rows() -> str:
        calls["n"] += 1
        return json.dumps([iteration_row(IterationStats(
            iteration=calls["n"] * 100 + i, timestamp=float(calls["n"] * 100 + i), latency_s=0.01,
            draft_latency_s=0.002, num_active_requests=4, num_queued_requests=0, num_context_requests=0,
            num_context_tokens=0, num_generation_requests=4, num_completed_requests=0,
            num_requests_with_draft_tokens=4, num_draft_tokens=16, num_accepted_tokens=1, num_emitted_tokens=5))
            for i in range(100)])

    def scraper(urls, **_):
        return lambda: Sample(time.monotonic(), {page.model: copy.deepcopy(page.feed(rows()))})

    monkeypatch.setattr(scrape, "scraper", scraper)
    baseline = from_results(ROOT / "docs/sweep/results.jsonl", method="draft_target", k=4, max_k=8,
                            temperature=0.0).write(tmp_path / "b.json")
    code, out, err = _cli("monitor", "--metrics", "fake:1", "--baseline", str(baseline), "--deployment",
                          f"trtllm-serve:{made['build']}", "--once", "--window", "1s", "--interval", "0.2s", "--json")
    assert code == 0, err
    (report,) = json.loads(out)
    assert report["per_pos_estimated"] and report["drift"]["test"] == "acceptance_rate" and report["drift"]["drifted"]
    assert report["schedule"]["served"] is not None, report["schedule"]  # read from the build output's options
    assert "planned_change" in report or "planned_change_error" in report
    # a sweep's results as the baseline: the source labels no method, the results' one method is the served one
    results = tmp_path / "draft_target.jsonl"
    results.write_text("".join(line for line in (ROOT / "docs/sweep/results.jsonl").read_text().splitlines(True)
                               if json.loads(line).get("params", {}).get("method") != "ngram"))
    code, out, err = _cli("monitor", "--metrics", "fake:1", "--baseline", str(results), "--baseline-temperature", "0",
                          "--once", "--window", "1s", "--interval", "0.2s", "--json")
    assert code == 0, err
    assert json.loads(out)[0]["drift"]["drifted"]
    code, out, err = _cli("monitor", "--metrics", "fake:1", "--baseline", str(ROOT / "docs/sweep/results.jsonl"),
                          "--once", "--window", "1s", "--interval", "0.2s", "--json")
    assert code == 2 and "label no method and the results hold draft_target, ngram" in err
