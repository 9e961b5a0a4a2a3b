"""The schedule in the report (a Markdown section and one PNG per temperature) and in a build config
(`trtspec report --write-config`). The numbers come from sweep/schedule.py.

Writing a build config: the recommended method (and its draft, drafter or heads), `max_draft_len` = the k at batch 1
(TensorRT-LLM's rule: schedule[1] == max_draft_len) and, for builds whose target reads them (the torch backend's
reference engine; TensorRT-LLM's PyTorch workflow where the target's facts list them: 1.2.1), the `llm_api:` controls
`draft_len_schedule`, `max_concurrency` and the release's gate (1.2.1: `acceptance_window`,
`acceptance_length_threshold`; none on a form that runs without them). The result is checked
before anything is written: parse_build_spec, the engine's schedule rules (BuildSpec.schedule) and, for the PyTorch
workflow, the target's LLM-API rules (build/llm_api.llm_api_options). PyYAML writes it: the user's keys keep their
order, comments are not kept; a comment header (numbers and fixed words only, through the comment-safe writer) says
where the values came from.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtspec.contracts.schedule import SpecSchedule
from trtspec.errors import ConfigError
from trtspec.methods.eagle import EAGLE3
from trtspec.methods.medusa import MEDUSA
from trtspec.sweep.analysis import Results
from trtspec.sweep.schedule import DEFAULT_GATE_BATCH, DEFAULT_RELEASE, ScheduleRecommendation, choose
from trtspec.targets.controls import release

CONTROLS = SpecSchedule.LLM_API  # the build config's llm_api keys a recommendation replaces
ALL_ROWS_UP_TO = 16  # larger max batch sizes show the rows where k changes, measured rows and powers of two


# --- Markdown ---------------------------------------------------------------------------------------------------


def schedule_section(recs: Sequence[ScheduleRecommendation], plots: dict[str, Path]) -> list[str]:
    """The report's "Speculation schedule" section: per variant and temperature, k per batch size with its speedup
    (measured where the sweep ran it), max_concurrency, the gate, and the temperature's plot."""
    out = ["## Speculation schedule", ""]
    if not recs:
        return out + ["No schedule: the results have no calibration records (forward costs are measured only with "
                      "--via engine) or no fixed-k cases.", ""]
    out += ["For each batch size, the k with the highest speedup over plain decoding: **measured** where the sweep "
            "ran that concurrency and k (mean over suites), else **modelled**: the cost model's speedup (E(k) "
            "measured, forward costs calibrated at that batch size) scaled by measured / modelled of that k at the "
            "nearest measured concurrencies (`model alone` is the unscaled prediction). No k above the k at batch 1 "
            "(TensorRT-LLM: schedule[1] == max_draft_len) and none above the k at the batch size below (draft "
            "lengths do not rise with the batch size); k = 0 wins ties. Batch 1's k is the one that serves the load "
            "profile best (the sweep's concurrencies, or `--load`). The gate's threshold is the break-even at which "
            "speculation stops paying at its batch size (S_k / S_0 tokens per target forward, host overhead "
            "included, anchored like the speedups), written in the unit of the target release's gate "
            "(TensorRT-LLM 1.2.1's `acceptance_length_threshold`: accepted draft tokens per iteration, bonus token "
            "excluded, so break-even - 1). Write one into a build config: `trtspec report RESULTS --out DIR --write-config build.yaml "
            "[--method M] [--temperature T]`.", ""]
    for rec in recs:
        schedule = rec.schedule
        out += [f"### {rec.variant}, T={rec.temperature:g}", "", f"- {schedule_text(rec)}",
                "- gate: " + (f"`{rec.gate.keys[1]}` {schedule.gate_threshold:g}, `{rec.gate.keys[0]}` "
                              f"{schedule.gate_window} ({rec.gate.reason}; window: {rec.gate.window_reason})"
                              if rec.gate.set else rec.gate.reason),
                f"- load profile {', '.join(f'{b}: {w:.2f}' for b, w in rec.profile)}: {rec.profile_speedup:.2f}x "
                "plain decoding" + (f"; {rec.profile_note}" if rec.profile_note else ""), ""]
        shown = [row for row in rec.rows if _shown_row(rec, row.batch_size)]
        out += _table(["batch", "k", "speedup", "source", "model alone", "measured", f"tokens/s ({rec.timing})",
                       "plain tokens/s", "note"],
                      [(row.batch_size, row.k, f"{row.chosen.speedup:.2f}x", row.chosen.source,
                        f"{row.chosen.predicted_speedup:.2f}x",
                        "-" if row.chosen.measured_speedup is None else f"{row.chosen.measured_speedup:.2f}x",
                        f"{row.chosen.tokens_per_s:.1f}", f"{row.plain.tokens_per_s:.1f}", row.note) for row in shown])
        plot = plots.get(plot_name(rec.temperature))
        if plot is not None and rec is [r for r in recs if r.temperature == rec.temperature][-1]:
            out += [f"![Schedule, T={rec.temperature:g}]({plot.name})", ""]
    return out


