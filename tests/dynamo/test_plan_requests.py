"""The Dynamo pieces that need no running Dynamo: request mapping, usage, metrics, the deployment plan, the CLI."""

from __future__ import annotations

import re
import socket
import subprocess

import pytest

from tests.cli_checks import run_cli
from trtspec.contracts.engine import EngineConfig, Lookahead, PromptLog
from trtspec.contracts.metrics import AcceptanceStats
from trtspec.contracts.openai import annotations, served_name
from trtspec.contracts.prom_series import WorkerMetrics
from trtspec.contracts.prompt_log import WORKER_PREFIX
from trtspec.contracts.series import SERIES
from trtspec.dynamo.launch import MAX_SYSTEM_PORT, check_dynamo, plan_deployment
from trtspec.dynamo.requests import engine_request, usage
from trtspec.dynamo.worker import parse_args
from trtspec.errors import ConfigError, RequestError, ToolNotFoundError, UsageError

PARAMS = EngineConfig(target="tiny", draft="tiny-draft", method="draft_target", default_k=3)


def request(**parts):
    return {"token_ids": [5, 6, 7], **parts}


def test_openai_defaults_and_greedy():
    default = engine_request(request(), PARAMS, max_context=1024)
    assert default.sampling.temperature == 1.0 and default.sampling.top_k == 0 and default.sampling.top_p == 1.0
    assert default.sampling.max_new_tokens == 1024 - 3  # no max_tokens: up to the context
    assert (default.spec.method, default.spec.k) == ("draft_target", 3)  # the worker's speculation
    greedy = engine_request(request(sampling_options={"temperature": 0.0, "top_k": -1, "seed": 7},
                                    stop_conditions={"max_tokens": 9, "stop_token_ids_hidden": [0],
                                                     "stop_token_ids_visible": [3, 0], "min_tokens": 2,
                                                     "ignore_eos": None}), PARAMS)
    s = greedy.sampling
    assert (s.temperature, s.top_k, s.seed, s.max_new_tokens, s.min_tokens) == (0.0, 0, 7, 9, 2)
    assert s.stop_token_ids == (0, 3) and s.ignore_eos is False and not greedy.return_log_probs


@pytest.mark.parametrize(("parts", "field"), [
    ({"sampling_options": {"n": 2}}, "n=2"),
    ({"sampling_options": {"best_of": 3}}, "best_of=3"),
    ({"sampling_options": {"guided_decoding": {"regex": "a+"}}}, "guided_decoding="),
    ({"sampling_options": {"temperature": "hot"}}, "temperature='hot'"),
    ({"output_options": {"logprobs": 5}}, "top_logprobs=5"),
    ({"token_ids": []}, "token_ids"),
    ({"token_ids": ["a"]}, "token_ids"),
])
def test_refused_requests_name_the_field(parts, field):
    with pytest.raises(RequestError, match=field.replace("(", r"\(")):
        engine_request({**request(), **parts}, PARAMS)


def test_annotations_choose_the_speculation_of_one_request():
    notes = annotations(method="ngram", k=2, adaptive=True)
    assert notes == ["trtspec:method=ngram", "trtspec:k=2", "trtspec:adaptive=true"]
    spec = engine_request(request(annotations=["formatted_prompt", *notes]), PARAMS).spec  # Dynamo's own pass by
    assert (spec.method, spec.k, spec.adaptive) == ("ngram", 2, True)
    for bad in ("trtspec:k=two", "trtspec:depth=3", "trtspec:adaptive=maybe", "trtspec:method="):
        with pytest.raises(RequestError, match="annotation"):
            engine_request(request(annotations=[bad]), PARAMS)


@pytest.mark.parametrize(("notes", "message"), [
    (["trtspec:k=2", "trtspec:k=3"], "'trtspec:k=3' conflicts with 'trtspec:k=2'"),
    (["trtspec:method=ngram", "trtspec:method=none"], "'trtspec:method=none' conflicts with 'trtspec:method=ngram'"),
    (["trtspec:adaptive=true", "trtspec:adaptive=false"], "adaptive is given twice"),
    (["trtspec:k=\u00b2"], "ASCII digits"),  # superscript two: str.isdigit() says yes, int() says no
    (["trtspec:k=\u0663"], "ASCII digits"),  # Arabic-Indic three: int() would take it
    (["trtspec:k=" + "9" * 5000], "ASCII digits"),  # past int()'s digit limit
])
def test_conflicting_or_non_ascii_annotations_are_refused(notes, message):
    with pytest.raises(RequestError, match=re.escape(message)):
        engine_request(request(annotations=notes), PARAMS)
    same = engine_request(request(annotations=["trtspec:k=2", "trtspec:k=2"]), PARAMS).spec  # a repeat agrees
    assert same.k == 2


