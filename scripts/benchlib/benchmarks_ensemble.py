"""The `ensemble` section of docs/benchmarks.md: streamed tokens/s through the torch-flavour inflight-batcher
repository's `ensemble` (decoupled: preprocessing -> tensorrt_llm -> postprocessing on a real tritonserver, asked over
a gRPC stream with the tensors of NVIDIA's end_to_end_grpc_client.py) vs the in-process engine streaming the same
prompts with the same method and k.

The two paths alternate prompt by prompt, round after round, so load on the machine hits both alike; each round's
tokens/s and their ratio give the medians and the spread (min-max). Every served text is compared with the engine's.
"""

from __future__ import annotations

import os
import queue
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchlib.benchmarks import MIXED, Section

LOCAL = "in-process engine (SpecEngine.stream)"
SERVED = "ensemble (tritonserver, gRPC stream)"


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
    """Per round: (tokens, seconds) of each path; the requests whose served text differed; the served responses;
    CPU seconds of each path (served: the server's processes, by name, and this process as the gRPC client)."""

    rounds: dict[str, list[tuple[int, float]]] = field(default_factory=lambda: {LOCAL: [], SERVED: []})
    cpu: dict[str, float] = field(default_factory=dict)
    requests: int = 0
    mismatches: list[str] = field(default_factory=list)
    responses: int = 0


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
    with tempfile.TemporaryDirectory() as tmp:
        repo = write_repository(plan_repository(repo_spec), Path(tmp) / "repo")
        with TritonServer(repo, env={"OMP_NUM_THREADS": str(spec.threads)}) as server, _Stream(server.grpc_url) as stream:
            list(engine.stream(engine.encode(prompts[0]), sampling, params))  # warm-up, both paths, untimed
            stream.generate(prompts[0], spec.new_tokens)
            for _ in range(spec.rounds):
                totals = {LOCAL: [0, 0.0], SERVED: [0, 0.0]}
                for prompt in prompts:
                    cpu, start = time.process_time(), time.perf_counter()
                    tokens = [t for d in engine.stream(engine.encode(prompt), sampling, params) for t in d.token_ids]
                    local_s = time.perf_counter() - start
                    _add(run.cpu, {LOCAL: time.process_time() - cpu})
                    tokens = tokens[:-1] if tokens and tokens[-1] == eos else tokens  # not in TensorRT-LLM's output
                    before, cpu, start = _tree_cpu(server.process.pid), time.process_time(), time.perf_counter()
                    deltas = stream.generate(prompt, spec.new_tokens)
                    served_s = time.perf_counter() - start
                    after = _tree_cpu(server.process.pid)
                    _add(run.cpu, {"gRPC client": time.process_time() - cpu}
                         | {name: after[name] - before.get(name, 0.0) for name in after})
                    run.requests += 1
                    run.responses += len(deltas)
                    if "".join(deltas) != engine.decode(tokens):
                        run.mismatches.append(prompt)
                    for name, seconds in ((LOCAL, local_s), (SERVED, served_s)):
                        totals[name][0] += len(tokens)
                        totals[name][1] += seconds
                for name, (count, seconds) in totals.items():
                    run.rounds[name].append((count, seconds))
    return run


def section(spec: EnsembleSpec, run: EnsembleRun) -> Section:
    rates = {name: [count / seconds for count, seconds in rounds] for name, rounds in run.rounds.items()}
    ratios = [s / local for s, local in zip(rates[SERVED], rates[LOCAL], strict=True)]
    rows = []
    for name, values in rates.items():
        tokens = sum(count for count, _ in run.rounds[name])
        seconds = sum(s for _, s in run.rounds[name])
        ratio = ratios if name == SERVED else [1.0]
        rows.append([name, str(tokens), f"{seconds:.2f}", f"{statistics.median(values):.1f}",
                     f"{min(values):.1f}-{max(values):.1f}", f"{statistics.median(ratio):.2f}",
                     f"{min(ratio):.2f}-{max(ratio):.2f}"])
    notes = [f"{spec.model} + {spec.draft}, draft_target k={spec.k}, greedy, {spec.num_prompts} held-out prompts "
             f"({MIXED}) x {spec.rounds} interleaved round(s) (each prompt through the engine, then through the "
             f"ensemble), up to {spec.new_tokens} new tokens each (the end token ends a request on both paths), batch "
             f"1, torch threads {spec.threads}, one untimed warm-up request each; tokens/s and the ratio per round, "
             "median and min-max.",
             "Served: NVIDIA's end_to_end_grpc_client.py tensors (text_input, max_tokens, stream=true, beam_width 1, "
             "temperature 1, exclude_input_in_output) to `ensemble` on one gRPC stream kept open over the run, timed "
             "from the send to the final response; in-process: SpecEngine.stream over the same token ids.",
             "CPU seconds over the run: " + ", ".join(f"{name} {seconds:.2f}" for name, seconds in run.cpu.items())
             + " (served: the server's processes, Linux /proc, and this process as the gRPC client).",
             f"Outputs equal on {run.requests - len(run.mismatches)} of {run.requests} requests (the streamed text "
             f"deltas joined vs the engine's decoded tokens); {run.responses / max(run.requests, 1):.1f} streamed "
             "responses per request."]
    return Section(title="Triton ensemble (inflight batcher, torch flavour) vs the in-process engine, streamed, batch 1 "
                         "(tiny + tiny-draft)",
                   columns=["path", "tokens", "seconds", "tokens/s", "spread", "x in-process", "ratio spread"],
                   rows=rows, notes=notes)


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


class _Stream:
    """One gRPC stream to `ensemble`, requests sent one at a time; `generate` returns a request's text deltas."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.results: queue.Queue = queue.Queue()
        self.client: Any = None

    def __enter__(self) -> _Stream:
        import tritonclient.grpc as grpcclient

        self.client = grpcclient.InferenceServerClient(self.url)
        self.client.start_stream(callback=lambda result, error: self.results.put((result, error)))
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.stop_stream()
        self.client.close()

    def generate(self, prompt: str, max_tokens: int) -> list[str]:
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
        self.client.async_stream_infer("ensemble", inputs, outputs=[grpcclient.InferRequestedOutput("text_output")],
                                       enable_empty_final_response=True)
        deltas = []
        while True:
            result, error = self.results.get(timeout=600)
            if error is not None:
                raise RuntimeError(f"ensemble stream failed: {error}")
            response = result.get_response()
            if response.outputs:
                deltas.append(result.as_numpy("text_output")[0].decode())
            final = response.parameters.get("triton_final_response")
            if final is not None and final.bool_param:
                return deltas
