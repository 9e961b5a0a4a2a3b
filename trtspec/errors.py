"""The TrtspecError hierarchy.

Every error carries a one-line message that names the offending field or path and value, and a hint: the fix or the
next command to run. The CLI prints `Error: <message>` and `Hint: <hint>` and exits with `exit_code`; tracebacks only
with `--debug` / `TRTSPEC_DEBUG=1`.
"""

from __future__ import annotations

import stat
from typing import Any


class TrtspecError(Exception):
    """Base class. `exit_code` 1 = runtime failure, 2 = bad input, 3 = a required tool is missing."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class UsageError(TrtspecError):
    """Bad input from the user: a value, a file or a combination of options."""

    exit_code = 2


class ConfigError(UsageError):
    """A config field has a bad value. The message names the field, the value and the fix."""

    def __init__(self, field: str, value: object, problem: str, *, hint: str | None = None) -> None:
        self.field = field
        self.value = value
        self.problem = problem
        name = field if field.isprintable() else shown_text(field)  # a key read from a file can hold a newline
        super().__init__(f"{name}={value!r}: {problem}", hint=hint)


class ModelNotFoundError(UsageError):
    """A model name or directory that does not resolve to a causal-LM checkpoint."""


class IncompatibleModelsError(UsageError):
    """Draft and target (or heads and target) cannot be paired: vocab, tokenizer or hidden size differ."""


class UnknownMethodError(UsageError):
    """A speculative method name that is not in the registry."""


class RequestError(UsageError):
    """A served request that cannot be served (bad tensors, values past the model's limits); the message goes back to
    the client as the Triton error and the server keeps serving."""


class ToolNotFoundError(TrtspecError):
    """A required external tool or optional package is missing (tensorrt_llm, tritonserver, ...)."""

    exit_code = 3


class BuildError(TrtspecError):
    """A build step failed."""


class ServerError(TrtspecError):
    """tritonserver failed to start, became unready, or a request failed."""


class OverloadedError(TrtspecError):
    """The engine's queue is full: the request was rejected, never silently dropped."""


class SinkClosed(RuntimeError):
    """Raised by a serving sink's deliver() when its request has already ended (an error answered it, or its client
    went away): the serving loop aborts the request and tells the sink nothing more (`spec.serving.EngineLoop`)."""


# --- values in messages ----------------------------------------------------------------------------------------------


# The tag a served model appends to the message of a bad-input error (Triton code INVALID_ARG). On tritonserver 2.51
# an error on a gRPC stream (a decoupled model) carries only its message: the code travels in Triton's
# `triton_grpc_error` stream mode alone, and that mode crashes 2.51 (SIGSEGV) when an error ends a stream under load
# (a race of the stream's completion with its last response, triton-inference-server/server#8078). So trtspec's
# models tag bad-input messages, and its client reads a stream error with the tag as INVALID_ARG. The stdlib-only
# models (model_repo/: preprocessing, postprocessing, tensorrt_llm_bls) repeat it; a test checks every copy.
BAD_INPUT_TAG = "[INVALID_ARG]"


def tag_bad_input(message: str) -> str:
    """`message` with BAD_INPUT_TAG appended once."""
    return message if message.endswith(BAD_INPUT_TAG) else f"{message} {BAD_INPUT_TAG}"


class _Shown:
    """A value shown by a short, one-line repr (for errors about large or deep values)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def shown_text(value: Any) -> str:
    """A short one-line repr of any value: long strings and containers abridged, huge integers by their size."""
    import reprlib

    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"<an integer of {value.bit_length()} bits>"
    short = reprlib.Repr()
    short.maxstring, short.maxother, short.maxlevel = 80, 80, 3
    short.maxlist = short.maxtuple = short.maxdict = short.maxset = 6
    return short.repr(value)


def shown(value: Any) -> Any:
    """`value` itself when it is short and primitive (errors keep it), else a stand-in with a short repr."""
    if value is None or isinstance(value, (bool, float)):
        return value
    if isinstance(value, int) and value.bit_length() <= 64:
        return value
    if isinstance(value, str) and len(value) <= 200:
        return value
    return _Shown(shown_text(value))


def file_kind(mode: int) -> str:
    """What a file of `st_mode` `mode` is, for a message: `a regular file`, `a directory`, `a FIFO (named pipe)`, ..."""
    for test, kind in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return kind
    return "a special file"
