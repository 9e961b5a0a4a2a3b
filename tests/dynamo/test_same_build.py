"""`trtspec serve --dynamo N SOURCE` serves what Triton serves from the same build.

Each example of build_configs/ that the reference engine serves with a method of its own (EAGLE-3, suffix decoding,
lookahead) is built for the torch backend and served through NVIDIA Dynamo the way the CLI does it: the engine
configuration is read from the build output (`cli._dynamo.dynamo_engine`, checked before anything starts) and planned
into workers. The openai SDK's answers at temperature 0 are the target's own greedy output (exact verification), the
usage shows the method drafted, and the worker's series carry its name.
"""

from __future__ import annotations

import os
import threading
import urllib.request

import pytest

from tests.dynamo.conftest import MAX_TOKENS
from tests.triton.helpers import build_example
from trtspec.ports import free_ports

pytestmark = pytest.mark.dynamo
if not os.environ.get("CI"):  # CI installs Dynamo (make install): there a missing install fails instead of skipping
    pytest.importorskip("dynamo.frontend", reason="NVIDIA Dynamo is not installed (make install)")

PROMPTS = ["def fibonacci(n):", "import os\n\ndef main("]
# method -> (example, overrides of its sections): tiny-lookahead's example builds TensorRT-LLM engines; the same config
# with backend torch is the reference engine's build of it
BUILDS = {
    "eagle3": ("tiny-eagle", {}),
    "suffix": ("tiny-suffix", {}),
    "lookahead": ("tiny-lookahead", {"backend": "torch", "engine": {"dtype": "float32", "max_batch_size": 4,
                                                                    "max_input_len": 128, "max_seq_len": 256}}),
}


@pytest.fixture(scope="module")
def deployments(tmp_path_factory):
    """One single-worker deployment per build, started side by side (startup is the expensive part)."""
    from trtspec.cli._dynamo import dynamo_engine
    from trtspec.dynamo.launch import MAX_SYSTEM_PORT, DynamoDeployment, plan_deployment

    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setenv("DYN_GRACEFUL_SHUTDOWN_GRACE_PERIOD_SECS", "1")  # Dynamo's default grace before a drain: 5 s
    base = tmp_path_factory.mktemp("same-build")
    ports = iter(free_ports(2 * len(BUILDS), below=MAX_SYSTEM_PORT))
    running = {}
    for method, (example, overrides) in BUILDS.items():
        config = dynamo_engine(build_example(example, base / example, **overrides), {})
        assert config.method == method
        plan = plan_deployment(config, workers=1, http_port=next(ports), system_port=[next(ports)])
        running[method] = DynamoDeployment(plan, startup_timeout=240.0, stop_timeout=15.0)
    try:
        for deployment in running.values():  # spawned from this (the main) thread, then all load side by side
            deployment.spawn()
        for deployment in running.values():
            deployment.wait_ready()
        assert all(d.failed == {} for d in running.values()), {m: d.failed for m, d in running.items()}
        yield running
    finally:  # stopped side by side (each drains, then ends its processes)
        stops = [threading.Thread(target=d.stop) for d in running.values()]
        for thread in stops:
            thread.start()
        for thread in stops:
            thread.join()
        monkeypatch.undo()


@pytest.mark.parametrize("method", list(BUILDS))
def test_the_build_is_served_with_greedy_parity(deployments, reference, method):
    from openai import OpenAI

    deployment = deployments[method]
    client = OpenAI(base_url=deployment.plan.url, api_key="unused", timeout=120.0, max_retries=0)
    drafted = 0
    for prompt in PROMPTS:
        response = client.completions.create(model=deployment.plan.model, prompt=prompt, max_tokens=MAX_TOKENS,
                                             temperature=0)
        assert response.choices[0].text == reference(prompt).text, (method, prompt)
        details = response.usage.completion_tokens_details
        drafted += details.accepted_prediction_tokens + details.rejected_prediction_tokens
    assert drafted > 0, f"{method} drafted nothing"
    port = deployment.plan.system_ports[0]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as page:
        assert f'method="{method}"' in page.read().decode()  # the worker serves the build's method
