"""Numbers on the command line are checked before anything casts them: values past int32 / uint64 / port ranges,
nan and inf are one-line usage errors (exit 2) naming the option, never a wraparound or a traceback."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trtspec.cli.main import main

INT32_MAX, UINT64_MAX = 2**31 - 1, 2**64 - 1


def run(argv: list[str], capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as info:
        main(argv)
    return info.value.code, capsys.readouterr().err


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=st.one_of(
    st.tuples(st.just("--max-new-tokens"), st.integers(INT32_MAX + 1, 2**70) | st.integers(-(2**70), 0)),
    st.tuples(st.just("--k"), st.integers(INT32_MAX + 1, 2**70) | st.integers(-(2**70), -1)),
    st.tuples(st.just("--top-k"), st.integers(INT32_MAX + 1, 2**70)),
    st.tuples(st.just("--seed"), st.integers(UINT64_MAX + 1, 2**90) | st.integers(-(2**70), -1)),
    st.tuples(st.just("--temperature"), st.sampled_from(["inf", "-inf", "nan", "-1", "1e400"])),
    st.tuples(st.just("--top-p"), st.sampled_from(["nan", "1.5", "-0.1", "inf"])),
    st.tuples(st.just("--url"), st.integers(65536, 10**9).map(lambda p: f"localhost:{p}")
              | st.sampled_from(["localhost:0", "localhost", ":8001", "localhost:http"])),
))
def test_out_of_range_generate_flags_are_usage_errors(case, capsys):
    capsys.readouterr()  # capsys is shared between examples: start from an empty buffer
    option, value = case
    code, err = run(["generate", option, str(value), "x"], capsys)
    assert code == 2 and f"Invalid value for '{option}'" in err and "Traceback" not in err


@pytest.mark.parametrize("argv, option", [
    (["sweep", "--out", "r.jsonl", "--max-new-tokens", "4294967304"], "--max-new-tokens"),
    (["sweep", "--out", "r.jsonl", "--timeout", "nan"], "--timeout"),
    (["sweep", "--out", "r.jsonl", "--url", "localhost:99999"], "--url"),
    (["serve", ".", "--startup-timeout", "inf"], "--startup-timeout"),
    (["report", "r.jsonl", "--price-per-hour", "-1"], "--price-per-hour"),
])  # fmt: skip
def test_out_of_range_flags_of_other_commands(argv, option, capsys):
    code, err = run(argv, capsys)
    assert code == 2 and f"Invalid value for '{option}'" in err
