"""Run a BuildPlan: stage into a temp dir, run steps with progress + logs, write the manifest, rename into place.

Atomicity: the output directory is cloned (hard links) into `.<name>.trtspec-tmp-<pid>` next to it, every step
writes there (outputs, logs and the manifest are new files, never hard-linked files rewritten in place), and only a
run that finishes (steps done or pending) replaces the output directory. A failed step leaves the output directory
exactly as it was; the failure (manifest so far + the step's log) is written beside it as
`<name>.trtspec-failed.json` / `.log`. A run killed at any point (kill -9) leaves either the previous output or the
new one; the next run removes the staging directories of dead runs (and finishes a swap a kill interrupted).

Re-runs skip a step only when its key is unchanged and its recorded outputs are still there, unmodified. The key
covers everything the step reads: its command (argv, which carries the config values it uses) or the content it
writes, the hashes of its input files (model checkpoints, outputs of earlier steps), who runs it and that runner's
code version (tensorrt_llm's version; trtspec's version and converter source). A step whose key changed and that
cannot run here becomes pending and its stale outputs and log are removed, as are the outputs of steps the plan no
longer has: a build output never holds files made for another config.

Steps that need TensorRT-LLM run only where `import tensorrt_llm` works; elsewhere conversion uses trtspec's own
converter when the plan offers one, and the rest is recorded as pending with the exact command for the container
(`cd OUT && ...`, shell-quoted).
"""

from __future__ import annotations

import errno
import glob
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from trtspec import __version__
from trtspec import choices as tree_choices
from trtspec.atomic import atomic_path, replace_dir, write_json, write_text
from trtspec.build.manifest import Hasher
from trtspec.build.plan import LLM_API_FILE, OWN_CONVERTER, TRTLLM, BuildPlan, Step, engine_config
from trtspec.build.preflight import Resolved
from trtspec.contracts.build_output import FORMAT, MANIFEST, Manifest, read_manifest, write_manifest
from trtspec.contracts.engine import Lookahead
from trtspec.errors import BuildError, TrtspecError, UsageError
from trtspec.methods.lookahead import LOOKAHEAD

# Source files of the in-process converter: their hash is part of its steps' keys (a converter fix reconverts).
CONVERTER_SOURCES = ("convert.py", "checkpoint.py")


