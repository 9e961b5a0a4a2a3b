"""The sweep grid: a typed, validated SweepSpec (YAML or CLI flags) and its deterministic list of cases.

A case is one point of method x k x draft (or Medusa heads / tree, or lookahead W,N,G) x temperature x prompt suite x
concurrency for one target model. Its id is a hash of its parameters, so a results file can be resumed by id. k = 0
is plain decoding: it is enumerated once per (suite, temperature, concurrency) as method `none`, the baseline every
speedup divides by. Adaptive-k cases (the engine picks k per step, up to a cap) run beside the fixed-k ones.

Suffix decoding keeps a cache of earlier requests' outputs, so its cases come in two cache states (via engine): `cold`
(the cache is emptied before the case; it still learns from the case's own requests as they finish, in order) and
`warm` (the case's requests ran once, unmeasured, just before: a repeat of the same traffic, like retries). The
cache never carries over from one case to the next, so results do not depend on the order of the grid.

Via engine, a sweep can also run speculation schedules (`schedules`: a `contracts.schedule.SpecSchedule` each, in the
text form of `schedule_text`) beside the fixed and adaptive k, and load ramps (`ramps`: concurrency phases such as
1,2,4,8,16,8,4,2,1 in one closed loop) beside the fixed concurrencies: a ramp is a point of the grid like a
concurrency, with its own baseline, and its case's `concurrency` is the ramp's largest phase.

`via` says how cases run: `engine` (the in-process reference engine), `triton` (a served repository over gRPC) or
`openai` (an OpenAI endpoint, such as `trtspec serve --dynamo N`); the build/deploy `backend` (torch | tensorrtllm) is
another thing. A spec may spell `via` as `backend` (an alias); a field the sweep no longer reads (RETIRED_FIELDS) is
refused with its fix.

Validation happens before any work: unknown method or model, k above the engine's max_draft_len, malformed prompt
files and bad numbers raise ConfigError naming the field, the value and the fix. Server reachability is checked by
the triton via's preflight (runner), still before the first case runs. No torch here.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError

from trtspec.config import load_yaml
from trtspec.contracts.engine import PARTS, EagleTree, Lookahead, Ngram
from trtspec.contracts.schedule import SpecSchedule
from trtspec.errors import ConfigError, UsageError, shown
from trtspec.methods import BASELINE, MethodInfo, engine_methods, lookahead_trie_nodes, parse_lookahead, resolve
from trtspec.methods.draft_target import DRAFT_TARGET
from trtspec.methods.eagle import EAGLE3
from trtspec.methods.lookahead import LOOKAHEAD
from trtspec.methods.medusa import MEDUSA
from trtspec.methods.ngram import NGRAM
from trtspec.methods.suffix import SUFFIX
from trtspec.sweep.record_fields import MAX_BATCH_SIZE, MAX_K
from trtspec.triton.client import DEFAULT_TIMEOUT_S  # numpy only; tritonclient loads when a client is made

CHAIN_TREE = "chain"  # tree methods without an explicit tree: a chain of depth k
SUFFIX_CACHES = ("cold", "warm")  # suffix decoding cache states a case starts from (via engine)
# Options only the in-process engine applies (a served model has its own); refused with another backend.
# (the methods' variant fields by their homes' names: lookahead, max_ngram, suffix_cache)
ENGINE_ONLY = (LOOKAHEAD.sweep_variant, "adaptive", "prompt_tokens", NGRAM.sweep_variant, SUFFIX.sweep_variant,
               "schedules", "ramps", "stagger_start")
MAX_CASES = 100_000  # cases one sweep may have (suites x temperatures x concurrency x methods x variants x k x rounds)
MAX_RANGE = 4096  # values one `lo-hi` list item may span (k, concurrency, batch sizes)
INT32_MAX, UINT64_MAX = 2**31 - 1, 2**64 - 1  # counts are int32 (engine, TensorRT-LLM); seeds uint64 (Triton)
# Fields an older spec may name that the sweep no longer reads: field -> (why, the fix).
RETIRED_FIELDS = {"draft_model_name": ("is no longer a sweep field: TensorRT-LLM draft-target runs in the served BLS "
                                       "model, which calls its own draft model",
                                       "replace it with bls_model_name (the BLS model's name, default "
                                       "tensorrt_llm_bls; --bls-model-name), or remove it")}


class SweepSpec(BaseModel):
    """Everything a sweep varies and fixes. Explicit CLI flags override a YAML file's values."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field("tiny", description="target model: embedded name or HF directory")
    methods: list[str] = Field([DRAFT_TARGET.name, NGRAM.name], description="methods from trtspec.methods")
    k: list[int] = Field(list(range(0, 9)), description="draft lengths; 0 = plain decoding (the baseline)")
    drafts: list[str] = Field(["tiny-draft"], description="draft models, for methods that need one")
    draft_runtime: Literal["torch", "onnx"] = Field(
        "torch", description="what runs the draft models (via engine): torch (trtspec's runner) or onnx (ONNX "
        "Runtime, float32 on the CPU; needs trtspec[onnx]); its cases are other cases (params.draft_runtime), so a "
        "sweep of each into one results file compares the runtimes' speed at equal acceptance")
    medusa: list[str] = Field([], description="Medusa heads directories, for medusa")
    trees: list[str] = Field([CHAIN_TREE], description="tree choices (preset, JSON, file) for tree methods")
    eagle: list[str] = Field([], description="EAGLE-3 drafters (embedded name or directory), for eagle3")
    eagle_trees: list[str] = Field(["dynamic"], description="EAGLE trees for eagle3: chain (top-1), dynamic (EAGLE-2: "
                                   "top-4 per node, 6 levels, the k best nodes), dynamic:TOPKxDEPTH, or static "
                                   "choices (preset, JSON, file); k is the node budget")
    temperatures: list[float] = Field([0.0], description="sampling temperatures")
    suites: list[str] = Field(["code"], description="shipped suite names or JSONL paths")
    concurrency: list[int] = Field([1], description="requests in flight")
    max_new_tokens: int = Field(64, description="tokens generated per request")
    num_prompts: int = Field(8, description="prompts taken (in file order) from each suite")
    seed: int = Field(0, description="request i is sampled with seed + i")
    num_requests: int | None = Field(None, description="requests per case, the suite's prompts reused round-robin; "
                                     "None = one request per prompt")
    waves: int = Field(0, description="at least waves x concurrency requests per case (a steady closed loop at every "
                       "concurrency); 0 = off")
    prompt_tokens: int | None = Field(None, description="keep the last N tokens of each prompt; None = whole prompts")
    adaptive: list[int] = Field([], description="caps of adaptive-k cases: the engine picks k in [0, cap] every step "
                                "(run beside the fixed k)")
    schedules: list[str] = Field([], description="speculation schedules run beside the fixed k (via engine), each "
                                 "a SpecSchedule's parameters joined by ';', e.g. draft_len_schedule=1:4,4:2,16:0;"
                                 "max_concurrency=16;acceptance_window=32;acceptance_length_threshold=0.5: a case "
                                 "per method variant whose requests ask the schedule's draft length at batch 1")
    ramps: list[str] = Field([], description="load ramps run beside the fixed concurrencies (via engine): each "
                             "concurrency phases, e.g. 1,2,4,8,16,8,4,2,1; phase c submits ramp_waves x c requests "
                             "with c in flight, the phases one closed loop")
    ramp_waves: int = Field(1, description="requests per ramp phase = ramp_waves x the phase's concurrency")
    stagger_start: bool = Field(False, description="a closed loop's first `concurrency` requests arrive one per step, "
                                "not together (via engine): requests of one length that start together are replaced "
                                "together, so plain decoding batches every prompt pass while speculation spreads them")
    lookahead: list[str] = Field([], description="lookahead W,N,G variants, e.g. 4,4,4 (empty = 4,4,4); k counts trie "
                                 "nodes and stops at G x (N - 1), which verifies every candidate")
    max_ngram: int | None = Field(None, description="longest n-gram the ngram proposer matches; None = its default (3)")
    suffix_cache: list[Literal["cold", "warm"]] | None = Field(
        None, description="suffix decoding cache states per suffix case: cold (emptied before the case) and/or warm "
        "(the case's requests ran once before it); None = both (via engine)")
    calibrate: bool = Field(True, description="time forwards for the cost model before the cases (engine backend)")
    repeats: int = Field(1, description="rounds over the whole grid; the report takes each case's median timing")
    shuffle: bool = Field(False, description="run each round's cases of every (suite, temperature, concurrency) in "
                          "a random order (seeded by seed and round), so no case always runs at the same place or "
                          "next to the same neighbours")
    max_draft_len: int = Field(8, description="the engine's maximum k (engine max_k / TensorRT-LLM max_draft_len)")
    via: Literal["engine", "triton", "openai"] = Field(
        "engine", validation_alias=AliasChoices("via", "backend"),
        description="engine = in-process reference engine; triton = gRPC; openai = an OpenAI endpoint (Dynamo)")
    url: str | None = Field(None, description="server url: Triton gRPC (via triton), e.g. localhost:8001; OpenAI "
                            "(via openai), e.g. localhost:8000 for http://localhost:8000/v1")
    flavour: Literal["torch", "tensorrtllm"] = Field("torch", description="served repository flavour (triton)")
    model_name: str | None = Field(None, description="served model to call; default tensorrt_llm (via triton, both "
                                   "flavours; TensorRT-LLM draft-target calls bls_model_name), the model's served name "
                                   "(via openai: tiny for tiny)")
    bls_model_name: str = Field("tensorrt_llm_bls", description="served BLS model that runs TensorRT-LLM draft-target "
                                "and its k = 0 baseline (via triton, flavour tensorrtllm): it calls the draft and "
                                "target models itself")
    timeout_s: float = Field(DEFAULT_TIMEOUT_S, gt=0, allow_inf_nan=False,
                             description="seconds one request to the server may take (triton)")
    calibration_batch_sizes: list[int] = Field([1, 4, 16], description="batch sizes of the cost micro-benchmark")
    calibration_repeats: int = Field(5, description="timed rounds of the cost micro-benchmark (each point's cost is "
                                     "the median over them, after one warm-up round)")
    calibration_slices: int = Field(1, description="the micro-benchmark runs in this many slices spread over the "
                                    "cases (one before the first, the others between them), calibration_repeats / "
                                    "slices rounds each (at least one); each point's cost is the median over the "
                                    "slices, so on a machine whose speed drifts the calibration spans the time of "
                                    "the runs it prices")
    chat_template: str | None = Field(None, description="prompts as one-turn chats: `model` = the model's own template "
                                      "(trtspec.chat), or a Jinja template (via engine); None = raw text")
    threads: int | None = Field(None, description="torch intra-op threads (via engine); None = torch default")
    device: str = "cpu"
    dtype: str = "float32"

    @property
    def served_model_name(self) -> str:
        return self.model_name or "tensorrt_llm"

    @classmethod
    def from_yaml(cls, path: str | Path, **overrides: object) -> SweepSpec:
        """Read a YAML sweep config; `overrides` (explicit CLI flags, None = not given) win over the file."""
        path = Path(path)
        data = load_yaml(path, what="a sweep spec") or {}
        if not isinstance(data, dict):
            raise ConfigError("config", str(path), "must be a YAML mapping", hint="e.g. `methods: [draft_target]`")
        data.update({k: v for k, v in overrides.items() if v is not None})
        return cls.build(**data)

    @classmethod
    def build(cls, **data: object) -> SweepSpec:
        """Construct and validate; pydantic errors become ConfigError naming the field."""
        for field, (why, fix) in RETIRED_FIELDS.items():
            if field in data:
                raise ConfigError(field, shown(data[field]), why, hint=fix)
        try:
            spec = cls(**data)
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(p) for p in err["loc"]) or "sweep"
            raise ConfigError(field, err.get("input"), err["msg"],
                              hint="see `trtspec sweep --help` for the fields and their types") from None
        spec.validate_values()
        return spec

    def validate_values(self) -> None:
        """Cheap, torch-free checks of every field (models are resolved on disk, prompt files are parsed)."""
        from trtspec.models import check_pair, resolve_eagle, resolve_model
        from trtspec.sweep.prompts import load_suite

        # The torch-flavour repository serves the reference engine, so it runs the same methods.
        allowed = engine_methods() if self.via == "engine" or self.flavour == "torch" else None
        for name in self.methods:
            info = resolve(name)  # UnknownMethodError lists the valid names
            why = info.trtllm_unsupported or (info.engine_flow_unsupported if not _llm_api_target(info) else None)
            if allowed is None and why:
                raise ConfigError("methods", name, f"has no TensorRT-LLM form: {why}",
                                  hint="sweep it via engine, or via triton on a torch-flavour repository")
            if allowed is not None and name not in allowed:
                raise ConfigError("methods", name, "the reference engine has no proposer for this method",
                                  hint=f"the reference engine runs: {', '.join(allowed)}; "
                                  f"{name} needs a TensorRT-LLM repository (--via triton --flavour tensorrtllm)")
            if info.needs_medusa_heads and not self.medusa:
                raise ConfigError(MEDUSA.sweep_variant, self.medusa, f"method {name} needs Medusa heads",
                                  hint="pass --medusa DIR (heads trained with `trtspec train medusa`)")
            if info.needs_eagle_drafter and not self.eagle and self.via == "engine":
                raise ConfigError(EAGLE3.sweep_variant, self.eagle, f"method {name} needs an EAGLE-3 drafter",
                                  hint="pass --eagle tiny-eagle (or a directory from `trtspec train eagle`)")
        _positive("max_draft_len", [self.max_draft_len], most=MAX_K)  # the report reads k up to MAX_K
        for field, values, lowest in (("k", self.k, 0), ("adaptive", self.adaptive, 1)):
            for k in values:
                if not lowest <= k <= self.max_draft_len:
                    raise ConfigError(field, k, f"must be within {lowest}..max_draft_len ({self.max_draft_len})",
                                      hint="lower k, or raise max_draft_len (the engine must be built for it)")
        self._validate_options()
        for tree in self.eagle_trees:
            EagleTree.parse(tree, field="eagle_trees")
        _positive("temperatures", self.temperatures, allow_zero=True)
        _positive("concurrency", self.concurrency, most=MAX_BATCH_SIZE)  # the report's schedule: a row per batch size
        _positive("calibration_batch_sizes", self.calibration_batch_sizes, most=MAX_BATCH_SIZE)
        if self.threads is not None:
            _positive("threads", [self.threads])
        for field in ("max_new_tokens", "num_prompts", "repeats", "calibration_repeats", "calibration_slices"):
            _positive(field, [getattr(self, field)])
        if not 0 <= self.seed <= UINT64_MAX:
            raise ConfigError("seed", shown(self.seed), f"must be within 0..{UINT64_MAX} (a uint64 seed)",
                              hint="pick a seed such as 0")
        self._check_grid_size()
        if self.via == "triton" and not self.url:
            raise ConfigError("url", self.url, "via triton needs the server's gRPC url",
                              hint="pass --url localhost:8001 (start one with `trtspec serve REPO`)")
        if self.via == "openai" and not self.url:
            raise ConfigError("url", self.url, "via openai needs the server's host:port",
                              hint="pass --url localhost:8000 (start one with `trtspec serve --dynamo 2`)")
        if self.via != "engine" and self.chat_template not in (None, "model"):
            raise ConfigError("chat_template", self.chat_template, f"via {self.via} the server applies its own template",
                              hint="use chat_template: model (or none), or sweep via engine")
        if self.via == "triton" and self.chat_template is not None:
            raise ConfigError("chat_template", self.chat_template, "the Triton path sends token ids, not chats",
                              hint="sweep via openai or engine for chat prompts")
        # Only the Triton server resolves models there; locally every name must resolve on disk.
        if self.via == "engine":
            target = resolve_model(self.model, field="model")
            if any(resolve(m).needs_draft_model for m in self.methods):
                if not self.drafts:
                    raise ConfigError("drafts", self.drafts, "draft_target needs a draft model",
                                      hint="pass --draft tiny-draft (or a local HF directory)")
                for draft in self.drafts:
                    check_pair(target, resolve_model(draft, field="drafts"))
            if any(resolve(m).needs_eagle_drafter for m in self.methods):
                for drafter in self.eagle:
                    resolve_eagle(drafter, field=EAGLE3.sweep_variant)
        for suite in self.suites:
            load_suite(suite, self.num_prompts)

    def _validate_options(self) -> None:
        """The closed-loop and engine options: numbers in range, variants that some method uses, engine-only
        options with the engine backend."""
        for field in ("num_requests", "prompt_tokens", "max_ngram"):
            if getattr(self, field) is not None:
                _positive(field, [getattr(self, field)])
        _positive("waves", [self.waves], allow_zero=True)
        for text in self.schedules:
            parse_schedule(text, field="schedules").check(max_k=self.max_draft_len)
        for text in self.ramps:
            parse_ramp(text)
        _positive("ramp_waves", [self.ramp_waves])
        if self.schedules and all(m == BASELINE for m in self.methods):
            raise ConfigError("schedules", self.schedules, "a schedule needs a speculative method",
                              hint="add a method such as draft_target, or drop schedules")
        for value in self.lookahead:
            parse_lookahead(value, field=LOOKAHEAD.sweep_variant)
        if self.lookahead and not any(resolve(m).jacobi for m in self.methods):
            raise ConfigError(LOOKAHEAD.sweep_variant, self.lookahead, "lookahead variants need method lookahead",
                              hint="add lookahead to methods, or drop lookahead")
        if self.suffix_cache is not None:
            if not self.suffix_cache:
                raise ConfigError("suffix_cache", self.suffix_cache, "must not be empty",
                                  hint="use cold, warm or cold,warm")
            if not any(resolve(m).cross_request_cache for m in self.methods):
                raise ConfigError("suffix_cache", self.suffix_cache, "cache states need method suffix",
                                  hint="add suffix to methods, or drop suffix_cache")
        if self.adaptive and all(m == BASELINE for m in self.methods):
            raise ConfigError("adaptive", self.adaptive, "adaptive k needs a speculative method",
                              hint="add a method such as draft_target, or drop adaptive")
        given = [name for name in ENGINE_ONLY if getattr(self, name) not in (None, []) and getattr(self, name) is not False]
        if given and self.via != "engine":
            raise ConfigError(given[0], getattr(self, given[0]), "is applied by the in-process engine only",
                              hint="sweep via engine, or configure the served model instead")
        self._validate_draft_runtime()

    def _validate_draft_runtime(self) -> None:
        """A draft runtime other than torch: via engine (a served model runs its own draft), with a method that runs
        a draft model, in float32 on the CPU (what ONNX Runtime runs: EngineConfig.draft_runtime's rule)."""
        runtime = self.draft_runtime
        if runtime == "torch":
            return
        if self.via != "engine":
            raise ConfigError("draft_runtime", runtime, "is applied by the in-process engine only", hint="sweep via "
                              "engine, or deploy with --draft-runtime and sweep the served model")
        if not any(resolve(m).needs_draft_model for m in self.methods):
            raise ConfigError("draft_runtime", runtime, "runs the draft model, and no method of the sweep has one",
                              hint="add draft_target (or suffix_draft) to methods, or drop draft_runtime")
        if self.dtype != "float32" or self.device != "cpu":
            raise ConfigError("draft_runtime", runtime, f"runs a float32 draft model on the CPU; the sweep has dtype "
                              f"{self.dtype}, device {self.device}", hint="set dtype float32 and device cpu, or drop "
                              "draft_runtime")

    def _check_grid_size(self) -> None:
        """Refuse a grid of more than MAX_CASES cases, from an upper bound computed without listing them."""
        variants = max(len(self.drafts), len(self.medusa) * len(self.trees), len(self.eagle) * len(self.eagle_trees),
                       len(self.lookahead), 1)
        per_point = 1 + len(self.methods) * variants * (len(set(self.k)) + len(set(self.adaptive))
                                                         + len(self.schedules))
        loads = len(self.concurrency) + len(self.ramps)
        bound = len(self.suites) * len(self.temperatures) * loads * per_point * self.repeats
        if bound > MAX_CASES:
            raise ConfigError("sweep", f"up to {bound} cases", f"is more than a sweep runs ({MAX_CASES} cases)",
                              hint="sweep fewer values (k, methods, temperatures, suites, concurrency) or repeats")

    def cases(self) -> list[Case]:
        """All cases in a deterministic order; each (suite, temperature, concurrency) starts with its k = 0 baseline
        unless shuffled.

        With repeats > 1 the whole grid is run in rounds (round r = cases with repeat r), so a burst of load from
        other processes hits one measurement of many cases rather than every measurement of one case. With shuffle
        each (suite, temperature, concurrency) point of a round runs its cases in their own seeded random order,
        points in grid order (the cases compared with each other stay seconds apart; the order is not part of a
        case id: a resumed sweep finds its done cases whatever the order).
        """
        out, points = [], self._points()
        for r in range(self.repeats):
            for i, point in enumerate(points):
                point = [replace(case, repeat=r, **self._run_options(case.concurrency, case.ramp)) for case in point]
                if self.shuffle:
                    random.Random(f"{self.seed}:{r}:{i}").shuffle(point)
                out.extend(point)
        return out

    def _points(self) -> list[list[Case]]:
        """The cases of one round per (suite, temperature, concurrency or ramp), its baseline first."""
        out: list[list[Case]] = []
        loads = [(c, None) for c in self.concurrency] + [(max(parse_ramp(r)), r) for r in self.ramps]
        for suite in self.suites:
            for temperature in self.temperatures:
                for concurrency, ramp in loads:
                    common = {"model": self.model, "temperature": float(temperature), "suite": suite,
                              "concurrency": concurrency, "max_new_tokens": self.max_new_tokens,
                              "num_prompts": self.num_prompts, "seed": self.seed, "via": self.via, "ramp": ramp}
                    point = [Case(method=BASELINE, k=0, **common)]  # always: speedups divide by it
                    for method in self.methods:
                        if method == BASELINE:
                            continue
                        for variant in self._variants(method):
                            point.extend(Case(method=method, k=k, **variant, **common)
                                         for k in self._ks(method, variant, self.k))
                            point.extend(Case(method=method, k=k, adaptive=True, **variant, **common)
                                         for k in self._ks(method, variant, self.adaptive))
                            for text in self.schedules:
                                schedule = parse_schedule(text)
                                point.append(Case(method=method, k=schedule.draft_len_at(1, self.max_draft_len),
                                                  schedule=schedule_text(schedule), **variant, **common))
                    out.append(point)
        return out

    def _run_options(self, concurrency: int, ramp: str | None = None) -> dict[str, int | None]:
        """Closed-loop fields of a case at this concurrency or ramp (None = default, left out of the case id)."""
        requests = max(self.num_requests or self.num_prompts, self.waves * concurrency)
        if ramp is not None:
            requests = len(ramp_limits(ramp, self.ramp_waves))
        return {"num_requests": requests if requests != self.num_prompts else None,
                "prompt_tokens": self.prompt_tokens}

    def _variants(self, method: str) -> list[dict[str, str | int | None]]:
        """The method's variants, each keyed as the home of what it varies names it (`sweep_variant`): the draft model
        (draft; and draft_runtime unless torch), Medusa heads (medusa), EAGLE-3 drafter (eagle), (W, N, G) (lookahead), max_ngram, suffix_cache; a
        method with a cross-request cache (suffix, the hybrids) has each of its others at each cache state."""
        info = resolve(method)
        variants = self._model_variants(method)
        if info.cross_request_cache and self.via == "engine":  # a served model's cache is the server's, as it stands
            return [{**variant, SUFFIX.sweep_variant: state} for variant in variants
                    for state in dict.fromkeys(self.suffix_cache or SUFFIX_CACHES)]
        return variants

    def _model_variants(self, method: str) -> list[dict[str, str | int | None]]:
        info = resolve(method)
        if info.needs_draft_model:  # a runtime other than torch is part of the case (left out at torch: ids stay)
            runtime = {"draft_runtime": self.draft_runtime} if self.draft_runtime != "torch" else {}
            return [{DRAFT_TARGET.sweep_variant: d, **runtime} for d in self.drafts]
        if info.needs_medusa_heads:
            return [{MEDUSA.sweep_variant: m, "tree": t} for m in self.medusa for t in self.trees]
        if info.needs_eagle_drafter and self.via == "engine":  # a served model has its own drafter and tree
            return [{EAGLE3.sweep_variant: e, "tree": t} for e in self.eagle for t in self.eagle_trees]
        if info.jacobi:
            return [{LOOKAHEAD.sweep_variant: w} for w in self.lookahead] or [{}]
        if self.max_ngram is not None and PARTS.get(info.engine_part or "") is Ngram:  # n-gram matching's knobs
            return [{NGRAM.sweep_variant: self.max_ngram}]
        return [{}]

    def _ks(self, method: str, variant: dict[str, str | int | None], ks: list[int]) -> list[int]:
        """Sorted distinct k > 0; lookahead's k counts trie nodes and stops at the full trie (a larger k drafts the
        same, see methods.lookahead_trie_nodes)."""
        if resolve(method).jacobi:
            window = variant.get(LOOKAHEAD.sweep_variant)
            wng = parse_lookahead(str(window)) if window else Lookahead().as_tuple()
            ks = [min(k, lookahead_trie_nodes(*wng)) for k in ks]
        return sorted({k for k in ks if k > 0})


