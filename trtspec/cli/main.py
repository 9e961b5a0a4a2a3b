"""The `trtspec` root command: --version, --debug, lazy subcommands, and TrtspecError -> one-line messages.

Subcommands are imported only when invoked (`COMMANDS` maps name -> "module:attr"), so `trtspec --help` stays fast
and importing the CLI pulls in neither torch nor tritonclient.
"""

from __future__ import annotations

import importlib
import os
import sys

import click

from trtspec import __version__
from trtspec.errors import TrtspecError

COMMANDS: dict[str, str] = {
    "build": "trtspec.cli.build:build",
    "deploy": "trtspec.cli.deploy:deploy",
    "doctor": "trtspec.cli.doctor:doctor",
    "generate": "trtspec.cli.generate:generate",
    "k8s": "trtspec.cli.k8s:k8s",
    "models": "trtspec.cli.models:models",
    "monitor": "trtspec.cli.monitor:monitor",
    "report": "trtspec.cli.report:report",
    "rollout-draft": "trtspec.cli.control:rollout_draft",
    "serve": "trtspec.cli.serve:serve",
    "set-k": "trtspec.cli.control:set_k",
    "set-schedule": "trtspec.cli.control:set_schedule",
    "sweep": "trtspec.cli.sweep:sweep",
    "train": "trtspec.cli.train:train",
    "tune": "trtspec.cli.tune:tune",
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = COMMANDS.get(name)
        if target is None:
            return None
        module, attr = target.split(":")
        return getattr(importlib.import_module(module), attr)


def debug_enabled() -> bool:
    return os.environ.get("TRTSPEC_DEBUG", "") not in ("", "0", "false")


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="trtspec")
@click.option("--debug", is_flag=True, help="Show full tracebacks (or set TRTSPEC_DEBUG=1).")
def cli(debug: bool) -> None:
    """trtspec: speculative decoding that pays off.

    Build TensorRT-LLM engines with speculative decoding, deploy them to Triton, measure acceptance and speedup,
    and run the exact PyTorch reference engine on any machine.

    Examples:

    \b
        trtspec doctor
        trtspec generate --method draft_target --k 4 "def fibonacci(n):"
        trtspec sweep --method draft_target,ngram --k 0-4 --out results.jsonl
    """
    if debug:
        os.environ["TRTSPEC_DEBUG"] = "1"


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: maps TrtspecError to `Error: ... / Hint: ...` and its exit code."""
    try:
        cli.main(args=argv, prog_name="trtspec", standalone_mode=False)
    except TrtspecError as exc:
        if debug_enabled():
            raise
        click.secho(f"Error: {exc.message}", fg="red", err=True)
        if exc.hint:
            click.echo(f"Hint: {exc.hint}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except OSError as exc:  # the file system refused (disk full, quota, permissions): one line, runtime failure
        if debug_enabled():
            raise
        where = f" ({exc.filename})" if exc.filename else ""
        click.secho(f"Error: {exc.strerror or exc}{where}", fg="red", err=True)
        click.echo("Hint: free space or fix permissions on that path, then rerun (outputs are written atomically; "
                   "completed work is kept)", err=True)
        sys.exit(1)
