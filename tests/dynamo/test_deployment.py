"""Acceptance: a real NVIDIA Dynamo frontend and two trtspec workers on CPU, driven by the `openai` SDK.

One deployment for the module (startup is the expensive part); the tests run in file order and the last two change
it (a worker is SIGKILLed, then everything is stopped).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from trtspec.ports import free_ports

pytestmark = pytest.mark.dynamo
if not os.environ.get("CI"):  # CI installs Dynamo (make install): there a missing install fails instead of skipping
    pytest.importorskip("dynamo.frontend", reason="NVIDIA Dynamo is not installed (make install)")

PROMPTS = ["def fibonacci(n):", "import os\n\ndef main("]
MAX_TOKENS = 24
CLIENT_TIMEOUT_S = 120.0  # a hung request fails the test instead of hanging it


@pytest.fixture(scope="module")
def deployment():
    from trtspec.contracts.engine import EngineConfig
    from trtspec.dynamo.launch import MAX_SYSTEM_PORT, DynamoDeployment, plan_deployment

    http, *system = free_ports(3, below=MAX_SYSTEM_PORT)
    params = EngineConfig(target="tiny", draft="tiny-draft", method="draft_target", default_k=4)
    plan = plan_deployment(params, workers=2, http_port=http, system_port=system, migration_limit=3)
    saved = os.environ.get("DYN_GRACEFUL_SHUTDOWN_GRACE_PERIOD_SECS")
    os.environ["DYN_GRACEFUL_SHUTDOWN_GRACE_PERIOD_SECS"] = "1"  # Dynamo's default grace before a drain is 5 s
    dep = DynamoDeployment(plan, startup_timeout=240.0, stop_timeout=15.0)
    try:
        dep.start()
        assert dep.failed == {}, dep.failed
        yield dep
    finally:
        dep.stop()
        if saved is None:
            os.environ.pop("DYN_GRACEFUL_SHUTDOWN_GRACE_PERIOD_SECS", None)
        else:
            os.environ["DYN_GRACEFUL_SHUTDOWN_GRACE_PERIOD_SECS"] = saved


@pytest.fixture(scope="module")
def client(deployment):
    from openai import OpenAI

    return OpenAI(base_url=deployment.plan.url, api_key="unused", timeout=CLIENT_TIMEOUT_S, max_retries=0)


def worker_counts(deployment, metric: str = "trtspec_spec_decode_requests") -> dict[str, float]:
    """Per worker: the sum of a trtspec series on its /metrics (system port)."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for i, port in enumerate(deployment.plan.system_ports):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
                text = response.read().decode()
        except OSError:
            continue
        out[f"worker-{i}"] = sum(sample.value for family in text_string_to_metric_families(text)
                                 if family.name == metric for sample in family.samples
                                 if sample.name == f"{metric}_total")
    return out


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
@pytest.mark.parametrize("api", ["completions", "chat"])
def test_openai_sdk_greedy_output_is_the_targets(client, deployment, reference, api, stream):
    for prompt in PROMPTS:
        ref = reference(prompt)
        kwargs = {"model": deployment.plan.model, "max_tokens": MAX_TOKENS, "temperature": 0, "stream": stream}
        if stream:
            kwargs["stream_options"] = {"include_usage": True}
        if api == "completions":
            response = client.completions.create(prompt=prompt, **kwargs)
        else:
            response = client.chat.completions.create(messages=[{"role": "user", "content": prompt}], **kwargs)
        if stream:
            chunks = list(response)
            usage = chunks[-1].usage
            pieces = [c.choices[0].text if api == "completions" else c.choices[0].delta.content
                      for c in chunks if c.choices]
            text, finish = "".join(p or "" for p in pieces), [c.choices[0].finish_reason for c in chunks if c.choices][-1]
            assert len([p for p in pieces if p]) > 1  # really streamed
        else:
            choice = response.choices[0]
            text = choice.text if api == "completions" else choice.message.content
            usage, finish = response.usage, choice.finish_reason
        assert text == ref.text
        assert finish == ref.finish_reason
        assert usage.prompt_tokens == len(ref.prompt_token_ids)  # the chat template renders one message as its text
        assert usage.completion_tokens == len(ref.token_ids)
        details = usage.completion_tokens_details
        assert details.accepted_prediction_tokens > 0  # draft_target with tiny-draft accepts most draft tokens
        assert details.accepted_prediction_tokens + 1 <= usage.completion_tokens


