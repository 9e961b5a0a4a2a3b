"""The fields of results records that the report reads, checked once, where they are read (`analysis.load_results`).

Every number a record supplies to the analysis (a case's params and metrics, a calibration's timings, the type of
each field the report shows) is checked here for its type, that it is finite, and its range, before anything divides
by it, loops over it or sizes a table by it. A bad field is one ConfigError (exit 2) naming the file, the line, the
field (dotted: `metrics.stats.num_drafts`), the value, what it must be, and the fix; nothing downstream sees it.

Ranges: k is 0..MAX_K (a draft never holds more tokens than the largest draft tree, `choices.MAX_NODES`; the sweep
refuses a larger max_draft_len too), concurrencies and calibrated batch sizes 1..MAX_BATCH_SIZE (the report's
largest --max-batch-size: the schedule has a row per batch size up to the largest), counts are integers 0..MAX_COUNT
(exact as floats), seconds are finite and at most MAX_SECONDS, and strictly positive (at least MIN_SECONDS) where the
report divides by them (a case's wall and CPU time, a target forward). Fields the report does not read are carried
unread. Pure Python.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from trtspec.choices import MAX_NODES
from trtspec.errors import ConfigError, UnknownMethodError, UsageError, shown, shown_text
from trtspec.methods.draft_target import DRAFT_TARGET
from trtspec.methods.eagle import EAGLE3
from trtspec.methods.lookahead import LOOKAHEAD
from trtspec.methods.medusa import MEDUSA

MAX_K = MAX_NODES  # draft tokens per step: a draft tree has at most MAX_NODES nodes (max_draft_len = its nodes)
MAX_BATCH_SIZE = 4096  # concurrency / batch size; the report's --max-batch-size is at most this
MAX_COUNT = 2**53  # tokens, steps, drafts, requests: integers a float holds exactly
MIN_SECONDS, MAX_SECONDS = 1e-9, 1e9  # a duration that is divided by; any duration
MAX_RATE = 1e12  # tokens per second
INT32_MAX, UINT64_MAX = 2**31 - 1, 2**64 - 1  # the sweep's counts (int32) and seeds (uint64)

Rule = Callable[[Any], str | None]  # the problem with a value, or None when it is fine
MISSING = object()  # a field the record does not have


class _Bad(Exception):
    def __init__(self, field: str, value: Any, problem: str) -> None:
        super().__init__(problem)
        self.field, self.value, self.problem = field, value, problem


def integer(lo: int, hi: int) -> Rule:
    def rule(v: Any) -> str | None:
        if isinstance(v, bool) or not isinstance(v, int):
            return f"must be an integer in {lo}..{hi}"
        return None if lo <= v <= hi else f"must be an integer in {lo}..{hi}"
    return rule


def number(lo: float, hi: float = math.inf, *, what: str = "a finite number") -> Rule:
    """A finite int or float in [lo, hi] (bools are not numbers here)."""
    problem = f"must be {what} at least {lo:g}" + (f" and at most {hi:g}" if math.isfinite(hi) else "")

    def rule(v: Any) -> str | None:
        if isinstance(v, bool) or not isinstance(v, int | float):
            return problem
        if isinstance(v, int) and abs(v) > MAX_COUNT:  # float(10**400) overflows; no field here is that large
            return problem
        x = float(v)
        return problem if not math.isfinite(x) or not lo <= x <= hi else None
    return rule


def text(v: Any) -> str | None:
    return None if isinstance(v, str) else "must be a string"


def text_or_none(v: Any) -> str | None:
    return None if v is None or isinstance(v, str) else "must be a string or null"


def mapping_or_none(v: Any) -> str | None:
    return None if v is None or isinstance(v, dict) else "must be an object or null"


def mapping(v: Any) -> str | None:
    return None if isinstance(v, dict) else "must be an object"


def flag(v: Any) -> str | None:
    return None if v is None or isinstance(v, bool) else "must be true, false or null"


def optional(rule: Rule) -> Rule:
    return lambda v: None if v is None else rule(v)


def choice(*names: str) -> Rule:
    """One of `names` (strings)."""
    problem = f"must be {' or '.join(names)}"
    return lambda v: None if isinstance(v, str) and v in names else problem


def method(v: Any) -> str | None:
    from trtspec.methods import resolve

    if not isinstance(v, str):
        return "must be a method name (a string)"
    try:
        resolve(v)
    except UnknownMethodError as exc:
        return f"is not a method trtspec knows ({exc.hint})"
    return None


COUNT = integer(0, MAX_COUNT)
SECONDS = number(0.0, MAX_SECONDS, what="a finite number of seconds")
DIVISOR_SECONDS = number(MIN_SECONDS, MAX_SECONDS, what="a finite number of seconds")
TOKENS_PER_STEP = number(0.0, MAX_K + 1)

# params: the case's grid point (grid.Case.params); the report groups, divides and sizes tables by these
PARAMS: dict[str, tuple[Rule, bool]] = {  # name -> (rule, required)
    "method": (method, True), "model": (text, True), "suite": (text, True),
    "k": (integer(0, MAX_K), True), "concurrency": (integer(1, MAX_BATCH_SIZE), True),
    "temperature": (number(0.0), True), "max_new_tokens": (integer(1, INT32_MAX), True),
    "num_prompts": (optional(integer(1, INT32_MAX)), False), "seed": (optional(integer(0, UINT64_MAX)), False),
    "repeat": (optional(integer(0, INT32_MAX)), False), "num_requests": (optional(integer(1, INT32_MAX)), False),
    "prompt_tokens": (optional(integer(1, INT32_MAX)), False), "max_ngram": (optional(integer(1, INT32_MAX)), False),
    "adaptive": (flag, False), "draft": (text_or_none, False), MEDUSA.sweep_variant: (text_or_none, False),
    EAGLE3.sweep_variant: (text_or_none, False), "tree": (text_or_none, False),
    LOOKAHEAD.sweep_variant: (text_or_none, False),
    "suffix_cache": (text_or_none, False), "schedule": (text_or_none, False), "ramp": (text_or_none, False),
    "via": (text_or_none, False), "draft_runtime": (optional(choice("onnx")), False),  # only when not torch
}
# metrics: what the runner measured (backend_*.run_case)
METRICS: dict[str, tuple[Rule, bool]] = {
    "wall_time_s": (DIVISOR_SECONDS, True), "cpu_time_s": (optional(DIVISOR_SECONDS), False),
    "output_tokens": (optional(COUNT), False), "tokens_per_s": (optional(number(0.0, MAX_RATE)), False),
    "num_requests": (optional(integer(1, MAX_COUNT)), False), "num_steps": (optional(COUNT), False),
    "num_admission_steps": (optional(COUNT), False), "stats": (mapping, False),
}
STATS: dict[str, Rule] = {  # AcceptanceStats.to_dict, all optional
    **{name: COUNT for name in ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_target_forwards",
                                "num_emitted_tokens", "num_rejections")},
    **{name: SECONDS for name in ("draft_time_s", "target_time_s", "overhead_time_s")},
    "mean_acceptance_length": TOKENS_PER_STEP, "acceptance_rate": number(0.0, 1.0),
}
STATS_LISTS = ("num_accepted_tokens_per_pos", "num_rejections_per_pos", "accepted_length_histogram")  # of counts
# calibration: seconds per batch size (and per tokens per sequence); the `_cpu_s` twin of each too
CALIBRATION_BY_BATCH_AND_TOKENS = ("target", "draft_tokens")
CALIBRATION_BY_BATCH = ("draft", "target_prefill", "draft_prefill", "overhead", "overhead_token")


def check_records(path: Any, numbered: list[tuple[int, dict[str, Any]]], *, timing: str = "wall") -> None:
    """Check the records the report reads (`numbered`: (line, record)); ConfigError naming the first bad field.

    `timing` cpu (asked for, not auto) needs each ok case's `cpu_time_s`."""
    for lineno, rec in numbered:
        try:
            kind = rec.get("kind")
            if kind == "case":
                _case(rec, timing)
            elif kind == "calibration":
                _calibration(rec)
            elif kind == "sweep":
                _field(rec, "spec", mapping, required=True)
                _field(rec, "via_info", mapping_or_none)
        except _Bad as bad:
            name = bad.field if bad.field.isprintable() else shown_text(bad.field)  # a key read from the file
            hint = (f"the record was edited or written by another tool: correct the field, or delete line {lineno} "
                    "and rerun the sweep with --out on this file (it runs the case again)")
            if bad.value is MISSING:
                raise UsageError(f"{path}:{lineno}: {name} is missing", hint=hint) from None
            raise ConfigError(f"{path}:{lineno}: {name}", shown(bad.value), bad.problem, hint=hint) from None


