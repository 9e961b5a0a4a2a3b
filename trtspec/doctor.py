"""Environment checks for `trtspec doctor`: what this machine can run. Imports nothing heavy at module level."""

from __future__ import annotations

import importlib
import importlib.metadata
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    required: bool = True
    label: str | None = None  # the status word when not ok (default: missing if required, else unavailable)


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_package(dist: str, *, required: bool = True) -> Check:
    version = _version(dist)
    return Check(dist, version is not None, version or "not installed", required)


def check_tensorrt_llm() -> list[Check]:
    """TensorRT-LLM is optional: it exists only inside NVIDIA's containers. Where it imports, also report whether its
    version is a supported target (trtspec.targets)."""
    try:
        module = importlib.import_module("tensorrt_llm")
    except Exception as exc:  # ImportError, or a broken CUDA install raising something else
        from trtspec.targets import DEFAULT_TARGET, load_target

        reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:160]
        return [Check("tensorrt_llm", False,
                      f"unavailable ({reason}); engine steps are planned, not run. Run them inside the target's "
                      f"container (default target {DEFAULT_TARGET}: {load_target(DEFAULT_TARGET).image})",
                      required=False)]
    version = str(getattr(module, "__version__", "unknown version"))
    return [Check("tensorrt_llm", True, version, required=False), tensorrt_llm_target_check(version)]


def tensorrt_llm_target_check(version: str) -> Check:
    """Whether an installed TensorRT-LLM `version` is one of trtspec's supported targets, and what to set."""
    from trtspec.targets import DEFAULT_TARGET, SUPPORTED_TARGETS, load_target, nearest_target

    if version in SUPPORTED_TARGETS:
        default = ", the default" if version == DEFAULT_TARGET else ""
        return Check("tensorrt_llm target", True, f"{version} is a supported target{default}: build configs with "
                     f"trtllm.version: {version} run here ({load_target(version).image})", required=False)
    near = nearest_target(version)
    return Check("tensorrt_llm target", False,
                 f"{version} is not a supported target ({', '.join(SUPPORTED_TARGETS)}); artefacts written for "
                 f"another release may not match it. Nearest: {near}, in {load_target(near).image}", required=False,
                 label="unsupported")


def check_tritonserver() -> Check:
    from trtspec.triton.server import find_tritonserver

    binary = find_tritonserver()
    if binary is None:
        return Check("tritonserver", False, "not found (pip install nvidia-pytriton, or use NVIDIA's container)")
    return Check("tritonserver", True, str(binary))


def check_gpus() -> Check:
    try:
        import torch
    except ImportError:
        return Check("gpu", False, "torch not installed", required=False)
    if not torch.cuda.is_available():
        return Check("gpu", False, "no CUDA GPU: the torch engine runs on CPU", required=False)
    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return Check("gpu", True, ", ".join(names), required=False)


def check_embedded_models() -> list[Check]:
    from trtspec.errors import TrtspecError
    from trtspec.models import (
        EMBEDDED,
        embedded_path,
        is_eagle_drafter,
        is_medusa_heads,
        resolve_eagle,
        resolve_medusa,
        resolve_model,
    )

    out = []
    for name, desc in EMBEDDED.items():
        try:
            where = embedded_path(name)
            path = (resolve_medusa(name) if is_medusa_heads(where) else resolve_eagle(name) if is_eagle_drafter(where)
                    else resolve_model(name))
            out.append(Check(f"model {name}", True, f"{desc} ({path})"))
        except TrtspecError as exc:
            out.append(Check(f"model {name}", False, exc.message))
    return out


def check_shipped_data() -> list[Check]:
    """The Triton model templates and the example build configs (shipped in the wheel, or the checkout's)."""
    from trtspec.errors import TrtspecError
    from trtspec.resources import example_names
    from trtspec.triton.render import template_root

    out = []
    try:
        out.append(Check("templates", True, str(template_root())))
    except TrtspecError as exc:
        out.append(Check("templates", False, exc.message))
    try:
        out.append(Check("example configs", True, f"{len(example_names())} (trtspec build --list-examples)",
                         required=False))
    except TrtspecError as exc:
        out.append(Check("example configs", False, exc.message, required=False))
    return out


def run_checks() -> list[Check]:
    checks = [check_package(d) for d in ("torch", "transformers", "tritonclient", "nvidia-pytriton", "nvidia-modelopt")]
    checks += [check_tritonserver(), *check_tensorrt_llm(), check_gpus()]
    checks += check_embedded_models()
    checks += check_shipped_data()
    return checks


def llm_api_check(path: Any, version: str | None = None) -> tuple[Any, str]:
    """(Validation, release) of an extra_llm_api_options file: the installed tensorrt_llm's own classes where it
    imports, else trtspec's facts of `version` (default: the installed release's version, else the newest release
    with facts). ConfigError (exit 2) for a file that cannot be read or is not YAML, or a release without facts."""
    from trtspec.build.llm_api import read_options, validate_llm_api
    from trtspec.errors import ConfigError
    from trtspec.targets.llm_api import facts_versions

    with_facts = facts_versions()
    installed = _version("tensorrt_llm")
    version = version or (installed if installed in with_facts else with_facts[-1])
    if version not in with_facts:
        from trtspec.targets import nearest_target

        near = nearest_target(version, with_facts)
        raise ConfigError("--trtllm-version", version, f"has no LLM-API facts in trtspec (nearest: {near})",
                          hint=f"releases with facts: {', '.join(with_facts)}")
    return validate_llm_api(read_options(path), version), version