def schedule_text(rec: ScheduleRecommendation) -> str:
    """The schedule in words: "no speculation" when plain decoding serves the load best, else the draft lengths and
    max_concurrency."""
    if rec.max_draft_len == 0:
        return (f"no speculation: plain decoding serves the load profile best at every batch size 1-"
                f"{rec.max_batch_size} (a build config gets method none)")
    limit = ("none (speculation wins up to the max batch size)" if rec.max_concurrency is None
             else str(rec.max_concurrency))
    return (f"`draft_len_schedule` {{{', '.join(f'{b}: {k}' for b, k in rec.draft_len)}}}, max_draft_len "
            f"{rec.max_draft_len}, `max_concurrency` {limit}")


def _shown_row(rec: ScheduleRecommendation, batch: int) -> bool:
    if rec.max_batch_size <= ALL_ROWS_UP_TO or batch in (1, rec.max_batch_size) or batch & (batch - 1) == 0:
        return True
    row = rec.rows[batch - 1]
    return row.k != rec.rows[batch - 2].k or row.chosen.source == "measured"


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows] + [""]


# --- plots ------------------------------------------------------------------------------------------------------


def plot_name(temperature: float) -> str:
    return f"schedule_T{temperature:g}"


def render_schedule_plots(recs: Sequence[ScheduleRecommendation], out_dir: Path) -> dict[str, Path]:
    """One PNG per temperature: per variant, tokens/s against batch size, one line per k (measured points marked),
    the recommended schedule drawn over it as a thick step line. Returns {name: path}."""
    if not recs:
        return {}
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    made = {}
    for temperature in sorted({r.temperature for r in recs}):
        group = [r for r in recs if r.temperature == temperature]
        fig, axes = plt.subplots(len(group), 1, figsize=(8, 4.2 * len(group)), squeeze=False)
        for ax, rec in zip(axes[:, 0], group, strict=True):
            sizes = [row.batch_size for row in rec.rows]
            for point in rec.rows[0].points:
                values = [row.point(point.k).tokens_per_s for row in rec.rows]
                (line,) = ax.plot(sizes, values, linewidth=1.2, label=f"k={point.k}" if point.k else "k=0 (plain)")
                measured = [(row.batch_size, row.point(point.k).tokens_per_s) for row in rec.rows
                            if row.point(point.k).source == "measured"]
                if measured:
                    ax.plot(*zip(*measured, strict=True), "o", color=line.get_color())
            ax.step(sizes, [row.chosen.tokens_per_s for row in rec.rows], where="mid", color="black", linewidth=5,
                    alpha=0.3, label="recommended schedule")
            for row in rec.rows:
                if row.batch_size == 1 or row.k != rec.rows[row.batch_size - 2].k:
                    ax.annotate(f"k={row.k}", (row.batch_size, row.chosen.tokens_per_s), textcoords="offset points",
                                xytext=(0, 8), ha="center", fontsize=8)
            if rec.max_concurrency is not None:
                ax.axvline(rec.max_concurrency + 0.5, color="grey", linestyle=":",
                           label=f"max_concurrency {rec.max_concurrency}")
            ax.plot([], [], "o", color="grey", label="measured (sweep)")
            ax.set(title=f"{rec.variant}, T={temperature:g}: output tokens/s vs batch size ({rec.timing} time)",
                   xlabel="batch size (running requests)", ylabel=f"tokens/s ({rec.timing})")
            ax.grid(alpha=0.3)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=5, frameon=False)
        fig.tight_layout()
        path = out_dir / f"{plot_name(temperature)}.png"
        fig.savefig(path, dpi=100, bbox_inches="tight")
        plt.close(fig)
        made[plot_name(temperature)] = path
    return made