def _field(mapping: Mapping[str, Any], name: str, rule: Rule, *, required: bool = False, prefix: str = "") -> None:
    if name not in mapping:
        if required:
            raise _Bad(prefix + name, MISSING, "is missing")
        return
    problem = rule(mapping[name])
    if problem:
        raise _Bad(prefix + name, mapping[name], problem)


def _object(rec: Mapping[str, Any], name: str, prefix: str = "") -> dict[str, Any]:
    value = rec.get(name, MISSING)
    if not isinstance(value, dict):
        raise _Bad(prefix + name, value, "must be an object")
    return value


def _case(rec: dict[str, Any], timing: str) -> None:
    status = rec.get("status")
    _field(rec, "via_info", mapping_or_none)
    _field(rec, "label", text)
    if status == "error":
        error = _object(rec, "error")
        for name in ("type", "message"):
            _field(error, name, text, required=True, prefix="error.")
        _field(error, "hint", text_or_none, prefix="error.")
        return
    if status != "ok":
        raise _Bad("status", status, "must be ok or error")
    params = _object(rec, "params")
    for name, (rule, required) in PARAMS.items():
        _field(params, name, rule, required=required, prefix="params.")
    metrics = _object(rec, "metrics")
    for name, (rule, required) in METRICS.items():
        _field(metrics, name, rule, required=required or (name == "cpu_time_s" and timing == "cpu"),
               prefix="metrics.")
    _list(metrics, "admission_trace", "metrics.", COUNT, length=3)  # per admission step: rows, admitted, prompt
    _list(metrics, "per_request_counts", "metrics.", COUNT, length=5)  # drafts, draft/accepted/emitted tokens, forwards
    _list(metrics, "per_request_mean_acceptance_length", "metrics.", TOKENS_PER_STEP)
    stats = metrics.get("stats", {})
    for name, rule in STATS.items():
        _field(stats, name, optional(rule), prefix="metrics.stats.")
    for name in STATS_LISTS:
        _list(stats, name, "metrics.stats.", COUNT)
    _consistent(metrics, stats)


