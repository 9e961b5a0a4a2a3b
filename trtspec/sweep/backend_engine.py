"""Sweep via `engine`: the in-process reference SpecEngine (imports torch; loaded only for --via engine).

One engine per model set (target + draft or Medusa heads, or a lookahead W,N,G) is loaded once and reused for every
case that needs it; n-gram, suffix and plain cases reuse whichever engine is loaded. Suffix cases start from the
cache state they name (grid.py): the engine's suffix cache is emptied before each, and for `warm` the case's requests
run once, unmeasured, before the measured loop. `closed_loop` keeps c requests in flight through `add_request` /
`step` (a finished request is replaced by the next prompt at once), so the target forward of each step is batched
over up to c sequences; each step that admits requests is recorded (its rows, how many it admitted, their longest
prompt: the cost model prices its prompt passes from them). Each engine gets an untimed warm-up request before its
first case, and each decoding path (plain, or a method with fixed or adaptive k) an untimed closed loop before its
first.

A case with a speculation schedule runs it on the engine (a fresh SchedulePolicy: its gate starts open; every other
case runs without one); a ramp case's closed loop keeps each phase's concurrency in flight (grid.ramp_limits).

Calibration times the engine's own target and draft LlamaModel forwards (fresh KV caches with a context of about
the sweep's prompt + half the generated length): the target and the draft over n = 1..max_k+1 tokens per sequence,
and both over the mean prompt (a request's first step), at each batch size; medians of interleaved repeats, not
smoothed (a CPU forward over more tokens can cost less: kernels have favourite widths). Both wall time and process
CPU time are recorded (for cases too): on a CPU shared with other processes, CPU seconds are insensitive to
time-slicing, so `trtspec report --timing cpu` compares like with like (use --threads 1 for that). The host time
per step outside the forwards is calibrated as well (`_host_costs`).
"""

from __future__ import annotations

import platform
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from trtspec.methods import parse_lookahead, resolve
from trtspec.sweep.grid import BASELINE, Case, SweepSpec, parse_schedule, ramp_limits
from trtspec.sweep.model_set import ModelSet
from trtspec.sweep.prompts import PromptSuite, last_tokens, load_suite
from trtspec.sweep.records import output_digest

WARMUP_TOKENS = 16  # per request of a path's warm-up loop (at most a case's max_new_tokens)
HOST_TOKENS = 8  # per request of the calibration's host-time loops

Lookahead = tuple[int, int, int] | None  # an engine's lookahead (W, N, G); None = the engine's default
EngineKey = tuple[ModelSet, Lookahead, str | None]  # + the EAGLE tree (grid.SweepSpec.eagle_trees) of an eagle set


@dataclass
class LoopRun:
    """What one closed loop measured."""

    wall_s: float
    cpu_s: float
    outputs: list[list[int]]  # [num_requests][output tokens], request order
    latencies_s: list[float]  # [num_requests] submit to last token, request order
    stats: Any  # AcceptanceStats merged over the requests
    per_request_mean_acceptance_length: list[float]  # finish order
    num_steps: int
    num_admission_steps: int  # steps that also ran prompt passes
    admission_trace: list[tuple[int, int, int]]  # per admission step: (rows in the step, rows admitted, longest prompt)
    gate_closed_after: int | None = None  # finished requests when the acceptance gate first closed (None: it did not)
    requests_drafted: int = 0  # finished requests that drafted at least once
    finish_trace: list[tuple[int, float]] = field(default_factory=list)  # per finished request: (tokens, cpu_s) so far
    # per finished request: (drafts, draft tokens, accepted tokens, emitted tokens, target forwards), finish order
    per_request_counts: list[tuple[int, int, int, int, int]] = field(default_factory=list)

    @property
    def output_tokens(self) -> int:
        return sum(len(o) for o in self.outputs)


