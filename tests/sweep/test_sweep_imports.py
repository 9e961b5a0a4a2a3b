"""The sweep's pure layers (grid, records, cost model, analysis, report, CLI modules) never import torch."""

import subprocess
import sys

import pytest

PURE = ["trtspec.sweep.grid", "trtspec.sweep.records", "trtspec.contracts.costmodel", "trtspec.sweep.analysis",
        "trtspec.sweep.report", "trtspec.sweep.runner", "trtspec.cli.sweep", "trtspec.cli.report",
        "trtspec.sweep.backend_triton", "trtspec.sweep.backend_openai"]


@pytest.mark.parametrize("module", PURE)
def test_pure_sweep_modules_do_not_import_torch(module):
    code = f"import sys, {module}; assert 'torch' not in sys.modules and 'tritonclient' not in sys.modules"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