@dataclass
class BuildResult:
    out_dir: Path
    manifest: dict[str, Any]
    done: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    pending: list[dict[str, Any]] = field(default_factory=list)


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
    if trtllm and plan.llm_api is not None and plan.target is not None:
        _release_validates(plan.llm_api, plan.target)
    check_output_dir(out, plan)
    recover_interrupted(out)
    previous = read_manifest(out) or Manifest()
    old_steps = {s["id"]: s for s in previous.steps if isinstance(s, dict) and "id" in s}
    steps = plan.select(only)
    _check_stage_inputs(steps, plan, out)

    hasher = Hasher(previous.file_hashes)
    result = BuildResult(out_dir=out, manifest={})
    records: dict[str, dict[str, Any]] = {}
    pending_outputs: set[str] = set()
    current: Step | None = None
    staging = out.parent / f".{out.name}.trtspec-tmp-{os.getpid()}"
    try:
        # 1. stage: clone the current output (hard links) so unchanged steps can be skipped and failures discarded
        _stage(out, staging)
        _drop_removed_steps(plan, old_steps, staging)
        with _progress(quiet) as progress:
            task = progress.add_task("trtspec build", total=len(steps))
            for step in steps:
                current = step
                progress.update(task, description=f"{step.id}: {step.title}")
                # 2. decide: skip (key and outputs unchanged), pending (needs TensorRT-LLM / a pending input), or run
                runner, argv = _runner(step, trtllm)
                inputs = {p: hasher.tree(_where(p, staging), p) for p in step.inputs}
                old = old_steps.get(step.id)
                if _up_to_date(step, old, inputs, staging, hasher, runner):
                    records[step.id] = old
                    result.skipped.append(step.id)
                elif runner is None or pending_outputs & set(step.inputs):
                    pending_outputs.update(step.outputs)
                    _remove_outputs(step, staging)
                    records[step.id] = _record(step, "pending", runner or TRTLLM, step.command(), inputs, {}, 0.0)
                    result.pending.append(_pending(step, out, resolved))
                else:
                    # 3. run, timing it; outputs are replaced, never merged with stale files
                    started = time.monotonic()
                    _run_step(step, argv, runner, staging)
                    outputs = {o: hasher.tree(staging / o, o) for o in step.outputs}
                    code = _code(step, runner, argv)
                    records[step.id] = _record(step, "done", runner, step.command(use_fallback=argv != step.argv),
                                               inputs, outputs, time.monotonic() - started,
                                               key=_key(step, runner, argv, inputs, code), code=code)
                    result.done.append(step.id)
                progress.advance(task)
            current = None
        # 4. steps of the other stage (e.g. engines after `--only convert`) keep a result only while it is current
        for step in plan.steps:
            if step in steps:
                continue
            old = old_steps.get(step.id)
            inputs = {p: hasher.tree(_where(p, staging), p) for p in step.inputs}
            if _up_to_date(step, old, inputs, staging, hasher, _runner(step, trtllm)[0]):
                records[step.id] = old
            else:
                _remove_outputs(step, staging)
                records[step.id] = _record(step, "pending", step.tool, step.command(), {}, {}, 0.0)
                result.pending.append(_pending(step, out, resolved))
        # 5. manifest, then swap the staged directory into place
        ordered = [records[s.id] for s in plan.steps if s.id in records]
        manifest = _manifest(plan, resolved, ordered, result.pending, hasher, trtllm, out)
        write_manifest(staging, manifest)
        result.manifest = manifest.to_dict()
        replace_dir(staging, out)
        for report in (f"{out.name}.trtspec-failed.json", f"{out.name}.trtspec-failed.log"):
            (out.parent / report).unlink(missing_ok=True)  # an earlier failure's report no longer describes `out`
    except BaseException as exc:
        if current is not None:
            records[current.id] = _record(current, "failed", None, current.command(), {}, {}, 0.0)
        error = _disk_error(exc, out, current) if isinstance(exc, OSError) else exc
        _fail(staging, out, plan, resolved, records, hasher, trtllm, error)
        if error is exc:
            raise
        raise error from None
    return result


def check_output_dir(out: Path, plan: BuildPlan) -> None:
    """Refuse an output directory the build would clobber or read from: an existing path that is not a directory,
    a non-empty directory that is not a trtspec build output, or one that is, holds or lies inside an input."""
    if out.parent == out:
        raise UsageError(f"--out {out} is a file-system root", hint="choose a new or empty directory")
    for step in plan.steps:
        for path in step.inputs:
            source = Path(path)
            if not source.is_absolute():
                continue
            source = source.resolve()
            if out == source or out.is_relative_to(source) or source.is_relative_to(out):
                raise UsageError(f"--out {out} overlaps the input {source} of step {step.id}",
                                 hint="write the build output to a directory of its own, e.g. out/build/NAME")
    if out.exists():
        if not out.is_dir():
            raise UsageError(f"--out {out} exists and is not a directory", hint="choose a new or empty directory")
        if read_manifest(out) is None and any(out.iterdir()):
            raise UsageError(f"--out {out} exists and is not a trtspec build output (no {MANIFEST})",
                             hint="choose a new or empty directory; a rebuild replaces only its own output")


def pending_checks(resolved: Resolved) -> list[dict[str, str]]:
    """The preflight checks that could not run on this host (a checkpoint that lives where TensorRT-LLM runs): each
    to be made there, in the target's container."""
    return [{"name": c.name, "detail": c.detail, "container": resolved.spec.trtllm.image()}
            for c in resolved.checks if c.status == "unchecked"]