def closed_loop(engine: Any, prompts: Sequence[list[int]], samplings: Sequence[Any], spec: Any,
                concurrency: int, limits: Sequence[int] | None = None, stagger: bool = False) -> LoopRun:
    """Run request i = (prompts[i], samplings[i], spec) for every i, keeping `concurrency` in flight: a finished
    request is replaced before the next step. `limits` (a load ramp): request i is submitted once fewer than
    limits[i] are in flight. `stagger`: the first `concurrency` requests arrive one per step, not together (requests
    of one length that start together finish and are replaced together for as long as nothing desynchronizes them:
    plain decoding then batches every prompt pass into one step while speculation spreads them out)."""
    from trtspec.contracts.metrics import AcceptanceStats

    stats = AcceptanceStats()
    outputs: list[list[int]] = [[] for _ in prompts]
    latencies = [0.0] * len(prompts)
    submitted: dict[int, tuple[int, float]] = {}  # request id -> (request index, submit time)
    per_request: list[float] = []
    counts: list[tuple[int, int, int, int, int]] = []
    num_steps = admission_steps = 0
    next_index = in_flight = 0
    trace: list[tuple[int, int, int]] = []
    finished = drafted = emitted = 0
    gate_closed_after: int | None = None
    finish_trace: list[tuple[int, float]] = []
    cpu_start = time.process_time()
    start = time.perf_counter()
    while next_index < len(prompts) or in_flight:
        admitted: list[int] = []  # prompt lengths of the requests this step admits
        while next_index < len(prompts) and in_flight < (limits[next_index] if limits else concurrency) and \
                not (stagger and admitted and next_index < concurrency):
            rid = engine.add_request(prompts[next_index], samplings[next_index], spec)
            submitted[rid] = (next_index, time.perf_counter())
            admitted.append(len(prompts[next_index]))
            next_index += 1
            in_flight += 1
        if admitted:  # a step that also runs prompt passes (padded to the longest of them)
            admission_steps += 1
            trace.append((in_flight, len(admitted), max(admitted)))
        for delta in engine.step():
            index, submit = submitted[delta.request_id]
            outputs[index].extend(delta.token_ids)
            emitted += len(delta.token_ids)
            if delta.finished:
                in_flight -= 1
                finished += 1
                finish_trace.append((emitted, time.process_time() - cpu_start))
                latencies[index] = time.perf_counter() - submit
                if delta.stats is not None:
                    stats.merge(delta.stats)
                    per_request.append(delta.stats.mean_acceptance_length)
                    counts.append(request_counts(delta.stats))
                    drafted += delta.stats.num_drafts > 0
        gate = getattr(engine, "gate_state", None)
        if gate_closed_after is None and gate is not None and gate.closes:
            gate_closed_after = finished
        num_steps += 1
    wall = time.perf_counter() - start
    return LoopRun(wall, time.process_time() - cpu_start, outputs, latencies, stats, per_request, num_steps,
                   admission_steps, trace, gate_closed_after, drafted, finish_trace, counts)


def request_counts(stats: Any) -> tuple[int, int, int, int, int]:
    """(drafts, draft tokens, accepted tokens, emitted tokens, target forwards) of one request's AcceptanceStats: what
    any release's gate value is computed from (targets.controls)."""
    return (stats.num_drafts, stats.num_draft_tokens, stats.num_accepted_tokens, stats.num_emitted_tokens,
            stats.num_target_forwards)


