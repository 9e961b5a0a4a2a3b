"""The `ensemble` section of docs/benchmarks.md: streamed tokens/s through the torch-flavour inflight-batcher
repository's `ensemble` (decoupled: preprocessing -> tensorrt_llm -> postprocessing on a real tritonserver, asked with
the tensors of NVIDIA's end_to_end_grpc_client.py) vs the in-process engine streaming the same prompts with the same
method and k.

Two served paths: one gRPC stream per request, as end_to_end_grpc_client.py and `trtspec generate --url --stream` do
(a client, start_stream, send, every response to the final one, stop_stream, close; timed from creating the client to
closing it), and one stream kept open over the run (timed from the send to the final response). The three paths
alternate prompt by prompt, round after round, so load on the machine hits them alike, in an order rotated prompt by
prompt so each path follows each as often; each round's tokens/s and their ratios give the medians and the spread
(min-max). Every served text is compared with the engine's.

Where a per-request stream's time goes: the client's timestamps (client and stream set-up, send -> first response,
first -> final response, final response -> stream closed) beside the in-process engine's first token, and Triton's
per-model statistics (/v2/models/stats: execute time of preprocessing, tensorrt_llm and postprocessing per request,
and the queue time of postprocessing, which runs once per streamed response).
"""

from __future__ import annotations

import json
import os
import queue
import statistics
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchlib.benchmarks import MIXED, Section

LOCAL = "in-process engine (SpecEngine.stream)"
PER_REQUEST = "ensemble, one gRPC stream per request"
KEPT = "ensemble, one gRPC stream kept open"
PATHS = (LOCAL, PER_REQUEST, KEPT)
PHASES = ("client + start_stream", "send -> first response", "first -> final response", "final -> stream closed")
STAT_MODELS = ("ensemble", "preprocessing", "tensorrt_llm", "postprocessing")


@dataclass
class EnsembleSpec:
    model: str
    draft: str
    k: int
    new_tokens: int
    num_prompts: int
    rounds: int
    threads: int


@dataclass
class EnsembleRun:
    """Per path and round: (tokens, seconds); per request: the in-process first token and the per-request stream's
    phases (ms); the requests whose served text differed; the served responses; CPU seconds of each path (served:
    the server's processes, by name, and this process as the gRPC client); Triton's per-model statistics over the
    timed requests (count and nanoseconds of success, queue and compute_infer)."""

    rounds: dict[str, list[tuple[int, float]]] = field(default_factory=lambda: {name: [] for name in PATHS})
    local_first_ms: list[float] = field(default_factory=list)
    kept_first_ms: list[float] = field(default_factory=list)
    kept_rest_ms: list[float] = field(default_factory=list)  # first -> final response on the kept stream
    phases_ms: dict[str, list[float]] = field(default_factory=lambda: {name: [] for name in PHASES})
    cpu: dict[str, float] = field(default_factory=dict)
    requests: int = 0
    mismatches: list[str] = field(default_factory=list)
    responses: int = 0
    stats: dict[str, dict[str, tuple[int, int]]] = field(default_factory=dict)


