"""The deploy-time baseline: what the sweep that chose k measured, stored with the repository as a typed file.

`Baseline` keeps what monitoring needs as its reference (built from a sweep's results by
`trtspec.sweep.baseline.from_results`):
- acceptance per draft position, as pooled counts (accepted, rejected, drafts per position): r_i and c_i,
- plain-decoding tokens/s per concurrency (k = 0 cases) and speculative tokens/s per (k, concurrency),
- the cost model's inputs: calibrated step costs per batch size and host overhead per step per (k, concurrency),
  timed in wall-clock seconds (the monitor compares them with a live server's wall-clock throughput).
`trtspec deploy --baseline` writes it into the repository as `trtspec-baseline.json` (BASELINE_FILE) and names it
in `trtspec-repo.json`; `load_baseline` reads it back (from the file, or from a repository directory).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trtspec.contracts import costmodel
from trtspec.contracts.metrics import conditional_acceptance
from trtspec.contracts.repository import REPO_RECORD
from trtspec.errors import UsageError
from trtspec.textfile import read_text_file

FORMAT = "trtspec-baseline/1"
BASELINE_FILE = "trtspec-baseline.json"
# The most a baseline file may hold: a real one is a few KiB (per-position counts up to max_k, costs per batch size),
# so a larger file is another file (a results JSONL named .json, a device, a binary) and is refused unread.
MAX_BASELINE_BYTES = 4 << 20


class StepCostsRecord(BaseModel):
    """costmodel.StepCosts as data (seconds per forward at one batch size)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    batch_size: int = Field(ge=1)
    target_s: dict[int, float]  # tokens per sequence in the forward -> seconds
    draft_s: float = 0.0
    target_prefill_s: float = 0.0
    draft_prefill_s: float = 0.0
    draft_tokens_s: dict[int, float] | None = None

    @classmethod
    def of(cls, costs: costmodel.StepCosts) -> StepCostsRecord:
        return cls(batch_size=costs.batch_size, target_s=dict(costs.target_s), draft_s=costs.draft_s,
                   target_prefill_s=costs.target_prefill_s, draft_prefill_s=costs.draft_prefill_s,
                   draft_tokens_s=dict(costs.draft_tokens_s) if costs.draft_tokens_s else None)

    def costs(self) -> costmodel.StepCosts:
        return costmodel.StepCosts(self.batch_size, dict(self.target_s), self.draft_s, self.target_prefill_s,
                                   self.draft_prefill_s, dict(self.draft_tokens_s) if self.draft_tokens_s else None)