# Case ids hash each field under the name it had when ids were first written, so a results file written before a
# rename still resumes (its done cases are skipped): field -> name in the id.
_ID_NAMES = {"via": "backend"}


@dataclass(frozen=True)
class Case:
    """One measured point of the grid. `case_id` hashes every field, so changing any one makes a new case."""

    model: str
    method: str
    k: int
    temperature: float
    suite: str
    concurrency: int
    max_new_tokens: int
    num_prompts: int
    seed: int
    via: str  # engine | triton
    draft: str | None = None
    medusa: str | None = None
    tree: str | None = None
    repeat: int = 0  # measurement round (see SweepSpec.repeats)
    lookahead: str | None = None  # W,N,G (method lookahead); None = the engine's default
    max_ngram: int | None = None  # ngram proposer option; None = its default
    adaptive: bool = False  # k is the cap of the engine's per-step choice
    num_requests: int | None = None  # requests (prompts reused round-robin); None = one per prompt
    prompt_tokens: int | None = None  # prompts cut to their last N tokens; None = whole
    suffix_cache: str | None = None  # suffix decoding: cold | warm cache at the start (None: not suffix, or served)
    eagle: str | None = None  # EAGLE-3 drafter (eagle3 via engine; its tree in `tree`)
    schedule: str | None = None  # a speculation schedule (schedule_text) capping k by batch size, and its gate
    ramp: str | None = None  # concurrency phases "1,4,16,4,1" of one closed loop (concurrency = the largest)
    draft_runtime: str | None = None  # what runs the draft model when not torch (onnx); None = torch

    @property
    def case_id(self) -> str:
        params = {_ID_NAMES.get(name, name): value for name, value in self.params().items()}
        return case_id(params)

    def params(self) -> dict[str, object]:
        """Every field, except that fields added later are left out at their defaults (round 0 included), so a
        case keeps the id an older sweep gave it and resumes from its results file."""
        out = asdict(self)
        for name, default in _LATER_FIELDS.items():
            if out[name] == default:
                del out[name]
        return out

    def label(self) -> str:
        extra = self.draft or self.medusa or self.lookahead or self.suffix_cache or ""
        if self.draft_runtime:
            extra = f"{extra}@{self.draft_runtime}"
        if self.eagle:
            extra = f"{self.eagle}/{self.tree}"
        k = f"k<={self.k} adaptive" if self.adaptive else f"schedule {self.schedule}" if self.schedule else f"k={self.k}"
        load = f"ramp={self.ramp}" if self.ramp else f"c={self.concurrency}"
        label = f"{self.method}{'/' + extra if extra else ''} {k} T={self.temperature:g} {self.suite} {load}"
        return label + (f" #{self.repeat}" if self.repeat else "")