class EngineBackend:
    name = "engine"

    def __init__(self) -> None:
        self._engines: dict[EngineKey, Any] = {}
        self._warm: set[tuple[int, str, bool]] = set()  # (id(engine), method, adaptive) paths already warmed up
        self._device = "cpu"
        self._saved_threads: int | None = None

    # -- Backend protocol ----------------------------------------------------------------------------------------
    def preflight(self, spec: SweepSpec) -> None:
        from trtspec.methods import engine_methods

        self._device = spec.device
        if spec.threads:  # process-wide; restored in close(). One thread is far steadier on a shared CPU.
            import torch

            self._saved_threads = torch.get_num_threads()
            torch.set_num_threads(spec.threads)
        unknown = [m for m in spec.methods if m not in engine_methods()]
        if unknown:  # SweepSpec already refuses these; kept so a hand-built spec fails before loading models
            from trtspec.errors import ConfigError

            raise ConfigError("methods", unknown[0], "the reference engine cannot run it",
                              hint=f"use one of {', '.join(engine_methods())}")

    def check_model_set(self, spec: SweepSpec, model_set: ModelSet) -> None:
        """Before any case runs: the engine can run every method, and prompts leave room for max_new_tokens + k."""
        from trtspec.errors import ConfigError

        engine = self._engine(spec, model_set)
        relevant = [m for m in spec.methods if m != BASELINE
                    and (model_set.draft is not None or not resolve(m).needs_draft_model)
                    and (model_set.medusa is not None or not resolve(m).needs_medusa_heads)
                    and (model_set.eagle is not None or not resolve(m).needs_eagle_drafter)]
        missing = [m for m in relevant if m not in engine.available_methods]
        if missing and missing[0] in engine.unavailable:  # an optional package is missing (suffix: arctic-inference)
            raise engine.unavailable[missing[0]]
        if missing:
            raise ConfigError("methods", missing[0], "this engine build has no proposer for it",
                              hint=f"available here: {', '.join(engine.available_methods)}")
        for suite_name in spec.suites:
            longest = max(len(last_tokens(encode_prompt(engine, p, spec.chat_template), spec.prompt_tokens))
                          for p in load_suite(suite_name, spec.num_prompts).prompts)
            need = longest + spec.max_new_tokens + spec.max_draft_len + 1
            if need > engine.max_context:
                raise ConfigError("max_new_tokens", spec.max_new_tokens,
                                  f"suite {suite_name!r} has a {longest}-token prompt; with max_draft_len "
                                  f"{spec.max_draft_len} that needs {need} > the model's context of "
                                  f"{engine.max_context} tokens",
                                  hint="lower --max-new-tokens or use shorter prompts")

    def calibrate(self, spec: SweepSpec, model_set: ModelSet) -> dict[str, Any]:
        import torch

        engine = self._engine(spec, model_set)
        draft_model = getattr(engine.proposers.get("draft_model"), "model", None)
        prompt_len, context = _calibration_lengths(spec, engine)
        sizes = sorted(set(spec.calibration_batch_sizes) | set(spec.concurrency))
        ns = list(range(1, spec.max_draft_len + 2))
        points = [("target", b, n) for b in sizes for n in ns]
        points += [("draft", b, n) for b in sizes for n in ns] if draft_model is not None else []
        # prompt passes (a fresh request's first step): n = prompt length over an empty cache
        prefills = [("target_prefill", b, prompt_len) for b in sizes]
        prefills += [("draft_prefill", b, prompt_len) for b in sizes] if draft_model is not None else []
        models = {"target": engine.target, "draft": draft_model, "target_prefill": engine.target,
                  "draft_prefill": draft_model}
        benches = {(role, b): _Bench(models[role], b, 0 if role.endswith("prefill") else context)
                   for role, b, _ in points + prefills}
        points += prefills
        wall: dict[tuple, list[float]] = {p: [] for p in points}
        cpu: dict[tuple, list[float]] = {p: [] for p in points}
        with torch.inference_mode():
            # interleaved repeats: a burst of load from other processes hits every point, not one
            for rep in range(spec.calibration_repeats + 1):
                for role, b, n in points:
                    benches[(role, b)].time(n)  # back to back: time the second call, on warm caches as in a run
                    w, c = benches[(role, b)].time(n)
                    if rep:  # the first round is a warm-up
                        wall[(role, b, n)].append(w)
                        cpu[(role, b, n)].append(c)
        out: dict[str, Any] = {"batch_sizes": sizes, "context_tokens": context, "prompt_tokens": prompt_len,
                               "repeats": spec.calibration_repeats,
                               "device": spec.device, "dtype": spec.dtype, "torch_threads": torch.get_num_threads(),
                               "smoothing": "median of interleaved warm repeats"}
        for clock, samples in (("s", wall), ("cpu_s", cpu)):
            out[f"target_{clock}"] = {str(b): {str(n): statistics.median(samples[("target", b, n)]) for n in ns}
                                      for b in sizes}
            if draft_model is not None:  # the draft's first forward of a step catches up on the accepted tokens
                out[f"draft_tokens_{clock}"] = {str(b): {str(n): statistics.median(samples[("draft", b, n)])
                                                         for n in ns} for b in sizes}
            for role, n in (("draft", 1), ("target_prefill", prompt_len), ("draft_prefill", prompt_len)):
                out[f"{role}_{clock}"] = {str(b): statistics.median(samples[(role, b, n)])
                                          for b in sizes if (role, b, n) in samples}
        out.update(_host_costs(engine, spec, sizes))
        return out

    def run_case(self, case: Case, suite: PromptSuite, spec: SweepSpec) -> dict[str, Any]:
        from trtspec.spec.params import SamplingParams, SpecParams

        engine = self._engine_of(spec, case)
        # chat_template None: base models get raw text
        prompts = [last_tokens(encode_prompt(engine, p, spec.chat_template), case.prompt_tokens) for p in suite.prompts]
        method = case.method
        spec_params = SpecParams(method=method, k=case.k, adaptive=case.adaptive)
        samplings = [SamplingParams(temperature=case.temperature, seed=case.seed + i,
                                    max_new_tokens=case.max_new_tokens, ignore_eos=True)
                     for i in range(len(prompts))]
        self._warm_up(engine, prompts, spec_params, min(WARMUP_TOKENS, case.max_new_tokens))
        engine.schedule_policy = _policy(case.schedule)  # after the warm-up: the case's gate starts with its requests
        if case.suffix_cache is not None:  # suffix decoding: the cross-request cache starts as the case says
            engine.proposers[resolve(method).proposer].reset()
            if case.suffix_cache == "warm":  # the same traffic once, unmeasured: the cache holds its outputs
                closed_loop(engine, prompts, samplings, spec_params, case.concurrency)
        limits = ramp_limits(case.ramp, spec.ramp_waves) if case.ramp else None
        run = closed_loop(engine, prompts, samplings, spec_params, case.concurrency, limits, spec.stagger_start)
        tokens, wall, cpu = run.output_tokens, run.wall_s, run.cpu_s
        gate = engine.gate_state
        return {"wall_time_s": wall, "cpu_time_s": cpu, "tokens_per_cpu_s": tokens / cpu if cpu > 0 else 0.0,
                "num_requests": len(prompts), "output_tokens": tokens,
                "tokens_per_s": tokens / wall if wall > 0 else 0.0, "num_steps": run.num_steps,
                "num_admission_steps": run.num_admission_steps,
                "admission_trace": [list(step) for step in run.admission_trace], "latencies_s": run.latencies_s,
                "output_sha256": output_digest(run.outputs),
                "per_request_mean_acceptance_length": run.per_request_mean_acceptance_length,
                "per_request_counts": [list(c) for c in run.per_request_counts],
                "requests_drafted": run.requests_drafted, "stats": run.stats.to_dict(),
                "finish_trace_cpu_s": [list(point) for point in run.finish_trace],
                **({"gate": {**asdict(gate), "closed_after": run.gate_closed_after}} if gate is not None else {})}

    def info(self) -> dict[str, Any]:
        import torch

        tokenizers = {str(m.model): e.tokenizer is not None for (m, _, _), e in self._engines.items()}
        return {"name": self.name, "device": self._device, "torch": torch.__version__, "has_tokenizer": tokenizers,
                "torch_threads": torch.get_num_threads(), "machine": platform.machine()}

    def close(self) -> None:
        self._engines.clear()
        self._warm.clear()
        if self._saved_threads is not None:
            import torch

            torch.set_num_threads(self._saved_threads)
            self._saved_threads = None

    # -- helpers -------------------------------------------------------------------------------------------------
    def _engine_of(self, spec: SweepSpec, case: Case) -> Any:
        """The engine a case needs; model-free methods reuse any loaded engine of the same target (lookahead: one
        with the case's W,N,G)."""
        lookahead = parse_lookahead(case.lookahead) if case.lookahead else None
        if case.draft or case.medusa or case.eagle:
            return self._engine(spec, ModelSet(case.model, case.draft, case.medusa, case.eagle, case.draft_runtime),
                                eagle_tree=case.tree if case.eagle else None)
        for model_set, options, tree in self._engines:
            if model_set.model == case.model and lookahead in (None, options):
                return self._engines[(model_set, options, tree)]
        return self._engine(spec, ModelSet(case.model), lookahead)

    def _engine(self, spec: SweepSpec, model_set: ModelSet, lookahead: Lookahead = None,
                eagle_tree: str | None = None) -> Any:
        if model_set.eagle and eagle_tree is None:  # check_model_set / calibrate: the set's first tree
            eagle_tree = spec.eagle_trees[0]
        key = (model_set, lookahead, eagle_tree)
        if key not in self._engines:
            from trtspec.contracts.engine import EagleTree, Lookahead, Ngram, ProposerOptions
            from trtspec.spec.engine import SpecEngine
            from trtspec.spec.params import SamplingParams, SpecParams

            options = ProposerOptions(
                ngram=Ngram(max_size=spec.max_ngram) if spec.max_ngram is not None else Ngram(),
                lookahead=Lookahead(*lookahead) if lookahead is not None else Lookahead(),
                eagle_tree=EagleTree.parse(eagle_tree) if eagle_tree is not None else EagleTree())
            engine = SpecEngine.from_pretrained(model_set.model, draft=model_set.draft, medusa=model_set.medusa,
                                                eagle=model_set.eagle, max_k=spec.max_draft_len, device=spec.device,
                                                dtype=spec.dtype, options=options,
                                                draft_runtime=model_set.draft_runtime or "torch")
            # untimed warm-up; a short prompt, so that a too-long one is reported by check_model_set
            warm_prompt = last_tokens(encode_prompt(engine, load_suite(spec.suites[0], 1).prompts[0], spec.chat_template), 32)
            engine.generate([warm_prompt], SamplingParams(max_new_tokens=8, seed=0), SpecParams(method=BASELINE, k=0))
            self._engines[key] = engine
        return self._engines[key]

    def _warm_up(self, engine: Any, prompts: list[list[int]], spec: Any, tokens: int) -> None:
        """An untimed closed loop of 4 requests of `tokens` tokens the first time an engine runs a decoding path: first
        batched forwards (and the draft model's), and the adaptive policy's acceptance and step-cost estimates, are not
        measured in a case."""
        from trtspec.spec.params import SamplingParams

        path = (id(engine), spec.method if spec.k else BASELINE, spec.adaptive)
        if path in self._warm:
            return
        self._warm.add(path)
        samplings = [SamplingParams(max_new_tokens=tokens, ignore_eos=True, seed=i) for i in range(4)]
        closed_loop(engine, [prompts[i % len(prompts)] for i in range(4)], samplings, spec, concurrency=4)