def measure(spec: EnsembleSpec) -> EnsembleRun:
    from trtspec.contracts.engine import EngineConfig
    from trtspec.models import resolve_model
    from trtspec.spec.engine import SpecEngine
    from trtspec.spec.params import SpecParams, trtllm_sampling_params
    from trtspec.sweep.prompts import load_suite
    from trtspec.triton.render import write_repository
    from trtspec.triton.repo import RepoSpec, plan_repository
    from trtspec.triton.server import TritonServer

    config = EngineConfig(target=spec.model, draft=spec.draft, method="draft_target", max_k=spec.k, default_k=spec.k,
                          max_input_len=4096, max_output_len=spec.new_tokens)
    engine = SpecEngine.from_config(config)
    eos = engine.tokenizer.eos_token_id
    prompts = list(load_suite(MIXED, spec.num_prompts).prompts)
    sampling = trtllm_sampling_params(max_new_tokens=spec.new_tokens, end_id=eos)  # greedy: no top_k / top_p
    params = SpecParams(method="draft_target", k=spec.k)
    repo_spec = RepoSpec(backend="torch", engine=config, tokenizer_dir=Path(resolve_model(spec.model)), decoupled=True)
    run = EnsembleRun()

    def local(prompt: str) -> tuple[list[int], float, float]:
        start, first, tokens = time.perf_counter(), 0.0, []
        for delta in engine.stream(engine.encode(prompt), sampling, params):
            tokens += delta.token_ids
            first = first or time.perf_counter() - start
        tokens = tokens[:-1] if tokens and tokens[-1] == eos else tokens  # not in TensorRT-LLM's output
        return tokens, first, time.perf_counter() - start

    with tempfile.TemporaryDirectory() as tmp:
        repo = write_repository(plan_repository(repo_spec), Path(tmp) / "repo")
        with TritonServer(repo, env={"OMP_NUM_THREADS": str(spec.threads)}) as server, \
                _Stream(server.grpc_url) as kept:
            local(prompts[0])  # warm-up, every path, untimed
            kept.generate(prompts[0], spec.new_tokens)
            _per_request(server.grpc_url, prompts[0], spec.new_tokens)
            before_stats = _model_stats(server.http_url)
            for round_index in range(spec.rounds):
                totals = {name: [0, 0.0] for name in PATHS}
                for index, prompt in enumerate(prompts):
                    # the paths in turn, rotated prompt by prompt: each follows each as often
                    shift = (round_index + index) % len(PATHS)
                    texts, seconds = {}, {}
                    for name in PATHS[shift:] + PATHS[:shift]:
                        cpu = time.process_time()
                        if name == LOCAL:
                            tokens, first_s, seconds[name] = local(prompt)
                            run.local_first_ms.append(first_s * 1e3)
                            texts[name] = engine.decode(tokens)
                            _add(run.cpu, {LOCAL: time.process_time() - cpu})
                            continue
                        before = _tree_cpu(server.process.pid)
                        if name == PER_REQUEST:
                            deltas, phases = _per_request(server.grpc_url, prompt, spec.new_tokens)
                            seconds[name] = sum(phases.values()) / 1e3
                            for phase, ms in phases.items():
                                run.phases_ms[phase].append(ms)
                        else:
                            deltas, first_s, seconds[name] = kept.generate(prompt, spec.new_tokens)
                            run.kept_first_ms.append(first_s * 1e3)
                            run.kept_rest_ms.append((seconds[name] - first_s) * 1e3)
                        after = _tree_cpu(server.process.pid)
                        _add(run.cpu, {"gRPC client": time.process_time() - cpu}
                             | {proc: after[proc] - before.get(proc, 0.0) for proc in after})
                        texts[name] = "".join(deltas)
                        run.requests += 1
                        run.responses += len(deltas)
                    run.mismatches += [prompt for name in (PER_REQUEST, KEPT) if texts[name] != texts[LOCAL]]
                    for name in PATHS:
                        totals[name][0] += len(tokens)
                        totals[name][1] += seconds[name]
                for name, (count, seconds_sum) in totals.items():
                    run.rounds[name].append((count, seconds_sum))
            after_stats = _model_stats(server.http_url)
    run.stats = {model: {key: (after_stats[model][key][0] - before_stats.get(model, {}).get(key, (0, 0))[0],
                               after_stats[model][key][1] - before_stats.get(model, {}).get(key, (0, 0))[1])
                         for key in after_stats[model]} for model in after_stats}
    return run


