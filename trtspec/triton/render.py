"""Strict rendering of the Triton model repository: templates + RepoSpec -> files, written atomically.

The renderer fails on a missing *or* unknown placeholder and never emits a literal `${...}`: "unset" is decided by
`RepoSpec` (a parameter that is unset is simply not listed). Structured values (the `parameters` block, tree choices)
are serialised by code here, never hand-escaped. Every rendered `config.pbtxt` can be parsed into Triton's
`ModelConfig` protobuf (`validate_model_config`). The templates hold no release's tensor names: the input/output
declarations and ensemble steps arrive as Block values generated from the target's facts (`trtspec.triton.contract`).
Pure: imports neither torch nor tritonclient at module level.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from trtspec.atomic import replace_dir
from trtspec.contracts.repository import REPO_RECORD
from trtspec.errors import ConfigError, ToolNotFoundError, UsageError
from trtspec.resources import MODEL_REPO, data_dir

TEMPLATE_SUFFIX = ".pbtxt.tmpl"

_PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_ANY_DOLLAR = re.compile(r"\$")


def template_root() -> Path:
    """The `model_repo/` template directory: $TRTSPEC_TEMPLATES, else the one trtspec ships (`trtspec.resources`)."""
    env = os.environ.get("TRTSPEC_TEMPLATES")
    root = Path(env) if env else data_dir(MODEL_REPO)
    if not (root / "ensemble" / f"config{TEMPLATE_SUFFIX}").is_file():
        source = "TRTSPEC_TEMPLATES" if env else "the installed trtspec"
        raise ToolNotFoundError(f"no Triton model templates at {root} (from {source})",
                                hint="unset TRTSPEC_TEMPLATES or point it at a model_repo/ directory; "
                                     "reinstall trtspec if the shipped templates are missing")
    return root


class Block(str):
    """A multi-line value (a rendered pbtxt fragment); plain values must be single-line."""


def placeholders(text: str) -> set[str]:
    """The `${name}` placeholders of a template."""
    return set(_PLACEHOLDER.findall(text))


def render_template(text: str, values: Mapping[str, object], *, source: str = "template") -> str:
    """Substitute every `${name}` in `text` from `values`, strictly.

    Raises ConfigError when a placeholder has no value, when a value has no placeholder, when a stray `$` is in the
    template, or when a value would put `${`, a quote or a newline where a single token belongs.
    """
    wanted = placeholders(text)
    stray = _ANY_DOLLAR.findall(_PLACEHOLDER.sub("", text))
    if stray:
        raise ConfigError(source, "$", "has a `$` that is not a ${name} placeholder", hint="fix the template")
    missing = sorted(wanted - set(values))
    if missing:
        raise ConfigError(source, missing, "placeholders have no value", hint="set them in the RepoSpec")
    unknown = sorted(set(values) - wanted)
    if unknown:
        raise ConfigError(source, unknown, "values have no placeholder in the template",
                          hint="remove them or add the placeholder to the template")
    rendered = _PLACEHOLDER.sub(lambda m: _serialise(m.group(1), values[m.group(1)], source), text)
    if "${" in rendered:  # unreachable unless a value smuggled one in; keep the invariant explicit
        raise ConfigError(source, "${", "rendered output still contains a placeholder", hint="report a bug")
    return rendered


def _serialise(name: str, value: object, source: str) -> str:
    if isinstance(value, Block):
        text = str(value)
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, (int, float)):
        text = repr(value)
    elif isinstance(value, str):
        text = value
        if any(c in text for c in '"\n\\'):
            raise ConfigError(f"{source}:{name}", value, "a plain value may not contain quotes, backslashes or "
                              "newlines", hint="pass structured values through pbtxt_parameters()")
    else:
        raise ConfigError(f"{source}:{name}", value, f"has type {type(value).__name__}; expected str, int, float "
                          "or bool", hint="serialise it in code first")
    if "${" in text:
        raise ConfigError(f"{source}:{name}", value, "contains `${`", hint="values are never templates")
    return text


def pbtxt_string(value: str) -> str:
    """A protobuf text-format string literal (quotes and backslashes escaped)."""
    if "\n" in value:
        raise ConfigError("parameter", value, "contains a newline", hint="use a single-line value")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def pbtxt_parameters(params: Mapping[str, object]) -> Block:
    """Triton `parameters` entries for the set values of `params` (None = unset = not listed).

    Booleans become "true"/"false", numbers their repr, strings stay as they are (quoted and escaped here).
    """
    lines = []
    for key, value in params.items():
        if value is None:
            continue
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, (int, float, str)):
            text = str(value)
        else:
            raise ConfigError(f"parameter {key}", value, f"has type {type(value).__name__}",
                              hint="serialise it to a string in code (e.g. choices.to_triton)")
        if "${" in text:
            raise ConfigError(f"parameter {key}", text, "contains `${`", hint="values are never templates")
        lines.append(f"parameters: {{ key: {pbtxt_string(key)} value: {{ string_value: {pbtxt_string(text)} }} }}")
    return Block("\n".join(lines))


def validate_model_config(text: str, *, source: str = "config.pbtxt"):
    """Parse a rendered config into Triton's ModelConfig protobuf; ConfigError names the line on failure."""
    try:
        from google.protobuf import text_format
        from tritonclient.grpc import model_config_pb2
    except ImportError:
        raise ToolNotFoundError("tritonclient[grpc] is not installed: cannot validate model configs",
                                hint="pip install 'tritonclient[grpc]'") from None
    config = model_config_pb2.ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as exc:
        raise ConfigError(source, str(exc), "does not parse as Triton's ModelConfig",
                          hint="a template value has the wrong type") from None
    return config