def encode_prompt(engine: Any, text: str, chat_template: str | None = None) -> list[int]:
    """Token ids of a prompt (as a one-turn chat when `chat_template` is set: trtspec.chat.chat_prompt); a model
    without a tokenizer (random test models) gets bytes modulo its vocabulary."""
    if engine.tokenizer is not None:
        if chat_template is not None:
            from trtspec.chat import chat_prompt

            text = chat_prompt(engine.tokenizer, text, chat_template)
        return engine.encode(text)
    return [b % engine.vocab_size for b in text.encode("utf-8")]


def _policy(schedule: str | None) -> Any:
    """A fresh SchedulePolicy of a case's schedule (grid.schedule_text), or None."""
    if schedule is None:
        return None
    from trtspec.spec.schedule_policy import SchedulePolicy

    return SchedulePolicy(parse_schedule(schedule))


def _host_costs(engine: Any, spec: SweepSpec, sizes: Sequence[int]) -> dict[str, Any]:
    """Host time per engine step outside the forwards, at each batch size b, from short closed loops of b requests
    (HOST_TOKENS tokens each, the first suite's prompts; the engine's own time split, converted to CPU seconds with
    the loop's CPU / wall ratio; median over min(calibration_repeats, 3) rounds after a warm-up round):
      overhead_{s,cpu_s}[b]            plain decoding's host time per step
      overhead_token_{s,cpu_s}[b]      the extra per draft token per row (a loop at max_draft_len: the draft model
                                       when the set has one, else the first model-free method)
      proposer_{s,cpu_s}[method][b]    a model-free proposer's time per step (n-gram lookup and the like)
    """
    from trtspec.spec.params import SamplingParams, SpecParams

    prompts = [last_tokens(encode_prompt(engine, p, spec.chat_template), spec.prompt_tokens)
               for p in load_suite(spec.suites[0], spec.num_prompts).prompts]
    model_free = [m for m in spec.methods if m in engine.available_methods and m != BASELINE and not resolve(m).jacobi
                  and resolve(m).proposer is not None and not (resolve(m).needs_draft_model
                                                               or resolve(m).needs_medusa_heads
                                                               or resolve(m).needs_eagle_drafter)]
    draft_method = next((m for m in engine.available_methods if resolve(m).needs_draft_model), None)
    has_draft = draft_method is not None and engine.proposers.get(resolve(draft_method).proposer) is not None
    drafting = draft_method if has_draft else (model_free[0] if model_free else None)
    methods = [BASELINE, *([drafting] if drafting else []), *(m for m in model_free if m != drafting)]
    k = spec.max_draft_len
    seen: dict[tuple[str, int], list[tuple[float, float, float, float]]] = {}  # (overhead, proposer, draft tokens, cpu/wall)
    for rep in range(min(spec.calibration_repeats, 3) + 1):  # the first round is a warm-up
        for b in sizes:
            for method in methods:
                samplings = [SamplingParams(max_new_tokens=HOST_TOKENS, ignore_eos=True, seed=i) for i in range(b)]
                params = SpecParams(method=method, k=0 if method == BASELINE else k)
                run = closed_loop(engine, [prompts[i % len(prompts)] for i in range(b)], samplings, params, b)
                forwards = max(run.stats.num_target_forwards, 1)
                if rep:
                    seen.setdefault((method, b), []).append((run.stats.overhead_time_s / forwards,
                                                             run.stats.draft_time_s / forwards,
                                                             run.stats.num_draft_tokens / forwards,
                                                             run.cpu_s / run.wall_s if run.wall_s > 0 else 1.0))
    out: dict[str, Any] = {"host_tokens": HOST_TOKENS, "host_methods": methods}
    for clock in ("s", "cpu_s"):
        def med(method: str, b: int, i: int, clock: str = clock) -> float:
            return statistics.median(x[i] * (x[3] if clock == "cpu_s" and i < 2 else 1.0) for x in seen[(method, b)])

        out[f"overhead_{clock}"] = {str(b): med(BASELINE, b, 0) for b in sizes}
        if drafting:
            out[f"overhead_token_{clock}"] = {str(b): max(med(drafting, b, 0) - med(BASELINE, b, 0), 0.0)
                                              / max(med(drafting, b, 2), 1e-9) for b in sizes}
        out[f"proposer_{clock}"] = {m: {str(b): med(m, b, 1) for b in sizes} for m in model_free}
    return out


