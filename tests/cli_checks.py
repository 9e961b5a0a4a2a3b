"""Running `trtspec` in-process in tests: `cli` (the exit code), `run_cli` (exit code and output, under a time limit),
`assert_clean_failure` (a failure is a documented one-line error), and the hypothesis settings and hostile values of
the CLI property tests (tests/build/test_properties.py, tests/sweep/test_properties.py)."""

from __future__ import annotations

import contextlib
import io
import math
import signal

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from trtspec.cli.main import main

INT32_MAX = 2**31 - 1
FAILURE_CODES = frozenset({1, 2, 3})  # docs/guarantees.md: runtime failure, bad input, missing tool
# Seeded (derandomize): the same examples every run; fixtures are shared between examples on purpose.
SETTINGS = settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                           HealthCheck.too_slow], derandomize=True)


class Hang(BaseException):
    """Raised by the alarm when one run takes longer than its limit (BaseException: nothing may swallow it)."""


def cli(*args: object) -> int:
    """The exit code of `trtspec ARGS` run in-process (its output goes to the test's stdout and stderr)."""
    try:
        main([str(a) for a in args])
    except SystemExit as exc:
        return int(exc.code)
    return 0


def run_cli(argv: list[str], *, limit: float = 60.0) -> tuple[int, str, str]:
    """`trtspec ARGV` in-process: (exit code, stdout, stderr). Exceptions other than SystemExit propagate."""
    out, err = io.StringIO(), io.StringIO()

    def alarm(*_: object) -> None:
        raise Hang(f"trtspec {argv} ran past {limit} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(argv)
                code = 0
            except SystemExit as exc:
                code = int(exc.code or 0)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    return code, out.getvalue(), err.getvalue()


def assert_clean_failure(code: int, err: str, codes: frozenset[int] = FAILURE_CODES) -> None:
    """A failure is one `Error:` line and at most one `Hint:` line (click usage errors: its usage lines first)."""
    assert code in codes, (code, err)
    assert "Traceback" not in err and "Error: " in err, err
    lines = err[err.index("Error: "):].rstrip("\n").split("\n")
    assert len(lines) <= 2 and all(line.startswith("Hint: ") for line in lines[1:]), err
    assert len(lines[0]) < 2000, lines[0][:300]


SPECIAL_FLOATS = st.sampled_from([math.inf, -math.inf, math.nan, 0.0, -0.0, 1e308, 5e-324])
SCALARS = st.one_of(
    st.none(), st.booleans(),
    st.integers(-(2**70), 2**70), st.sampled_from([0, 1, -1, INT32_MAX, INT32_MAX + 1, 10**12, 10**40]),
    st.floats(allow_nan=True, allow_infinity=True), SPECIAL_FLOATS,
    st.text(max_size=40), st.sampled_from(["tiny", "tiny-draft", "tiny-medusa", "", "\0", "x" * 300, "../..",
                                           "mc_sim_7b_63", "/etc/passwd", "float16", "fp8", "auto", "0.19.0"]),
)  # fmt: skip
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                         max_size=4), max_leaves=12)
