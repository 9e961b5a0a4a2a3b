"""SpecSchedule: when a served engine speculates and how far, by load and by recent acceptance.

The three static controls of TensorRT-LLM 1.2's PyTorch workflow (`speculative_config` of the LLM API; rules in
trtspec/targets/pytorch-workflow.json, 1.2.1 `rules.draft_len_schedule` / `rules.acceptance_gate`), as one torch-free
part of the engine configuration, so the reference engine runs what a TensorRT-LLM deployment is given:

- `draft_len`: the draft-length schedule {batch size: draft length}, sorted by batch size. At a step with b running
  requests the draft length is the value of the largest key <= b (0: no speculation); it must hold batch size 1.
- `max_concurrency`: no speculation at batch sizes above it.
- the acceptance gate: after each finished request that drafted, the mean of the acceptance lengths (tokens per
  drafting step, bonus token included) of the last `acceptance_window` such requests; when it falls below
  `acceptance_length_threshold` the gate closes and no request speculates.

TensorRT-LLM's gate stays closed for the life of the server. trtspec's reopens by default: while closed, one request
at a time still speculates (a probe, the `probe_every`-th admitted request that would draft; the interval doubles
after each probe below the threshold, up to 16 x, and is restored by one at or above it), its acceptance enters the
window, and the gate opens again once the window's mean is back at the threshold. Traffic shifts (a burst of prose,
then code again); a gate that never reopens gives up the speedup for good after one bad stretch, while the probes'
share of requests falls from 1/probe_every towards 1/(16 x probe_every) as long as acceptance stays low.
`probe_every 0` is TensorRT-LLM's permanent gate (what the LLM-API file renders).

Forms: flat parameters (`draft_len_schedule` "1:4,4:2,16:0", `max_concurrency`, `acceptance_window`,
`acceptance_length_threshold`, `gate_probe_every`), JSON (`to_dict`), and the LLM-API mapping (`llm_api_options` /
`from_llm_api`). Bad values are ConfigErrors naming the entry and the rule. Pure Python.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from trtspec.errors import ConfigError, shown

DraftLens = tuple[tuple[int, int], ...]  # ((batch size, draft length), ...), sorted by batch size
DEFAULT_PROBE_EVERY = 16  # while the gate is closed, a probe every this many admissions (before backoff)
MAX_BATCH = 1 << 20  # a batch-size key above this is not a batch size


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class SpecSchedule:
    """Draft length by batch size, speculation off above `max_concurrency`, the acceptance gate (module docstring).
    Unset fields do nothing: no schedule caps k, no concurrency limit, no gate."""

    PARAMETERS: ClassVar[dict[str, str]] = {
        "draft_len": "draft_len_schedule", "max_concurrency": "max_concurrency",
        "acceptance_window": "acceptance_window", "acceptance_length_threshold": "acceptance_length_threshold",
        "probe_every": "gate_probe_every"}

    draft_len: DraftLens | None = None
    max_concurrency: int | None = None
    acceptance_window: int | None = None  # finished requests in the gate's rolling mean; None or 0: no gate
    acceptance_length_threshold: float | None = None
    probe_every: int | None = None  # None: DEFAULT_PROBE_EVERY; 0: the gate never reopens (TensorRT-LLM)

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
        batch size 1 present, draft lengths integers >= 0 (and <= `max_k` when given), no key twice; max_concurrency
        an integer >= 0; a window an integer >= 0; a threshold a finite number >= 0; probe_every an integer >= 0."""
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
        for field_name in ("max_concurrency", "acceptance_window", "probe_every"):
            value = getattr(self, field_name)
            if value is not None and (not _is_int(value) or not 0 <= value <= MAX_BATCH):
                raise ConfigError(self.PARAMETERS[field_name], shown(value), f"must be an integer in [0, {MAX_BATCH}]",
                                  hint={"max_concurrency": "e.g. 8: no speculation above 8 running requests",
                                        "acceptance_window": "e.g. 32 finished requests (0: no gate)",
                                        "probe_every": "e.g. 16 (0: a closed gate stays closed)"}[field_name])
        threshold = self.acceptance_length_threshold
        if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))
                                      or not math.isfinite(threshold) or threshold < 0):
            raise ConfigError("acceptance_length_threshold", shown(threshold), "must be a finite number >= 0 "
                              "(tokens per drafting step)", hint="e.g. 1.3")
        if (self.acceptance_window or 0) > 0 and threshold is None:
            raise ConfigError("acceptance_length_threshold", None, "is required with acceptance_window "
                              f"{self.acceptance_window}", hint="e.g. acceptance_length_threshold 1.3")
        if threshold is not None and not self.acceptance_window:
            raise ConfigError("acceptance_window", self.acceptance_window, "a gate with a threshold needs a window of "
                              "at least 1 finished request", hint="e.g. acceptance_window 32")

    # -- semantics ---------------------------------------------------------------------------------------------------
    def draft_len_at(self, batch_size: int, k: int) -> int:
        """The draft length for one request asking for `k` at a step with `batch_size` running requests: 0 above
        max_concurrency, else min(k, the schedule's value at the largest key <= batch_size)."""
        if self.max_concurrency is not None and batch_size > self.max_concurrency:
            return 0
        if not self.draft_len:
            return k
        cap = next((value for key, value in reversed(self.draft_len) if key <= batch_size), k)
        return min(k, cap)

    @property
    def gated(self) -> bool:
        """Whether the acceptance gate is on (a window of at least one request)."""
        return bool(self.acceptance_window) and self.acceptance_length_threshold is not None

    @property
    def probes(self) -> int:
        """One admitted request in this many speculates while the gate is closed (0: never)."""
        return DEFAULT_PROBE_EVERY if self.probe_every is None else self.probe_every

    # -- forms -----------------------------------------------------------------------------------------------------
    def text(self) -> str | None:
        """The schedule as parameter text, "1:4,4:2,16:0" (None: unset)."""
        return None if self.draft_len is None else ",".join(f"{key}:{value}" for key, value in self.draft_len)

    @staticmethod
    def parse_draft_len(text: str, field: str = "draft_len_schedule") -> DraftLens:
        """"1:4,4:2,16:0" (or "1=4 4=2") -> ((1, 4), (4, 2), (16, 0)); ConfigError naming `field` when malformed."""
        pairs = []
        for item in text.replace(" ", ",").split(","):
            if not item:
                continue
            key, sep, value = item.replace("=", ":").partition(":")
            try:
                if not sep:
                    raise ValueError(item)
                pairs.append((int(key), int(value)))
            except ValueError:
                raise ConfigError(field, text, f"entry {item!r} is not BATCH:DRAFT_LEN with two integers",
                                  hint="e.g. 1:4,4:2,16:0") from None
        if not pairs:
            raise ConfigError(field, text, "holds no entry", hint="e.g. 1:4,4:2,16:0")
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
            try:
                out[name] = (float(text) if name == "acceptance_length_threshold" else int(text)) if text else None
            except ValueError:
                expect = "a number" if name == "acceptance_length_threshold" else "an integer"
                raise ConfigError(f"parameter {parameter}", text, f"is not {expect}",
                                  hint="redeploy the repository") from None
        return cls(**out)

    def to_dict(self) -> dict[str, Any]:
        return {"draft_len": None if self.draft_len is None else [list(p) for p in self.draft_len],
                "max_concurrency": self.max_concurrency, "acceptance_window": self.acceptance_window,
                "acceptance_length_threshold": self.acceptance_length_threshold, "probe_every": self.probe_every}

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
        """The LLM API's `speculative_config` keys this schedule sets (TensorRT-LLM 1.2.1's names); the gate's probes
        have no LLM-API form (TensorRT-LLM's gate is permanent)."""
        out: dict[str, Any] = {}
        if self.max_concurrency is not None:
            out["max_concurrency"] = self.max_concurrency
        if self.draft_len is not None:
            out["draft_len_schedule"] = dict(self.draft_len)
        if self.acceptance_window is not None:
            out["acceptance_window"] = self.acceptance_window
        if self.acceptance_length_threshold is not None:
            out["acceptance_length_threshold"] = self.acceptance_length_threshold
        return out

    @classmethod
    def from_llm_api(cls, options: Mapping[str, Any], *, probe_every: int | None = None) -> SpecSchedule | None:
        """The schedule of an LLM-API mapping's keys (`max_concurrency`, `draft_len_schedule`, `acceptance_window`,
        `acceptance_length_threshold`; a build config's `llm_api:` section); None when it sets none."""
        draft_len = options.get("draft_len_schedule")
        schedule = cls(draft_len=tuple(dict(draft_len).items()) if isinstance(draft_len, Mapping) else draft_len,
                       max_concurrency=options.get("max_concurrency"),
                       acceptance_window=options.get("acceptance_window"),
                       acceptance_length_threshold=options.get("acceptance_length_threshold"), probe_every=probe_every)
        return schedule if schedule.to_parameters() else None
