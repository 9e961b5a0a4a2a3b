"""`trtspec doctor` reports the installed TensorRT-LLM version and whether it is a supported target.

The `tensorrt_llm` module is faked only inside these unit tests (monkeypatched into sys.modules)."""

from __future__ import annotations

import sys
import types

import pytest

from trtspec.doctor import check_tensorrt_llm, tensorrt_llm_target_check
from trtspec.targets import DEFAULT_TARGET, SUPPORTED_TARGETS, load_target


def fake_tensorrt_llm(monkeypatch, version: str) -> None:
    module = types.ModuleType("tensorrt_llm")
    module.__version__ = version
    monkeypatch.setitem(sys.modules, "tensorrt_llm", module)


@pytest.mark.parametrize("version", SUPPORTED_TARGETS)
def test_installed_supported_target(monkeypatch, version):
    fake_tensorrt_llm(monkeypatch, version)
    installed, target = check_tensorrt_llm()
    assert (installed.name, installed.ok, installed.detail, installed.required) == ("tensorrt_llm", True, version,
                                                                                     False)
    assert target.name == "tensorrt_llm target" and target.ok and not target.required
    assert f"trtllm.version: {version}" in target.detail and load_target(version).image in target.detail
    assert ("the default" in target.detail) == (version == DEFAULT_TARGET)


@pytest.mark.parametrize(("version", "nearest"), [("1.0.0", "1.2.1"), ("0.20.0", "0.19.0"), ("0.17.0", "0.18.0")])
def test_installed_unsupported_version_names_the_nearest_target(monkeypatch, version, nearest):
    fake_tensorrt_llm(monkeypatch, version)
    installed, target = check_tensorrt_llm()
    assert installed.ok and installed.detail == version
    assert not target.ok and f"{version} is not a supported target" in target.detail and target.label == "unsupported"
    assert f"Nearest: {nearest}, in {load_target(nearest).image}" in target.detail


def test_not_installed_points_at_the_default_targets_container(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt_llm", None)  # import raises ImportError
    (check,) = check_tensorrt_llm()
    assert not check.ok and not check.required and "unavailable" in check.detail
    assert load_target(DEFAULT_TARGET).image in check.detail


def test_version_string_without_a_module():
    assert tensorrt_llm_target_check("1.2.1").ok and not tensorrt_llm_target_check("1.2.1rc1").ok
