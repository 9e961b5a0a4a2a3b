"""Where the reference engine runs: a torch device string checked before any model is loaded.

`check_device("cuda:1")` returns the torch.device or raises UsageError naming the value and what this machine has
(no traceback from deep inside a load). torch is imported here, when a device is checked, never at import time.
"""

from __future__ import annotations

from typing import Any

from trtspec.errors import UsageError

SUPPORTED = ("cpu", "cuda")


def check_device(device: str, *, field: str = "device") -> Any:
    import torch

    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError):
        raise UsageError(f"{field}={device!r} is not a torch device", hint="use cpu, cuda or cuda:N") from None
    if parsed.type not in SUPPORTED:
        raise UsageError(f"{field}={device!r}: the reference engine runs on {' or '.join(SUPPORTED)} devices",
                         hint="use cpu, or cuda on a machine with an NVIDIA GPU")
    if parsed.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise UsageError(f"{field}={device!r}: this machine has no CUDA device (torch {torch.__version__})",
                             hint="use --device cpu, or a CUDA build of torch on a machine with an NVIDIA GPU")
        if parsed.index is not None and parsed.index >= count:
            raise UsageError(f"{field}={device!r}: this machine has {count} CUDA device(s)",
                             hint=f"use cuda:0..cuda:{count - 1}")
    return parsed