def test_echo_arrives_as_prompt_logprobs_and_is_refused():
    """Dynamo 1.6.1's frontend turns `echo: true` into output_options.prompt_logprobs (seen in a worker's request);
    the reference engine returns no prompt log-probs, so the request is refused instead of answered without echo."""
    with pytest.raises(RequestError, match=r"echo/prompt_logprobs=1"):
        engine_request(request(output_options={"prompt_logprobs": 1}), PARAMS)
    assert engine_request(request(output_options={"prompt_logprobs": None}), PARAMS).prompt_ids == [5, 6, 7]


def test_out_of_range_values_are_refused_by_the_engines_own_validation():
    with pytest.raises(ConfigError, match="top_p"):
        engine_request(request(sampling_options={"top_p": 0.0}), PARAMS)


def test_usage_carries_acceptance_in_openai_fields():
    stats = AcceptanceStats()
    stats.observe(4, 3)
    stats.observe(4, 1)
    u = usage(9, 7, stats)
    assert u["total_tokens"] == 16
    assert u["completion_tokens_details"] == {"accepted_prediction_tokens": 4, "rejected_prediction_tokens": 4}
    assert usage(1, 1, None)["completion_tokens_details"]["accepted_prediction_tokens"] == 0


def test_worker_metrics_export_the_shared_series():
    from prometheus_client.parser import text_string_to_metric_families

    metrics = WorkerMetrics()
    stats = AcceptanceStats()
    stats.observe(3, 2)
    metrics.finished("length", stats)
    metrics.finished("abort")
    families = {f.name: f for f in text_string_to_metric_families(metrics.exposition())}
    assert {series.name for series in SERIES.values()} <= set(families)  # (+ prometheus_client's *_created)
    values = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families.values() for s in f.samples}
    prefix = "trtspec_spec_decode_"
    assert values[f"{prefix}num_accepted_tokens_total", ()] == 2
    assert values[f"{prefix}num_accepted_tokens_per_pos_total", (("position", "1"),)] == 1
    assert values[f"{prefix}requests_total", (("finish_reason", "abort"),)] == 1
    assert values[f"{prefix}mean_acceptance_length", ()] == 3.0
    assert values[f"{prefix}num_rejections_per_pos_total", (("position", "2"),)] == 1


def test_plan_round_trips_the_engine_configuration_through_the_worker_command_line():
    params = EngineConfig(target="tiny", method="lookahead", lookahead=Lookahead(3, 3, 2), default_k=2, max_queue=9)
    plan = plan_deployment(params, workers=3, http_port=9000, system_port=9100, threads=2)
    frontend, *workers = plan.processes
    assert frontend.argv[1:3] == ["-m", "dynamo.frontend"] and "--http-port" in frontend.argv
    assert plan.system_ports == [9100, 9101, 9102] and plan.model == "tiny"
    for i, worker in enumerate(workers):
        parsed, options = parse_args(worker.argv[3:])
        assert parsed == params and options.threads == 2 and options.served_model_name == "tiny"
        assert worker.env["DYN_SYSTEM_PORT"] == str(9100 + i) and worker.env["DYN_TCP_RPC_HOST"] == "127.0.0.1"
    assert plan.ports() == {"--http-port": 9000, "--system-port (worker 0)": 9100,
                            "--system-port (worker 1)": 9101, "--system-port (worker 2)": 9102}


def test_each_worker_logs_prompts_to_its_own_directory_within_the_bound(tmp_path):
    """Several processes must not rotate one file: worker i logs to DIR/worker-i with its share of the size bound,
    and the log's reader (trtspec train draft) reads them all."""
    log = PromptLog(str(tmp_path / "logs"), sample_rate=1.0, max_mb=64.0)
    plan = plan_deployment(EngineConfig(target="tiny", method="none", prompt_log=log), workers=2, http_port=9000,
                           system_port=9100)
    parsed = [parse_args(worker.argv[3:])[0].prompt_log for worker in plan.processes[1:]]
    assert [p.directory for p in parsed] == [str(tmp_path / "logs" / f"{WORKER_PREFIX}{i}") for i in (0, 1)]
    assert sum(p.max_mb for p in parsed) == 64.0 and {p.sample_rate for p in parsed} == {1.0}


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"workers": 0}, "--dynamo=0"),
    ({"workers": 2, "router_mode": "fastest"}, "--router-mode='fastest'"),
    ({"workers": 2, "system_port": MAX_SYSTEM_PORT}, "16-bit signed"),
    ({"workers": 2, "system_port": [9100]}, "1 ports for 2 workers"),
])
def test_bad_plans_are_refused(kwargs, message):
    with pytest.raises(UsageError, match=message):
        plan_deployment(PARAMS, **kwargs)


