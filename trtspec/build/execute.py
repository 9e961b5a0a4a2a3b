"""Run a BuildPlan: stage into a temp dir, run steps with progress + logs, write the manifest, rename into place.

Atomicity: the output directory is cloned (hard links) into `.<name>.trtspec-tmp-<pid>` next to it, every step
writes there, and only a run that finishes (steps done or pending) replaces the output directory. A failed step
leaves the output directory exactly as it was; the failure (manifest so far + the step's log) is written beside it
as `<name>.trtspec-failed.json` / `.log`.

Re-runs skip steps recorded as done whose command and input hashes are unchanged and whose outputs still exist.
Steps that need TensorRT-LLM run only where `import tensorrt_llm` works; elsewhere conversion uses trtspec's own
converter when the plan offers one, and the rest is recorded as pending with the exact command for the container.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from trtspec import __version__
from trtspec import choices as tree_choices
from trtspec.build.manifest import FORMAT, MANIFEST, Hasher, read_manifest, write_json
from trtspec.build.plan import LLM_API_FILE, OWN_CONVERTER, TRTLLM, BuildPlan, Step
from trtspec.build.preflight import Resolved
from trtspec.errors import BuildError, UsageError


@dataclass
class BuildResult:
    out_dir: Path
    manifest: dict[str, Any]
    done: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    pending: list[dict[str, str]] = field(default_factory=list)


def tensorrt_llm_available() -> bool:
    """True where `import tensorrt_llm` works (inside NVIDIA's TensorRT-LLM containers)."""
    if importlib.util.find_spec("tensorrt_llm") is None:
        return False
    try:
        import tensorrt_llm  # noqa: F401
    except Exception:  # noqa: BLE001 - a broken install counts as absent
        return False
    return True


def execute(plan: BuildPlan, resolved: Resolved, out_dir: Path, *, only: str | None = None,
            trtllm: bool | None = None, quiet: bool = False) -> BuildResult:
    """Run `plan` (or one stage of it) into `out_dir`; see the module docstring for the guarantees."""
    out = Path(out_dir).resolve()
    trtllm = tensorrt_llm_available() if trtllm is None else trtllm
    previous = read_manifest(out) or {}
    old_steps = {s["id"]: s for s in previous.get("steps", [])}
    steps = plan.select(only)
    _check_stage_inputs(steps, plan, out)

    # 1. stage: clone the current output (hard links) so unchanged steps can be skipped and failures discarded
    staging = out.parent / f".{out.name}.trtspec-tmp-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.is_dir():
        shutil.copytree(out, staging, copy_function=_link_or_copy, symlinks=True)
    else:
        staging.mkdir()
    (staging / "logs").mkdir(exist_ok=True)

    hasher = Hasher(previous.get("file_hashes"))
    result = BuildResult(out_dir=out, manifest={})
    records = dict(old_steps)
    pending_outputs: set[str] = set()
    current: Step | None = None
    try:
        with _progress(quiet) as progress:
            task = progress.add_task("trtspec build", total=len(steps))
            for step in steps:
                current = step
                progress.update(task, description=f"{step.id}: {step.title}")
                # 2. decide: skip, pending (needs TensorRT-LLM / a pending input), or run here
                runner, argv = _runner(step, trtllm)
                inputs = {p: hasher.tree(_where(p, staging), p) for p in step.inputs}
                command = step.command(use_fallback=runner == "trtspec" and step.tool is not None)
                old = old_steps.get(step.id)
                if runner is None or pending_outputs & set(step.inputs):
                    pending_outputs.update(step.outputs)
                    records[step.id] = _record(step, "pending", runner or TRTLLM, step.command(), inputs, {}, 0.0)
                    result.pending.append({"id": step.id, "command": f"cd {out} && {step.command()}",
                                           "container": resolved.spec.trtllm.image()})
                elif (old and old.get("status") == "done" and old.get("command") == command
                      and old.get("inputs") == inputs and all((staging / o).exists() for o in step.outputs)):
                    result.skipped.append(step.id)
                else:
                    # 3. run, timing it; outputs are replaced, never merged with stale files
                    started = time.monotonic()
                    _run_step(step, argv, runner, staging)
                    outputs = {o: hasher.tree(staging / o, o) for o in step.outputs}
                    records[step.id] = _record(step, "done", runner, command, inputs, outputs,
                                               time.monotonic() - started)
                    result.done.append(step.id)
                progress.advance(task)
            current = None
        # 4. steps of the other stage stay pending (e.g. engines after `--only convert`) unless done earlier
        for step in plan.steps:
            if step not in steps and records.get(step.id, {}).get("status") != "done":
                records[step.id] = _record(step, "pending", step.tool, step.command(), {}, {}, 0.0)
                result.pending.append({"id": step.id, "command": f"cd {out} && {step.command()}",
                                       "container": resolved.spec.trtllm.image()})
        # 5. manifest, then swap the staged directory into place
        ordered = [records[s.id] for s in plan.steps if s.id in records]
        result.manifest = _manifest(plan, resolved, ordered, result.pending, hasher, trtllm)
        write_json(staging / MANIFEST, result.manifest)
        _swap(staging, out)
    except BaseException as exc:
        if current is not None:
            records[current.id] = _record(current, "failed", None, current.command(), {}, {}, 0.0)
        _fail(staging, out, plan, resolved, records, hasher, trtllm, exc)
        raise
    return result


# --- steps --------------------------------------------------------------------------------------------------------


def _runner(step: Step, trtllm: bool) -> tuple[str | None, tuple[str, ...]]:
    """(who runs it, argv): TensorRT-LLM when present, else trtspec's fallback, else (None, argv) = pending."""
    if step.tool is None:
        return "trtspec", step.argv
    if step.tool == TRTLLM and trtllm:
        return TRTLLM, step.argv
    if step.fallback:
        return "trtspec", step.fallback
    return None, step.argv


def _run_step(step: Step, argv: tuple[str, ...], runner: str, staging: Path) -> None:
    for output in step.outputs:
        _remove(staging / output)
    log = staging / "logs" / f"{step.id}.log"
    if step.kind == "write":
        target = staging / step.outputs[0]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(step.content or "")
    elif step.kind == "copy":
        for src, dst in zip(step.inputs, step.outputs, strict=True):
            _copy_model(Path(src), staging / dst)
    elif tuple(argv[:3]) == OWN_CONVERTER:
        from trtspec.build.convert import main as convert_main

        cwd = os.getcwd()
        os.chdir(staging)
        try:
            convert_main(list(argv[3:]))
        finally:
            os.chdir(cwd)
        log.write_text(f"$ {' '.join(argv)}\nconverted in-process by trtspec {__version__}\n")
    else:
        with open(log, "w") as fh:
            fh.write(f"$ {' '.join(argv)}\n")
            fh.flush()
            try:
                proc = subprocess.run(list(argv), cwd=staging, stdout=fh, stderr=subprocess.STDOUT)
            except FileNotFoundError:
                raise BuildError(f"step {step.id}: {argv[0]} not found", hint="run inside the TensorRT-LLM container") from None
        if proc.returncode != 0:
            tail = log.read_text()[-2000:]
            raise BuildError(f"step {step.id} failed with exit code {proc.returncode}:\n{tail}",
                             hint=f"see the log; the command was: {' '.join(argv)}")


def _copy_model(src: Path, dst: Path) -> None:
    """The files of a checkpoint directory (weights, config, tokenizer), hard-linked where possible."""
    if not src.is_dir():
        raise BuildError(f"{src} is not a directory", hint="check the model path")
    dst.mkdir(parents=True)
    for item in sorted(src.iterdir()):
        if item.is_file() and not item.name.startswith("."):
            _link_or_copy(str(item), str(dst / item.name))


def _check_stage_inputs(steps: list[Step], plan: BuildPlan, out: Path) -> None:
    """`--only engines` needs the converted checkpoints from an earlier `--only convert` run."""
    produced_here = {o for s in steps for o in s.outputs}
    produced_by_plan = {o for s in plan.steps for o in s.outputs}
    for step in steps:
        for path in step.inputs:
            if path in produced_by_plan and path not in produced_here and not (out / path).exists():
                raise UsageError(f"step {step.id} needs {out / path}, which an earlier stage produces",
                                 hint="run `trtspec build CONFIG --only convert` first (same --out)")


def _record(step: Step, status: str, runner: str | None, command: str, inputs: dict[str, Any],
            outputs: dict[str, Any], seconds: float) -> dict[str, Any]:
    return {"id": step.id, "stage": step.stage, "kind": step.kind, "title": step.title, "status": status,
            "runner": runner, "command": command, "inputs": inputs, "outputs": outputs, "seconds": round(seconds, 3)}


# --- manifest -----------------------------------------------------------------------------------------------------


def _versions(resolved: Resolved, trtllm: bool) -> dict[str, Any]:
    def version(dist: str) -> str | None:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return None

    return {"trtspec": __version__, "python": platform.python_version(), "torch": version("torch"),
            "safetensors": version("safetensors"), "tensorrt_llm": version("tensorrt_llm") if trtllm else None,
            "target_tensorrt_llm": resolved.spec.trtllm.version, "container": resolved.spec.trtllm.image()}


def derived_values(resolved: Resolved) -> dict[str, Any]:
    """The values trtspec computed (also shown by --dry-run)."""
    tree = resolved.choices
    heads = resolved.medusa
    return {
        "max_draft_len": resolved.max_draft_len,
        "choices": {"json": tree_choices.to_json(tree), "triton": tree_choices.to_triton(tree)} if tree else None,
        "lookahead": dict(zip(("window", "ngram", "verification_set"), resolved.lookahead, strict=True))
        if resolved.lookahead else None,
        "kv_cache": {role: kv.to_dict() for role, kv in resolved.kv.items()},
        "medusa_heads": {"path": str(heads.path), "layout": heads.layout, "num_heads": heads.num_heads,
                         "num_layers": heads.num_layers, "hidden_size": heads.hidden_size,
                         "vocab_size": heads.vocab_size} if heads else None,
        "checks": [{"name": c.name, "status": c.status, "detail": c.detail} for c in resolved.checks],
    }


def _manifest(plan: BuildPlan, resolved: Resolved, steps: list[dict[str, Any]], pending: list[dict[str, str]],
              hasher: Hasher, trtllm: bool) -> dict[str, Any]:
    config = resolved.spec.model_dump(mode="json")
    return {
        "format": FORMAT,
        "updated": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "backend": plan.backend,
        "method": plan.method,
        "config": config,
        "config_sha256": hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest(),
        "versions": _versions(resolved, trtllm),
        "derived": derived_values(resolved),
        "engines": plan.engines,
        "checkpoints": plan.checkpoints,
        "llm_api": LLM_API_FILE if plan.llm_api is not None else None,
        "steps": steps,
        "pending": pending,
        "notes": list(plan.notes),
        "file_hashes": hasher.cache,
    }


# --- file-system helpers ------------------------------------------------------------------------------------------


def _where(path: str, staging: Path) -> Path:
    return Path(path) if Path(path).is_absolute() else staging / path


def _link_or_copy(src: str, dst: str) -> str:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
    return dst


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _swap(staging: Path, out: Path) -> None:
    old = out.parent / f".{out.name}.trtspec-old-{os.getpid()}"
    if out.exists():
        os.replace(out, old)
    os.replace(staging, out)
    shutil.rmtree(old, ignore_errors=True)


def _fail(staging: Path, out: Path, plan: BuildPlan, resolved: Resolved, records: dict[str, dict[str, Any]],
          hasher: Hasher, trtllm: bool, exc: BaseException) -> None:
    """Leave `out` untouched; keep the failure report and the last log beside it."""
    report = _manifest(plan, resolved, list(records.values()), [], hasher, trtllm)
    report["error"] = str(exc)
    try:
        write_json(out.parent / f"{out.name}.trtspec-failed.json", report)
        logs = sorted((staging / "logs").glob("*.log"), key=lambda p: p.stat().st_mtime)
        if logs:
            shutil.copyfile(logs[-1], out.parent / f"{out.name}.trtspec-failed.log")
    finally:
        shutil.rmtree(staging, ignore_errors=True)


class _Quiet:
    def __enter__(self) -> _Quiet:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def add_task(self, *args: object, **kwargs: object) -> int:
        return 0

    def update(self, *args: object, **kwargs: object) -> None:
        return None

    def advance(self, *args: object) -> None:
        return None


def _progress(quiet: bool) -> Any:
    if quiet:
        return _Quiet()
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=Console(stderr=True), transient=False)