def _pending(step: Step, out: Path, resolved: Resolved) -> dict[str, Any]:
    """A pending step as printed and stored: the shell line is built from argv (`cd OUT && ...`, quoted)."""
    return {"id": step.id, "command": f"{shlex.join(['cd', str(out)])} && {step.command()}", "cwd": str(out),
            "argv": list(step.argv), "container": resolved.spec.trtllm.image()}


def serve_command(argv: tuple[str, ...], out: Path, plan: BuildPlan) -> dict[str, Any]:
    """A serving form's command as printed and stored: argv, and the shell line run from the output directory
    (`cd OUT && ...`, quoted), inside the target's container."""
    return {"argv": list(argv), "command": f"{shlex.join(['cd', str(out)])} && {shlex.join(argv)}", "cwd": str(out),
            "container": plan.container}


def _disk_error(exc: OSError, out: Path, step: Step | None) -> TrtspecError:
    """An OSError while building (disk full, quota, read-only, permissions) as a one-line BuildError."""
    where = f"step {step.id}" if step is not None else "staging the build"
    path = exc.filename or out
    reason = exc.strerror or str(exc)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        hint = f"free space on the file system of {out.parent} (or choose another --out), then rerun: " \
               "completed steps are kept and the output directory was not changed"
    else:
        hint = f"check that {out.parent} is writable, then rerun; the output directory was not changed"
    return BuildError(f"{where}: cannot write {path}: {reason}", hint=hint)


# --- step keys ----------------------------------------------------------------------------------------------------


def _code(step: Step, runner: str | None, argv: tuple[str, ...]) -> str:
    """The version of the code that runs `step` here (part of its key)."""
    if runner == TRTLLM:
        try:
            return f"tensorrt_llm {importlib.metadata.version('tensorrt_llm')}"
        except importlib.metadata.PackageNotFoundError:
            return "tensorrt_llm unknown"
    if tuple(argv[:3]) == OWN_CONVERTER:
        digest = hashlib.sha256()
        for name in CONVERTER_SOURCES:
            digest.update((Path(__file__).parent / name).read_bytes())
        return f"trtspec {__version__} converter {digest.hexdigest()[:16]}"
    return f"trtspec {__version__}"


def _key(step: Step, runner: str | None, argv: tuple[str, ...], inputs: dict[str, Any], code: str) -> str:
    """What decides a step's result: command or written content, input hashes, outputs, runner and its code."""
    data = {"id": step.id, "kind": step.kind, "runner": runner, "argv": list(argv), "inputs": inputs,
            "outputs": list(step.outputs), "code": code,
            "content": hashlib.sha256(step.content.encode()).hexdigest() if step.content is not None else None}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def _argv_for(step: Step, runner: str | None) -> tuple[str, ...]:
    return step.fallback if runner == "trtspec" and step.tool is not None else step.argv


def _up_to_date(step: Step, old: dict[str, Any] | None, inputs: dict[str, Any], staging: Path, hasher: Hasher,
                here: str | None) -> bool:
    """True when `old` (the previous record) is a done result of exactly this step for these inputs, and its outputs
    are still there unmodified. The recorded runner's code version is re-read where that runner is available here
    (trtspec always; TensorRT-LLM inside its container); a result made elsewhere is trusted at its recorded version."""
    if not old or old.get("status") != "done" or not isinstance(old.get("key"), str):
        return False
    runner = old.get("runner")
    argv = _argv_for(step, runner)
    code = _code(step, runner, argv) if runner in (here, "trtspec") else str(old.get("code"))
    if _key(step, runner, argv, inputs, code) != old["key"]:
        return False
    if not all((staging / o).exists() for o in step.outputs):
        return False
    return {o: hasher.tree(staging / o, o) for o in step.outputs} == old.get("outputs")