_LATER_FIELDS = {"repeat": 0, LOOKAHEAD.sweep_variant: None, NGRAM.sweep_variant: None, "adaptive": False,
                 "num_requests": None, "prompt_tokens": None, SUFFIX.sweep_variant: None, EAGLE3.sweep_variant: None,
                 "schedule": None, "ramp": None, "draft_runtime": None}


def schedule_text(schedule: SpecSchedule) -> str:
    """A schedule's parameters as one case field: `draft_len_schedule=1:4,4:2;max_concurrency=8;...` (parameter
    order of SpecSchedule.PARAMETERS); `parse_schedule` reads it back."""
    return ";".join(f"{name}={value}" for name, value in schedule.to_parameters().items())


def parse_schedule(text: str, field: str = "schedule") -> SpecSchedule:
    """`schedule_text`'s form -> SpecSchedule; ConfigError naming `field` when an item is not NAME=VALUE or names
    no schedule parameter (the schedule's own errors name the entry and the rule)."""
    values: dict[str, str] = {}
    known = SpecSchedule.PARAMETERS.values()
    for item in text.split(";"):
        name, sep, value = item.strip().partition("=")
        if not sep or name not in known:
            raise ConfigError(field, text, f"item {item!r} is not NAME=VALUE with a schedule parameter",
                              hint="names: " + ", ".join(known) + "; e.g. draft_len_schedule=1:4,4:2;max_concurrency=8")
        values[name] = value
    return SpecSchedule.from_parameters(values)


