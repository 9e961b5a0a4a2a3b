"""SpecSchedule (contracts/schedule.py): its forms round-trip through the engine configuration, its lookup follows
TensorRT-LLM 1.2.1's rule (the largest key <= batch size; nothing above max_concurrency), bad entries are named."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trtspec.contracts.engine import EngineConfig
from trtspec.contracts.schedule import SpecSchedule
from trtspec.errors import ConfigError

draft_lens = st.one_of(st.none(), st.dictionaries(st.integers(2, 64), st.integers(0, 8), max_size=5).flatmap(
    lambda rest: st.integers(0, 8).map(lambda first: tuple({1: first, **rest}.items()))))
windows = st.one_of(st.none(), st.integers(1, 64))
schedules = st.builds(
    lambda draft_len, max_concurrency, window, probe_every: SpecSchedule(
        draft_len, max_concurrency, window, None if window is None else 1.25, probe_every),
    draft_lens, st.one_of(st.none(), st.integers(0, 64)), windows, st.one_of(st.none(), st.integers(0, 32)))


@given(schedules)
def test_every_form_round_trips_through_the_engine_configuration(schedule):
    config = EngineConfig(target="tiny", max_k=8, schedule=schedule)
    assert EngineConfig.from_parameters(config.to_parameters()) == config
    assert EngineConfig.from_dict(config.to_dict()) == config
    if schedule.to_parameters():
        again = SpecSchedule.from_llm_api(schedule.llm_api_options(), probe_every=schedule.probe_every)
        assert again == schedule


@given(schedules, st.integers(1, 200), st.integers(0, 8))
def test_lookup_is_the_largest_key_at_or_below_the_batch_and_never_above_k(schedule, batch, k):
    got = schedule.draft_len_at(batch, k)
    assert 0 <= got <= k
    if schedule.max_concurrency is not None and batch > schedule.max_concurrency:
        assert got == 0
    elif schedule.draft_len:
        key = max(key for key, _ in schedule.draft_len if key <= batch)
        assert got == min(k, dict(schedule.draft_len)[key])
    else:
        assert got == k


def test_a_schedule_reads_like_tensorrt_llms():
    schedule = SpecSchedule(draft_len=((4, 2), (1, 4), (16, 0)), max_concurrency=32)
    assert schedule.text() == "1:4,4:2,16:0"
    assert [schedule.draft_len_at(b, 4) for b in (1, 3, 4, 15, 16, 32, 33)] == [4, 4, 2, 2, 0, 0, 0]
    assert schedule.llm_api_options() == {"max_concurrency": 32, "draft_len_schedule": {1: 4, 4: 2, 16: 0}}


@pytest.mark.parametrize(("parameters", "field", "rule"), [
    ({"draft_len_schedule": "2:4"}, "draft_len_schedule", "must contain batch size 1"),
    ({"draft_len_schedule": "1:9"}, "draft_len_schedule[1]", "at most max_draft_len 8"),
    ({"draft_len_schedule": "1:4,0:2"}, "draft_len_schedule[0]", "integer in [1,"),
    ({"draft_len_schedule": "1:4,3:-1"}, "draft_len_schedule[3]", "integer >= 0"),
    ({"draft_len_schedule": "1:4,3:2,3:1"}, "draft_len_schedule[3]", "given twice"),
    ({"draft_len_schedule": "1:4,x"}, "draft_len_schedule", "BATCH:DRAFT_LEN"),
    ({"draft_len_schedule": "1:2.5"}, "draft_len_schedule", "two integers"),
    ({"acceptance_window": "8", "acceptance_length_threshold": "nan"}, "acceptance_length_threshold", "finite"),
    ({"acceptance_window": "8", "acceptance_length_threshold": "inf"}, "acceptance_length_threshold", "finite"),
    ({"acceptance_window": "0", "acceptance_length_threshold": "1.3"}, "acceptance_window", "at least 1"),
    ({"acceptance_window": "-1"}, "acceptance_window", "integer in [0,"),
    ({"acceptance_window": "8"}, "acceptance_length_threshold", "is required"),
    ({"max_concurrency": "-2"}, "max_concurrency", "integer in [0,"),
    ({"draft_len_schedule": "1:4,"}, "draft_len_schedule", "is an empty entry"),
    ({"draft_len_schedule": "1:\u0664"}, "draft_len_schedule", "two integers"),  # an Arabic-Indic 4: int() takes it
    ({"draft_len_schedule": ",".join(f"{b}:1" for b in range(1, 10_001))}, "draft_len_schedule", "more than 4096"),
    ({"acceptance_window": "8", "acceptance_length_threshold": "\u0661.5"}, "acceptance_length_threshold", "finite"),
    ({"acceptance_rate_window_size": "8", "acceptance_rate_threshold": "1.5"}, "acceptance_rate_threshold", "[0, 1]"),
    ({"acceptance_window": "8", "acceptance_length_threshold": "0.5", "acceptance_rate_window_size": "8",
      "acceptance_rate_threshold": "0.5"}, "acceptance_rate_threshold", "one gate at most"),
    ({"speculation_controls": "trtllm-9.9"}, "speculation_controls", "is not a way to run the controls"),
    ({"speculation_controls": "trtllm-1.2.1", "acceptance_rate_window_size": "8", "acceptance_rate_threshold": "0.5"},
     "acceptance_rate_threshold", "is not the gate of trtllm-1.2.1"),
    ({"speculation_controls": "trtllm-1.2.1", "gate_probe_every": "4"}, "gate_probe_every", "permanent"),
])
def test_bad_entries_are_named_with_their_rule(parameters, field, rule):
    with pytest.raises(ConfigError) as info:
        EngineConfig.from_parameters({"target": "tiny", **parameters})
    assert info.value.field.removeprefix("parameter ") == field and rule in info.value.problem


@given(st.text(alphabet="0123456789:,= \u0664-x.", max_size=40))
def test_the_schedule_text_parser_returns_pairs_of_integers_or_names_the_field(text):
    """Any flag text: pairs of ASCII integers the text spells, or a ConfigError naming the field (never another
    exception)."""
    try:
        pairs = SpecSchedule.parse_draft_len(text, "--draft-len-schedule")
    except ConfigError as exc:
        assert exc.field == "--draft-len-schedule"
        return
    assert pairs and all(isinstance(k, int) and isinstance(v, int) for k, v in pairs)
    entries = [i.replace("=", ":") for i in text.strip().replace(" ", ",").split(",")]
    assert [(int(k), int(v)) for k, v in (e.split(":") for e in entries)] == list(pairs)
    assert text.isascii()  # other scripts' digits never parse


def test_an_empty_engine_flag_is_refused(tmp_path):
    from tests.cli_checks import run_cli

    code, _, err = run_cli(["deploy", "--backend", "torch", "--build", str(tmp_path), "--out", str(tmp_path / "r"),
                            "--draft-len-schedule", ""])
    assert code == 2 and "Error: --draft-len-schedule='': is empty" in err