def _calibration_lengths(spec: SweepSpec, engine: Any) -> tuple[int, int]:
    """(mean prompt tokens, mean decode context = mean prompt tokens + half of max_new_tokens) of the sweep."""
    lengths = [len(last_tokens(encode_prompt(engine, p, spec.chat_template), spec.prompt_tokens))
               for s in spec.suites for p in load_suite(s, spec.num_prompts).prompts]
    prompt = max(1, round(statistics.fmean(lengths)))
    return prompt, max(8, prompt + spec.max_new_tokens // 2)


class _Bench:
    """A model with `batch` cache slots holding a random context of `context` tokens, for timing forwards."""

    def __init__(self, model: Any, batch: int, context: int) -> None:
        import torch

        self.model = model
        self.device = model.lm_head.weight.device
        self.cache = model.new_cache(num_slots=batch, max_slots=max(batch, 4))
        self.slots = torch.tensor([self.cache.alloc() for _ in range(batch)]).to(self.device)  # [batch]
        self.context = min(context, self.cache.max_seq_len // 2)
        self.gen = torch.Generator().manual_seed(0)
        if self.context:
            prefix = torch.randint(0, model.config.vocab_size, (batch, self.context), generator=self.gen)
            model(prefix.to(self.device), self.cache, self.slots)  # prefix: [batch, context]

    def time(self, num_tokens: int) -> tuple[float, float]:
        """(wall, process CPU) seconds of one forward of `num_tokens` new tokens per sequence; the cache is restored."""
        import torch

        new = torch.randint(0, self.model.config.vocab_size, (len(self.slots), num_tokens),
                            generator=self.gen).to(self.device)  # [batch, num_tokens]
        wall, cpu = time.perf_counter(), time.process_time()
        self.model(new, self.cache, self.slots)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        for s in self.slots.tolist():
            self.cache.rollback(s, self.context)
        return wall, cpu
