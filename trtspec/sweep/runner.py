"""Run a sweep: preflight, calibrate, then one record per case appended to results.jsonl, resumable.

The runner knows nothing about models: a `Backend` (spec.via: the in-process engine, or Triton over gRPC) runs one
case and returns its measurements. Order of work:
  1. preflight  the spec is already validated; the backend checks what only it can (server reachable, engine max_k)
  2. resume     read the results file, cut a torn last line, skip case ids that already have a record
  3. calibrate  per model set, time target forwards over 1..max_k+1 tokens and a draft forward at batch 1/4/16
                (via engine only, unless spec.calibrate is off; `calibration` records for the cost model), in
                spec.calibration_slices slices: the first before the cases, the others between them
  4. cases      run each missing case over its suite's prompts (reused round-robin up to the case's num_requests);
                an exception becomes an `error` record and the sweep goes on
A KeyboardInterrupt or kill stops between (or inside) cases; the next run resumes with the missing ones.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from trtspec.errors import TrtspecError
from trtspec.methods.draft_target import DRAFT_TARGET
from trtspec.methods.eagle import EAGLE3
from trtspec.methods.lookahead import LOOKAHEAD
from trtspec.methods.medusa import MEDUSA
from trtspec.methods.suffix import SUFFIX
from trtspec.sweep.grid import Case, SweepSpec, case_id
from trtspec.sweep.model_set import ModelSet, model_sets
from trtspec.sweep.prompts import PromptSuite, load_suite
from trtspec.sweep.records import Record, ResultsFile, latest_by_id


class Backend(Protocol):
    """What the runner needs from an execution backend.

    A backend may also define `check_model_set(spec, model_set)`, called for each model set during preflight (the
    engine one loads the models there and checks methods and prompt lengths before any case runs).
    """

    name: str

    def preflight(self, spec: SweepSpec) -> None:
        """Raise a TrtspecError before any case runs when the backend cannot run this spec."""

    def calibrate(self, spec: SweepSpec, model_set: ModelSet) -> Record | None:
        """Forward-cost micro-benchmark for one model set (fields of a calibration record), or None."""

    def run_case(self, case: Case, suite: PromptSuite, spec: SweepSpec) -> dict[str, Any]:
        """Run every prompt of the suite for this case; return the `metrics` of its record."""

    def info(self) -> dict[str, Any]:
        """Static facts for every record (versions, url, device)."""

    def close(self) -> None: ...


@dataclass
class SweepSummary:
    total: int
    skipped: int
    ran: int = 0
    errors: int = 0
    calibrations: int = 0
    error_messages: list[str] = field(default_factory=list)


def make_backend(spec: SweepSpec) -> Backend:
    """The backend `spec.via` names (imported lazily: torch or tritonclient only when used)."""
    if spec.via == "engine":
        from trtspec.sweep.backend_engine import EngineBackend

        return EngineBackend()
    if spec.via == "openai":
        from trtspec.sweep.backend_openai import OpenAIBackend

        return OpenAIBackend()
    from trtspec.sweep.backend_triton import TritonBackend

    return TritonBackend()


def run_sweep(spec: SweepSpec, out: str | Path, *, backend: Backend | None = None, show_progress: bool = True,
              retry_errors: bool = False, on_record: Callable[[Record], None] | None = None) -> SweepSummary:
    """Run (or resume) a sweep into `out`; returns what was run and skipped."""
    cases = spec.cases()
    suites = {s: load_suite(s, spec.num_prompts) for s in spec.suites}
    backend = backend or make_backend(spec)
    results = ResultsFile(out)
    try:
        # 1. preflight (before any file is touched): the backend's own checks, then per model set (via engine)
        backend.preflight(spec)
        check = getattr(backend, "check_model_set", None)
        if check is not None:
            for model_set in model_sets(cases):
                check(spec, model_set)
        # 2. resume
        existing = results.open_for_append()
        done_cases = latest_by_id(existing, "case")
        done = {cid for cid, rec in done_cases.items() if rec.get("status") == "ok" or not retry_errors}
        done_calib = set(latest_by_id(existing, "calibration"))
        todo = [c for c in cases if c.case_id not in done]
        summary = SweepSummary(total=len(cases), skipped=len(cases) - len(todo))
        if todo:
            results.append({"kind": "sweep", "id": "sweep-" + case_id(spec.model_dump()), "spec": spec.model_dump(),
                            "started_at": _now(), "via_info": backend.info()})
        with _progress(show_progress, len(cases), summary.skipped) as progress:
            # 3. calibrate (slice 0 of each model set now, the others between the cases) and 4. cases
            sets = model_sets(cases) if todo and spec.calibrate else []
            slices = calibration_slices(spec, len(todo))
            for index, case in enumerate([*todo, None]):
                for number in slices.get(index, ()):
                    for model_set in sets:
                        if _slice_id(model_set, number) not in done_calib:
                            _calibrate(backend, spec, model_set, number, results, summary, progress)
                if case is None:
                    break
                progress.describe(case.label())
                suite = suites[case.suite]
                rec = _run_one(backend, case, suite.cycled(case.num_requests) if case.num_requests else suite, spec,
                               summary)
                results.append(rec)
                if on_record:
                    on_record(rec)
                progress.advance()
        return summary
    finally:
        results.close()
        backend.close()


def calibration_slices(spec: SweepSpec, num_cases: int) -> dict[int, list[int]]:
    """Before which case (index into the cases to run; num_cases: after the last) each calibration slice runs: slice
    0 before the first, slice i before case round(i x num_cases / slices)."""
    at: dict[int, list[int]] = {}
    for number in range(spec.calibration_slices):
        at.setdefault(round(number * num_cases / spec.calibration_slices), []).append(number)
    return at


def _slice_id(model_set: ModelSet, number: int) -> str:
    """Slice 0 keeps the model set's calibration id (a one-slice sweep writes what it always wrote)."""
    return model_set.calibration_id if number == 0 else f"{model_set.calibration_id}.slice{number}"


