"""A change of a trtllm-serve deployment's speculation, planned as data (the PyTorch workflow's form).

TensorRT-LLM reads its speculation controls once, when the LLM is created: a new draft length, schedule or gate is a
new `extra_llm_api_options` file and a restart of trtllm-serve. `plan_serve_change(build_dir, change)` turns a
`SpeculationChange` (the monitor's proposal, or `set-k` / `set-schedule`) into a `PlannedChange`: the build's options
with `speculative_config` re-rendered by the code that rendered them at build time (`llm_api.options_with`: the
release's own schedule form and gate names, checked against its facts by `targets.diff_llm_api`), written as
CHANGED_FILE beside the build's own (which stays as the build wrote it), and the restart command: the build's
`trtllm-serve` command (its manifest's `serve`) with `--extra_llm_api_options` naming the new file, shell-quoted.
A later plan starts from CHANGED_FILE when it exists (the last change written). Pure: reads files, writes none.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtspec.build.llm_api import (
    LLM_API_FILE,
    header_lines,
    llm_api_yaml,
    options_max_draft_len,
    options_schedule,
    options_with,
)
from trtspec.contracts.build_output import MANIFEST, read_manifest
from trtspec.contracts.control import PlannedChange, ServedSpeculation, SpeculationChange, describe, unified_diff
from trtspec.contracts.schedule import SpecSchedule
from trtspec.errors import ConfigError, UsageError
from trtspec.methods import BASELINE
from trtspec.targets.llm_api import diff_serve_argv

CHANGED_FILE = "llm-api/extra_llm_api_options.changed.yaml"
OPTIONS_FLAG = "--extra_llm_api_options"
RESTART_NOTE = ("trtllm-serve reads its LLM-API options once, when it creates the LLM: stop the running trtllm-serve, "
                "then start it with the new file (requests in flight on the old process end with it: drain traffic "
                "first, or restart one replica at a time behind the load balancer)")
NO_LLM_API_FORM = ("gate_probe_every and speculation_controls have no LLM-API form: TensorRT-LLM's gate never reopens "
                   "(docs/operations.md, the acceptance gate)")


@dataclass(frozen=True)
class ServeDeployment:
    """A PyTorch-workflow build output as trtllm-serve runs it: its release, the options file in force (the last
    planned change, else the build's), the serve command and where it runs."""

    root: Path
    version: str
    method: str
    options_file: str  # relative to root: CHANGED_FILE when a change was written, else the build's LLM_API_FILE
    options: dict[str, Any]
    text: str  # the options file's text
    argv: tuple[str, ...]  # the build's trtllm-serve command (its options file relative to `cwd`)
    cwd: str
    container: str | None

    @property
    def max_draft_len(self) -> int:
        return options_max_draft_len(self.options, self.root / self.options_file)

    @property
    def schedule(self) -> SpecSchedule | None:
        return options_schedule(self.options, self.version)


def _where(root: Path) -> str:
    return f"trtllm-serve:{root}"


def read_serve_deployment(build_dir: Path) -> ServeDeployment:
    """The trtllm-serve deployment of `build_dir`; ConfigError (exit 2) naming `deployment`, the value and the fix when
    it is not the output of a PyTorch-workflow `trtspec build`."""
    from trtspec.textfile import load_yaml_text

    root = Path(build_dir).expanduser().resolve()
    fix = "give the output directory of `trtspec build` for a config with `workflow: pytorch` (trtllm.version 1.2.1)"
    if not root.is_dir():
        raise ConfigError("deployment", _where(root), "is not a directory", hint=fix)
    manifest = read_manifest(root)
    if manifest is None:
        raise ConfigError("deployment", _where(root), f"has no readable {MANIFEST}: not a trtspec build output", hint=fix)
    workflow = manifest.workflow or manifest.config.get("workflow")
    serve = manifest.serve.get("trtllm-serve")
    if manifest.backend != "tensorrtllm" or workflow != "pytorch" or not isinstance(serve, dict):
        kind = "a torch bundle" if manifest.backend == "torch" else f"an {workflow or 'engine'}-workflow build"
        raise ConfigError("deployment", _where(root), f"is {kind}, which trtllm-serve does not run with LLM-API options",
                          hint="serve an engine-workflow build through Triton (--deployment triton:REPO), or " + fix)
    version = str((manifest.config.get("trtllm") or {}).get("version") or "")
    rel = CHANGED_FILE if (root / CHANGED_FILE).is_file() else str(manifest.llm_api or LLM_API_FILE)
    path = root / rel
    try:
        text = path.read_text(encoding="utf-8")
        options = load_yaml_text(text)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError("deployment", _where(root), f"its options file {rel} cannot be read ({exc})",
                          hint="re-run `trtspec build` (it writes the file atomically)") from None
    if not isinstance(options, dict):
        raise ConfigError("deployment", _where(root), f"its options file {rel} is not a YAML mapping",
                          hint="re-run `trtspec build`")
    argv = tuple(str(a) for a in serve.get("argv") or ())
    if OPTIONS_FLAG not in argv[:-1]:
        raise UsageError(f"{root / MANIFEST}: its trtllm-serve command has no {OPTIONS_FLAG} FILE",
                         hint="re-run `trtspec build` with this trtspec")
    return ServeDeployment(root=root, version=version, method=str(manifest.method or BASELINE), options_file=rel,
                           options=options, text=text, argv=argv, cwd=str(serve.get("cwd") or root),
                           container=serve.get("container"))


def served_speculation(build_dir: Path, model: str, *, max_k: int = 0) -> ServedSpeculation:
    """What the deployment's options file in force speculates with (max_draft_len is its default k; `max_k`: the
    largest k a proposal may choose, at least that: trtllm-serve takes any max_draft_len at a restart)."""
    deployment = read_serve_deployment(build_dir)
    k = deployment.max_draft_len
    return ServedSpeculation(model, k, max(k, max_k), deployment.schedule)


def target_values(k: int, schedule: SpecSchedule | None, change: SpeculationChange) -> tuple[int, SpecSchedule | None]:
    """(max_draft_len, canonical schedule) after `change`, from the served `k` and `schedule`, for a release that
    reads both from speculative_config: a new schedule's first draft length is its max_draft_len unless the change
    names k; k 0 (no speculation) is max_concurrency 0 with the served draft length (1.2.1: speculation off at every
    batch size; a release that refuses it says so)."""
    from dataclasses import replace

    new_schedule = change.schedule if change.replace_schedule else schedule
    if change.default_k is not None:
        new_k = change.default_k
    elif change.replace_schedule and new_schedule is not None and new_schedule.draft_len:
        new_k = new_schedule.draft_len[0][1]
    else:
        new_k = k
    if new_k == 0:
        return k, replace(new_schedule or SpecSchedule(), draft_len=None, max_concurrency=0)
    return new_k, new_schedule


def plan_serve_change(build_dir: Path, change: SpeculationChange, *, model: str = "") -> PlannedChange:
    """The PlannedChange that makes the trtllm-serve deployment of `build_dir` serve `change` (module docstring);
    ConfigError naming the key and the rule when the release cannot run it."""
    from trtspec.targets import load_target

    deployment = read_serve_deployment(build_dir)
    old_k, old_schedule = deployment.max_draft_len, deployment.schedule
    k, schedule = target_values(old_k, old_schedule, change)
    options = options_with(deployment.options, deployment.version, max_draft_len=k, schedule=schedule)
    new_schedule = options_schedule(options, deployment.version)
    old, new = describe(old_schedule, old_k), describe(new_schedule, k)
    notes = [NO_LLM_API_FORM] if schedule is not None and (schedule.probe_every or schedule.exact) else []
    if change.default_k == 0:
        notes.append("k 0: no speculation at any batch size (max_concurrency 0); the draft stays loaded, and a later "
                     "k >= 1 turns it back on")
    if options == deployment.options:
        return PlannedChange("trtllm-serve", model, old, new, "restart", notes=(
            *notes, f"{deployment.options_file} already says this: nothing to change or restart"))
    argv = list(deployment.argv)
    argv[argv.index(OPTIONS_FLAG) + 1] = CHANGED_FILE
    if problems := diff_serve_argv(argv, deployment.version):  # the build checked its command: the manifest was edited
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        raise UsageError(f"{deployment.root / MANIFEST}: its trtllm-serve command does not run on TensorRT-LLM "
                         f"{deployment.version}: {problems[0]}{more}",
                         hint="restore serve.trtllm-serve.argv in the manifest, or re-run `trtspec build`")
    target = load_target(deployment.version)
    header = [*header_lines(deployment.method, target, argv[1], argv),
              f"trtspec: changed from {deployment.options_file} ({old} -> {new}); the build's own options stay in "
              f"{LLM_API_FILE}"]
    path = str(deployment.root / CHANGED_FILE)
    text = llm_api_yaml(options, header)
    notes += [RESTART_NOTE, f"run it inside {deployment.container or target.image}, in {deployment.cwd} (paths as the "
                            "build wrote them)"]
    if not options.get("enable_iter_perf_stats"):
        notes.append("the options do not set enable_iter_perf_stats: true, so trtllm-serve's /metrics carries no "
                     "iteration statistics (the monitor's acceptance source on this form)")
    return PlannedChange("trtllm-serve", model, old, new, "restart", files={path: text},
                         diffs={path: unified_diff(path, deployment.text, text,
                                                   old_path=str(deployment.root / deployment.options_file))},
                         commands=(tuple(argv),), cwd=deployment.cwd, notes=tuple(notes))
