"""The OpenAI-API contract between a client and trtspec's workers behind NVIDIA Dynamo's frontend.

- The served model name: a target's embedded name as is (`tiny`), else its directory's name (`served_name`).
- A request chooses its speculation in Dynamo's `nvext.annotations` (strings the frontend passes through to the
  worker): `trtspec:method=ngram`, `trtspec:k=2`, `trtspec:adaptive=true`. `annotations` writes them (clients: the
  sweep), `spec_annotations` reads them back into SpecParams fields (the worker: dynamo/requests.py).
Pure Python.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trtspec.errors import RequestError

ANNOTATION_PREFIX = "trtspec:"
SPEC_ANNOTATIONS = ("method", "k", "adaptive")  # nvext.annotations "trtspec:<name>=<value>" -> SpecParams fields
MAX_K_DIGITS = 9  # a k annotation longer than this is no k any engine has (and int() stays cheap)


def served_name(target: str) -> str:
    """The OpenAI model name of a target: an embedded name as is (`tiny`), else its directory's name."""
    return target if "/" not in target and not Path(target).is_dir() else Path(target).resolve().name


def spec_annotations(annotations: list[Any]) -> dict[str, Any]:
    """SpecParams fields from `trtspec:<name>=<value>` annotations (others are Dynamo's and ignored here).

    Each name at most once (a repeat with another value is refused, never last-one-wins); k is ASCII digits.
    """
    out: dict[str, Any] = {}
    given: dict[str, str] = {}  # name -> the annotation that set it
    for item in annotations:
        if not isinstance(item, str) or not item.startswith(ANNOTATION_PREFIX):
            continue
        name, _, value = item[len(ANNOTATION_PREFIX):].partition("=")
        if name not in SPEC_ANNOTATIONS or not value:
            raise RequestError(f"annotation {item!r}: not one of {', '.join(ANNOTATION_PREFIX + n + '=...' for n in SPEC_ANNOTATIONS)}",
                               hint="e.g. nvext.annotations: [\"trtspec:method=ngram\", \"trtspec:k=2\"]")
        if name in given and given[name] != item:
            raise RequestError(f"annotation {item!r} conflicts with {given[name]!r}: {name} is given twice",
                               hint=f"send one {ANNOTATION_PREFIX}{name}=... annotation per request")
        given[name] = item
        if name == "k":
            if not (value.isascii() and value.isdigit()) or len(value) > MAX_K_DIGITS:
                raise RequestError(f"annotation {item!r}: k must be a whole number >= 0 in ASCII digits 0-9",
                                   hint="e.g. trtspec:k=2")
            out["k"] = int(value)
        elif name == "adaptive":
            if value.lower() not in ("true", "false"):
                raise RequestError(f"annotation {item!r}: adaptive is true or false", hint="e.g. trtspec:adaptive=true")
            out["adaptive"] = value.lower() == "true"
        else:
            out[name] = value
    return out


def annotations(method: str | None = None, k: int | None = None, adaptive: bool | None = None) -> list[str]:
    """The annotations a client sends to choose the speculation of one request (the inverse of spec_annotations)."""
    values = {"method": method, "k": k, "adaptive": None if adaptive is None else str(adaptive).lower()}
    return [f"{ANNOTATION_PREFIX}{name}={value}" for name, value in values.items() if value is not None]
