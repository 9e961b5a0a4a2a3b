"""Where trtspec's shipped data lives: the Triton model templates (`model_repo/`) and the example build configs.

One resolver, two layouts. An installed wheel carries both directories as package data, `trtspec/_data/<name>/`
(copied there at build time by setup.py's build hook); a checkout (editable install, PYTHONPATH) reads the top-level
directories, which are the source of truth. Imports nothing heavy.
"""

from __future__ import annotations

import importlib.resources
import re
from pathlib import Path

from trtspec.errors import ConfigError, ToolNotFoundError

MODEL_REPO = "model_repo"
BUILD_CONFIGS = "build_configs"
EXAMPLE_SUFFIX = ".yaml"
_OUTPUT_LINE = re.compile(r"^output:.*$", re.MULTILINE)


def data_dir(name: str) -> Path:
    """The directory `name` (MODEL_REPO or BUILD_CONFIGS): shipped in the wheel, else the checkout's top level."""
    shipped = importlib.resources.files("trtspec") / "_data" / name
    if isinstance(shipped, Path) and shipped.is_dir():
        return shipped
    checkout = Path(__file__).resolve().parent.parent / name
    if checkout.is_dir():
        return checkout
    raise ToolNotFoundError(f"trtspec's {name}/ is neither shipped in the package ({shipped}) nor in a checkout "
                            f"({checkout})", hint="reinstall trtspec from its wheel (`pip install trtspec-*.whl`), "
                                                  "or install a checkout with `pip install -e .`")


def example_names() -> list[str]:
    """The names of the example build configs (`tiny-torch`, `llama3.3-70b-draft-target`, ...), sorted."""
    return sorted(p.name[: -len(EXAMPLE_SUFFIX)] for p in data_dir(BUILD_CONFIGS).glob(f"*{EXAMPLE_SUFFIX}"))


def example_path(name: str) -> Path:
    """The shipped file of example build config `name`; ConfigError listing the valid names when there is none."""
    names = example_names()
    if name not in names:
        raise ConfigError("--example", name, "no such example build config",
                          hint=f"use one of: {', '.join(names)} (`trtspec build --list-examples` describes them)")
    return data_dir(BUILD_CONFIGS) / f"{name}{EXAMPLE_SUFFIX}"


def example_summary(name: str) -> str:
    """The first comment line of example `name` (what it builds)."""
    for line in example_path(name).read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            return line.lstrip("#").strip()
    return ""


def example_text(name: str) -> str:
    """Example build config `name`, ready to save anywhere: its `output:` becomes `out/build/<name>`.

    The shipped files point `output:` at the checkout's top-level `out/` (relative paths resolve against the
    config file's directory); a copy saved elsewhere writes beside itself instead.
    """
    text = example_path(name).read_text(encoding="utf-8")
    if _OUTPUT_LINE.search(text) is None:
        return text
    return _OUTPUT_LINE.sub(f"output: out/build/{name}  # relative to this file's directory", text, count=1)
