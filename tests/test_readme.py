"""README agrees with the default TensorRT-LLM target: every full container name it gives is the default target's."""

from __future__ import annotations

import re
from pathlib import Path

from trtspec.targets import DEFAULT_TARGET, SUPPORTED_TARGETS, load_target

README = Path(__file__).resolve().parents[1] / "README.md"
IMAGE = re.compile(r"nvcr\.io/nvidia/tritonserver:(\d\d\.\d\d)-trtllm-python-py3")


def test_readme_container_is_the_default_targets():
    text = README.read_text()
    tags = IMAGE.findall(text)
    assert tags, "README names no container"
    assert set(tags) == {load_target(DEFAULT_TARGET).container["tag"]}, tags


def test_readme_states_the_default_and_the_supported_targets():
    text = README.read_text()
    assert f"Default target **{DEFAULT_TARGET}**, container `{load_target(DEFAULT_TARGET).image}`" in text
    others = [v for v in SUPPORTED_TARGETS if v != DEFAULT_TARGET]
    assert f"also supported: {' and '.join(others)}" in " ".join(text.split())
