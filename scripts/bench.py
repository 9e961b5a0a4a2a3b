"""`make bench`: side-by-side benchmarks on the embedded models, printed as rich tables and written to
docs/benchmarks.md (one `##` section per benchmark, replaced in place on re-runs).

Sections (run all, or pick with --section):
  engine   reference engine at batch 1: plain decoding, draft_target and ngram at k = 1..8, and transformers'
           greedy / assisted generation / prompt lookup on the same models (tokens/s, speedup, acceptance, overhead)
  sweep    `trtspec sweep` on the same pair (draft_target + ngram, k = 0..4, code + grounded, greedy, shuffled
           rounds) and how close the cost model's predicted speedup comes to the measured one (error distribution,
           and how well the measurement repeats: the medians of the even and the odd rounds)
  lookahead lookahead decoding on the embedded target alone: mean acceptance length per prompt suite, lossless check
  batching continuous batching at concurrency 1, 4, 16 (closed loop): no speculation vs fixed k = 1..8 vs
           adaptive k (output tokens/s median and spread over shuffled rounds, per-request latency p50/p99), and
           the verdict: adaptive k within 5% of the best of the others at every concurrency (paired by round)
  schedule the speculation schedule a sweep recommends (draft length per batch size, max_concurrency, the gate) vs
           no speculation, fixed k and adaptive k at concurrency 1, 4, 16 and on a ramp 1 -> 16 -> 1, with the verdict
           (schedule >= 0.97 x the best fixed k, paired per round), and its gate on traffic where acceptance collapses
  controls each TensorRT-LLM release's acceptance gate run exactly (speculation_controls trtllm-<release>) with the
           threshold and window derived for that release from a greedy code sweep: open on that traffic, closed
           within its window on collapsed traffic
  dynamo   `trtspec serve --dynamo N` with 1 and 2 workers under the same openai sweep (and aiperf when
           `make aiperf` installed it): throughput and latency side by side
  suffix   suffix decoding with a cold and a warm cache on code, prose, grounded and repetitive prompts at batch 1,
           beside ngram, draft_target (fixed and adaptive k), transformers' prompt lookup and assisted generation
  eagle    EAGLE-3 (chain and dynamic trees) vs the draft model vs Medusa at equal target compute (node budget k),
           batch 1: mean acceptance length, draft cost per drafted token, speedup, and issue 17's goal verdict
  eagle-cost  the draft cost alone: EAGLE-3 (chain, dynamic tree) vs the draft model per drafted token in CPU time,
           the proposers called directly and interleaved (steadier than the eagle section's wall-clock draft time)
  llmapi   streamed tokens/s through the torch-flavour llmapi repository (tritonserver on CPU, HTTP generate_stream)
           vs the in-process engine streaming the same prompts with the same method and k, and their ratio
  ensemble streamed tokens/s through the torch-flavour inflight-batcher repository's `ensemble` (tritonserver on CPU,
           decoupled; one gRPC stream per request as NVIDIA's end_to_end_grpc_client.py, and one kept open) vs the
           in-process engine on the same prompts, method and k: interleaved rounds, medians, spread, the ratio and
           where a per-request stream's time goes (client timestamps, Triton's per-model statistics)
  llmapi-concurrency
           N concurrent requests (--llmapi-concurrency) through the torch-flavour llmapi model, unary vs decoupled,
           both servers running, rounds alternating: seconds, N / 1 and the ratio unary / decoupled
  onnx     the drafters (draft model, EAGLE-3, Medusa heads) exported to ONNX and run in ONNX Runtime vs trtspec's
           torch runner: parity (logits, argmax per position) and one decode step at batch 1, 4, 16 (--concurrency)
           after 128 cached tokens, one thread each side, KV cache in and out timed, interleaved, medians and ratios
  verify   the host cost of an engine step's logits processing + verification: the batched verifier over the
           step's ragged batch vs the same verifier once per request, on captured draft_target (chains) and
           Medusa (trees) steps at batch 1, 4, 16 (--concurrency), greedy and temperature 1, CPU time,
           interleaved, paired ratios

  headline issue 42's acceptance line in one command: the engine's plain decoding vs draft_target, EAGLE-3 (chain,
           dynamic tree), n-gram, suffix (cold cache), any registered hybrid, transformers' greedy / assisted / prompt
           lookup, and (--headline-baseline REV) the plain decoding of an earlier revision, interleaved per prompt

Every section is a sweep (scripts/benchlib/benchmarks.py: its SweepSpec, run by the sweep runner, and its table); this
script adds only what a sweep cannot measure (the transformers rows; eagle-cost times the proposers directly) and
writes the Markdown.
A new section is a function `(args) -> Section` registered in SECTIONS. EOS is ignored everywhere, so all rows of a
section produce the same number of tokens; --repeats / --batching-repeats run the grid in rounds (medians).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path

from benchlib import (
    benchmarks,
    benchmarks_controls,
    benchmarks_eagle,
    benchmarks_ensemble,
    benchmarks_llmapi_concurrency,
    benchmarks_onnx,
    benchmarks_schedule,
)
from benchlib.benchmarks import Comparison, Section
from trtspec.atomic import write_text
from trtspec.sweep.grid import SweepSpec
from trtspec.sweep.report import markdown_table

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "benchmarks.md"


def bench_engine(args: argparse.Namespace) -> Section:
    spec = benchmarks.engine_spec(model=args.model, draft=args.draft, ks=args.ks, num_prompts=args.prompts,
                                  prompt_tokens=args.prompt_tokens, max_new_tokens=args.max_new_tokens,
                                  max_ngram=args.max_ngram, repeats=args.repeats, threads=args.threads)
    measured = benchmarks.measure(spec)
    notes = [f"transformers rows: `generate()` on the same prompts and models, each prompt through every "
             f"configuration in turn, {args.repeats} round(s); tokens/s = total tokens / total seconds, median over "
             "the rounds.",
             f"n-gram lookup on both sides: max n-gram size {args.max_ngram}, min 1. transformers' assisted generation "
             "with defaults drafts up to 20 tokens and stops early when the draft's confidence drops below 0.4."]
    return benchmarks.engine_section(spec, measured, transformers_rows(args, spec), notes)


def transformers_rows(args: argparse.Namespace, spec: SweepSpec) -> list[Comparison]:
    """transformers' greedy, assisted and prompt-lookup generation on the engine section's prompts (batch 1)."""
    configs: dict[str, dict[str, object]] = {
        "transformers: greedy": {},
        "transformers: assisted (defaults: 20, confidence 0.4)": {"assistant_model": "draft"},
        "transformers: assisted k=4 (constant)": {"assistant_model": "draft", "num_assistant_tokens": 4,
                                                  "num_assistant_tokens_schedule": "constant",
                                                  "assistant_confidence_threshold": 0.0},
        **{f"transformers: prompt lookup k={k}": {"prompt_lookup_num_tokens": k,
                                                  "max_matching_ngram_size": args.max_ngram} for k in (4, 8)},
    }
    return run_transformers(args, spec.suites[0], spec.num_prompts, spec.prompt_tokens, args.max_new_tokens,
                            args.repeats, configs)


def run_transformers(args: argparse.Namespace, suite: str, num_prompts: int, prompt_tokens: int | None,
                     max_new_tokens: int, repeats: int, configs: dict[str, dict[str, object]]) -> list[Comparison]:
    """transformers' `generate` (greedy, EOS ignored) per configuration on a suite's first prompts, batch 1, every
    configuration in turn per prompt; wall and process-CPU tokens/s per round. `assistant_model: "draft"` = args.draft.
    """
    import torch
    from rich.progress import track
    from transformers import AutoTokenizer, LlamaForCausalLM

    from trtspec.models import resolve_model
    from trtspec.sweep.prompts import last_tokens, load_suite
    from trtspec.sweep.records import output_digest

    target_path = resolve_model(args.model)
    target = LlamaForCausalLM.from_pretrained(target_path, dtype=torch.float32).eval()
    draft = LlamaForCausalLM.from_pretrained(resolve_model(args.draft), dtype=torch.float32).eval()
    for model in (target, draft):
        model.generation_config.eos_token_id = None  # ignore EOS, as the engine rows do
        model.generation_config.pad_token_id = 0
    tokenizer = AutoTokenizer.from_pretrained(target_path)
    prompts = [last_tokens(tokenizer.encode(text), prompt_tokens) for text in load_suite(suite, num_prompts).prompts]
    configs = {name: {k: draft if v == "draft" else v for k, v in kwargs.items()} for name, kwargs in configs.items()}

    def generate(prompt: list[int], max_new_tokens: int = max_new_tokens, **kwargs: object) -> list[int]:
        ids = torch.tensor([prompt])
        with torch.inference_mode():
            out = target.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                  max_new_tokens=max_new_tokens, **kwargs)
        return out[0, len(prompt):].tolist()

    generate(prompts[0], max_new_tokens=4)  # warm-up
    rows = []
    seconds = {name: [0.0] * repeats for name in configs}
    cpu_seconds = {name: [0.0] * repeats for name in configs}
    outputs: dict[str, list[list[list[int]]]] = {name: [[] for _ in range(repeats)] for name in configs}
    steps = [(r, p) for r in range(repeats) for p in prompts]
    for repeat, prompt in track(steps, description=f"transformers rows ({suite})"):
        for name, kwargs in configs.items():  # every configuration in turn: load drift hits all alike
            start, cpu = time.perf_counter(), time.process_time()
            outputs[name][repeat].append(generate(prompt, **kwargs))
            seconds[name][repeat] += time.perf_counter() - start
            cpu_seconds[name][repeat] += time.process_time() - cpu
    for name in configs:
        tokens = [sum(map(len, outputs[name][r])) for r in range(repeats)]
        rows.append(Comparison(name, [t / s for t, s in zip(tokens, seconds[name], strict=True)],
                               [output_digest(o) for o in outputs[name]],
                               [t / s for t, s in zip(tokens, cpu_seconds[name], strict=True) if s > 0]))
    return rows


def bench_sweep(args: argparse.Namespace) -> Section:
    import os

    spec = benchmarks.sweep_spec(model=args.model, draft=args.draft, ks=args.sweep_ks, num_prompts=args.sweep_prompts,
                                 max_new_tokens=args.sweep_new_tokens, repeats=args.sweep_repeats, threads=args.threads,
                                 calibration_slices=args.sweep_calibration_slices)
    before = os.getloadavg()[0]
    measured = benchmarks.measure(spec)
    return benchmarks.sweep_section(spec, measured, (before, os.getloadavg()[0]))


def bench_batching(args: argparse.Namespace) -> Section:
    spec = benchmarks.batching_spec(model=args.model, draft=args.draft, concurrency=args.concurrency,
                                    fixed_ks=args.fixed_ks, adaptive_max_k=args.adaptive_max_k,
                                    max_new_tokens=args.batching_new_tokens, prompt_tokens=args.batching_prompt_tokens,
                                    min_requests=args.batching_min_requests, repeats=args.batching_repeats,
                                    threads=args.threads)
    return benchmarks.batching_section(spec, benchmarks.measure(spec), min_requests=args.batching_min_requests)


def bench_controls(args: argparse.Namespace) -> Section:
    bench = benchmarks_controls.ControlsBench(model=args.model, max_new_tokens=args.schedule_new_tokens,
                                              prompt_tokens=args.batching_prompt_tokens, threads=args.threads)
    return benchmarks_controls.run(bench)


def bench_schedule(args: argparse.Namespace) -> Section:
    bench = benchmarks_schedule.ScheduleBench(
        model=args.model, draft=args.draft, concurrency=tuple(args.concurrency), ramp=tuple(args.schedule_ramp),
        sweep_ks=tuple(args.schedule_sweep_ks), fixed_ks=tuple(args.schedule_fixed_ks),
        adaptive_max_k=args.adaptive_max_k, max_new_tokens=args.schedule_new_tokens,
        prompt_tokens=args.batching_prompt_tokens, waves=args.schedule_waves, ramp_waves=args.schedule_ramp_waves,
        min_requests=args.schedule_min_requests,
        sweep_repeats=args.schedule_sweep_repeats, repeats=args.schedule_repeats,
        gate_concurrency=args.schedule_gate_concurrency, gate_requests=args.schedule_gate_requests,
        gate_repeats=args.schedule_gate_repeats, threads=args.threads)
    return benchmarks_schedule.run(bench)


def bench_lookahead(args: argparse.Namespace) -> Section:
    spec = benchmarks.lookahead_spec(model=args.model, configs=args.lookahead_configs,
                                     num_prompts=args.lookahead_prompts, prompt_tokens=args.batching_prompt_tokens,
                                     max_new_tokens=args.lookahead_new_tokens, threads=args.threads)
    return benchmarks.lookahead_section(spec, benchmarks.measure(spec))


def bench_dynamo(args: argparse.Namespace) -> Section:
    """A Dynamo deployment of 1, then 2 workers; the same openai sweep against each (and aiperf when installed)."""
    from trtspec.contracts.engine import EngineConfig
    from trtspec.dynamo.launch import MAX_SYSTEM_PORT, DynamoDeployment, plan_deployment
    from trtspec.ports import free_ports

    by_workers, aiperf_rows, spec = {}, [], None
    for workers in (1, 2):
        http, *system = free_ports(1 + workers, below=MAX_SYSTEM_PORT)
        params = EngineConfig(target=args.model, draft=args.draft, method="draft_target", default_k=args.dynamo_k)
        plan = plan_deployment(params, workers=workers, http_port=http, system_port=system, threads=args.threads)
        with DynamoDeployment(plan) as deployment:
            spec = benchmarks.dynamo_spec(url=f"127.0.0.1:{http}", model=args.model, k=args.dynamo_k,
                                          concurrency=args.concurrency, max_new_tokens=args.batching_new_tokens,
                                          min_requests=args.dynamo_min_requests)
            by_workers[workers] = benchmarks.measure(spec)
            if AIPERF.is_file():
                aiperf_rows.append([f"{workers} worker(s):", aiperf_profile(plan, deployment, args)])
    assert spec is not None
    return benchmarks.dynamo_section(spec, by_workers, aiperf_rows)


AIPERF = ROOT / ".venv-aiperf" / "bin" / "aiperf"  # `make aiperf` installs it apart (its pins clash with trtspec's)


def aiperf_profile(plan, deployment, args: argparse.Namespace) -> str:
    """A short `aiperf profile` against the frontend; its output token throughput and request latency p50."""
    import json
    import subprocess
    import tempfile

    from trtspec.models import resolve_model

    concurrency = max(args.concurrency)
    with tempfile.TemporaryDirectory() as tmp:
        argv = [str(AIPERF), "profile", "--model", plan.model, "--url", f"http://127.0.0.1:{plan.http_port}",
                "--endpoint-type", "completions", "--streaming", "--concurrency", str(concurrency),
                "--request-count", str(2 * concurrency), "--isl", "64",
                "--osl", str(args.batching_new_tokens), "--extra-inputs", "ignore_eos:true",
                "--tokenizer", str(resolve_model(args.model)), "--artifact-dir", tmp, "--ui-type", "none"]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        found = sorted(Path(tmp).rglob("profile_export_aiperf.json"))
        if proc.returncode != 0 or not found:
            return f"aiperf failed ({proc.returncode}): {(proc.stderr or proc.stdout).strip().splitlines()[-1:]}"
        data = json.loads(found[0].read_text())
        tput = data.get("output_token_throughput", {}).get("avg")
        latency = data.get("request_latency", {}).get("p50")
        accepted = data.get("usage_accepted_prediction_tokens", {}).get("avg")  # aiperf reads trtspec's usage too
        return (f"c={concurrency}, {tput:.1f} output tokens/s, request latency p50 {latency:.0f} ms"
                + (f", {accepted:.1f} accepted draft tokens per request" if accepted is not None else ""))
def bench_suffix(args: argparse.Namespace) -> Section:
    """Per suite: the three sweeps (draft_target, ngram, suffix), then transformers' prompt lookup and assisted
    generation on the same prompts, so that load drift hits one suite's rows alike."""
    configs: dict[str, dict[str, object]] = {
        f"transformers: prompt lookup k={args.suffix_lookup_k}": {"prompt_lookup_num_tokens": args.suffix_lookup_k,
                                                                  "max_matching_ngram_size": args.max_ngram},
        "transformers: assisted (defaults: 20, confidence 0.4)": {"assistant_model": "draft"},
    }
    all_specs, measured, comparisons = [], {}, {}
    for suite in args.suffix_suites:
        specs = benchmarks.suffix_specs(model=args.model, draft=args.draft, suite=suite,
                                        num_prompts=args.suffix_prompts, prompt_tokens=args.suffix_prompt_tokens,
                                        max_new_tokens=args.suffix_new_tokens, suffix_k=args.suffix_k,
                                        fixed_k=args.suffix_draft_k, ngram_k=args.suffix_ngram_k,
                                        adaptive_max_k=args.adaptive_max_k, repeats=args.suffix_repeats,
                                        threads=args.threads)
        all_specs += specs
        measured[suite] = [benchmarks.measure(spec) for spec in specs]
        comparisons[suite] = run_transformers(args, suite, args.suffix_prompts, args.suffix_prompt_tokens,
                                              args.suffix_new_tokens, args.suffix_repeats, configs)
    notes = [f"transformers rows: `generate()` on the same prompts, every configuration in turn per prompt; prompt "
             f"lookup with max n-gram size {args.max_ngram}; assisted generation with tiny-draft and transformers' "
             "defaults (up to 20 draft tokens, stop below confidence 0.4). Their speedups divide by the suite's "
             "engine plain row (engine plain / transformers greedy is in the engine section)."]
    return benchmarks.suffix_section(all_specs, measured, comparisons, notes)