def test_sixteen_concurrent_clients_are_served_by_both_workers(client, deployment, reference):
    from concurrent.futures import ThreadPoolExecutor

    before = worker_counts(deployment)
    accepted_before = worker_counts(deployment, "trtspec_spec_decode_num_accepted_tokens")

    def one(i: int):
        prompt = PROMPTS[i % len(PROMPTS)]
        r = client.completions.create(model=deployment.plan.model, prompt=prompt, max_tokens=16, temperature=0)
        return prompt, r

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(one, range(16)))
    for prompt, r in results:
        assert r.choices[0].text == reference(prompt, 16).text
    after = worker_counts(deployment)
    served = {w: after[w] - before.get(w, 0) for w in after}
    assert sum(served.values()) == 16 and all(n > 0 for n in served.values()), served
    accepted = worker_counts(deployment, "trtspec_spec_decode_num_accepted_tokens")
    in_usage = sum(r.usage.completion_tokens_details.accepted_prediction_tokens for _, r in results)
    assert sum(accepted.values()) - sum(accepted_before.values()) == in_usage  # /metrics and usage agree


def test_bad_requests_get_an_error_and_the_deployment_keeps_serving(client, deployment, reference):
    import openai

    from trtspec.contracts.openai import annotations

    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="no-such-model", prompt="x", max_tokens=4)
    with pytest.raises(openai.BadRequestError, match="n=2"):
        client.completions.create(model=deployment.plan.model, prompt="x", max_tokens=4, n=2)
    with pytest.raises(openai.BadRequestError, match="method"):
        client.completions.create(model=deployment.plan.model, prompt="x", max_tokens=4,
                                  extra_body={"nvext": {"annotations": annotations(method="eagle3")}})
    with pytest.raises(openai.BadRequestError, match="echo"):  # the frontend passes it on as prompt_logprobs
        client.completions.create(model=deployment.plan.model, prompt="x", max_tokens=4, echo=True)
    with pytest.raises(openai.BadRequestError, match="'trtspec:k=3' conflicts with 'trtspec:k=2'"):
        client.completions.create(model=deployment.plan.model, prompt="x", max_tokens=4,
                                  extra_body={"nvext": {"annotations": ["trtspec:k=2", "trtspec:k=3"]}})
    with pytest.raises(openai.BadRequestError, match="ASCII digits"):
        client.completions.create(model=deployment.plan.model, prompt="x", max_tokens=4,
                                  extra_body={"nvext": {"annotations": ["trtspec:k=\u00b2"]}})
    with pytest.raises(openai.BadRequestError):  # past the tokenizer: Dynamo's frontend refuses it, no worker sees it
        client.completions.create(model=deployment.plan.model, prompt=[1000000], max_tokens=4)
    logs = "".join((deployment.log_dir / f"worker-{i}.log").read_text(errors="replace") for i in range(2))
    assert "conflicts with 'trtspec:k=2'" in logs and "ASCII digits" in logs  # each refusal is in a worker's log
    ok = client.completions.create(model=deployment.plan.model, prompt=PROMPTS[0], max_tokens=8, temperature=0)
    assert ok.choices[0].text == reference(PROMPTS[0], 8).text
    plain = client.completions.create(model=deployment.plan.model, prompt=PROMPTS[0], max_tokens=8, temperature=0,
                                      extra_body={"nvext": {"annotations": annotations(method="none")}})
    assert plain.choices[0].text == ok.choices[0].text  # per-request speculation: same output, nothing drafted
    assert plain.usage.completion_tokens_details.accepted_prediction_tokens == 0
    assert plain.usage.completion_tokens_details.rejected_prediction_tokens == 0