def section(spec: EnsembleSpec, run: EnsembleRun) -> Section:
    rates = {name: [count / seconds for count, seconds in rounds] for name, rounds in run.rounds.items()}
    rows = []
    for name, values in rates.items():
        tokens = sum(count for count, _ in run.rounds[name])
        seconds = sum(s for _, s in run.rounds[name])
        ratio = [s / local for s, local in zip(values, rates[LOCAL], strict=True)]
        rows.append([name, str(tokens), f"{seconds:.2f}", f"{statistics.median(values):.1f}",
                     f"{min(values):.1f}-{max(values):.1f}", f"{statistics.median(ratio):.2f}",
                     f"{min(ratio):.2f}-{max(ratio):.2f}"])
    timed = run.requests // 2  # requests per served path
    extra = statistics.median(1e3 * (served - local) / spec.num_prompts for (_, served), (_, local)
                              in zip(run.rounds[PER_REQUEST], run.rounds[LOCAL], strict=True))
    own = [1e3 * (served - kept) / spec.num_prompts for (_, served), (_, kept)
           in zip(run.rounds[PER_REQUEST], run.rounds[KEPT], strict=True)]
    phases = ", ".join(f"{name} {_median_spread(values)}" for name, values in run.phases_ms.items())
    notes = [f"{spec.model} + {spec.draft}, draft_target k={spec.k}, greedy, {spec.num_prompts} held-out prompts "
             f"({MIXED}) x {spec.rounds} interleaved round(s) (each prompt through the engine, through the ensemble "
             "on a stream of its own and on the stream kept open, in turn, the order rotated prompt by prompt so each "
             f"path follows each as often), up to {spec.new_tokens} new tokens "
             "each (the end token ends a request on every path), batch 1, torch threads "
             f"{spec.threads}, one untimed warm-up request each; tokens/s and the ratio to the in-process engine per "
             "round, median and min-max.",
             "Served: NVIDIA's end_to_end_grpc_client.py tensors (text_input, max_tokens, stream=true, beam_width 1, "
             "temperature 1, exclude_input_in_output) to `ensemble`. One stream per request: a new "
             "InferenceServerClient, start_stream, async_stream_infer, every response to the final one, stop_stream, "
             "close, timed from creating the client to closing it (as end_to_end_grpc_client.py runs a request); "
             "kept open: timed from the send to the final response; in-process: SpecEngine.stream over the same "
             "token ids.",
             f"Per request, one stream each (ms, median and min-max over {timed} requests): {phases}; send -> first "
             f"response on the kept stream {_median_spread(run.kept_first_ms)}, first -> final response on it "
             f"{_median_spread(run.kept_rest_ms)}, the in-process engine's first token "
             f"{_median_spread(run.local_first_ms)}; a request through its own stream takes {extra:+.0f} ms more "
             f"than in-process and {_median_spread(own)} ms more than on the kept stream (per round, the mean per "
             "request; median and min-max over rounds).",
             "Triton's per-model statistics over the timed requests of both served paths (/v2/models/stats, ms per "
             "request): " + _stats_note(run.stats, run.requests) + ".",
             "CPU seconds over the run: " + ", ".join(f"{name} {seconds:.2f}" for name, seconds in run.cpu.items())
             + " (served: the server's processes, Linux /proc, and this process as the gRPC client; both served "
             "paths together).",
             f"Outputs equal on {run.requests - len(run.mismatches)} of {run.requests} served requests (the streamed "
             f"text deltas joined vs the engine's decoded tokens); {run.responses / max(run.requests, 1):.1f} "
             "streamed responses per request."]
    return Section(title="Triton ensemble (inflight batcher, torch flavour) vs the in-process engine, streamed, batch 1 "
                         "(tiny + tiny-draft)",
                   columns=["path", "tokens", "seconds", "tokens/s", "spread", "x in-process", "ratio spread"],
                   rows=rows, notes=notes)


def _median_spread(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})" if values else "n/a"


def _stats_note(stats: dict[str, dict[str, tuple[int, int]]], requests: int) -> str:
    parts = []
    for model in STAT_MODELS:
        if model not in stats:
            continue
        calls, success_ns = stats[model]["success"]
        infer_ms = stats[model]["compute_infer"][1] / 1e6 / max(requests, 1)
        queue_ms = stats[model]["queue"][1] / 1e6 / max(requests, 1)
        parts.append(f"{model} {calls / max(requests, 1):.1f} execution(s), request to response "
                     f"{success_ns / 1e6 / max(requests, 1):.1f}, of which compute_infer {infer_ms:.1f} and queue "
                     f"{queue_ms:.1f}")
    return "; ".join(parts)


def _model_stats(http_url: str) -> dict[str, dict[str, tuple[int, int]]]:
    """Triton's cumulative per-model statistics: {model: {success|queue|compute_infer: (count, ns)}}."""
    with urllib.request.urlopen(f"{http_url}/v2/models/stats", timeout=10) as response:
        data = json.load(response)
    return {m["name"]: {key: (int(m["inference_stats"][key]["count"]), int(m["inference_stats"][key]["ns"]))
                        for key in ("success", "queue", "compute_infer")} for m in data.get("model_stats", [])}


def _add(totals: dict[str, float], more: dict[str, float]) -> None:
    for name, seconds in more.items():
        totals[name] = totals.get(name, 0.0) + seconds