def bench_eagle(args: argparse.Namespace) -> Section:
    spec = benchmarks_eagle.eagle_spec(model=args.model, draft=args.draft, medusa=args.medusa, eagle=args.eagle,
                                       trees=args.eagle_trees, ks=args.eagle_ks, num_prompts=args.prompts,
                                       prompt_tokens=args.prompt_tokens, max_new_tokens=args.max_new_tokens,
                                       repeats=args.repeats, threads=args.threads)
    return benchmarks_eagle.eagle_section(spec, benchmarks.measure(spec))


def bench_eagle_cost(args: argparse.Namespace) -> Section:
    spec = benchmarks_eagle.DraftCostSpec(model=args.model, draft=args.draft, eagle=args.eagle, ks=tuple(args.eagle_ks),
                                          num_prompts=args.prompts, new_tokens=args.max_new_tokens,
                                          rounds=args.eagle_cost_rounds)
    return benchmarks_eagle.draft_cost_section(spec, benchmarks_eagle.measure_draft_costs(spec))


def bench_llmapi(args: argparse.Namespace) -> Section:
    """The torch-flavour llmapi repository (decoupled) on a real tritonserver vs the in-process engine: the same
    prompts, one at a time, interleaved per prompt (so load drift hits both alike), greedy, draft_target at k."""
    import tempfile

    from trtspec.contracts.engine import EngineConfig
    from trtspec.models import resolve_model
    from trtspec.spec.engine import SpecEngine
    from trtspec.spec.params import SpecParams, trtllm_sampling_params
    from trtspec.sweep.prompts import load_suite
    from trtspec.triton.render import write_repository
    from trtspec.triton.repo import RepoSpec, plan_repository
    from trtspec.triton.server import TritonServer

    k, n = args.llmapi_k, args.llmapi_new_tokens
    config = EngineConfig(target=args.model, draft=args.draft, method="draft_target", max_k=k, default_k=k,
                          max_input_len=4096, max_output_len=n)
    engine = SpecEngine.from_config(config)
    prompts = list(load_suite(benchmarks.MIXED, args.prompts).prompts)
    sampling = trtllm_sampling_params(max_new_tokens=n, temperature=0.0, end_id=engine.tokenizer.eos_token_id)
    spec = SpecParams(method="draft_target", k=k)
    totals = {"in-process engine (SpecEngine.stream)": [0, 0.0], "llmapi model (tritonserver, generate_stream)": [0, 0.0]}
    accepted = drafted = 0
    mismatches = 0
    repo_spec = RepoSpec(backend="torch", engine=config, tokenizer_dir=Path(resolve_model(args.model)),
                         trtllm_version="1.2.1", form="llmapi", decoupled=True)
    with tempfile.TemporaryDirectory() as tmp:
        repo = write_repository(plan_repository(repo_spec), Path(tmp) / "repo")
        with TritonServer(repo, env={"OMP_NUM_THREADS": str(args.threads)}) as server:
            list(engine.stream(engine.encode(prompts[0]), sampling, spec))  # warm-up, both paths, untimed
            _generate_stream(server.http_url, prompts[0], n)
            for _ in range(args.repeats):
                for prompt in prompts:
                    ids = engine.encode(prompt)
                    start = time.perf_counter()
                    tokens = [t for delta in engine.stream(ids, sampling, spec) for t in delta.token_ids]
                    local_s = time.perf_counter() - start
                    if tokens and tokens[-1] == engine.tokenizer.eos_token_id:
                        tokens = tokens[:-1]
                    start = time.perf_counter()
                    events = _generate_stream(server.http_url, prompt, n)
                    served_s = time.perf_counter() - start
                    mismatches += events[-1].get("text_output") != engine.decode(tokens)
                    accepted += int(events[-1]["total_accepted_draft_tokens"])
                    drafted += int(events[-1]["total_draft_tokens"])
                    for name, seconds in zip(totals, (local_s, served_s), strict=True):
                        totals[name][0] += len(tokens)
                        totals[name][1] += seconds
    base = totals["in-process engine (SpecEngine.stream)"]
    rows = [[name, str(count), f"{seconds:.2f}", f"{count / seconds:.1f}", f"{(count / seconds) / (base[0] / base[1]):.2f}"]
            for name, (count, seconds) in totals.items()]
    notes = [f"{args.model} + {args.draft}, draft_target k={k}, greedy, {len(prompts)} held-out prompts ({benchmarks.MIXED}) "
             f"x {args.repeats} round(s), up to {n} new tokens each (the end token ends a request on both paths, so both "
             "produce the same tokens), batch 1, torch threads " + str(args.threads) + ", one untimed warm-up request each.",
             "Served: HTTP POST /v2/models/tensorrt_llm/generate_stream with streaming true, timed from the request to "
             "the last event (NVIDIA's llmapi model streams the text so far in every event); in-process: "
             "SpecEngine.stream over the same token ids.",
             f"Outputs equal on {len(prompts) * args.repeats - mismatches} of {len(prompts) * args.repeats} requests; "
             f"served acceptance rate {accepted / max(drafted, 1):.3f} ({accepted}/{drafted} draft tokens)."]
    return Section(title="Triton llmapi model vs the in-process engine, streamed, batch 1 (tiny + tiny-draft)",
                   columns=["path", "tokens", "seconds", "tokens/s", "x in-process"], rows=rows, notes=notes)