def _remove_outputs(step: Step, staging: Path) -> None:
    """A step that is not done here has no outputs and no log in the output directory (they were made for another
    config or by another run)."""
    for output in step.outputs:
        _remove(staging / output)
    _remove(staging / "logs" / f"{step.id}.log")


def _drop_removed_steps(plan: BuildPlan, old_steps: dict[str, dict[str, Any]], staging: Path) -> None:
    """Outputs and logs of steps the plan no longer has (another method, another target) are removed."""
    ids, outputs = {s.id for s in plan.steps}, {o for s in plan.steps for o in s.outputs}
    for step_id, old in old_steps.items():
        if step_id in ids:
            continue
        for output in old.get("outputs") or {}:
            rel = Path(output)
            if output not in outputs and not rel.is_absolute() and ".." not in rel.parts:
                _remove(staging / rel)
        if re.fullmatch(r"[A-Za-z0-9_.-]+", step_id):
            _remove(staging / "logs" / f"{step_id}.log")


# --- steps --------------------------------------------------------------------------------------------------------


def _release_validates(options: dict[str, Any], version: str) -> None:
    """The LLM-API options through the installed release's own classes (the planner checked them against the facts);
    BuildError naming the validator and its first problems when it refuses them."""
    from trtspec.build.llm_api import validate_llm_api

    validation = validate_llm_api(options, version, release=True)
    if not validation.ok:
        raise BuildError(f"{LLM_API_FILE}: {validation.validator} refuses the LLM-API options: "
                         + "; ".join(validation.problems[:3]),
                         hint="report this with the file; `trtspec doctor --llm-api FILE` shows every problem")


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
    _remove_outputs(step, staging)
    log = staging / "logs" / f"{step.id}.log"
    if step.kind == "write":
        target = staging / step.outputs[0]
        target.parent.mkdir(parents=True, exist_ok=True)
        write_text(target, step.content or "")
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
        write_text(log, f"$ {shlex.join(argv)}\nconverted in-process by trtspec {__version__}\n")
    else:
        with atomic_path(log, publish_on_error=True) as partial, open(partial, "w") as fh:
            fh.write(f"$ {shlex.join(argv)}\n")
            fh.flush()
            try:
                proc = subprocess.run(list(argv), cwd=staging, stdout=fh, stderr=subprocess.STDOUT)
            except FileNotFoundError:
                raise BuildError(f"step {step.id}: {argv[0]} not found",
                                 hint="run inside the TensorRT-LLM container") from None
        if proc.returncode != 0:
            lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
            last = lines[-1][-300:] if len(lines) > 1 else "(no output)"
            raise BuildError(f"step {step.id} failed with exit code {proc.returncode}; last log line: {last}",
                             hint=f"the whole log is kept beside the output directory (*.trtspec-failed.log); "
                                  f"the command was: {shlex.join(argv)}")


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
            outputs: dict[str, Any], seconds: float, *, key: str | None = None,
            code: str | None = None) -> dict[str, Any]:
    return {"id": step.id, "stage": step.stage, "kind": step.kind, "title": step.title, "status": status,
            "runner": runner, "command": command, "inputs": inputs, "outputs": outputs, "seconds": round(seconds, 3),
            "key": key, "code": code}


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
        LOOKAHEAD.section: Lookahead(*resolved.lookahead).to_dict() if resolved.lookahead else None,
        "kv_cache": {role: kv.to_dict() for role, kv in resolved.kv.items()},
        "medusa_heads": {"path": str(heads.path), "layout": heads.layout, "num_heads": heads.num_heads,
                         "num_layers": heads.num_layers, "hidden_size": heads.hidden_size,
                         "vocab_size": heads.vocab_size} if heads else None,
        "checks": [{"name": c.name, "status": c.status, "detail": c.detail} for c in resolved.checks],
    }


