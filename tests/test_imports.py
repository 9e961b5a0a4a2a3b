"""Imports are cheap: CLI root, method table, choices, models and build/triton rendering never import torch."""

import pytest

from tests.fresh_imports import heavy_modules_loaded_by

LIGHT = ["trtspec", "trtspec.cli.main", "trtspec.methods", "trtspec.choices", "trtspec.models", "trtspec.errors",
         "trtspec.contracts.suffix", "trtspec.contracts.engine", "trtspec.contracts.engine_parts",
         "trtspec.contracts.openai", "trtspec.config",
         "trtspec.triton.served_config", "trtspec.spec.host", "trtspec.cli._engine",
         "trtspec.doctor", "trtspec.resources", "trtspec.triton.render", "trtspec.triton.repo",
         "trtspec.triton.build_output", "trtspec.contracts.build_output",
         "trtspec.triton.server", "trtspec.triton.client", "trtspec.cli.deploy", "trtspec.cli.serve",
         "trtspec.dynamo.launch", "trtspec.dynamo.worker", "trtspec.dynamo.k8s", "trtspec.dynamo.k8s_yaml",
         "trtspec.cli.k8s", "trtspec.contracts.engine_args",
         "trtspec.cli.monitor", "trtspec.ops.monitor", "trtspec.contracts.observability", "trtspec.ops.dashboard",
         "trtspec.contracts.series", "trtspec.triton.spec_metrics", "trtspec.triton.llmapi",
         "trtspec.triton.llmapi_model", "trtspec.trtllm_serve.app", "trtspec.trtllm_serve.launch",
         "trtspec.trtllm_serve.server", "trtspec.contracts.prom_series", "trtspec.build.change",
         "trtspec.triton.change", "trtspec.dynamo.change", "trtspec.cli._deployment", "trtspec.cli.control",
         "trtspec.contracts.iteration", "trtspec.contracts.trtllm_iterations", "trtspec.contracts.acceptance_tap",
         "trtspec.ops.iterations", "trtspec.ops.tap", "trtspec.ops.scrape", "trtspec.cli.generate"]


@pytest.fixture(scope="module")
def loaded() -> dict[str, list[str]]:
    return heavy_modules_loaded_by(LIGHT)


@pytest.mark.parametrize("module", LIGHT)
def test_module_does_not_import_torch(module, loaded):
    assert loaded[module] == [], f"importing {module} imported {loaded[module]}"