def bench_ensemble(args: argparse.Namespace) -> Section:
    spec = benchmarks_ensemble.EnsembleSpec(model=args.model, draft=args.draft, k=args.llmapi_k,
                                            new_tokens=args.llmapi_new_tokens, num_prompts=args.prompts,
                                            rounds=args.ensemble_rounds, threads=args.threads)
    return benchmarks_ensemble.section(spec, benchmarks_ensemble.measure(spec))


def bench_headline(args: argparse.Namespace) -> Section:
    from benchlib import benchmarks_headline

    spec = benchmarks_headline.HeadlineSpec(
        model=args.model, draft=args.draft, eagle=args.eagle, num_prompts=args.prompts,
        prompt_tokens=args.prompt_tokens, new_tokens=args.headline_new_tokens, rounds=args.headline_rounds,
        draft_k=args.headline_draft_k, eagle_ks=tuple(args.eagle_ks), ngram_k=args.suffix_ngram_k,
        suffix_k=args.suffix_k, lookup_k=args.suffix_lookup_k, max_ngram=args.max_ngram,
        baseline_rev=args.headline_baseline, threads=args.threads)
    return benchmarks_headline.section(spec, *benchmarks_headline.measure(spec))


def bench_llmapi_concurrency(args: argparse.Namespace) -> Section:
    spec = benchmarks_llmapi_concurrency.ConcurrencySpec(
        model=args.model, draft=args.draft, k=args.llmapi_k, new_tokens=args.llmapi_new_tokens,
        concurrency=args.llmapi_concurrency, rounds=args.llmapi_concurrency_rounds, threads=args.threads)
    return benchmarks_llmapi_concurrency.section(spec, benchmarks_llmapi_concurrency.measure(spec))


