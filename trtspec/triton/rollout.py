"""Roll a new draft out to a running torch-flavour deployment as a new Triton model version, with no failed request.

Plan (pure, `plan_rollout`): the models that load the draft (`tensorrt_llm_draft` runs it as its target;
`tensorrt_llm` drafts with it), each one's newest version N and the new version N+1; the new draft is checked
against the served target (same vocabulary and tokenizer) before anything is written. Execute (`execute_rollout`),
per model:
  1. stage    `MODEL/.N+1.tmp/`: the files of version N (model.py), the draft checkpoint in `draft/`, and
              `trtspec-version.json` naming it (triton/served_config.py); renamed to `MODEL/N+1/` when complete
  2. load     a model served with Triton's default policy (the latest version) is loaded again with its live config
              unchanged: Triton loads only N+1 while N keeps serving, then N drains its running requests and unloads
              (one model load). Any other policy: reload with version_policy {specific: [N, N+1]}, then
              3. retire with {specific: [N+1]} (a changed config reloads every version it names: three loads)
              Requests without a version go to the newest ready one, N+1.
The repository's config.pbtxt is not touched: its default policy (the latest version) serves N+1 after a restart.
Version N's directory stays on disk (roll back by removing N+1 and reloading). A failure before step 3 unloads
nothing: the staged version is removed and N keeps serving. Pure Python: no torch.
"""

from __future__ import annotations

import copy
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtspec.atomic import replace_dir
from trtspec.errors import ServerError, UsageError
from trtspec.triton.control import config_params, server_lock
from trtspec.triton.served_config import VERSION_FILE, write_version_file

DRAFT_MODELS = {"tensorrt_llm_draft": "target", "tensorrt_llm": "draft"}  # model -> its EngineConfig field of the draft
CHECKPOINT_DIR = "draft"  # inside the new version directory


@dataclass(frozen=True)
class VersionStep:
    """One model's move from `old_version` to `new_version`, whose `field` checkpoint is the new draft."""

    model: str
    field: str
    old_version: int
    new_version: int

    def version_dir(self, repo: Path, version: int | None = None) -> Path:
        return Path(repo) / self.model / str(self.new_version if version is None else version)


@dataclass(frozen=True)
class RolloutPlan:
    repo: Path
    draft: Path  # the new draft checkpoint
    steps: tuple[VersionStep, ...]

    def describe(self) -> list[str]:
        return [f"{s.model}: version {s.old_version} -> {s.new_version} ({s.field} = {self.draft})" for s in self.steps]


def plan_rollout(repo: Path, draft: Path | str) -> RolloutPlan:
    """Check the repository and the new draft; the versions each draft-loading model moves to. Writes nothing.

    Raises:
        UsageError: not a torch-flavour repository, or it serves no draft model.
        ModelNotFoundError / IncompatibleModelsError: the new draft is not a checkpoint, or its vocabulary,
            tokenizer (an id mapped to another token) or special token ids differ from the served target's.
    """
    from trtspec.build.checkpoint import check_special_ids
    from trtspec.models import check_pair, resolve_model
    from trtspec.triton.server import read_repo_record

    repo = Path(repo)
    record = read_repo_record(repo)
    if record is None or record.backend != "torch":
        raise UsageError(f"--repo {repo}: rollout-draft serves a new draft through the torch flavour's models; this "
                         f"repository's backend is {record.backend if record else None!r}",
                         hint="deploy with `trtspec deploy --backend torch`, or rebuild the TensorRT-LLM draft engine")
    params = {m: config_params(repo / m / "config.pbtxt") for m in DRAFT_MODELS if (repo / m / "config.pbtxt").is_file()}
    steps = []
    for model, field in DRAFT_MODELS.items():
        if model in params and getattr(params[model], field):
            versions = model_versions(repo / model)
            if not versions:
                raise UsageError(f"--repo: {repo / model} has no version directory",
                                 hint="re-render the repository with `trtspec deploy --force`")
            steps.append(VersionStep(model, field, versions[-1], versions[-1] + 1))
    if not steps:
        raise UsageError(f"--repo {repo} serves no draft model (method {record.method!r})",
                         hint="roll out a draft to a draft_target deployment")
    target = params["tensorrt_llm"].target if "tensorrt_llm" in params else None
    draft_path = resolve_model(draft, field="draft")
    if target is not None:  # as `trtspec build` checks a pair: vocabulary, tokenizer, special ids; before any write
        target_path = resolve_model(target, field="target")
        check_pair(target_path, draft_path)
        check_special_ids(target_path, draft_path, str(target), str(draft))
    return RolloutPlan(repo=repo, draft=draft_path, steps=tuple(steps))


