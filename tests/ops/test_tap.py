"""The acceptance tap: records round-trip and bad ones are refused by name; the reader counts only what was appended
after it started, waits for a line still being written, skips lines that are not records, starts again when the file
is truncated, estimates drafts where records have none (and says so), and feeds the monitor's window."""

from __future__ import annotations

import pytest

from trtspec.contracts.acceptance_tap import TapRecord, TapWriter
from trtspec.errors import ServerError
from trtspec.ops.scrape import ModelId, scraper
from trtspec.ops.tap import TapFile
from trtspec.ops.window import increments


def record(**changes) -> TapRecord:
    values = dict(time=1.0, model="ensemble", output_tokens=33, total_draft_tokens=40, total_accepted_draft_tokens=22,
                  num_drafts=10, finish_reason="length", latency_s=0.5)
    return TapRecord(**{**values, **changes})


def test_a_record_round_trips_through_its_line():
    one = record()
    assert TapRecord.from_line(one.to_line()) == one
    bare = record(num_drafts=None, finish_reason="", latency_s=None)
    assert "num_drafts" not in bare.to_line() and TapRecord.from_line(bare.to_line()) == bare


@pytest.mark.parametrize(("line", "match"), [
    ("nope", "not JSON"), ("[1]", "not a JSON object"), ('{"output_tokens": 1}', "model: missing"),
    ('{"model": "m", "output_tokens": -1, "total_draft_tokens": 1, "total_accepted_draft_tokens": 0}', "output_tokens"),
    ('{"model": "m", "output_tokens": 1, "total_draft_tokens": 1, "total_accepted_draft_tokens": 2}', "more than"),
    ('{"model": "m", "output_tokens": 1, "total_draft_tokens": 1, "total_accepted_draft_tokens": 0, "time": NaN}',
     "not JSON"),
])
def test_bad_lines_are_refused_by_name(line, match):
    with pytest.raises(ValueError, match=match):
        TapRecord.from_line(line)


def test_the_reader_counts_appended_whole_lines_and_restarts_on_truncation(tmp_path):
    path = tmp_path / "tap.jsonl"
    writer = TapWriter(path)
    writer.append(record())  # before the reader started: not counted
    tap = TapFile(path)
    assert tap.read() == {}
    writer.append(record())
    with path.open("a") as file:
        file.write("not a record\n" + record(output_tokens=9).to_line()[:20])  # a line still being written
    counters = tap.read()[ModelId("ensemble")]
    assert counters.counters["num_drafts"] == 10 and counters.counters["num_accepted_tokens"] == 22
    assert counters.requests == {"length": 1} and counters.k == 4 and "1 line(s)" in counters.note
    with path.open("a") as file:
        file.write(record(output_tokens=9).to_line()[20:])
    assert tap.read()[ModelId("ensemble")].counters["num_emitted_tokens"] == 33 + 9
    path.write_text(record(model="other", num_drafts=None).to_line())  # truncated and rewritten
    models = tap.read()
    assert tap.restarts == 1 and set(models) == {ModelId("ensemble"), ModelId("other")}  # totals grow on
    assert models[ModelId("other")].counters["num_drafts"] == 33 - 1 - 22  # estimated, and said so
    assert "drafts estimated" in models[ModelId("other")].note and "truncated 1 time(s)" in models[ModelId("other")].note


def test_a_rotated_file_is_read_from_its_start_even_when_larger(tmp_path):
    path = tmp_path / "tap.jsonl"
    TapWriter(path).append(record())
    tap = TapFile(path)
    tap.read()
    path.rename(tmp_path / "tap.jsonl.1")
    for _ in range(5):  # the new file is already longer than the old offset
        TapWriter(path).append(record())
    assert tap.read()[ModelId("ensemble")].counters["num_drafts"] == 5 * 10 and tap.restarts == 1


def test_a_line_longer_than_one_read_is_one_bad_line(tmp_path):
    path = tmp_path / "tap.jsonl"
    path.touch()
    tap = TapFile(path, max_bytes=64)
    tap.read()
    with path.open("a") as file:
        file.write("x" * 150 + "\n")
    for _ in range(4):
        tap.read()
    TapWriter(path).append(record(model="m"))
    tap.max_bytes = 4096
    models = tap.read()
    assert tap.bad_lines == 1 and models[ModelId("m")].counters["num_drafts"] == 10


def test_records_of_unknown_drafts_count_in_the_rate_only(tmp_path):
    path = tmp_path / "tap.jsonl"
    path.touch()
    read = scraper(f"tap:{path}")
    first = read()
    TapWriter(path).append(record(num_drafts=10, total_draft_tokens=40, total_accepted_draft_tokens=10))
    TapWriter(path).append(record(num_drafts=None, output_tokens=None, total_draft_tokens=40,
                                  total_accepted_draft_tokens=30))
    window = increments(ModelId("ensemble"), read().models[ModelId("ensemble")], first.models.get(ModelId("ensemble")),
                        1.0)
    assert window.mean_acceptance_length == pytest.approx(2.0)  # the drafts' own: 1 + 10 / 10
    assert window.acceptance_rate == pytest.approx(40 / 80)  # every record's tokens



def test_a_tap_is_a_monitor_source(tmp_path):
    path = tmp_path / "tap.jsonl"
    path.touch()
    read = scraper(f"tap:{path}")
    first = read()
    TapWriter(path).append(record())
    TapWriter(path).append(record(total_accepted_draft_tokens=30))
    second = read()
    window = increments(ModelId("ensemble"), second.models[ModelId("ensemble")], None, 2.0)
    assert window.mean_acceptance_length == pytest.approx(1 + 52 / 20)
    assert window.acceptance_rate == pytest.approx(52 / 80) and window.per_pos_estimated
    assert window.concurrency == pytest.approx(0.5) and first.models == {}


def test_a_missing_tap_file_is_one_line(tmp_path):
    with pytest.raises(ServerError, match="is not a file"):
        scraper(f"tap:{tmp_path / 'none.jsonl'}")