# --- build config -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConfigWrite:
    """What `--write-config` wrote (or would write, `written` False): the new text, the old one, the recommendation,
    and notes (e.g. why the controls were not written)."""

    path: Path
    text: str
    previous: str | None
    recommendation: ScheduleRecommendation
    notes: tuple[str, ...]
    written: bool

    @property
    def diff(self) -> str:
        old = (self.previous or "").splitlines(keepends=True)
        return "".join(difflib.unified_diff(old, self.text.splitlines(keepends=True),
                                            fromfile=f"{self.path} (now)" if self.previous is not None else "/dev/null",
                                            tofile=f"{self.path} (recommended)"))


def write_schedule_config(path: str | Path, results: Results, *, method: str | None = None,
                          temperature: float | None = None, max_batch_size: int | None = None,
                          gate_batch_size: int = DEFAULT_GATE_BATCH, dry_run: bool = False,
                          load: str | None = None, force: bool = False) -> ConfigWrite:
    """Create or update the build config at `path` with the recommended schedule (module docstring); `max_batch_size`
    defaults to the config's engine.max_batch_size; the gate is the config's target release's (its names and unit).
    Checked before writing (ConfigError, exit 2, naming the field); a config for another model pair than the sweep's
    is refused unless `force`; `dry_run`: nothing is written."""
    from trtspec.atomic import write_text
    from trtspec.build.llm_api import llm_api_yaml
    from trtspec.config import EngineSpec, load_yaml, parse_build_spec

    path = Path(path)
    previous = None
    data: dict[str, Any] = {}
    configured: int = EngineSpec.model_fields["max_batch_size"].default
    if path.exists():
        loaded = load_yaml(path, what="a build config")
        if not isinstance(loaded, dict):
            raise ConfigError("write_config", str(path), "is not a YAML mapping", hint="pass a build config file")
        data, previous = loaded, path.read_text(encoding="utf-8")
        configured = parse_build_spec(data, source=str(path)).engine.max_batch_size  # a broken config: exit 2 first
    if max_batch_size is not None and max_batch_size > configured:
        raise ConfigError("max_batch_size", max_batch_size, f"is above engine.max_batch_size {configured} of {path}: "
                          "the build never runs that many requests", hint="raise engine.max_batch_size in the config "
                          f"first, or give --max-batch-size <= {configured}")
    release = _gate_release(parse_build_spec(data, source=str(path)) if data else None)
    rec = choose(results, method=method, temperature=temperature,
                 max_batch_size=configured if max_batch_size is None else max_batch_size,
                 gate_batch_size=gate_batch_size, target_release=release, load=load)
    if data and not force:
        _same_pair(data, rec, path)
    new = dict(data) if data else {"target": rec.params["model"]}
    notes = _set_method(new, rec)
    _set_controls(new, {}, keep=True)
    reads, why = _reads_controls(parse_build_spec(new, source=str(path)))
    if rec.max_draft_len and reads:
        _set_controls(new, rec.schedule.llm_api_options())
    else:
        _set_controls(new, {})
        if rec.max_draft_len:
            notes.append(f"no llm_api controls written: {why}")
    spec = parse_build_spec(new, source=str(path))
    _check(spec)
    text = llm_api_yaml(new, _header(rec))
    if not dry_run:
        write_text(path, text)
    return ConfigWrite(path, text, previous, rec, tuple(notes), not dry_run)