def bench_onnx(args: argparse.Namespace) -> Section:
    spec = benchmarks_onnx.OnnxSpec(model=args.model, draft=args.draft, eagle=args.eagle, medusa=args.medusa,
                                    batches=tuple(args.concurrency), past=args.onnx_past, calls=args.onnx_calls,
                                    rounds=args.onnx_rounds)
    return benchmarks_onnx.section(spec, benchmarks_onnx.measure(spec))


def bench_verify(args: argparse.Namespace) -> Section:
    from benchlib import benchmarks_verify

    bench = benchmarks_verify.VerifyBench(model=args.model, draft=args.draft, medusa=args.medusa,
                                          batches=tuple(args.concurrency), rounds=args.verify_rounds,
                                          threads=args.threads)
    return benchmarks_verify.section(bench, benchmarks_verify.measure(bench))


def bench_hybrid(args: argparse.Namespace) -> Section:
    from benchlib import benchmarks_hybrid

    spec = benchmarks_hybrid.HybridSpec(
        model=args.model, draft=args.draft, eagle=args.eagle, num_prompts=args.prompts,
        prompt_tokens=args.prompt_tokens, new_tokens=args.headline_new_tokens, rounds=args.headline_rounds,
        suffix_k=args.suffix_k, drafter_k=args.headline_draft_k, threads=args.threads)
    return benchmarks_hybrid.section(spec, benchmarks_hybrid.measure(spec))


