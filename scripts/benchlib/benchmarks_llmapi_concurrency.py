"""The `llmapi-concurrency` section of docs/benchmarks.md: concurrent requests through the torch-flavour llmapi model
(NVIDIA's llmapi tensors, trtspec's reference engine), unary vs decoupled, side by side in one run.

Two servers of the same engine configuration run together, one rendering the model unary (model_transaction_policy
decoupled false, NVIDIA's default `triton_config`) and one decoupled. Each round asks each server one request alone,
then N requests at once (`TritonClient.generate` from N threads: a unary gRPC infer on the unary model, a gRPC stream
per request on the decoupled one), and times from the first send to the last answer. Rounds alternate the servers, so
load on the machine hits both alike; the ratio unary / decoupled per round gives the median and the spread. Every
unary text is compared with the decoupled one.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from benchlib.benchmarks import MIXED, Section

FORMS = ("unary", "decoupled")


@dataclass
class ConcurrencySpec:
    model: str
    draft: str
    k: int
    new_tokens: int
    concurrency: int
    rounds: int
    threads: int


@dataclass
class ConcurrencyRun:
    """Per form and round: seconds for one request alone and for `concurrency` requests at once; the prompts whose
    unary text differed from the decoupled one."""

    one: dict[str, list[float]] = field(default_factory=lambda: {form: [] for form in FORMS})
    many: dict[str, list[float]] = field(default_factory=lambda: {form: [] for form in FORMS})
    mismatches: list[str] = field(default_factory=list)


def measure(spec: ConcurrencySpec) -> ConcurrencyRun:
    from trtspec.contracts.engine import EngineConfig
    from trtspec.models import resolve_model
    from trtspec.sweep.prompts import load_suite
    from trtspec.triton.render import write_repository
    from trtspec.triton.repo import RepoSpec, plan_repository
    from trtspec.triton.server import TritonServer

    config = EngineConfig(target=spec.model, draft=spec.draft, method="draft_target", max_k=spec.k, default_k=spec.k,
                          max_input_len=4096, max_output_len=spec.new_tokens)
    prompts = list(load_suite(MIXED, spec.concurrency).prompts)
    run = ConcurrencyRun()
    with tempfile.TemporaryDirectory() as tmp:
        servers: dict[str, TritonServer] = {}
        try:
            for form in FORMS:
                repo_spec = RepoSpec(backend="torch", engine=config, tokenizer_dir=Path(resolve_model(spec.model)),
                                     trtllm_version="1.2.1", form="llmapi", decoupled=form == "decoupled")
                repo = write_repository(plan_repository(repo_spec), Path(tmp) / form)
                servers[form] = TritonServer(repo, env={"OMP_NUM_THREADS": str(spec.threads)}).start()
            for server in servers.values():  # warm-up, untimed
                _ask(server.grpc_url, prompts, spec.new_tokens)
            for index in range(spec.rounds):
                texts = {}
                for form in FORMS if index % 2 == 0 else reversed(FORMS):
                    run.one[form].append(_ask(servers[form].grpc_url, prompts[:1], spec.new_tokens)[0])
                    seconds, texts[form] = _ask(servers[form].grpc_url, prompts, spec.new_tokens)
                    run.many[form].append(seconds)
                run.mismatches += [p for p, u, d in zip(prompts, texts["unary"], texts["decoupled"], strict=True)
                                   if u != d]
        finally:
            for server in servers.values():
                server.stop()
    return run


def _ask(url: str, prompts: list[str], max_tokens: int) -> tuple[float, list[str]]:
    """Seconds from sending `prompts` together (one thread each, `TritonClient.generate`) to the last answer; the
    texts."""
    from trtspec.triton.client import TritonClient

    def one(prompt: str) -> str:
        with TritonClient(url, model="tensorrt_llm") as client:
            return client.generate(prompt, max_tokens=max_tokens).text

    with ThreadPoolExecutor(len(prompts)) as pool:
        start = time.perf_counter()
        texts = list(pool.map(one, prompts))
        return time.perf_counter() - start, texts


def section(spec: ConcurrencySpec, run: ConcurrencyRun) -> Section:
    n = spec.concurrency
    ratios = [u / d for u, d in zip(run.many["unary"], run.many["decoupled"], strict=True)]
    rows = []
    for form in FORMS:
        per_one = [m / o for m, o in zip(run.many[form], run.one[form], strict=True)]
        rows.append([f"llmapi model, {form}", _median_spread(run.one[form]), _median_spread(run.many[form]),
                     _median_spread(per_one, 2),
                     _median_spread(ratios, 2) if form == "unary" else "1.00"])
    notes = [f"{spec.model} + {spec.draft}, draft_target k={spec.k}, greedy, {n} held-out prompts ({MIXED}), up to "
             f"{spec.new_tokens} new tokens each, torch threads {spec.threads}; {spec.rounds} rounds alternating the "
             "two servers (both running over the whole run), one untimed warm-up each; median (min-max).",
             "Each cell: seconds from sending to the last answer, with TritonClient.generate from one thread per "
             "request (unary: a gRPC infer; decoupled: a gRPC stream per request, no streaming).",
             f"Unary texts equal to the decoupled ones on {spec.rounds * n - len(run.mismatches)} of "
             f"{spec.rounds * n} requests."]
    return Section(title=f"Triton llmapi model, {n} concurrent requests: unary vs decoupled (tiny + tiny-draft)",
                   columns=["model", "1 request (s)", f"{n} at once (s)", f"{n} / 1", f"x decoupled ({n} at once)"],
                   rows=rows, notes=notes)


def _median_spread(values: list[float], digits: int = 2) -> str:
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"