def _gate_release(spec: Any) -> str:
    """The release whose gate a build config gets: its TensorRT-LLM target's where that has a controls model (the
    torch backend runs 1.2.1's names under trtspec's controls)."""
    from trtspec.targets.controls import has_release

    if spec is None or spec.backend == "torch" or not has_release(spec.trtllm.version):
        return DEFAULT_RELEASE
    return str(spec.trtllm.version)


def _same_pair(data: dict[str, Any], rec: ScheduleRecommendation, path: Path) -> None:
    """Refuse a sweep of one model pair written into a config for another (the acceptance measured is the pair's)."""
    from trtspec.errors import ConfigError

    swept = {"target": rec.params.get("model"), "draft": rec.params.get("draft")}
    for key in ("target", "draft"):
        given = data.get(key)
        if given is not None and swept[key] is not None and str(given) != str(swept[key]):
            raise ConfigError(key, str(given), f"is not the sweep's {key} {swept[key]!r}: the schedule was measured on "
                              f"target {swept['target']!r}" + (f" with draft {swept['draft']!r}" if swept["draft"]
                                                               else ""),
                              hint=f"write it into a config for that pair, or pass --force to write it into {path.name} "
                                   "anyway")


def _set_method(data: dict[str, Any], rec: ScheduleRecommendation) -> list[str]:
    """The method, its model or knobs and max_draft_len, in place (a key keeps its position; `k` is renamed); the
    draft and the sections of other methods are removed (a build refuses them: build/preflight.py)."""
    from trtspec.methods import BASELINE, METHOD_SECTIONS, resolve

    params, measured = rec.params, resolve(rec.method)
    method = BASELINE if rec.max_draft_len == 0 else measured.build_as or rec.method  # eagle3: a build's eagle
    _put(data, "method", method)
    info = resolve(method)
    notes = [f"removed `{key}:` (method {method} does not use it)" for key in ("draft", *METHOD_SECTIONS)
             if key in data and key != info.section and not (key == "draft" and info.needs_draft_model)]
    for key in ("draft", *METHOD_SECTIONS):
        if key != info.section and not (key == "draft" and info.needs_draft_model):
            data.pop(key, None)
    if info.baseline:
        for key in ("max_draft_len", "k"):
            data.pop(key, None)
        return [f"speculation does not pay at batch 1 for {rec.method} at temperature {rec.temperature:g}: method "
                "none", *notes]
    from trtspec.contracts.engine import PARTS, Ngram

    section = info.section or ""  # the method's own section of the build config (eagle3: eagle's)
    if info.needs_draft_model and params.get("draft"):
        _put(data, "draft", params["draft"])
    drafter, heads = params.get(EAGLE3.sweep_variant), params.get(MEDUSA.sweep_variant)  # the sweep's grid variants
    if measured.needs_eagle_drafter and drafter:  # the sweep's EAGLE-3 drafter (eagle.eagle3: true)
        _put(data, section, {**_section(data, section), info.section_model or "": drafter, EAGLE3.name: True})
    if info.needs_medusa_heads and heads:  # the sweep's heads
        _put(data, section, {**_section(data, section), info.section_model or "": heads})
    if PARTS.get(info.engine_part or "") is Ngram:
        _put(data, section, {**_section(data, section),
                             "max_matching_ngram_size": params.get("max_ngram") or Ngram().max_size})
    _put(data, "max_draft_len", rec.max_draft_len, alias="k")
    return notes


def _set_controls(data: dict[str, Any], controls: dict[str, Any], *, keep: bool = False) -> None:
    """Replace the schedule controls of `llm_api:` (CONTROLS; its other keys stay); drop the section when empty (`keep`:
    an existing one stays, empty, where it is)."""
    section = {k: v for k, v in _section(data, "llm_api").items() if k not in CONTROLS}
    section.update(controls)
    if section or (keep and "llm_api" in data):
        _put(data, "llm_api", section)
    else:
        data.pop("llm_api", None)