def _generate_stream(http_url: str, prompt: str, max_tokens: int) -> list[dict]:
    """The events of one streamed llmapi request (temperature 0, perf outputs on, the prompt left out)."""
    import json
    import urllib.request

    body = {"text_input": prompt, "streaming": True, "sampling_param_max_tokens": max_tokens,
            "sampling_param_temperature": 0.0, "sampling_param_exclude_input_from_output": True,
            "sampling_param_return_perf_metrics": True}
    request = urllib.request.Request(f"{http_url}/v2/models/tensorrt_llm/generate_stream",
                                     data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=600) as response:
        text = response.read().decode()
    events = [json.loads(line[len("data: "):]) for line in text.splitlines() if line.startswith("data: ")]
    if not events or "error" in events[-1]:
        raise RuntimeError(f"generate_stream failed: {events[-1:] or text[:200]}")
    return events


SECTIONS: dict[str, Callable[[argparse.Namespace], Section]] = {
    "headline": bench_headline, "hybrid": bench_hybrid,
    "engine": bench_engine, "sweep": bench_sweep, "batching": bench_batching, "lookahead": bench_lookahead,
    "dynamo": bench_dynamo, "schedule": bench_schedule, "controls": bench_controls, "verify": bench_verify,
    "suffix": bench_suffix, "eagle": bench_eagle, "eagle-cost": bench_eagle_cost, "llmapi": bench_llmapi,
    "ensemble": bench_ensemble, "llmapi-concurrency": bench_llmapi_concurrency, "onnx": bench_onnx,
}