@pytest.mark.parametrize("chat_template", [None, "model"], ids=["completions", "chat"])
def test_sweep_via_openai_measures_acceptance_per_request_method_and_k(deployment, tmp_path, chat_template):
    from trtspec.sweep.grid import SweepSpec
    from trtspec.sweep.records import read_records
    from trtspec.sweep.runner import run_sweep

    spec = SweepSpec.build(via="openai", url=f"127.0.0.1:{deployment.plan.http_port}", methods=["draft_target", "ngram"],
                           k=[0, 3], num_prompts=2, max_new_tokens=16, concurrency=[2], calibrate=False,
                           chat_template=chat_template)
    summary = run_sweep(spec, tmp_path / "results.jsonl", show_progress=False)
    assert summary.errors == 0 and summary.ran == 3  # the k=0 baseline, draft_target k=3, ngram k=3
    cases = {(r["params"]["method"], r["params"]["k"]): r for r in read_records(tmp_path / "results.jsonl")
             if r["kind"] == "case"}
    for record in cases.values():
        assert record["status"] == "ok" and record["metrics"]["output_tokens"] == 2 * 16  # ignore_eos, as the engine
        assert record["chat_template"] == chat_template and record["via_info"]["name"] == "openai"
    base, draft = cases["none", 0]["metrics"]["stats"], cases["draft_target", 3]["metrics"]["stats"]
    assert base["num_draft_tokens"] == 0 and base["mean_acceptance_length"] == 1.0
    assert 0 < draft["num_accepted_tokens"] <= draft["num_draft_tokens"] and draft["source"] == "openai_usage"
    assert draft["mean_acceptance_length"] > 1.5  # tiny-draft agrees with tiny on most tokens


def test_monitor_sums_both_workers_and_agrees_with_the_usage(client, deployment):
    """`trtspec monitor` on a Dynamo deployment: it scrapes every worker's system port and sums per model; the
    window's acceptance is the responses' usage summed over the requests."""
    from concurrent.futures import ThreadPoolExecutor

    from trtspec.ops.monitor import Monitor
    from trtspec.ops.scrape import ModelId, scraper

    scrape = scraper([f"127.0.0.1:{port}" for port in deployment.plan.system_ports])
    state = Monitor(3600.0)
    before = scrape()
    state.observe(before)

    def one(i: int):
        return client.completions.create(model=deployment.plan.model, prompt=PROMPTS[i % len(PROMPTS)],
                                         max_tokens=16, temperature=0)

    with ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(one, range(8)))
    after = scrape()
    state.observe(after)
    served = {m.source: sum(c.requests.values()) - sum(before.models[m].requests.values())
              for m, c in after.models.items()}
    assert len(served) == 2 and all(n > 0 for n in served.values()), served  # both workers' pages count
    (report,) = state.reports()
    assert report.model == f"{deployment.plan.model}/1" and report.method == "draft_target" and report.k == 4
    assert report.requests == len(responses)
    window = state.steps[ModelId(deployment.plan.model, "1", "draft_target")]
    details = [r.usage.completion_tokens_details for r in responses]
    accepted = sum(d.accepted_prediction_tokens for d in details)
    assert window.count("num_accepted_tokens") == accepted > 0
    assert window.count("num_draft_tokens") == accepted + sum(d.rejected_prediction_tokens for d in details)
    assert window.count("num_emitted_tokens") == sum(r.usage.completion_tokens for r in responses)
    assert report.acceptance_rate == pytest.approx(accepted / window.count("num_draft_tokens"))


