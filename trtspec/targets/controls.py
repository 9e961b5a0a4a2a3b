"""What each TensorRT-LLM release does with the speculation controls: facts (controls.json, every rule with its
source) and a small executable model of them, which NVIDIA's own unit-test vectors run through (tests/test_controls.py).

trtspec keeps one canonical form of a schedule (`contracts.schedule.SpecSchedule.draft_len`: {batch size: draft length},
the value of the largest key <= the batch size applies, batch size 1 present). A `Release` says, for one release:

- `keys`: the LLM-API names of the controls (1.2.1: `acceptance_window` / `acceptance_length_threshold`; 1.3.0rc29:
  `acceptance_rate_window_size` / `acceptance_rate_threshold`);
- `applies(decoding_type, speculative_config)`: whether the decoding form reads the controls at all (1.2.1: only forms
  with a drafter; one-model EAGLE-3 ignores them without a word), or None where no fact was read for that form;
- `lookup(release_schedule, batch_size, max_draft_len)`: the release's own lookup of its `draft_len_schedule` (1.2.1:
  the largest key <= batch size; 1.3.0rc29: the first key >= batch size, 0 above the last key);
- `release_schedule(canonical, max_concurrency, max_batch_size)`: the canonical schedule (and max_concurrency) written
  in the release's form, so that `lookup` gives the canonical draft length at every batch size up to the max batch
  size; `speculates(...)`: when max_concurrency turns speculation off;
- `gate_value(...)` and `Gate`: what the acceptance gate records (1.2.1: per completed request, accepted draft tokens
  per iteration without the bonus token, `max(0, generated / iterations - 1)`; 1.3.0rc29: per speculating iteration,
  accepted / drafted), the rolling window, the strict `<` and the permanent close;
- `problems(speculative_config, decoding_type)`: what the release refuses, ignores or has no verified fact for, each
  naming the key, the release and the fix.

Pure: json only.
"""

from __future__ import annotations

import bisect
import json
import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Literal

FACTS_FILE = "controls.json"
Unit = Literal["accepted_per_iteration", "acceptance_rate"]


@dataclass(frozen=True)
class ControlProblem:
    """One control a release refuses, ignores or has no fact for: the key, what is wrong, the fix."""

    key: str
    problem: str
    fix: str

    def __str__(self) -> str:
        return f"{self.key}: {self.problem} (fix: {self.fix})"


class Gate:
    """A release's acceptance gate: `record(value)` -> (disabled now, the window's mean or None before the window has
    filled); once disabled it records nothing more and stays disabled (TensorRT-LLM's gate is permanent)."""

    def __init__(self, window: int, threshold: float, *, rate: bool = False) -> None:
        self.window, self.threshold, self.rate = window, threshold, rate
        self._values: deque[float] = deque()
        self._recorded = 0
        self.disabled = False

    @property
    def fill(self) -> int:
        """Samples in the window."""
        return len(self._values)

    @property
    def mean(self) -> float | None:
        """The window's mean so far (None: empty)."""
        return math.fsum(self._values) / len(self._values) if self._values else None

    def record(self, value: float) -> tuple[bool, float | None]:
        if self.disabled or self.window <= 0:
            return False, None
        if self.rate and not 0.0 <= value <= 1.0:
            raise ValueError(f"acceptance rate {value} outside [0, 1]")
        self._values.append(value)
        if len(self._values) > self.window:
            self._values.popleft()
        self._recorded += 1
        if self._recorded < self.window:
            return False, None
        mean = math.fsum(self._values) / len(self._values)
        if mean < self.threshold:
            self.disabled = True
            return True, mean
        return False, mean