def _calibrate(backend: Backend, spec: SweepSpec, model_set: ModelSet, number: int, results: ResultsFile,
               summary: SweepSummary, progress: _progress) -> None:
    """One calibration slice of one model set, appended as a `calibration` record (`slice` of `slices`, `of` the
    model set's calibration id: `sweep.analysis` takes the median over a model set's slices)."""
    progress.describe(f"calibrating {model_set.model}+{model_set.draft or model_set.medusa or model_set.eagle or '-'}"
                      + (f" (slice {number + 1} of {spec.calibration_slices})" if spec.calibration_slices > 1 else ""))
    repeats = max(1, spec.calibration_repeats // spec.calibration_slices)
    part = spec if spec.calibration_slices == 1 else spec.model_copy(update={"calibration_repeats": repeats})
    fields = _guarded(lambda: backend.calibrate(part, model_set), summary)
    if fields:
        slice_fields = {"slice": number, "slices": spec.calibration_slices, "of": model_set.calibration_id} \
            if spec.calibration_slices > 1 else {}
        results.append({"kind": "calibration", "id": _slice_id(model_set, number), "model": model_set.model,
                        DRAFT_TARGET.checkpoint: model_set.draft, MEDUSA.checkpoint: model_set.medusa,
                        **({"draft_runtime": model_set.draft_runtime} if model_set.draft_runtime else {}),
                        "measured_at": _now(), **slice_fields,
                        **fields})
        summary.calibrations += 1


def _run_one(backend: Backend, case: Case, suite: PromptSuite, spec: SweepSpec, summary: SweepSummary) -> Record:
    rec: Record = {
        "kind": "case", "id": case.case_id, "label": case.label(), "params": case.params(),
        "sampling": {"temperature": case.temperature, "top_k": 0, "top_p": 1.0, "seed": case.seed,
                     "seed_rule": "request i uses seed + i", "max_new_tokens": case.max_new_tokens},
        "spec": {"method": case.method, "k": case.k, "draft": case.draft, MEDUSA.sweep_variant: case.medusa,
                 "tree": case.tree, **{name: case.params()[name] for name in (
                     "adaptive", LOOKAHEAD.sweep_variant, SUFFIX.sweep_variant, EAGLE3.sweep_variant, "draft_runtime")
                     if name in case.params()}},
        "chat_template": spec.chat_template, "prompts": suite.describe(), "via_info": backend.info(),
        "host": platform.node(), "started_at": _now(),
    }
    start = time.perf_counter()
    try:
        rec["metrics"] = backend.run_case(case, suite, spec)
        rec["status"] = "ok"
        summary.ran += 1
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001 - a failed case must not stop the sweep; the record says why
        rec["status"] = "error"
        rec["error"] = {"type": type(exc).__name__, "message": str(exc),
                        "hint": getattr(exc, "hint", None)}
        summary.errors += 1
        summary.error_messages.append(f"{case.label()}: {type(exc).__name__}: {exc}")
    rec["elapsed_s"] = round(time.perf_counter() - start, 4)
    return rec


def _guarded(fn: Callable[[], Record | None], summary: SweepSummary) -> Record | None:
    try:
        return fn()
    except TrtspecError:
        raise
    except Exception as exc:  # noqa: BLE001 - the cost model degrades gracefully without calibration
        summary.error_messages.append(f"calibration: {type(exc).__name__}: {exc}")
        return None


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class _progress:
    """A rich progress bar over cases (a no-op when disabled)."""

    def __init__(self, enabled: bool, total: int, completed: int) -> None:
        self.enabled, self.total, self.completed = enabled, total, completed
        self._progress: Any = None
        self._task: Any = None

    def __enter__(self) -> _progress:
        if self.enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(TextColumn("[bold]sweep"), BarColumn(), MofNCompleteColumn(),
                                      TimeElapsedColumn(), TextColumn("{task.description}"), transient=False)
            self._progress.__enter__()
            self._task = self._progress.add_task("", total=self.total, completed=self.completed)
        return self

    def describe(self, text: str) -> None:
        if self._progress:
            self._progress.update(self._task, description=text)

    def advance(self) -> None:
        if self._progress:
            self._progress.advance(self._task)

    def __exit__(self, *exc: object) -> None:
        if self._progress:
            self._progress.__exit__(*exc)
