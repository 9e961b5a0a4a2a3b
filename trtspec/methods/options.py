"""What the homes' options classes share: the `Options` base (a frozen pydantic model that refuses unknown keys), the
count bound and the path type of their fields.

A home's options class is the build config's section of its method (`medusa:` is MedusaSpec, in methods/medusa.py),
named on its MethodInfo (`options`); `config.BuildSpec` takes its method sections from the homes and
`BuildSpec.options` returns the one of the method it builds: one class per method, discriminated by the method (the
section's key is the home's `section`), as TensorRT-LLM's llm_args has one DecodingConfig class per `decoding_type`.
Pydantic and stdlib only (no torch, no click).
"""

from __future__ import annotations

import os
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict

# Counts go to TensorRT-LLM's C++ runtime as int32 (SizeType32): larger values would wrap, so they are refused here.
COUNT_MAX = 2**31 - 1
PATH_MAX, NAME_MAX = 4096, 255  # Linux limits, in bytes


def path_text(value: str) -> str:
    """A path-like string the file system can take: non-empty, no NUL, within PATH_MAX / NAME_MAX."""
    if not value:
        raise ValueError("is empty; give a path")
    if "\0" in value:
        raise ValueError("contains a NUL character")
    try:
        encoded = os.fsencode(value)
    except UnicodeError:
        raise ValueError("is not encodable as a file name") from None
    if len(encoded) > PATH_MAX or any(len(part) > NAME_MAX for part in encoded.split(b"/")):
        raise ValueError(f"is longer than the file system allows ({PATH_MAX} bytes, {NAME_MAX} per name)")
    return value


PathText = Annotated[str, AfterValidator(path_text)]


class Options(BaseModel):
    """A section of the build config: frozen, unknown keys refused (errors name `section.<key>`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