@dataclass(frozen=True)
class RepoFile:
    """One file of a planned repository: literal text, or a copy of a template file."""

    text: str | None = None
    copy_from: Path | None = None


RepoPlan = dict[str, RepoFile]  # relative path -> file


def render_model(template_dir: str, values: Mapping[str, object], *, root: Path | None = None) -> str:
    """Render `model_repo/<template_dir>/config.pbtxt.tmpl` with `values` and check it parses as a ModelConfig."""
    path = (root or template_root()) / template_dir / f"config{TEMPLATE_SUFFIX}"
    text = render_template(path.read_text(encoding="utf-8"), values, source=str(path))
    validate_model_config(text, source=f"{template_dir}/config.pbtxt")
    return text


def model_files(name: str, template_dir: str, values: Mapping[str, object], *,
                shared: Mapping[str, str | Path] | None = None, root: Path | None = None) -> RepoPlan:
    """The files of one model: its rendered config.pbtxt, `1/` copied from the template (model.py, ...), and the
    `shared` modules in its `1/` (file name there -> a module of `model_repo/common/`, or a file's path; the Python
    backend imports from its own directory)."""
    root = root or template_root()
    plan: RepoPlan = {f"{name}/config.pbtxt": RepoFile(text=render_model(template_dir, values, root=root))}
    for dest, module in (shared or {}).items():
        plan[f"{name}/1/{dest}"] = RepoFile(copy_from=module if isinstance(module, Path) else root / "common" / module)
    version_dir = root / template_dir / "1"
    if version_dir.is_dir():
        for src in sorted(version_dir.rglob("*")):
            if src.is_file() and "__pycache__" not in src.parts:
                plan[f"{name}/1/{src.relative_to(version_dir).as_posix()}"] = RepoFile(copy_from=src)
    elif not shared:
        plan[f"{name}/1/.keep"] = RepoFile(text="")  # Triton needs the version directory to exist
    return plan


MARKER = ".trtspec-repository"  # written into every repository trtspec renders: `--force` replaces only those


def check_destination(out: Path, *, force: bool = False, keep: Sequence[Path] = ()) -> Path:
    """`out` (resolved) if a repository may be written there: it must not be, contain or lie inside any `keep` path
    (the build output, the tokenizer), and an existing `out` is replaced only with `force` and only when trtspec made
    it (it holds MARKER, or the `trtspec-repo.json` of older releases) or it is empty."""
    out = Path(out).resolve()
    for path in keep:
        other = Path(path).resolve()
        if out == other or other.is_relative_to(out) or out.is_relative_to(other):
            relation = "is" if out == other else "contains" if other.is_relative_to(out) else "is inside"
            raise UsageError(f"--out {out} {relation} {other}, which the repository reads",
                             hint="write the repository to a directory of its own, e.g. out/triton/NAME")
    if out.exists() or out.is_symlink():
        if not force:
            raise UsageError(f"--out {out} already exists", hint="pass --force to replace it, or choose another path")
        made_by_trtspec = (out / MARKER).is_file() or (out / REPO_RECORD).is_file()
        if not out.is_dir() or out.is_symlink() or not (made_by_trtspec or not any(out.iterdir())):
            raise UsageError(f"--out {out} exists and is not a model repository trtspec rendered (no {MARKER}); "
                             "--force replaces only those", hint="choose another --out, or remove it yourself")
    return out


def write_repository(plan: RepoPlan, out: Path, *, force: bool = False, keep: Sequence[Path] = ()) -> Path:
    """Write `plan` under `out` atomically: a sibling temp dir, then a rename. An existing `out` is replaced only
    with `force` and only when trtspec rendered it; `out` may not overlap the `keep` paths (check_destination)."""
    out = check_destination(out, force=force, keep=keep)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for rel, item in plan.items():
            dest = tmp / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            if item.copy_from is not None:
                shutil.copyfile(item.copy_from, dest)
            else:
                dest.write_text(item.text or "", encoding="utf-8")
        (tmp / MARKER).write_text("a Triton model repository rendered by `trtspec deploy`\n", encoding="utf-8")
        replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