def _section(data: dict[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key)
    return dict(value) if isinstance(value, dict) else {}


def _put(data: dict[str, Any], key: str, value: Any, *, alias: str | None = None) -> None:
    """Set `key` where it (or its alias) already is, else at the end."""
    if alias is not None and alias in data and key not in data:
        items = [(key if k == alias else k, value if k == alias else v) for k, v in data.items()]
        data.clear()
        data.update(items)
    data[key] = value


def _reads_controls(spec: Any) -> tuple[bool, str]:
    """Whether the build's target reads the llm_api controls, and why not. A method the PyTorch workflow has no
    decoding type for is an LlmApiRefusal (exit 2): that build would not plan."""
    from trtspec.build.llm_api import decoding_type

    if spec.backend == "torch":
        return True, ""
    target = spec.trtllm.target()
    if spec.workflow_name() != "pytorch":
        return False, (f"TensorRT-LLM {target.version}'s engine workflow (trtllm-build engines) does not read them; "
                       "the PyTorch workflow (workflow: pytorch, TensorRT-LLM 1.2.1) does")
    kind = decoding_type(spec.method, target.llm_api, eagle3=bool(spec.eagle and spec.eagle.eagle3))
    if kind is None or "draft_len_schedule" not in target.llm_api.fields_of(kind):
        return False, f"TensorRT-LLM {target.version}'s {kind} speculative_config has no draft_len_schedule"
    from trtspec.targets.controls import has_release, release

    form = {"eagle3_one_model": spec.eagle.one_model} if spec.eagle is not None else {}
    if has_release(target.version) and release(target.version).applies(kind, form) is False:
        return False, (f"TensorRT-LLM {target.version}'s one-model {kind} runs without them (no drafter); two-model "
                       "EAGLE-3 (eagle: {one_model: false}) reads them")
    return True, ""


def _check(spec: Any) -> None:
    """The engine's schedule rules and, for the PyTorch workflow, the target's LLM-API rules (ConfigError)."""
    spec.schedule()
    from trtspec.methods import resolve

    if spec.backend != "tensorrtllm" or spec.workflow_name() != "pytorch" or resolve(spec.method).baseline:
        return
    from trtspec.build.llm_api import Speculation, llm_api_options

    eagle3 = bool(spec.eagle and spec.eagle.eagle3)
    draft = spec.eagle.model if eagle3 else spec.draft
    llm_api_options(Speculation(spec.method, spec.max_draft_len or 0, spec.target, draft_model=draft, eagle3=eagle3,
                                eagle3_one_model=spec.eagle.one_model if spec.eagle is not None else True,
                                controls=spec.llm_api.options() if spec.llm_api is not None else None,
                                max_batch_size=spec.engine.max_batch_size),
                    spec.trtllm.target(), {})


def _header(rec: ScheduleRecommendation) -> list[str]:
    """Where the values came from: numbers and fixed words only (and the method, a name of trtspec's table)."""
    entries = ", ".join(f"batch {b}: k={k} ({rec.rows[b - 1].chosen.speedup:.2f}x {rec.rows[b - 1].chosen.source})"
                        for b, k in rec.draft_len)
    window_key, threshold_key = rec.gate.keys
    gate = (f"gate: {threshold_key} {rec.gate.threshold:g} ({release(rec.gate.release).unit_text}) over "
            f"{window_key} {rec.gate.window}" if rec.gate.set else "no acceptance gate")
    concurrency = "none" if rec.max_concurrency is None else str(rec.max_concurrency)
    return [f"Recommended by `trtspec report`: method {rec.method} at temperature {rec.temperature:g} "
            f"({rec.timing} time), batch sizes 1-{rec.max_batch_size}.", f"Draft length: {entries}.",
            f"max_concurrency {concurrency}; {gate}.",
            "Written by PyYAML: comments in this file are not kept when --write-config rewrites it."]