def _consistent(metrics: Mapping[str, Any], stats: Mapping[str, Any]) -> None:
    """The counts the step-trace model combines agree: a row drafts at most once per target forward (a forward is a
    row of a step), an admission step admits at most its rows, and the admission steps' rows are among the forwards
    (servers that count no forwards, 0, are not held to it)."""
    forwards = stats.get("num_target_forwards") or 0
    if forwards and (stats.get("num_drafts") or 0) > forwards:
        raise _Bad("metrics.stats.num_drafts", stats["num_drafts"],
                   f"must be at most num_target_forwards ({forwards}): a row drafts at most once per forward")
    trace = metrics.get("admission_trace") or []
    for i, (rows, admitted, _) in enumerate(trace):
        if admitted > rows:
            raise _Bad(f"metrics.admission_trace[{i}]", trace[i], "admits more requests than the step has rows")
    rows = sum(step[0] for step in trace[:metrics.get("num_steps") or 0])
    if forwards and rows > forwards:
        raise _Bad("metrics.admission_trace", trace, f"its steps hold {rows} rows, more than the "
                   f"num_target_forwards ({forwards}) of the whole run")


def _list(mapping: Mapping[str, Any], name: str, prefix: str, rule: Rule, *, length: int | None = None) -> None:
    """`mapping[name]`, when set: a list of values (or, with `length`, of lists of that many values) each fine."""
    values = mapping.get(name)
    if values is None:
        return
    if not isinstance(values, list):
        raise _Bad(prefix + name, values, "must be a list")
    for i, item in enumerate(values):
        items = [item]
        if length is not None:
            if not isinstance(item, list) or len(item) != length:
                raise _Bad(f"{prefix}{name}[{i}]", item, f"must be a list of {length} numbers")
            items = item
        for j, value in enumerate(items):
            problem = rule(value)
            if problem:
                where = f"[{i}]" if length is None else f"[{i}][{j}]"
                raise _Bad(f"{prefix}{name}{where}", value, problem)


