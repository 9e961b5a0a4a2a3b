"""Build hook: ship the top-level `model_repo/` and `build_configs/` in the wheel as `trtspec/_data/<name>/`.

The top-level directories stay the source of truth (the product card fixes the layout); nothing is duplicated in the
repository. `trtspec.resources.data_dir` finds the shipped copy in an installed wheel and the top-level directory in
a checkout, so an editable install ships nothing here. All metadata lives in pyproject.toml.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
SHIPPED = ("model_repo", "build_configs")  # -> trtspec/_data/<name>/
DATA = Path("trtspec") / "_data"
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", ".*")


class BuildPyWithData(build_py):
    """`build_py` that also copies SHIPPED into the build tree (not in editable mode: the checkout is read there)."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return
        dest_root = Path(self.build_lib) / DATA
        shutil.rmtree(dest_root, ignore_errors=True)  # no stale files from an earlier build
        for name in SHIPPED:
            src = HERE / name
            if not (src.is_dir() and any(src.iterdir())):
                raise FileNotFoundError(f"{src} is missing or empty: the wheel would ship without it "
                                        "(build from a checkout or an sdist that includes it)")
            shutil.copytree(src, dest_root / name, ignore=IGNORE)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs = super().get_outputs(include_bytecode)
        if self.editable_mode:
            return outputs
        shipped = sorted(p for p in (Path(self.build_lib) / DATA).rglob("*") if p.is_file())
        return outputs + [str(p) for p in shipped]


setup(cmdclass={"build_py": BuildPyWithData})