def test_monitor_cli_with_a_sweeps_results_as_baseline(client, deployment):
    """`trtspec monitor --metrics W0,W1 --baseline RESULTS.jsonl --once --json` under traffic: the baseline is the
    reference engine's sweep of the same models (docs/sweep/results.jsonl), for the served method and k."""
    import json

    root = Path(__file__).resolve().parents[2]
    urls = ",".join(f"127.0.0.1:{port}" for port in deployment.plan.system_ports)
    monitor = subprocess.Popen([sys.executable, "-m", "trtspec", "monitor", "--metrics", urls, "--baseline",
                                str(root / "docs" / "sweep" / "results.jsonl"), "--baseline-temperature", "0",
                                "--once", "--json", "--window", "3s", "--interval", "0.5s"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        while monitor.poll() is None:  # traffic for as long as the monitor watches
            client.completions.create(model=deployment.plan.model, prompt=PROMPTS[0], max_tokens=16, temperature=0)
        out, err = monitor.communicate(timeout=60)
    finally:
        monitor.kill()
    assert monitor.returncode == 0, err
    (report,) = json.loads(out)
    assert report["model"] == f"{deployment.plan.model}/1" and report["num_drafts"] > 0
    assert len(report["baseline_per_pos"]) == 8  # the sweep's k reach 8
    assert report["drift"] is not None and report["recommendation"]["current_k"] == 4


def test_a_worker_that_cannot_load_its_model_exits_with_an_error_and_the_others_keep_serving(
        client, deployment, reference, tmp_path):
    import shutil

    from trtspec.models import embedded_path

    broken = tmp_path / "tiny-broken"
    shutil.copytree(embedded_path("tiny"), broken)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])  # cut short
    env = {**os.environ, "TMPDIR": str(deployment.tmpdir)}
    proc = subprocess.run([sys.executable, "-m", "trtspec.dynamo.worker", "--target", str(broken),
                           "--served-model-name", deployment.plan.model], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2
    assert "Error: --target: " in proc.stderr and "model.safetensors is not a complete safetensors file" in proc.stderr
    ok = client.completions.create(model=deployment.plan.model, prompt=PROMPTS[1], max_tokens=8, temperature=0)
    assert ok.choices[0].text == reference(PROMPTS[1], 8).text


def test_sigkill_of_a_worker_hangs_no_request_and_the_survivor_keeps_serving(client, deployment, reference):
    """In-flight requests of the killed worker: the frontend migrates them (--migration-limit 3) to the survivor
    with the tokens generated so far, so each still ends with the target's greedy output; none hangs."""
    n_tokens = 320  # ~1 s of generation per request: still in flight on the victim when every stream has begun
    prompts = [f"def f{i}(x):" for i in range(4)]
    started = threading.Barrier(len(prompts) + 1, timeout=CLIENT_TIMEOUT_S)
    results: dict[int, object] = {}

    def stream(i: int) -> None:
        text, first = "", True
        try:
            response = client.completions.create(model=deployment.plan.model, prompt=prompts[i], max_tokens=n_tokens,
                                                 temperature=0, stream=True)
            for c in response:
                if c.choices:
                    text += c.choices[0].text or ""
                    if first:
                        first = False
                        started.wait()
            results[i] = text
        except Exception as exc:  # an error is an answer too; a hang is not
            results[i] = exc
            if first:
                started.abort()

    threads = [threading.Thread(target=stream, args=(i,), daemon=True) for i in range(len(prompts))]
    for t in threads:
        t.start()
    started.wait()  # every request is generating
    victim = deployment.worker_pids()["worker-0"]
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "a request hung after its worker was killed"
    for i, prompt in enumerate(prompts):
        assert results[i] == reference(prompt, n_tokens).text, (i, results[i])
    frontend_log = re.sub(r"\x1b\[[0-9;]*m", "", (deployment.log_dir / "frontend.log").read_text(errors="replace"))
    assert "migration.is_retry=true" in frontend_log  # they finished on the survivor, not by luck before the kill
    before = worker_counts(deployment)
    for prompt in PROMPTS:
        r = client.completions.create(model=deployment.plan.model, prompt=prompt, max_tokens=8, temperature=0)
        assert r.choices[0].text == reference(prompt, 8).text
    after = worker_counts(deployment)
    assert "worker-0" not in after and after["worker-1"] - before["worker-1"] == len(PROMPTS)
    assert deployment.alive()["frontend"] and deployment.alive()["worker-1"]


def test_stop_leaves_no_process_and_no_files(deployment):
    from trtspec.ports import check_ports_free
    from trtspec.supervise import group_members

    groups = [p.pid for p in deployment.processes.values()]
    tmpdir = Path(deployment.tmpdir)
    codes = deployment.stop()
    assert codes["frontend"] == 0 and codes["worker-1"] == 0, codes
    assert all(group_members(pgid) == [] for pgid in groups)
    assert not tmpdir.exists()
    check_ports_free(deployment.plan.ports())  # nothing listens on them any more
