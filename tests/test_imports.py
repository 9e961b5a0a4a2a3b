"""Imports are cheap: CLI root, method table, choices, models and build/triton rendering never import torch."""

import subprocess
import sys

import pytest

LIGHT = ["trtspec", "trtspec.cli.main", "trtspec.methods", "trtspec.choices", "trtspec.models", "trtspec.errors",
         "trtspec.contracts.suffix", "trtspec.contracts.engine", "trtspec.contracts.openai", "trtspec.config",
         "trtspec.triton.served_config", "trtspec.spec.host", "trtspec.cli._engine",
         "trtspec.doctor", "trtspec.resources", "trtspec.triton.render", "trtspec.triton.repo",
         "trtspec.triton.build_output",
         "trtspec.triton.server", "trtspec.triton.client", "trtspec.cli.deploy", "trtspec.cli.serve",
         "trtspec.dynamo.launch", "trtspec.dynamo.worker", "trtspec.dynamo.k8s", "trtspec.cli.k8s",
         "trtspec.cli.monitor", "trtspec.ops.monitor", "trtspec.contracts.observability", "trtspec.ops.dashboard",
         "trtspec.contracts.series", "trtspec.triton.spec_metrics", "trtspec.triton.llmapi",
         "trtspec.triton.llmapi_model"]


@pytest.mark.parametrize("module", LIGHT)
def test_module_does_not_import_torch(module):
    code = f"import sys, {module}; assert 'torch' not in sys.modules, 'torch imported'; " \
           f"assert 'tritonclient' not in sys.modules"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