def _manifest(plan: BuildPlan, resolved: Resolved, steps: list[dict[str, Any]], pending: list[dict[str, Any]],
              hasher: Hasher, trtllm: bool, out: Path) -> Manifest:
    config = resolved.spec.model_dump(mode="json")
    return Manifest(
        format=FORMAT,
        updated=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        backend=plan.backend,
        workflow=plan.workflow,
        method=plan.method,
        config=config,
        config_sha256=hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest(),
        versions=_versions(resolved, trtllm),
        derived=derived_values(resolved),
        engine=engine_config(resolved).to_dict(),  # what the build serves (trtspec.contracts.engine.EngineConfig)
        engines=plan.engines,
        checkpoints=plan.checkpoints,
        llm_api=LLM_API_FILE if plan.llm_api is not None else None,
        serve={form: serve_command(argv, out, plan) for form, argv in plan.serve.items()},
        steps=steps,
        pending=pending,
        pending_checks=pending_checks(resolved),
        notes=list(plan.notes),
        file_hashes=hasher.used(),
    )


# --- file-system helpers ------------------------------------------------------------------------------------------

_STAGED = re.compile(r"\.(?P<name>.+)\.trtspec-(?P<kind>tmp|old)-(?P<pid>\d+)")


def recover_interrupted(out: Path) -> list[Path]:
    """Clean up after builds of `out` that were killed (kill -9, power loss): finish a swap that was cut between its
    two renames (the staged directory was complete), then remove the staging and old directories of dead runs.
    Returns the paths removed. Directories of a run that is still alive are left alone."""
    if not out.parent.is_dir():
        return []
    found: dict[int, dict[str, Path]] = {}
    for path in out.parent.glob(f".{glob.escape(out.name)}.trtspec-*-*"):
        match = _STAGED.fullmatch(path.name)
        if match and match["name"] == out.name and path.is_dir() and not _alive(int(match["pid"])):
            found.setdefault(int(match["pid"]), {})[match["kind"]] = path
    removed = []
    for dirs in found.values():
        if not out.exists() and "old" in dirs:
            # killed between replace_dir's two renames (out -> old, staging -> out): the staging was complete
            os.replace(dirs.pop("tmp") if "tmp" in dirs else dirs.pop("old"), out)
        for path in dirs.values():
            if path.exists():
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def _stage(out: Path, staging: Path) -> None:
    """The staging directory: a hard-link clone of `out` (or empty), with a logs/ directory."""
    shutil.rmtree(staging, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging.mkdir()
    if out.is_dir():  # not shutil.copytree: it gathers errors into one shutil.Error that hides the errno
        for root, dirs, files in os.walk(out):
            rel = Path(root).relative_to(out)
            for name in dirs:
                source, dest = Path(root, name), staging / rel / name
                if source.is_symlink():
                    os.symlink(os.readlink(source), dest)
                else:
                    dest.mkdir()
            for name in files:
                source, dest = Path(root, name), staging / rel / name
                if source.is_symlink():
                    os.symlink(os.readlink(source), dest)
                else:
                    _link_or_copy(str(source), str(dest))
    (staging / "logs").mkdir(exist_ok=True)


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


def _fail(staging: Path, out: Path, plan: BuildPlan, resolved: Resolved, records: dict[str, dict[str, Any]],
          hasher: Hasher, trtllm: bool, exc: BaseException) -> None:
    """Leave `out` untouched; keep the failure report and the last log beside it (best effort: the disk may be
    full)."""
    try:
        report = _manifest(plan, resolved, list(records.values()), [], hasher, trtllm, out).to_dict()
        report["error"] = str(exc)
        write_json(out.parent / f"{out.name}.trtspec-failed.json", report)
        logs = sorted((staging / "logs").glob("*.log"), key=lambda p: p.stat().st_mtime)
        if logs:
            shutil.copyfile(logs[-1], out.parent / f"{out.name}.trtspec-failed.log")
    except OSError:
        pass
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