# ---------------------------------------------------------------------------------------------------------------
# output


def print_section(section: Section) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=section.title)
    for i, column in enumerate(section.columns):
        table.add_column(column, justify="left" if i == 0 else "right")
    for row in section.rows:
        table.add_row(*row)
    Console(width=200).print(table)


def to_markdown(section: Section, command: str) -> str:
    lines = [f"## {section.title}", "", f"Command: `{command}`", ""]
    lines += markdown_table(section.columns, section.rows, numeric=True)
    lines += [f"- {note}" for note in section.notes] + [""]
    return "\n".join(lines)


def write_section(path: Path, section: Section, command: str) -> None:
    """Replace (or append) the `## <title>` section of `path`, atomically."""
    text = path.read_text() if path.exists() else "# Benchmarks\n\nMeasured with `make bench` (scripts/bench.py).\n"
    heading = f"## {section.title}"
    body = to_markdown(section, command)
    if heading in text:
        start = text.index(heading)
        end = text.find("\n## ", start + len(heading))
        text = text[:start] + body + ("\n" + text[end + 1 :] if end != -1 else "")  # a blank line between sections
    else:
        text = text.rstrip("\n") + "\n\n" + body
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, text)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--section", choices=sorted(SECTIONS), action="append",
                        help="section(s) to run (default: all)")
    parser.add_argument("--model", default="tiny", help="target (embedded name or HF directory)")
    parser.add_argument("--draft", default="tiny-draft", help="draft model")
    parser.add_argument("--prompts", type=int, default=6, help="number of held-out prompts")
    parser.add_argument("--prompt-tokens", type=int, default=128, help="prompt length cap (tokens)")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="tokens generated per prompt")
    parser.add_argument("--ks", type=int, nargs="+", default=list(range(1, 9)), help="draft lengths to measure")
    parser.add_argument("--max-ngram", type=int, default=3, help="largest n-gram matched by prompt lookup")
    parser.add_argument("--repeats", type=int, default=1, help="runs over all prompts per configuration (median)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16], help="batching: requests in flight")
    parser.add_argument("--dynamo-k", type=int, default=4, help="dynamo: k of the draft_target rows")
    parser.add_argument("--fixed-ks", type=int, nargs="+", default=list(range(1, 9)),
                        help="batching: k of the fixed-k rows")
    parser.add_argument("--adaptive-max-k", type=int, default=8, help="batching: largest k adaptive may choose")
    parser.add_argument("--batching-new-tokens", type=int, default=32, help="batching: tokens generated per request")
    parser.add_argument("--batching-prompt-tokens", type=int, default=64, help="batching: prompt length cap")
    # cells of max(4 x concurrency, 8) requests (1-5 s) and 12 rounds, each concurrency's cells shuffled (~16
    # minutes): this machine's speed swings by 15-25% with a correlation time of 1-2 s and drifts more slowly too, so
    # the verdict pairs adaptive with the best other configuration round by round (docs/history/adaptive-k.md)
    parser.add_argument("--batching-min-requests", type=int, default=8, help="batching: requests per cell at least")
    parser.add_argument("--batching-repeats", type=int, default=12,
                        help="batching: rounds over the grid, each shuffled (medians, paired verdict)")
    parser.add_argument("--schedule-sweep-ks", type=int, nargs="+", default=list(range(1, 6)),
                        help="schedule: k of the recommendation sweep (beside k = 0)")
    parser.add_argument("--schedule-sweep-repeats", type=int, default=benchmarks_schedule.ScheduleBench.sweep_repeats,
                        help="schedule: shuffled rounds of the recommendation sweep (medians)")
    parser.add_argument("--schedule-fixed-ks", type=int, nargs="+", default=list(range(1, 6)),
                        help="schedule: k of the fixed-k rows the schedule is compared with")
    parser.add_argument("--schedule-ramp", type=int, nargs="+", default=list(benchmarks_schedule.RAMP),
                        help="schedule: concurrency phases of the ramp (one closed loop)")
    parser.add_argument("--schedule-new-tokens", type=int, default=32, help="schedule: tokens per request")
    parser.add_argument("--schedule-min-requests", type=int, default=benchmarks_schedule.ScheduleBench.min_requests,
                        help="schedule: requests per cell at least (c=1 and c=4 cells are short runs: noisy rounds)")
    parser.add_argument("--schedule-waves", type=int, default=benchmarks_schedule.ScheduleBench.waves,
                        help="schedule: requests per cell >= waves x concurrency")
    parser.add_argument("--schedule-ramp-waves", type=int, default=benchmarks_schedule.ScheduleBench.ramp_waves,
                        help="schedule: requests per ramp phase = ramp waves x its concurrency")
    parser.add_argument("--schedule-repeats", type=int, default=benchmarks_schedule.ScheduleBench.repeats,
                        help="schedule: rounds of the comparison, each load's cells shuffled (medians, paired verdict)")
    parser.add_argument("--schedule-gate-concurrency", type=int, default=benchmarks_schedule.ScheduleBench.gate_concurrency,
                        help="schedule: requests in flight on the gate's collapsed traffic")
    parser.add_argument("--schedule-gate-requests", type=int, default=benchmarks_schedule.ScheduleBench.gate_requests,
                        help="schedule: requests per cell on the gate's collapsed traffic")
    parser.add_argument("--schedule-gate-repeats", type=int, default=benchmarks_schedule.ScheduleBench.gate_repeats,
                        help="schedule: rounds of the gate's cells (paired ratio)")
    parser.add_argument("--dynamo-min-requests", type=int, default=6, help="dynamo: requests per cell at least")
    parser.add_argument("--lookahead-configs", nargs="+", default=["4,4,4", "7,5,7"], help="lookahead: W,N,G")
    parser.add_argument("--lookahead-prompts", type=int, default=8, help="lookahead: prompts per suite")
    parser.add_argument("--lookahead-new-tokens", type=int, default=48, help="lookahead: tokens per prompt")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--medusa", default="tiny-medusa", help="eagle: Medusa heads")
    parser.add_argument("--eagle", default="tiny-eagle", help="eagle: EAGLE-3 drafter")
    parser.add_argument("--eagle-trees", nargs="+", default=["chain", "dynamic"], help="eagle: EAGLE trees")
    parser.add_argument("--eagle-ks", type=int, nargs="+", default=[4, 8], help="eagle, eagle-cost: node budgets k")
    parser.add_argument("--verify-rounds", type=int, default=30,
                        help="verify: passes over the captured steps, both ways each (medians)")
    parser.add_argument("--eagle-cost-rounds", type=int, default=3,
                        help="eagle-cost: interleaved rounds (median)")
    # 16 cases x 2 x 128 tokens a round, 12 shuffled rounds (~13 minutes on the shared 2-core machine): each round
    # pairs a case with its baseline close in time, and the median over 3072 tokens per case absorbs the machine's
    # swings (docs/history/cost-model.md)
    parser.add_argument("--sweep-prompts", type=int, default=2, help="sweep section: prompts per suite")
    parser.add_argument("--sweep-new-tokens", type=int, default=128, help="sweep section: tokens per request")
    parser.add_argument("--sweep-ks", type=int, nargs="+", default=[1, 2, 3, 4], help="sweep section: draft lengths")
    parser.add_argument("--sweep-repeats", type=int, default=12, help="sweep section: shuffled rounds (medians)")
    parser.add_argument("--sweep-calibration-slices", type=int, default=4,
                        help="sweep section: calibration slices spread over the rounds (medians over slices)")
    parser.add_argument("--suffix-suites", nargs="+", default=list(benchmarks.SUFFIX_SUITES),
                        help="suffix: prompt suites")
    parser.add_argument("--suffix-prompts", type=int, default=16,
                        help="suffix: prompts per suite (the cold cache learns from the earlier ones)")
    parser.add_argument("--suffix-prompt-tokens", type=int, default=384, help="suffix: prompt length cap")
    parser.add_argument("--suffix-new-tokens", type=int, default=64, help="suffix: tokens per request")
    parser.add_argument("--suffix-k", type=int, default=16, help="suffix: k (draft tree nodes at most)")
    parser.add_argument("--suffix-draft-k", type=int, default=4, help="suffix: k of the fixed draft_target rows")
    parser.add_argument("--suffix-ngram-k", type=int, default=5, help="suffix: k of the ngram rows")
    parser.add_argument("--suffix-lookup-k", type=int, default=8, help="suffix: transformers prompt lookup tokens")
    parser.add_argument("--suffix-repeats", type=int, default=1, help="suffix: rounds per suite (medians)")
    parser.add_argument("--llmapi-k", type=int, default=4, help="llmapi, ensemble: k of the draft_target rows")
    parser.add_argument("--llmapi-new-tokens", type=int, default=64,
                        help="llmapi, ensemble: tokens per request at most")
    parser.add_argument("--ensemble-rounds", type=int, default=5,
                        help="ensemble: interleaved rounds over the prompts (medians, spread)")
    parser.add_argument("--llmapi-concurrency", type=int, default=6,
                        help="llmapi-concurrency: requests sent at once")
    parser.add_argument("--llmapi-concurrency-rounds", type=int, default=5,
                        help="llmapi-concurrency: rounds alternating the unary and the decoupled server (medians)")
    parser.add_argument("--headline-rounds", type=int, default=3, help="headline: interleaved rounds (medians)")
    parser.add_argument("--headline-new-tokens", type=int, default=128, help="headline: tokens per prompt")
    parser.add_argument("--headline-draft-k", type=int, default=4, help="headline: k of the draft_target row")
    parser.add_argument("--headline-baseline", default=None, metavar="REV",
                        help="headline: also time this git revision's engine (plain decoding and draft_target at "
                             "--headline-draft-k) beside this tree's, each in a worker process: the no-slower check")
    parser.add_argument("--onnx-past", type=int, default=128, help="onnx: cached tokens before the timed step")
    parser.add_argument("--onnx-calls", type=int, default=200, help="onnx: timed calls per runtime per round")
    parser.add_argument("--onnx-rounds", type=int, default=5, help="onnx: rounds (median, spread)")
    parser.add_argument("--out", type=Path, default=DOCS, help="markdown file to update")
    parser.add_argument("--no-write", action="store_true", help="print only; do not update the markdown file")
    args = parser.parse_args(argv)

    import torch

    torch.manual_seed(0)  # scripts may seed globally; the library never does
    torch.set_num_threads(args.threads)
    command = "python scripts/bench.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    for name in args.section or sorted(SECTIONS):
        section = SECTIONS[name](args)
        print_section(section)
        for note in section.notes:
            print(f"  - {note}")
        if not args.no_write:
            write_section(args.out, section, command.strip())
            print(f"wrote section '{section.title}' to {args.out}")


if __name__ == "__main__":
    main()