class Baseline(BaseModel):
    """Acceptance, throughput and costs measured when k was chosen (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format: Literal["trtspec-baseline/1"] = FORMAT
    model: str  # the target
    draft: str | None = None
    method: str
    temperature: float
    suites: list[str]
    k: int = Field(ge=0)  # the deployed default k
    max_k: int = Field(ge=1)  # the largest k a recommendation may choose
    # pooled acceptance counts per draft position, over the baseline cases
    drafts_per_pos: list[int]  # drafts that proposed a token at position i (cases with k > i)
    accepted_per_pos: list[int]  # drafts whose first i+1 tokens were accepted
    rejections_per_pos: list[int]  # drafts whose first rejection was at position i
    tokens_per_step_by_k: dict[int, float]  # measured mean acceptance length per k
    plain_tokens_per_s: dict[int, float]  # concurrency -> tokens/s of plain decoding (wall clock)
    spec_tokens_per_s: dict[int, dict[int, float]] = {}  # k -> concurrency -> tokens/s
    costs: list[StepCostsRecord]  # calibrated, one per batch size
    overhead_s: dict[int, dict[int, float]] = {}  # k (0 = plain) -> concurrency -> host seconds per step
    source: dict[str, Any] = {}  # results path, sha256, case ids

    @property
    def acceptance_per_pos(self) -> list[float]:
        """r_i = P(first i+1 accepted) over the drafts that reached position i."""
        return [a / d if d else 0.0 for a, d in zip(self.accepted_per_pos, self.drafts_per_pos, strict=True)]

    @property
    def conditional_per_pos(self) -> list[float]:
        return conditional_acceptance(self.accepted_per_pos, self.rejections_per_pos)

    @property
    def trials_per_pos(self) -> list[int]:
        return [a + r for a, r in zip(self.accepted_per_pos, self.rejections_per_pos, strict=True)]

    def plain_tokens_per_s_at(self, concurrency: float) -> float | None:
        """Plain decoding's tokens/s at the measured concurrency nearest to `concurrency`."""
        if not self.plain_tokens_per_s:
            return None
        return self.plain_tokens_per_s[_nearest(self.plain_tokens_per_s, concurrency)]

    def step_costs(self, batch: float) -> costmodel.StepCosts:
        """Calibrated costs at `batch` (interpolated between calibrated batch sizes, clamped at the ends)."""
        by_size = {c.batch_size: c.costs() for c in self.costs}
        sizes = sorted(by_size)
        lo = max((b for b in sizes if b <= batch), default=sizes[0])
        hi = min((b for b in sizes if b >= batch), default=sizes[-1])
        return by_size[lo] if lo == hi else costmodel.blend(by_size[lo], by_size[hi], (batch - lo) / (hi - lo))

    def overhead_at(self, k: int, concurrency: float) -> float:
        """Host seconds per step at k (nearest measured k of the same kind: plain or speculative), concurrency."""
        kinds = [m for m in self.overhead_s if (m == 0) == (k == 0)]
        if not kinds:
            return 0.0
        by_conc = self.overhead_s[min(kinds, key=lambda m: (abs(m - k), m))]
        return by_conc[_nearest(by_conc, concurrency)] if by_conc else 0.0

    # file -----------------------------------------------------------------------------------------------------
    def to_json(self) -> str:
        return self.model_dump_json(indent=2) + "\n"

    def write(self, path: Path) -> Path:
        """Write atomically (trtspec.atomic: temp file + rename)."""
        from trtspec.atomic import write_text

        write_text(Path(path), self.to_json())
        return Path(path)

    @classmethod
    def read(cls, path: Path) -> Baseline:
        """Read a baseline file; UsageError naming the file and the field when it is not one."""
        path = Path(path)
        if not path.exists():
            raise UsageError(f"baseline {path} does not exist",
                             hint="deploy with `trtspec deploy ... --baseline RESULTS.jsonl`, or pass --baseline FILE")
        if path.is_dir():
            raise UsageError(f"baseline {path} is a directory", hint="pass --repo DIR for a repository")
        text = read_text_file(path, "baseline", limit=MAX_BASELINE_BYTES, what="a trtspec-baseline.json")
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as exc:  # RecursionError: nested deeper than json can read
            raise UsageError(f"baseline {path} is not JSON ({exc.__class__.__name__})",
                             hint="give the trtspec-baseline.json that `trtspec deploy --baseline` wrote") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise UsageError(f"baseline {path}: format is {_field(data, 'format')!r}, not {FORMAT!r}",
                             hint="give the trtspec-baseline.json that `trtspec deploy --baseline` wrote")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(x) for x in err["loc"])
            raise UsageError(f"baseline {path}: field {where}: {err['msg']}",
                             hint="rewrite it with `trtspec deploy --baseline RESULTS.jsonl`") from None


def is_baseline_file(path: Path) -> bool:
    """Whether `path` is a trtspec-baseline.json (else: a sweep's results to make one from, or not readable)."""
    path = Path(path)
    if path.suffix != ".json" or not path.is_file():
        return False
    try:
        head = json.loads(read_text_file(path, "baseline", limit=MAX_BASELINE_BYTES, what="a trtspec-baseline.json"))
    except (UsageError, json.JSONDecodeError, RecursionError):
        head = None
    return isinstance(head, dict) and head.get("format") == FORMAT


def load_baseline(path: Path) -> Baseline:
    """A baseline file, or the one a repository directory names in its trtspec-repo.json."""
    path = Path(path)
    if path.is_dir():
        from trtspec.contracts.repository import RepoRecord

        record = RepoRecord.read(path)
        name = record.baseline if record is not None else None
        if not name:
            raise UsageError(f"repository {path} has no baseline (its {REPO_RECORD} names none)",
                             hint="redeploy with `trtspec deploy ... --baseline RESULTS.jsonl`, or pass "
                                  "--baseline FILE")
        path = path / name
    return Baseline.read(path)


def _nearest(mapping: dict[int, Any], value: float) -> int:
    return min(mapping, key=lambda c: (abs(c - value), c))


def _field(data: object, name: str) -> object:
    return data.get(name) if isinstance(data, dict) else type(data).__name__