BATCH_KEY = (integer(1, MAX_BATCH_SIZE), "a batch size")
TOKENS_KEY = (integer(1, MAX_K + 1), "tokens per sequence")


def _key(field: str, key: str, kind: tuple[Rule, str]) -> None:
    """A JSON object key that names a number ("4"), written as the analysis writes it back (str(int(key)))."""
    rule, what = kind
    if not (key.isascii() and key.isdigit() and len(key) <= 6 and key == str(int(key))) or rule(int(key)):
        raise _Bad(field, key, f"a key of {what}: {(rule(0) or '').removeprefix('must be ')}, in decimal digits")


def _calibration(rec: dict[str, Any]) -> None:
    _field(rec, "model", text, required=True)
    for name in (DRAFT_TARGET.checkpoint, MEDUSA.checkpoint, "of", EAGLE3.checkpoint):  # the model set's checkpoints
        _field(rec, name, text_or_none)
    _field(rec, "draft_runtime", optional(choice("onnx")))  # what ran its draft model, when not torch
    _field(rec, "prompt_tokens", optional(number(0.0, MAX_COUNT)))
    for suffix in ("s", "cpu_s"):
        for role in CALIBRATION_BY_BATCH_AND_TOKENS:
            name = f"{role}_{suffix}"
            if name not in rec:
                continue
            by_batch = _object(rec, name)
            if role == "target" and not by_batch:
                raise _Bad(name, by_batch, "must hold at least one batch size")
            for batch, by_tokens in by_batch.items():
                _key(f"{name}.{batch}", batch, BATCH_KEY)
                if not isinstance(by_tokens, dict) or not by_tokens:
                    raise _Bad(f"{name}.{batch}", by_tokens, "must be an object of tokens per sequence: seconds")
                for tokens, seconds in by_tokens.items():
                    _key(f"{name}.{batch}.{tokens}", tokens, TOKENS_KEY)
                    problem = (DIVISOR_SECONDS if role == "target" else SECONDS)(seconds)
                    if problem:
                        raise _Bad(f"{name}.{batch}.{tokens}", seconds, problem)
        for role in CALIBRATION_BY_BATCH:
            _by_batch(rec, f"{role}_{suffix}", f"{role}_{suffix}")
        proposers = rec.get(f"proposer_{suffix}")
        if proposers is not None:
            for name in _object(rec, f"proposer_{suffix}"):
                _by_batch(proposers, name, f"proposer_{suffix}.{name}")


def _by_batch(mapping: Mapping[str, Any], name: str, field: str) -> None:
    """`mapping[name]`, when set: an object of batch size: seconds."""
    if name not in mapping:
        return
    by_batch = mapping[name]
    if not isinstance(by_batch, dict):
        raise _Bad(field, by_batch, "must be an object of batch size: seconds")
    for batch, seconds in by_batch.items():
        _key(f"{field}.{batch}", batch, BATCH_KEY)
        problem = SECONDS(seconds)
        if problem:
            raise _Bad(f"{field}.{batch}", seconds, problem)