def execute_rollout(plan: RolloutPlan, url: str, *, timeout_s: float = 300.0,
                    progress: Callable[[str], None] = lambda _: None) -> list[VersionStep]:
    """Stage, load and retire, model by model (see the module docstring). Returns the steps done.

    Raises ServerError when a load fails: that model's staged version is removed and its old version keeps serving;
    models already moved stay on their new version.
    """
    from trtspec.triton.client import TritonClient

    done = []
    with server_lock(url, timeout_s=timeout_s), TritonClient(url, model=plan.steps[0].model,
                                                             timeout_s=timeout_s) as client:
        for step in plan.steps:
            versions = client.model_versions(step.model)
            if versions.get(step.old_version) != "READY":
                raise ServerError(f"{step.model} version {step.old_version} is not ready on {url} ({versions})",
                                  hint="serve the repository with `trtspec serve REPO` and roll out again")
            progress(f"{step.model}: staging version {step.new_version}")
            stage_version(plan, step)
            config = copy.deepcopy(client.model_config(step.model))
            latest = serves_latest(config)
            try:
                progress(f"{step.model}: loading version {step.new_version} beside {step.old_version}")
                client.load_model(step.model, config if latest else
                                  with_versions(config, [step.old_version, step.new_version]))
                if client.model_versions(step.model).get(step.new_version) != "READY":
                    raise ServerError(f"{step.model} version {step.new_version} did not become ready",
                                      hint="see the server log")
            except ServerError:
                shutil.rmtree(step.version_dir(plan.repo), ignore_errors=True)
                client.load_model(step.model, config)  # back to exactly what served before
                raise
            progress(f"{step.model}: retiring version {step.old_version}")
            if not latest:  # the latest-version policy retires N by itself once N+1 is ready
                client.load_model(step.model, with_versions(config, [step.new_version]))
            wait_retired(client, step, timeout_s)
            done.append(step)
    return done


def wait_retired(client, step: VersionStep, timeout_s: float, poll_s: float = 0.1) -> None:
    """Triton unloads a retired version once its in-flight requests finish: wait until it has drained."""
    deadline = time.monotonic() + timeout_s
    while (state := client.model_versions(step.model).get(step.old_version)) in ("READY", "UNLOADING"):
        if time.monotonic() > deadline:
            raise ServerError(f"{step.model} version {step.old_version} still {state} after {timeout_s:g} s",
                              hint="requests on the old version are still running; check the server log")
        time.sleep(poll_s)


def stage_version(plan: RolloutPlan, step: VersionStep) -> Path:
    """Write `MODEL/N+1/` atomically: version N's files (not its checkpoints), the draft, the override file."""
    final = step.version_dir(plan.repo)
    if final.exists():
        raise UsageError(f"{final} already exists", hint="remove it (a version left by an interrupted rollout) first")
    staging = final.with_name(f".{final.name}.tmp{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        staging.mkdir()
        old = step.version_dir(plan.repo, step.old_version)
        for src in old.iterdir():
            if src.is_file() and src.name != VERSION_FILE:
                shutil.copy2(src, staging / src.name)
        shutil.copytree(plan.draft, staging / CHECKPOINT_DIR, symlinks=False,
                        ignore=shutil.ignore_patterns(".*", "__pycache__"))
        write_version_file(staging, {step.field: CHECKPOINT_DIR})
        replace_dir(staging, final)  # `final` does not exist: one rename
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return final


def serves_latest(config: dict[str, Any]) -> bool:
    """Whether a live model config serves only the newest version (Triton's default policy, `latest {num_versions:
    1}`, or no policy): then a new version directory and a load with the config unchanged move it there."""
    policy = config.get("version_policy") or {"latest": {}}
    return set(policy) == {"latest"} and int((policy["latest"] or {}).get("num_versions", 1) or 1) == 1


def with_versions(config: dict[str, Any], versions: list[int]) -> dict[str, Any]:
    """A copy of a live model config that serves exactly `versions`."""
    return {**copy.deepcopy(config), "version_policy": {"specific": {"versions": versions}}}


def model_versions(model_dir: Path) -> list[int]:
    """A model directory's version numbers (numeric subdirectories), ascending."""
    return sorted(int(p.name) for p in Path(model_dir).iterdir() if p.is_dir() and p.name.isdigit())
