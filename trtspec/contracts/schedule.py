"""SpecSchedule: when a served engine speculates and how far, by load and by recent acceptance.

The static controls of TensorRT-LLM's PyTorch workflow (`speculative_config` of the LLM API), as one torch-free part
of the engine configuration, so the reference engine runs what a TensorRT-LLM deployment is given. What each release
does with them is `trtspec.targets.controls` (facts with sources, and NVIDIA's own test vectors):

- `draft_len`: the draft-length schedule {batch size: draft length}, sorted by batch size, in trtspec's canonical form
  (TensorRT-LLM 1.2.1's): at a step with b requests the draft length is the value of the largest key <= b (0: no
  speculation); it must hold batch size 1. A release that reads its keys otherwise (1.3.0rc29: upper bounds) gets it
  translated when the file is written (`controls.Release.release_schedule`).
- `max_concurrency`: no speculation above that many requests (the release's rule: `Release.speculates`).
- the acceptance gate, in the unit of the release whose names it uses:
  `acceptance_window` + `acceptance_length_threshold` (TensorRT-LLM 1.2.1's gate): after each completed request, its
  accepted draft tokens per iteration, bonus token excluded (max(0, generated tokens / iterations - 1), every
  iteration of the request counted, the first-token one included), over the last `acceptance_window` requests; the
  gate closes when the window is full and its mean is below the threshold.
  `acceptance_rate_window_size` + `acceptance_rate_threshold` (TensorRT-LLM 1.3's gate): after each iteration that
  drafted, accepted / drafted draft tokens of the batch (a rate in [0, 1]), over the last that many iterations.
- `controls`: how the engine runs them. `trtspec` (None, the default): the lookup and max_concurrency rule of 1.2.1,
  and a gate that reopens (below); `trtllm-1.2.1` / `trtllm-1.3.0rc29`: exactly that release, its gate permanent, so a
  sweep measures what the written file does there.

TensorRT-LLM's gate stays closed for the life of the server. trtspec's reopens by default: while closed, one request
at a time still speculates (a probe, the `probe_every`-th admitted request that would draft; the interval doubles
after each probe below the threshold, up to 16 x, and is restored by one at or above it), its acceptance enters the
window, and the gate opens again once the window's mean is back at the threshold. Traffic shifts (a burst of prose,
then code again); a gate that never reopens gives up the speedup for good after one bad stretch, while the probes'
share of requests falls from 1/probe_every towards 1/(16 x probe_every) as long as acceptance stays low.
`probe_every 0` is TensorRT-LLM's permanent gate (what the LLM-API file renders).

Forms: flat parameters (`draft_len_schedule` "1:4,4:2,16:0", `max_concurrency`, `acceptance_window`,
`acceptance_length_threshold`, `acceptance_rate_window_size`, `acceptance_rate_threshold`, `gate_probe_every`,
`speculation_controls`), JSON (`to_dict`), and the build config's `llm_api:` mapping (`llm_api_options` /
`from_llm_api`, canonical). Bad values are ConfigErrors naming the entry and the rule. Pure Python.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from trtspec.errors import ConfigError, shown

DraftLens = tuple[tuple[int, int], ...]  # ((batch size, draft length), ...), sorted by batch size
DEFAULT_PROBE_EVERY = 16  # while the gate is closed, a probe every this many admissions (before backoff)
MAX_BATCH = 1 << 20  # a batch-size key above this is not a batch size
MAX_ENTRIES = 4096  # a schedule's entries (one where the draft length changes; bounded by the max batch size)


_INTEGER = re.compile(r"-?[0-9]+")  # ASCII digits only (int() also takes other scripts' digits)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


CONTROLS = ("trtspec", "trtllm-1.2.1", "trtllm-1.3.0rc29")  # how an engine runs the controls (module docstring)
LENGTH_UNIT = "accepted draft tokens per iteration, bonus token excluded"
RATE_UNIT = "accepted / drafted draft tokens per iteration, in [0, 1]"


@dataclass(frozen=True)
class SpecSchedule:
    """Draft length by batch size, speculation off above `max_concurrency`, the acceptance gate (module docstring).
    Unset fields do nothing: no schedule caps k, no concurrency limit, no gate."""

    PARAMETERS: ClassVar[dict[str, str]] = {
        "draft_len": "draft_len_schedule", "max_concurrency": "max_concurrency",
        "acceptance_window": "acceptance_window", "acceptance_length_threshold": "acceptance_length_threshold",
        "probe_every": "gate_probe_every", "acceptance_rate_window_size": "acceptance_rate_window_size",
        "acceptance_rate_threshold": "acceptance_rate_threshold", "controls": "speculation_controls"}
    FLOATS: ClassVar[tuple[str, ...]] = ("acceptance_length_threshold", "acceptance_rate_threshold")
    LLM_API: ClassVar[tuple[str, ...]] = ("draft_len_schedule", "max_concurrency", "acceptance_window",
                                          "acceptance_length_threshold", "acceptance_rate_window_size",
                                          "acceptance_rate_threshold")

    draft_len: DraftLens | None = None
    max_concurrency: int | None = None
    acceptance_window: int | None = None  # completed requests in 1.2.1's gate; None or 0: no gate
    acceptance_length_threshold: float | None = None  # LENGTH_UNIT
    probe_every: int | None = None  # None: DEFAULT_PROBE_EVERY; 0: the gate never reopens (TensorRT-LLM)
    acceptance_rate_window_size: int | None = None  # iterations that drafted, in 1.3's gate; None or 0: no gate
    acceptance_rate_threshold: float | None = None  # RATE_UNIT
    controls: str | None = None  # None: "trtspec"

    def __post_init__(self) -> None:
        if self.draft_len is not None:
            pairs = self.draft_len.items() if isinstance(self.draft_len, Mapping) else self.draft_len
            try:
                pairs = tuple((key, value) for key, value in pairs)
            except (TypeError, ValueError):
                raise ConfigError("draft_len_schedule", shown(self.draft_len), "is not a mapping of batch size to "
                                  "draft length", hint="e.g. draft_len_schedule 1:4,4:2,16:0") from None
            object.__setattr__(self, "draft_len", tuple(sorted(pairs, key=lambda p: p[0] if _is_int(p[0]) else 0)))
        self.check()

    # -- rules -----------------------------------------------------------------------------------------------------
    def check(self, *, max_k: int | None = None, max_batch_size: int | None = None) -> None:
        """Raise ConfigError naming the entry and the rule: keys integers >= 1 (and <= `max_batch_size` when given),
        batch size 1 present, draft lengths integers >= 0 (and <= `max_k` when given), no key twice; max_concurrency,
        windows and probe_every integers >= 0; a length threshold a finite number >= 0, a rate in [0, 1]; each gate a
        window >= 1 with a threshold, one gate at most; `controls` one of CONTROLS, an exact release's own gate only,
        no probes."""
        name = self.PARAMETERS["draft_len"]
        if self.draft_len is not None:
            seen: set[int] = set()
            for key, value in self.draft_len:
                entry = f"{name}[{shown(key)}]"
                top = max_batch_size if max_batch_size is not None else MAX_BATCH
                if not _is_int(key) or not 1 <= key <= top:
                    bound = f"the max batch size {max_batch_size}" if max_batch_size is not None else f"{MAX_BATCH}"
                    raise ConfigError(entry, shown(key), f"a batch-size key must be an integer in [1, {bound}]",
                                      hint="keys are batch sizes: from that many running requests on, that draft "
                                           "length")
                if key in seen:
                    raise ConfigError(entry, key, "is given twice", hint="one draft length per batch size")
                seen.add(key)
                limit = "" if max_k is None else f", at most max_draft_len {max_k}"
                if not _is_int(value) or value < 0 or (max_k is not None and value > max_k):
                    raise ConfigError(entry, shown(value), f"a draft length must be an integer >= 0{limit} (0: no "
                                      "speculation)", hint=f"e.g. {name} 1:{max_k or 4},4:2,16:0")
            if 1 not in seen:
                raise ConfigError(name, self.text(), "must contain batch size 1 (TensorRT-LLM's rule: schedule[1] "
                                  "is the full draft length)", hint=f"add 1:{max_k or 'max_draft_len'}")
        for field_name in ("max_concurrency", "acceptance_window", "acceptance_rate_window_size", "probe_every"):
            value = getattr(self, field_name)
            if value is not None and (not _is_int(value) or not 0 <= value <= MAX_BATCH):
                raise ConfigError(self.PARAMETERS[field_name], shown(value), f"must be an integer in [0, {MAX_BATCH}]",
                                  hint={"max_concurrency": "e.g. 8: no speculation above 8 running requests",
                                        "acceptance_window": "e.g. 32 completed requests (0: no gate)",
                                        "acceptance_rate_window_size": "e.g. 64 iterations that drafted (0: no gate)",
                                        "probe_every": "e.g. 16 (0: a closed gate stays closed)"}[field_name])
        for window_name, threshold_name, high, unit, example in (
                ("acceptance_window", "acceptance_length_threshold", None, LENGTH_UNIT, "0.5"),
                ("acceptance_rate_window_size", "acceptance_rate_threshold", 1.0, RATE_UNIT, "0.3")):
            window, threshold = getattr(self, window_name), getattr(self, threshold_name)
            if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))
                                          or not math.isfinite(threshold) or threshold < 0
                                          or (high is not None and threshold > high)):
                span = "in [0, 1]" if high is not None else "a finite number >= 0"
                raise ConfigError(threshold_name, shown(threshold), f"must be {span} ({unit})", hint=f"e.g. {example}")
            if (window or 0) > 0 and threshold is None:
                raise ConfigError(threshold_name, None, f"is required with {window_name} {window}",
                                  hint=f"e.g. {threshold_name} {example} ({unit})")
            if threshold is not None and window is None:
                raise ConfigError(threshold_name, threshold, f"needs a window of at least 1 ({window_name}) beside it",
                                  hint=f"give the gate's window too, or drop {threshold_name}")
            if threshold is not None and not window:
                raise ConfigError(window_name, window, f"a gate with {threshold_name} needs a window of at least 1",
                                  hint=f"e.g. {window_name} 32")
        if self.acceptance_length_threshold is not None and self.acceptance_rate_threshold is not None:
            raise ConfigError("acceptance_rate_threshold", self.acceptance_rate_threshold, "is the TensorRT-LLM 1.3 "
                              "gate; acceptance_length_threshold (1.2.1's) is set too: one gate at most",
                              hint="keep the gate of the release you deploy to")
        self._check_controls()

    def _check_controls(self) -> None:
        controls = self.controls
        if controls is None or controls == "trtspec":
            return
        if controls not in CONTROLS:
            raise ConfigError("speculation_controls", shown(controls), "is not a way to run the controls",
                              hint="one of " + ", ".join(CONTROLS) + " (trtspec: a gate that reopens)")
        if self.probe_every:
            raise ConfigError("gate_probe_every", self.probe_every, f"{controls}'s gate is permanent (no probes)",
                              hint="drop it, or use speculation_controls trtspec")
        from trtspec.targets.controls import release

        own = release(controls).keys["threshold"]
        given = self.gate_keys
        if given is not None and given[1] != own:
            raise ConfigError(given[1], getattr(self, given[1]), f"is not the gate of {controls}",
                              hint=f"{controls}'s gate is {own}; or use speculation_controls trtspec")

    # -- semantics ---------------------------------------------------------------------------------------------------
    @property
    def exact(self) -> bool:
        """Whether the engine runs one release's controls exactly (its gate permanent)."""
        return self.controls is not None and self.controls != "trtspec"

    @property
    def release(self) -> str:
        """The TensorRT-LLM release whose lookup and max_concurrency rule the engine runs (trtspec: 1.2.1's)."""
        return self.controls.removeprefix("trtllm-") if self.exact and self.controls else "1.2.1"

    def draft_len_at(self, batch_size: int, k: int, *, max_batch_size: int | None = None) -> int:
        """The draft length for one request asking for `k` at a step with `batch_size` requests: 0 where
        max_concurrency turns speculation off (the release's rule, targets.controls), else min(k, the schedule's value
        at the largest key <= batch_size)."""
        from trtspec.targets.controls import release

        cap = next((value for key, value in reversed(self.draft_len) if key <= batch_size), k) if self.draft_len else k
        draft = min(k, cap)
        top = max_batch_size if max_batch_size is not None else max(batch_size, 1)
        if not release(self.release).speculates(self.max_concurrency, batch_size, top, None, draft):
            return 0
        return draft

    @property
    def gated(self) -> bool:
        """Whether an acceptance gate is on (a window of at least one and a threshold)."""
        return self.gate_window > 0

    @property
    def gate_keys(self) -> tuple[str, str] | None:
        """(window field, threshold field) of the gate this schedule carries, by its release's names; None: none."""
        if self.acceptance_length_threshold is not None:
            return "acceptance_window", "acceptance_length_threshold"
        if self.acceptance_rate_threshold is not None:
            return "acceptance_rate_window_size", "acceptance_rate_threshold"
        return None

    @property
    def gate_release(self) -> str | None:
        """The TensorRT-LLM release whose gate (names and unit) this schedule carries (targets.controls)."""
        from trtspec.targets.controls import releases

        keys = self.gate_keys
        return None if keys is None else next(r.name for r in releases() if r.keys["threshold"] == keys[1])

    @property
    def gate_unit(self) -> str | None:
        """"request" (a gate recorded per completed request: 1.2.1's), "iteration" (per drafting iteration: 1.3's),
        None (no gate)."""
        from trtspec.targets.controls import release

        if not self.gated or self.gate_release is None:
            return None
        return "request" if release(self.gate_release).facts["gate"]["per"] == "completed request" else "iteration"

    @property
    def gate_window(self) -> int:
        keys = self.gate_keys
        return (getattr(self, keys[0]) or 0) if keys is not None else 0

    @property
    def gate_threshold(self) -> float | None:
        keys = self.gate_keys
        return None if keys is None else getattr(self, keys[1])

    @property
    def probes(self) -> int:
        """One admitted request in this many speculates while the gate is closed (0: never; exact controls: 0)."""
        if self.exact:
            return 0
        return DEFAULT_PROBE_EVERY if self.probe_every is None else self.probe_every

    # -- forms -----------------------------------------------------------------------------------------------------
    def text(self) -> str | None:
        """The schedule as parameter text, "1:4,4:2,16:0" (None: unset)."""
        return None if self.draft_len is None else ",".join(f"{key}:{value}" for key, value in self.draft_len)

    @staticmethod
    def parse_draft_len(text: str, field: str = "draft_len_schedule") -> DraftLens:
        """"1:4,4:2,16:0" (or "1=4 4=2") -> ((1, 4), (4, 2), (16, 0)); ConfigError naming `field` when malformed:
        an empty entry, a number that is not ASCII digits, more than MAX_ENTRIES entries."""
        items = text.replace(" ", ",").split(",")
        if not text.strip():
            raise ConfigError(field, text, "holds no entry", hint="e.g. 1:4,4:2,16:0 (leave the flag out for no schedule)")
        if len(items) > MAX_ENTRIES:
            raise ConfigError(field, f"{len(items)} entries", f"holds more than {MAX_ENTRIES} entries",
                              hint="one entry where the draft length changes, e.g. 1:4,4:2,16:0")
        pairs = []
        for item in (i.strip() for i in text.strip().replace(" ", ",").split(",")):
            key, sep, value = item.replace("=", ":").partition(":")
            if not (sep and _INTEGER.fullmatch(key) and _INTEGER.fullmatch(value)):
                problem = "is an empty entry" if not item else "is not BATCH:DRAFT_LEN with two integers"
                raise ConfigError(field, text, f"entry {item!r} {problem}", hint="e.g. 1:4,4:2,16:0") from None
            pairs.append((int(key), int(value)))
        return tuple(pairs)

    def to_parameters(self) -> dict[str, str]:
        out = {}
        for name, parameter in self.PARAMETERS.items():
            value = getattr(self, name)
            if value is not None:
                out[parameter] = self.text() if name == "draft_len" else str(value)  # type: ignore[assignment]
        return out

    def values(self) -> dict[str, Any]:
        return {self.PARAMETERS[name]: dict(value) if name == "draft_len" else value
                for name in self.PARAMETERS if (value := getattr(self, name)) is not None}

    @classmethod
    def from_parameters(cls, values: Mapping[str, str]) -> SpecSchedule:
        out: dict[str, Any] = {}
        for name, parameter in cls.PARAMETERS.items():
            if parameter not in values:
                continue
            text = values[parameter]
            if name == "draft_len":
                out[name] = cls.parse_draft_len(text, f"parameter {parameter}") if text else None
                continue
            if name == "controls":
                out[name] = text or None
                continue
            try:
                out[name] = (_number(text) if name in cls.FLOATS else _integer(text)) if text else None
            except ValueError:
                expect = "a finite number" if name in cls.FLOATS else "an integer"
                raise ConfigError(f"parameter {parameter}", text, f"is not {expect}",
                                  hint="e.g. " + ("0.5" if name in cls.FLOATS else "8")) from None
        return cls(**out)

    def to_dict(self) -> dict[str, Any]:
        return {name: ([list(p) for p in self.draft_len] if self.draft_len is not None else None)
                if name == "draft_len" else getattr(self, name) for name in self.PARAMETERS}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "schedule") -> SpecSchedule:
        if not isinstance(data, Mapping):
            raise ConfigError(where, shown(data), "is not a mapping", hint="rebuild with this trtspec")
        unknown = sorted(str(k) for k in data if k not in cls.PARAMETERS)
        if unknown:
            raise ConfigError(f"{where}.{unknown[0]}", shown(data[unknown[0]]), "is not a field",
                              hint=f"known: {', '.join(cls.PARAMETERS)} (rebuild with this trtspec)")
        values = dict(data)
        if values.get("draft_len") is not None:
            if not isinstance(values["draft_len"], (list, tuple)) or \
                    not all(isinstance(p, (list, tuple)) and len(p) == 2 for p in values["draft_len"]):
                raise ConfigError(f"{where}.draft_len", shown(values["draft_len"]), "is not a list of [batch size, "
                                  "draft length] pairs", hint="rebuild with this trtspec")
            values["draft_len"] = tuple(tuple(p) for p in values["draft_len"])
        return cls(**values)

    def llm_api_options(self) -> dict[str, Any]:
        """The build config's `llm_api:` keys this schedule sets (trtspec's canonical form: the schedule as the
        largest key <= batch size reads it, each gate by its release's names); a target renders them in its own form
        (build/llm_api.py through targets.controls). The probes and `controls` have no LLM-API form."""
        out: dict[str, Any] = {}
        for key in self.LLM_API:
            name = "draft_len" if key == "draft_len_schedule" else key
            value = getattr(self, name)
            if value is not None:
                out[key] = dict(value) if name == "draft_len" else value
        return out

    @classmethod
    def from_llm_api(cls, options: Mapping[str, Any], *, probe_every: int | None = None,
                     controls: str | None = None) -> SpecSchedule | None:
        """The schedule of a build config's `llm_api:` mapping (`llm_api_options`' keys); None when it sets none."""
        draft_len = options.get("draft_len_schedule")
        schedule = cls(draft_len=tuple(dict(draft_len).items()) if isinstance(draft_len, Mapping) else draft_len,
                       **{key: options.get(key) for key in cls.LLM_API if key != "draft_len_schedule"},
                       probe_every=probe_every, controls=controls)
        return schedule if schedule.to_parameters() else None


def _integer(text: str) -> int:
    """An integer of ASCII digits (int() also takes other scripts' digits and underscores)."""
    if not _INTEGER.fullmatch(text.strip()):
        raise ValueError(text)
    return int(text)


def _number(text: str) -> float:
    """A decimal number of ASCII characters (float() alone also takes other scripts' digits); finiteness is the
    rules' (check)."""
    if not text.isascii() or "_" in text:
        raise ValueError(text)
    return float(text)