def parse_ramp(text: str, field: str = "ramps") -> tuple[int, ...]:
    """"1,2,4,8,4,2,1" -> its concurrency phases; ConfigError naming `field` unless each is an integer >= 1."""
    try:
        phases = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ConfigError(field, text, "is not a comma-separated list of concurrencies",
                          hint="e.g. 1,2,4,8,16,8,4,2,1") from None
    _positive(field, list(phases), most=MAX_BATCH_SIZE)
    return phases


def ramp_limits(ramp: str, waves: int) -> list[int]:
    """[num_requests] the in-flight limit when each request of a ramp is submitted: phase c submits waves x c
    requests while fewer than c are in flight."""
    return [c for c in parse_ramp(ramp) for _ in range(waves * c)]


def case_id(params: dict[str, object]) -> str:
    """A stable 16-hex id of a parameter dict (key order does not matter)."""
    blob = json.dumps(params, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _items(text: str, field: str, example: str) -> list[str]:
    """The comma-separated items of a list option; an empty item (`1,,2`, `''`) is refused naming the option."""
    items = [p.strip() for p in text.split(",")]
    if not text.strip() or any(not p for p in items):
        raise UsageError(f"--{field}={text!r} has an empty item", hint=f"e.g. --{field} {example}")
    return items


def parse_int_list(text: str, field: str) -> list[int]:
    """`0-8`, `1,2,4` or `0-2,4` -> sorted unique ints; UsageError naming the option on bad input."""
    values: set[int] = set()
    try:
        for part in _items(text, field, "0-8"):
            if "-" in part[1:]:
                lo, hi = (int(end) for end in part.split("-", 1))
                if hi - lo >= MAX_RANGE:
                    raise UsageError(f"--{field}={text!r}: the range {part} spans more than {MAX_RANGE} values",
                                     hint=f"list fewer values, e.g. --{field} 0-8")
                values.update(range(lo, hi + 1))
            else:
                values.add(int(part))
    except ValueError:
        raise UsageError(f"--{field}={text!r} is not a list of integers",
                         hint=f"e.g. --{field} 0-8 or --{field} 1,2,4") from None
    if not values:
        raise UsageError(f"--{field}={text!r} is empty", hint=f"e.g. --{field} 0-8")
    return sorted(values)


def parse_float_list(text: str, field: str) -> list[float]:
    """`0,0.7,1` -> floats; non-numbers, nan and inf are refused naming the option."""
    try:
        values = [float(p) for p in _items(text, field, "0,1")]
    except ValueError:
        raise UsageError(f"--{field}={text!r} is not a list of numbers", hint=f"e.g. --{field} 0,1") from None
    if not all(math.isfinite(v) for v in values):
        raise UsageError(f"--{field}={text!r} holds a value that is not finite", hint=f"e.g. --{field} 0,1")
    return values


def parse_str_list(text: str, field: str) -> list[str]:
    return _items(text, field, "a,b")


def _positive(field: str, values: list[int] | list[float], *, allow_zero: bool = False,
              most: int = INT32_MAX) -> None:
    """Every value finite and > 0 (>= 0 with allow_zero); integers at most `most` (default INT32_MAX: counts the
    engine and TensorRT-LLM hold as int32)."""
    if not values:
        raise ConfigError(field, values, "must not be empty", hint=f"give at least one value for {field}")
    for v in values:
        if isinstance(v, float) and not math.isfinite(v):  # (an int is finite; float(10**400) would overflow)
            raise ConfigError(field, v, "must be a finite number", hint=f"fix {field} in the sweep config or flags")
        if v < 0 or (v == 0 and not allow_zero):
            raise ConfigError(field, v, "must be " + ("non-negative" if allow_zero else "positive"),
                              hint=f"fix {field} in the sweep config or flags")
        if isinstance(v, int) and v > most:
            raise ConfigError(field, shown(v), f"must be at most {most}",
                              hint=f"fix {field} in the sweep config or flags")


def _llm_api_target(info: MethodInfo) -> bool:
    """A supported build target's LLM API has the method's decoding type (MTP on 1.2.1; not suffix's SA, 1.3 only)."""
    from trtspec.targets import SUPPORTED_TARGETS, load_target

    return info.llmapi_decoding_type is not None and any(
        info.llmapi_decoding_type in load_target(v).llm_api.decoding_types for v in SUPPORTED_TARGETS)
