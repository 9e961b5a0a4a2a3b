"""The sweep's pure layers (grid, records, cost model, analysis, report, schedule, CLI modules) never import torch."""

import pytest

from tests.fresh_imports import heavy_modules_loaded_by

PURE = ["trtspec.sweep.grid", "trtspec.sweep.records", "trtspec.contracts.costmodel", "trtspec.sweep.analysis",
        "trtspec.sweep.report", "trtspec.sweep.runner", "trtspec.cli.sweep", "trtspec.cli.report",
        "trtspec.sweep.backend_triton", "trtspec.sweep.backend_openai", "trtspec.sweep.schedule",
        "trtspec.sweep.schedule_report"]


@pytest.fixture(scope="module")
def loaded() -> dict[str, list[str]]:
    return heavy_modules_loaded_by(PURE)


@pytest.mark.parametrize("module", PURE)
def test_pure_sweep_modules_do_not_import_torch(module, loaded):
    assert loaded[module] == [], f"importing {module} imported {loaded[module]}"