@dataclass(frozen=True)
class Release:
    """One release's controls (module docstring); `facts` is its section of controls.json."""

    name: str
    facts: Mapping[str, Any]

    # -- names and units --------------------------------------------------------------------------------------------
    @property
    def keys(self) -> dict[str, str]:
        """{draft_len, max_concurrency, window, threshold} -> the release's LLM-API key."""
        return dict(self.facts["keys"])

    @property
    def unit(self) -> Unit:
        unit: Unit = self.facts["gate"]["unit"]
        return unit

    @property
    def unit_text(self) -> str:
        return str(self.facts["gate"]["unit_text"])

    @property
    def threshold_range(self) -> tuple[float, float | None]:
        gate = self.facts["gate"]
        return float(gate["threshold_min"]), gate["threshold_max"]

    # -- which forms read them --------------------------------------------------------------------------------------
    def tag(self, decoding_type: str) -> str:
        """The release's spelling of a decoding type (1.3.0rc29: `Draft_Target` for 1.2.1's `DraftTarget`)."""
        return str(self.facts.get("renamed", {}).get(decoding_type, decoding_type))

    def applies(self, decoding_type: str, speculative_config: Mapping[str, Any] | None = None) -> bool | None:
        """True: the form reads the controls; False: it ignores them; None: no fact was read for it."""
        forms = self.facts["forms"]
        config = speculative_config or {}
        for form in forms["applies"]:
            if form["decoding_type"] == decoding_type:
                if "field" not in form:
                    return True
                return bool(config.get(form["field"], form["default"])) == form["value"]
        if any(form["decoding_type"] == decoding_type for form in forms.get("unverified", ())):
            return None
        return False

    def unverified_why(self, decoding_type: str) -> str:
        return next((form["why"] for form in self.facts["forms"].get("unverified", ())
                     if form["decoding_type"] == decoding_type), "")

    # -- draft_len_schedule and max_concurrency ---------------------------------------------------------------------
    def lookup(self, schedule: Mapping[int, int] | None, batch_size: int, max_draft_len: int) -> int:
        """The draft length the release uses at `batch_size` for its own `draft_len_schedule` mapping."""
        if not schedule:
            return max_draft_len
        keys = sorted(schedule)
        if self.facts["schedule"]["lookup"] == "floor":
            index = bisect.bisect_right(keys, batch_size)
            return schedule[keys[index - 1]] if index else 0
        index = bisect.bisect_left(keys, batch_size)
        return schedule[keys[index]] if index < len(keys) else 0

    def speculates(self, max_concurrency: int | None, active: int, max_batch_size: int,
                   max_num_tokens: int | None = None, draft_len: int = 0) -> bool:
        """Whether max_concurrency leaves speculation on with `active` requests. 1.2.1 (the drafter):
        min(active, max_batch_size, max_num_tokens // (1 + draft_len)) <= max_concurrency, and never without a
        request; 1.3.0rc29 (the one-model path, max_concurrency translated into the schedule): active <= it."""
        if max_concurrency is None:
            return True
        if self.facts["schedule"]["lookup"] == "ceiling":
            return 0 < active <= max_concurrency
        if active <= 0 or max_batch_size <= 0 or (max_num_tokens is not None and max_num_tokens <= 0):
            return False
        token_cap = max_num_tokens // (1 + draft_len) if max_num_tokens is not None else active
        if token_cap <= 0:
            return False
        return min(active, max_batch_size, token_cap) <= max_concurrency

    def release_schedule(self, canonical: Mapping[int, int] | None, max_concurrency: int | None,
                         max_batch_size: int) -> tuple[dict[int, int] | None, int | None]:
        """(draft_len_schedule, max_concurrency) in the release's form, reading at every batch size 1..max_batch_size
        as the canonical schedule under max_concurrency does (canonical: the largest key <= b; speculation off above
        max_concurrency). 1.2.1 takes both as they are; 1.3.0rc29 refuses the two together, so max_concurrency is
        folded into the schedule (0 above it), and keys become the last batch size of each run."""
        if self.facts["schedule"]["lookup"] == "floor":
            return (dict(canonical) if canonical else None), max_concurrency
        if not canonical:
            return None, max_concurrency
        top = max_batch_size if max_concurrency is None else min(max_batch_size, max_concurrency)
        steps = sorted(canonical.items())
        out: dict[int, int] = {}
        for index, (key, value) in enumerate(steps):
            if key > top:
                break
            end = min(top, steps[index + 1][0] - 1) if index + 1 < len(steps) else top
            if out and list(out.values())[-1] == value:
                out.pop(max(out))
            out[end] = value
        while len(out) > 1 and out[max(out)] == 0:  # above the last key the release drafts 0 anyway
            out.pop(max(out))
        return out, None

    def canonical_schedule(self, schedule: Mapping[int, int] | None, max_concurrency: int | None
                           ) -> tuple[dict[int, int] | None, int | None]:
        """The inverse of `release_schedule`: (canonical draft_len_schedule, max_concurrency) that reads as the
        release's own `draft_len_schedule` (and max_concurrency) does at every batch size. 1.2.1: as they are;
        1.3.0rc29: each key is the last batch size of its run, 0 above the last key, so {3: 4, 7: 2} is
        {1: 4, 4: 2, 8: 0}; its max_concurrency alone stays max_concurrency."""
        if self.facts["schedule"]["lookup"] == "floor" or not schedule:
            return (dict(schedule) if schedule else None), max_concurrency
        out: dict[int, int] = {}
        start = 1
        for key, value in sorted(schedule.items()):
            if not out or list(out.values())[-1] != value:
                out[start] = value
            start = key + 1
        if list(out.values())[-1] != 0:
            out[start] = 0
        return out, None

    # -- the acceptance gate ----------------------------------------------------------------------------------------
    @staticmethod
    def accepted_per_iteration(avg_decoded_tokens_per_iter: float) -> float:
        """1.2.1's recorded value: max(0, avg decoded tokens per iteration - 1), the bonus token excluded."""
        return max(0.0, float(avg_decoded_tokens_per_iter) - 1.0)

    def request_gate_value(self, generated_tokens: int, iterations: int) -> float:
        """What 1.2.1 records for one completed request: `accepted_per_iteration(generated / iterations)`, the
        iterations counting every step of the request, its first-token step included (0 iterations: 0)."""
        return self.accepted_per_iteration(generated_tokens / iterations if iterations else 0.0)

    @staticmethod
    def iteration_gate_value(drafted: int, accepted: int) -> float | None:
        """What 1.3.0rc29 records for one iteration: accepted / drafted over the requests that drafted (None: none
        drafted, no sample)."""
        return accepted / drafted if drafted > 0 else None

    def gate(self, window: int, threshold: float) -> Gate:
        return Gate(window, threshold, rate=self.unit == "acceptance_rate")

    def threshold_from_break_even(self, tokens_per_iteration: float, draft_len: int) -> float:
        """The release's threshold at a break-even of `tokens_per_iteration` tokens per target forward (bonus
        included) for requests drafting `draft_len`: 1.2.1 records tokens per iteration - 1; 1.3.0rc29 the rate
        (tokens per iteration - 1) / draft_len."""
        accepted = tokens_per_iteration - 1.0
        return accepted if self.unit == "accepted_per_iteration" else accepted / max(1, draft_len)

    # -- what the release refuses or ignores ------------------------------------------------------------------------
    def problems(self, speculative_config: Mapping[str, Any], decoding_type: str) -> list[ControlProblem]:
        """The controls of a `speculative_config` mapping that this release refuses, ignores or has no verified fact
        for, with the fix. Keys of the other release's gate are named with this release's names."""
        keys = self.keys
        set_keys = [k for k in keys.values() if speculative_config.get(k) is not None]
        problems: list[ControlProblem] = []
        for other in releases():
            if other.name == self.name:
                continue
            for role in ("window", "threshold"):
                name = other.keys[role]
                if name != keys[role] and name in speculative_config:
                    unit = self.facts["gate"]["window_unit"] if role == "window" else self.unit_text
                    problems.append(ControlProblem(
                        name, f"is TensorRT-LLM {other.name}'s gate, not read by {self.name}",
                        f"use {keys[role]} ({unit}) for TensorRT-LLM {self.name} (a sweep's report writes it: "
                        "trtspec report --write-config), or drop it"))
        if not set_keys:
            return problems
        applies = self.applies(decoding_type, speculative_config)
        if applies is None:
            return problems + [ControlProblem(key, f"no fact was read for how TensorRT-LLM {self.name}'s {decoding_type} "
                                              f"uses it ({self.unverified_why(decoding_type)})",
                                              "drop it, or target a release whose facts cover it")
                               for key in set_keys]
        if not applies:
            forms = ", ".join(_form_text(f) for f in self.facts["forms"]["applies"])
            return problems + [ControlProblem(key, f"TensorRT-LLM {self.name}'s {decoding_type} ignores it ("
                                              f"{_form_text({'decoding_type': decoding_type}, speculative_config)} has "
                                              "no drafter to apply it)", f"use a form that reads it ({forms}), or drop it")
                               for key in set_keys]
        schedule_rule = self.facts["schedule"]
        if schedule_rule["exclusive_with_max_concurrency"] and speculative_config.get(keys["max_concurrency"]) is not None \
                and speculative_config.get(keys["draft_len"]) is not None:
            problems.append(ControlProblem(keys["max_concurrency"], f"TensorRT-LLM {self.name} refuses it beside "
                                           f"{keys['draft_len']} (mutually exclusive)",
                                           "fold it into the schedule: 0 above it (trtspec does when it renders)"))
        concurrency = speculative_config.get(keys["max_concurrency"])
        low = self.facts["max_concurrency"]["minimum"]
        if concurrency is not None and (not _is_int(concurrency) or concurrency < low):
            problems.append(ControlProblem(keys["max_concurrency"], f"{concurrency!r} is not an integer >= {low} "
                                           f"(TensorRT-LLM {self.name})", "e.g. 8: no speculation above 8 requests"))
        threshold = speculative_config.get(keys["threshold"])
        lo, hi = self.threshold_range
        if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))
                                      or not math.isfinite(threshold) or threshold < lo
                                      or (hi is not None and threshold > hi)):
            span = f"[{lo:g}, {hi:g}]" if hi is not None else f">= {lo:g}"
            problems.append(ControlProblem(keys["threshold"], f"{threshold!r} is outside {span}: TensorRT-LLM "
                                           f"{self.name}'s threshold is {self.unit_text}", f"a number {span}"))
        window = speculative_config.get(keys["window"])
        if window is not None and (not _is_int(window) or window < 0):
            problems.append(ControlProblem(keys["window"], f"{window!r} is not an integer >= 0 (TensorRT-LLM "
                                           f"{self.name}: {self.facts['gate']['window_unit']}; 0 disables the gate)",
                                           "e.g. 32"))
        return problems


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _form_text(form: Mapping[str, Any], config: Mapping[str, Any] | None = None) -> str:
    if config is not None:
        for field in ("eagle3_one_model", "mtp_eagle_one_model"):
            if field in config:
                return f"{form['decoding_type']} with {field} {str(bool(config[field])).lower()}"
        return str(form["decoding_type"])
    return f"{form['decoding_type']} with {form['field']}: {str(form['value']).lower()}" if "field" in form \
        else str(form["decoding_type"])


@cache
def facts() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(resources.files(__package__).joinpath(FACTS_FILE).read_text(encoding="utf-8"))
    return data


@cache
def release(name: str) -> Release:
    """The controls of TensorRT-LLM `name` ("1.2.1", "1.3.0rc29"; a "trtllm-" prefix is allowed); KeyError when
    controls.json has none."""
    name = name.removeprefix("trtllm-")
    return Release(name, facts()["releases"][name])


def releases() -> tuple[Release, ...]:
    return tuple(release(name) for name in facts()["releases"])


def has_release(name: str) -> bool:
    return name.removeprefix("trtllm-") in facts()["releases"]


def vectors(kind: str) -> list[dict[str, Any]]:
    """NVIDIA's unit-test vectors of one kind ("gate", "max_concurrency", "draft_len_schedule")."""
    return list(facts()["vectors"][kind])
