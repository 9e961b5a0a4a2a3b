"""Bounded click parameter types shared by the commands: values are checked before anything casts them (an int32
tensor, a uint64 seed, a port), so an out-of-range value is a one-line usage error naming the option, not a silent
wraparound (4294967304 tokens becoming 8 over gRPC)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import click

INT32_MAX = 2**31 - 1
UINT64_MAX = 2**64 - 1

COUNT = click.IntRange(0, INT32_MAX)  # e.g. k, top-k: sent as int32 tensors
POSITIVE_COUNT = click.IntRange(1, INT32_MAX)  # e.g. max-new-tokens
SEED = click.IntRange(0, UINT64_MAX)  # torch.Generator seeds and Triton's uint64 seed tensors


class LiveChoice(click.Choice):
    """click.Choice whose choices are `current()` at each use (help, parsing, completion), never a copy made when the
    command was defined: the method choices follow `trtspec.methods.register` (and a deferred, torch-importing
    `current` runs only when the option is used, not when commands are listed)."""

    def __init__(self, current: Callable[[], Sequence[str]], case_sensitive: bool = True) -> None:
        self._current = current
        super().__init__((), case_sensitive=case_sensitive)

    @property  # type: ignore[override]
    def choices(self) -> tuple[str, ...]:
        return tuple(self._current())

    @choices.setter
    def choices(self, value: Any) -> None:  # click.Choice.__init__ assigns its argument; the source stays current()
        pass


class FiniteFloat(click.ParamType):
    """A float that is finite (no nan, no inf) and within [min, max] when given."""

    name = "float"

    def __init__(self, min: float | None = None, max: float | None = None) -> None:  # noqa: A002 - click's names
        self.min, self.max = min, max

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        if (self.min is not None and number < self.min) or (self.max is not None and number > self.max):
            bounds = f"[{'-inf' if self.min is None else self.min}, {'inf' if self.max is None else self.max}]"
            self.fail(f"{number} is not in the range {bounds}", param, ctx)
        return number


NON_NEGATIVE = FiniteFloat(min=0.0)
PROBABILITY = FiniteFloat(min=0.0, max=1.0)


class HostPort(click.ParamType):
    """HOST:PORT with a port in 1..65535 (a larger one would silently wrap to another port)."""

    name = "host:port"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        host, sep, port = str(value).rpartition(":")
        if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
            self.fail(f"{value!r} is not HOST:PORT with a port in 1-65535 (e.g. localhost:8001)", param, ctx)
        return str(value)


HOST_PORT = HostPort()


class NameValue(click.ParamType):
    """NAME=VALUE (a repeatable option's one setting): the pair, checked later by what the name configures."""

    name = "name=value"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> tuple[str, str]:
        if isinstance(value, tuple):
            return value
        name, sep, text = str(value).partition("=")
        if not sep or not name.strip() or not text.strip():
            self.fail(f"{value!r} is not NAME=VALUE (e.g. max_cached_requests=1000)", param, ctx)
        return name.strip(), text.strip()


NAME_VALUE = NameValue()