def _tree_cpu(root: int) -> dict[str, float]:
    """CPU seconds (user + system) so far of `root` (the supervisor) and its descendants, summed by process name (Python stubs by model:
    tensorrt_llm_0_0 -> tensorrt_llm); empty where /proc cannot be read."""
    parents, cpu = {}, {}
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return {}
    hertz = os.sysconf("SC_CLK_TCK")
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        parents[pid] = int(stat[1])
        stub = [a.decode() for a in argv if a.endswith(b"_0_0")]
        name = stub[0].rsplit("_", 2)[0] + " (Python stub)" if stub else Path(argv[0].decode()).name
        name = "trtspec.supervise" if pid == root else name
        cpu[pid] = (name, (int(stat[11]) + int(stat[12])) / hertz)
    totals: dict[str, float] = {}
    for pid, (name, seconds) in cpu.items():
        ancestor = parents.get(pid)
        while ancestor and ancestor != root:
            ancestor = parents.get(ancestor)
        if ancestor == root or pid == root:
            totals[name] = totals.get(name, 0.0) + seconds
    return totals


def _inputs(prompt: str, max_tokens: int) -> list[Any]:
    """end_to_end_grpc_client.py's tensors for one streamed prompt."""
    import numpy as np
    import tritonclient.grpc as grpcclient

    tensors = {"text_input": (np.array([[prompt.encode()]], dtype=object), "BYTES"),
               "max_tokens": (np.array([[max_tokens]], dtype=np.int32), "INT32"),
               "stream": (np.array([[True]], dtype=bool), "BOOL"),
               "beam_width": (np.array([[1]], dtype=np.int32), "INT32"),
               "temperature": (np.array([[1.0]], dtype=np.float32), "FP32"),
               "exclude_input_in_output": (np.array([[True]], dtype=bool), "BOOL")}
    inputs = []
    for name, (array, dtype) in tensors.items():
        tensor = grpcclient.InferInput(name, list(array.shape), dtype)
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


def _send(client: Any, prompt: str, max_tokens: int) -> None:
    import tritonclient.grpc as grpcclient

    client.async_stream_infer("ensemble", _inputs(prompt, max_tokens),
                              outputs=[grpcclient.InferRequestedOutput("text_output")],
                              enable_empty_final_response=True)


def _collect(results: queue.Queue) -> tuple[list[str], float, float]:
    """A request's text deltas, when its first response with outputs came and when its final response came."""
    deltas, first = [], 0.0
    while True:
        result, error, at = results.get(timeout=600)
        if error is not None:
            raise RuntimeError(f"ensemble stream failed: {error}")
        response = result.get_response()
        if response.outputs:
            deltas.append(result.as_numpy("text_output")[0].decode())
            first = first or at
        final = response.parameters.get("triton_final_response")
        if final is not None and final.bool_param:
            return deltas, first, at


def _per_request(url: str, prompt: str, max_tokens: int) -> tuple[list[str], dict[str, float]]:
    """One request on a gRPC stream of its own, as end_to_end_grpc_client.py runs it; its text deltas and phases
    (ms)."""
    import tritonclient.grpc as grpcclient

    results: queue.Queue = queue.Queue()
    start = time.perf_counter()
    client = grpcclient.InferenceServerClient(url)
    client.start_stream(callback=lambda result, error: results.put((result, error, time.perf_counter())))
    sent = time.perf_counter()
    try:
        _send(client, prompt, max_tokens)
        deltas, first, final = _collect(results)
    finally:
        client.stop_stream()
        client.close()
    closed = time.perf_counter()
    return deltas, dict(zip(PHASES, (1e3 * (sent - start), 1e3 * (first - sent), 1e3 * (final - first),
                                     1e3 * (closed - final)), strict=True))


class _Stream:
    """One gRPC stream to `ensemble` kept open, requests sent one at a time; `generate` returns a request's text
    deltas, seconds to its first response and seconds to its final one."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.results: queue.Queue = queue.Queue()
        self.client: Any = None

    def __enter__(self) -> _Stream:
        import tritonclient.grpc as grpcclient

        self.client = grpcclient.InferenceServerClient(self.url)
        self.client.start_stream(callback=lambda result, error: self.results.put((result, error, time.perf_counter())))
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.stop_stream()
        self.client.close()

    def generate(self, prompt: str, max_tokens: int) -> tuple[list[str], float, float]:
        start = time.perf_counter()
        _send(self.client, prompt, max_tokens)
        deltas, first, final = _collect(self.results)
        return deltas, first - start, final - start
