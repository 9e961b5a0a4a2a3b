"""The speculation schedule served: `deploy` / `serve --dynamo` flags over the build's engine configuration reach the
torch flavour's config.pbtxt parameters and the Dynamo workers' arguments, bad values exit 2 naming the flag and the
rule, and the metrics code of both servers exports the acceptance gate as the `gate_closed` gauge: the Triton model's
SpecMetrics through a fake `pb_utils` (FakePb, no tritonserver) and a Dynamo worker's WorkerMetrics page (no Dynamo
runtime); no server runs here."""

from __future__ import annotations

import pytest

from tests.cli_checks import assert_clean_failure, run_cli
from tests.triton.helpers import torch_bundle
from tests.triton.test_engine_model import FakeFamily, FakePb
from trtspec.contracts.schedule import SpecSchedule
from trtspec.spec.schedule_policy import GateState
from trtspec.triton.control import config_params

FLAGS = ["--draft-len-schedule", "1:4,4:2,16:0", "--max-concurrency", "12", "--acceptance-window", "8",
         "--acceptance-length-threshold", "1.4", "--gate-probe-every", "0"]
SCHEDULE = SpecSchedule(draft_len=((1, 4), (4, 2), (16, 0)), max_concurrency=12, acceptance_window=8,
                        acceptance_length_threshold=1.4, probe_every=0)


@pytest.fixture(scope="module")
def bundle(tokenized_pair, tmp_path_factory):
    return torch_bundle(tmp_path_factory.mktemp("schedule") / "bundle", *tokenized_pair, k=4)


def test_deploy_flags_reach_the_served_model_and_the_dynamo_workers(bundle, tmp_path):
    from trtspec.cli._dynamo import dynamo_engine
    from trtspec.dynamo.launch import plan_deployment
    from trtspec.dynamo.worker import parse_args

    code, out, err = run_cli(["deploy", "--backend", "torch", "--build", str(bundle), "--out", str(tmp_path / "repo"),
                              *FLAGS])
    assert code == 0, err
    served = config_params(tmp_path / "repo" / "tensorrt_llm" / "config.pbtxt")
    assert served.schedule == SCHEDULE
    assert config_params(tmp_path / "repo" / "tensorrt_llm_draft" / "config.pbtxt").schedule is None  # plain
    # serve --dynamo SOURCE with the flags: the workers parse back the same configuration
    flags = {"engine_draft_len_schedule": "1:4,4:2,16:0", "engine_max_concurrency": 12, "engine_acceptance_window": 8,
             "engine_acceptance_length_threshold": "1.4", "engine_gate_probe_every": 0}
    params = dynamo_engine(bundle, flags)
    assert params.schedule == SCHEDULE and dynamo_engine(tmp_path / "repo", {}) == served
    plan = plan_deployment(params, workers=2, http_port=9000, system_port=9100)
    assert all(parse_args(worker.argv[3:])[0].schedule == SCHEDULE for worker in plan.processes[1:])


@pytest.mark.parametrize(("flags", "message"), [
    (["--draft-len-schedule", "2:4"], "--draft-len-schedule='2:4': must contain batch size 1"),
    (["--draft-len-schedule", "1:4,0:2"], "--draft-len-schedule[0]=0: a batch-size key must be an integer in [1, "),
    (["--draft-len-schedule", "1:5"], "--draft-len-schedule[1]=5: a draft length must be an integer >= 0, at most "
                                      "max_draft_len 4"),
    (["--draft-len-schedule", "1:4,2:-1"], "--draft-len-schedule[2]=-1: a draft length must be an integer >= 0"),
    (["--draft-len-schedule", "1:4,2:x"], "--draft-len-schedule='1:4,2:x': entry '2:x' is not BATCH:DRAFT_LEN"),
    (["--max-concurrency", "-1"], "--max-concurrency=-1: must be an integer in [0, "),
    (["--max-concurrency", "1.5"], "'--max-concurrency': '1.5' is not a valid integer"),
    (["--acceptance-window", "4", "--acceptance-length-threshold", "nan"],
     "--acceptance-length-threshold=nan: must be a finite number >= 0"),
    (["--acceptance-window", "4", "--acceptance-length-threshold", "fast"],
     "--acceptance-length-threshold='fast': is not a finite number"),
    (["--acceptance-window", "0", "--acceptance-length-threshold", "1.3"],
     "--acceptance-window=0: a gate with acceptance_length_threshold needs a window of at least 1"),
    (["--acceptance-window", "4"], "--acceptance-length-threshold=None: is required with acceptance_window 4"),
    (["--gate-probe-every", "-2"], "--gate-probe-every=-2: must be an integer in [0, "),
])  # fmt: skip
def test_bad_schedule_flags_exit_2_naming_the_flag_and_the_rule(bundle, tmp_path, flags, message):
    for command in (["deploy", "--backend", "torch", "--build", str(bundle), "--out", str(tmp_path / "repo"),
                     "--dry-run"], ["serve", str(bundle), "--dynamo", "1", "--max-k", "4", "--dry-run"]):
        code, out, err = run_cli([*command, *flags])
        assert_clean_failure(code, err)
        assert code == 2 and message in err, err
    assert not (tmp_path / "repo").exists()


def test_both_servers_metrics_export_whether_the_gate_is_closed():
    """The gauge each server's metrics code sets: Triton's SpecMetrics into a fake pb_utils metric family, the Dynamo
    worker's WorkerMetrics into its Prometheus page."""
    from prometheus_client.parser import text_string_to_metric_families

    from trtspec.contracts.prom_series import WorkerMetrics
    from trtspec.triton.spec_metrics import SpecMetrics

    state: list[GateState | None] = [GateState()]
    triton = SpecMetrics(FakePb, {"model": "m"}, gate=lambda: state[0])
    worker = WorkerMetrics({"method": "draft_target"}, gate=lambda: state[0])

    def gauges() -> tuple[float, float]:
        page = {s.name: s.value for f in text_string_to_metric_families(worker.exposition()) for s in f.samples}
        return FakeFamily.created["trtspec_spec_decode_gate_closed"].metrics[0].value, \
            page["trtspec_spec_decode_gate_closed"]

    assert gauges() == (0.0, 0.0)
    state[0] = GateState(open=False, closes=1)  # the gate changes when a request ends
    triton.finished("length")
    worker.finished("length")
    assert gauges() == (1.0, 1.0)
    ungated = WorkerMetrics({"method": "draft_target"}, gate=lambda: None)  # no gate: no sample
    ungated.finished("stop")
    assert "trtspec_spec_decode_gate_closed{" not in ungated.exposition()