def test_worker_arguments_are_checked_before_dynamo_starts():
    with pytest.raises(ConfigError, match="--max-k='many': is not an integer"):
        parse_args(["--target", "tiny", "--max-k", "many"])
    with pytest.raises(ConfigError, match=r"--default-k=50: must be in \[0, max_k=8\]"):
        parse_args(["--target", "tiny", "--default-k", "50", "--max-k", "8"])
    with pytest.raises(ConfigError, match="--threads"):
        parse_args(["--target", "tiny", "--threads", "0"])
    assert served_name("tiny") == "tiny"


def test_missing_dynamo_is_a_tool_error(monkeypatch):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ToolNotFoundError, match="NVIDIA Dynamo is not installed") as info:
        check_dynamo()
    assert info.value.exit_code == 3 and "make install" in (info.value.hint or "")


def serve(*args: str) -> subprocess.CompletedProcess:
    """`trtspec serve ARGS` in-process: every case here is a dry run or a refusal, so nothing starts."""
    code, out, err = run_cli(["serve", *args], limit=120)
    return subprocess.CompletedProcess(["trtspec", "serve", *args], code, out, err)


def test_cli_dry_run_prints_the_processes_and_refuses_a_busy_port():
    pytest.importorskip("dynamo.frontend")
    ok = serve("--dynamo", "2", "--http-port", "18555", "--system-port", "18560", "--dry-run")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.count("trtspec.dynamo.worker") == 2 and "DYN_SYSTEM_PORT=18561" in ok.stdout
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = serve("--dynamo", "1", "--http-port", str(port), "--dry-run")
    assert out.returncode == 2 and f"Error: --http-port={port}: the port is in use by pid" in out.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["--dynamo", "1", "--model", "/nonexistent/model", "--dry-run"], "Error: --model='/nonexistent/model': no "),
    (["--dynamo", "1", "--k", "50", "--max-k", "8", "--dry-run"], "Error: --k=50: must be in [0, max_k=8]"),
    (["--dynamo", "1", "--method", "eagle3", "--dry-run"], "Error: --eagle is required by --method eagle3"),
    (["--dynamo", "1", "--method", "eagle3", "--eagle", "/nonexistent", "--dry-run"], "Error: --eagle='/nonexistent'"),
    (["--dynamo", "1", "--method", "ngram", "--eagle-topk", "2", "--dry-run"],
     "Error: --eagle-topk=2: shapes method eagle / eagle3, but the method is ngram"),
    (["--k", "3"], "Error: --k applies to a Dynamo deployment (--dynamo N)"),
    (["--dynamo", "1", "--method", "medusa", "--dry-run"], "Error: --medusa is required by --method medusa"),
    (["--dynamo", "2", "--system-port", "32767", "--dry-run"], "16-bit signed"),
    (["/", "--dynamo", "1"], "Error: SOURCE / is neither a build output"),
    ([], "Error: REPO is missing"),
])
def test_cli_bad_input_exits_2_with_one_line(args, message):
    out = serve(*args)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_dynamo_workers_get_the_configuration_triton_serves(tmp_path):
    """From a build output, or from the repository `trtspec deploy` rendered from it (with engine flags), the
    workers' arguments parse to exactly what the Triton model reads from its config.pbtxt."""
    from tests.triton.helpers import build_example
    from trtspec.cli._dynamo import dynamo_engine
    from trtspec.cli.main import main
    from trtspec.triton.control import config_params

    bundle = build_example("tiny-eagle", tmp_path / "bundle", eagle={"model": "tiny-eagle", "eagle3": True, "topk": 2})
    main(["deploy", "--backend", "torch", "--build", str(bundle), "--out", str(tmp_path / "repo"), "--k", "5",
          "--eagle-depth", "3"])
    served = config_params(tmp_path / "repo" / "tensorrt_llm" / "config.pbtxt")
    assert (served.method, served.default_k, served.eagle_tree.topk, served.eagle_tree.depth) == ("eagle3", 5, 2, 3)
    from_repo = dynamo_engine(tmp_path / "repo", {})
    from_build = dynamo_engine(bundle, {"engine_k": 5, "engine_eagle_depth": 3})
    assert from_repo == served and from_build == served
    plan = plan_deployment(from_build, workers=2, http_port=9000, system_port=9100)
    assert all(parse_args(worker.argv[3:])[0] == served for worker in plan.processes[1:])
