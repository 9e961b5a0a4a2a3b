"""`--deployment FORM:PATH`: which deployment a command changes, and the planner of its form.

Forms (the change each gets: docs/operations.md, "Acting through each form's controls"):
- `trtllm-serve:BUILD_DIR`: a PyTorch-workflow build output (trtspec.build.change: a new options file + restart);
- `triton:REPO`: a repository `trtspec deploy` rendered; its form is read from its trtspec-repo.json and files:
  NVIDIA's llmapi model (trtspec.triton.change: model.yaml + a Triton reload), NVIDIA's inflight batcher (what changes
  without a rebuild), or trtspec's torch flavour (the live reload of trtspec.triton.control);
- `dynamo-k8s:DIR`: what `trtspec k8s` wrote (trtspec.dynamo.change: engine configs + the DynamoGraphDeployment's
  rolling update).
A plan is data (contracts.control.PlannedChange); `write_files` executes its files (atomically, trtspec/atomic.py);
its commands are printed for the operator, never run: trtspec restarts no NVIDIA process.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from trtspec.contracts.control import PlannedChange, ServedSpeculation, SpeculationChange

KINDS = ("trtllm-serve", "triton", "dynamo-k8s")
EXAMPLES = "trtllm-serve:out/build/tiny, triton:out/triton/tiny, dynamo-k8s:out/dynamo"
HELP = ("The deployment to change, FORM:PATH: trtllm-serve:BUILD_DIR (a PyTorch-workflow `trtspec build` output), "
        "triton:REPO (a `trtspec deploy` repository; its form, NVIDIA's llmapi model, inflight batcher or trtspec's "
        "torch flavour, is read from it) or dynamo-k8s:DIR (what `trtspec k8s` wrote); e.g. --deployment "
        "triton:out/triton/tiny-llmapi.")


@dataclass(frozen=True)
class Deployment:
    """A deployment named by --deployment: its form (contracts.control.FORMS) and path."""

    text: str  # as given
    form: str
    path: Path

    @property
    def live(self) -> bool:
        """Whether its change is trtspec's own live reload (the torch flavour)."""
        return self.form == "torch"


class DeploymentParam(click.ParamType):
    """FORM:PATH with FORM one of KINDS (the path is read when the command runs)."""

    name = "form:path"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> tuple[str, str]:
        from trtspec.errors import ConfigError

        if isinstance(value, tuple):
            return value
        kind, sep, path = str(value).partition(":")
        if not sep or kind not in KINDS or not path:
            problem = (f"names no deployment form ({kind!r} is not one of {', '.join(KINDS)})" if sep and path
                       else "is not FORM:PATH")
            raise ConfigError("--deployment", str(value), problem, hint=f"e.g. {EXAMPLES}")
        return kind, path


DEPLOYMENT = DeploymentParam()


@contextmanager
def named() -> Iterator[None]:
    """Errors about `deployment` name the flag."""
    from trtspec.contracts.engine import spelled

    with spelled(lambda field: "--deployment" if field == "deployment" else None):
        yield


def read_deployment(value: tuple[str, str]) -> Deployment:
    """The deployment --deployment names, checked: ConfigError (exit 2) naming the flag, the value and the fix when
    the path is not that form."""
    kind, text = value
    path = Path(text).expanduser()
    with named():
        if kind == "trtllm-serve":
            from trtspec.build.change import read_serve_deployment

            read_serve_deployment(path)
            return Deployment(f"{kind}:{text}", "trtllm-serve", path)
        if kind == "dynamo-k8s":
            from trtspec.dynamo.change import read_k8s_output

            read_k8s_output(path)
            return Deployment(f"{kind}:{text}", "dynamo-k8s", path)
        from trtspec.triton.change import repository_form

        return Deployment(f"{kind}:{text}", repository_form(path), path)


@dataclass(frozen=True)
class _Planner:
    """A form's planner: its module (imported when used), the function that reads what the deployment's files serve
    (path, model[, max_k]) and the one that plans a change (path, change, model[, http_url])."""

    module: str
    served: str
    plan: str
    max_k: bool = True  # `served` takes the largest k a proposal may choose
    http_url: bool = False  # `plan` takes Triton's HTTP address (its commands load the model there)

    def function(self, name: str) -> Any:
        from importlib import import_module

        return getattr(import_module(self.module), name)


# form -> its planner; the torch flavour has none (trtspec's live reload: `plan` below)
PLANNERS = {
    "trtllm-serve": _Planner("trtspec.build.change", "served_speculation", "plan_serve_change"),
    "dynamo-k8s": _Planner("trtspec.dynamo.change", "served_k8s", "plan_k8s_change"),
    "triton-llmapi": _Planner("trtspec.triton.change", "served_llmapi", "plan_llmapi_change", http_url=True),
    "triton-inflight": _Planner("trtspec.triton.change", "served_inflight", "plan_inflight_change", max_k=False,
                                http_url=True),
}


def served(deployment: Deployment, model: str, *, max_k: int = 0) -> ServedSpeculation | None:
    """What the deployment's files say `model` speculates with (None for the torch flavour: its live configuration,
    or its repository's config.pbtxt, is read as before)."""
    planner = PLANNERS.get(deployment.form)
    if planner is None:
        return None
    with named():
        return planner.function(planner.served)(deployment.path, model, **({"max_k": max_k} if planner.max_k else {}))


def plan(deployment: Deployment, change: SpeculationChange, *, model: str, http_url: str = "localhost:8000",
         url: str | None = None, current: ServedSpeculation | None = None) -> PlannedChange:
    """The PlannedChange of `change` for the deployment (pure: the planner of its form). The torch flavour needs what
    it serves (`current`) and its gRPC `url`."""
    planner = PLANNERS.get(deployment.form)
    with named():
        if planner is not None:
            return planner.function(planner.plan)(deployment.path, change, model=model,
                                                  **({"http_url": http_url} if planner.http_url else {}))
        from trtspec.triton.change import plan_torch_change, served_in_repository_or_none

        now = current or served_in_repository_or_none(deployment.path, model)
        if now is None:
            raise click.UsageError(f"--deployment {deployment.text}: model {model!r} is not a torch-flavour engine "
                                   "model of that repository")
        return plan_torch_change(deployment.path, change, now, url=url, model=model)


def write_files(change: PlannedChange) -> list[str]:
    """Execute the plan's files: each written atomically (its directory made); one line per file written."""
    from trtspec.atomic import write_text

    lines = []
    for path, text in change.files.items():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        write_text(path, text)
        lines.append(f"wrote {path}")
    return lines


def apply_lines(change: PlannedChange) -> list[str]:
    """What an operator does after `write_files`: the commands to run (trtspec runs none of NVIDIA's)."""
    if not change.commands:
        return []
    return [f"run (trtspec does not {change.how.replace('rolling update', 'roll out')} NVIDIA's processes itself):",
            *(f"  $ {line}" for line in change.command_lines())]
