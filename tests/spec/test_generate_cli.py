"""`trtspec generate`: streamed text + stats line, --json, and bad input as `Error:` / exit 2 without a traceback."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from trtspec.cli.main import cli, main


def invoke(*args: str):
    return CliRunner().invoke(cli, ["generate", *args], catch_exceptions=False)


def test_generate_streams_text_then_stats(embedded_pair):
    result = invoke("--model", "tiny", "--draft", "tiny-draft", "--k", "3", "--max-new-tokens", "24", "def main(")
    assert result.exit_code == 0, result.output
    text, stats = result.output.rstrip("\n").rsplit("\n", 1)
    assert text.strip() and "mean acceptance length" in stats and "tok/s" in stats


def test_generate_json_matches_engine_greedy(embedded_pair):
    from trtspec.spec.engine import SpecEngine
    from trtspec.spec.params import SamplingParams, SpecParams

    result = invoke("--method", "ngram", "--k", "5", "--max-new-tokens", "20", "--json", "import os\n")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    for key in ("text", "token_ids", "num_drafts", "num_accepted_tokens", "mean_acceptance_length", "acceptance_rate",
                "accepted_length_histogram", "draft_time_s", "target_time_s", "overhead_time_s", "tokens_per_s"):
        assert key in data
    engine = SpecEngine.from_pretrained("tiny")
    plain = engine.generate(["import os\n"], SamplingParams(max_new_tokens=20), SpecParams("none", 0))[0]
    assert data["token_ids"] == plain.token_ids and data["text"] == plain.text


def test_bad_input_exits_2_with_hint(random_pair, capsys):
    for args, needle in [(["--k", "9"], "k=9"), (["--top-p", "0"], "top_p=0.0"), (["--temperature", "-1"], "temperature"),
                         (["--model", str(random_pair[0]), "--method", "none"], "no tokenizer")]:
        with pytest.raises(SystemExit) as exc:
            main(["generate", *args, "hello"])
        assert exc.value.code == 2, args
        err = capsys.readouterr().err
        assert needle in err and "Traceback" not in err, (args, err)


def test_generate_lookahead_equals_plain_greedy(embedded_pair):
    result = invoke("--method", "lookahead", "--lookahead", "3,3,2", "--k", "4", "--max-new-tokens", "20", "--json",
                    "import os\n")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    plain = json.loads(invoke("--method", "none", "--max-new-tokens", "20", "--json", "import os\n").output)
    assert data["token_ids"] == plain["token_ids"] and data["method"] == "lookahead"


def test_generate_bad_lookahead_exits_2(capsys):
    for value, needle in [("4,4", "three integers"), ("2,1,1", "N == 1")]:
        with pytest.raises(SystemExit) as exc:
            main(["generate", "--method", "lookahead", "--lookahead", value, "hello"])
        assert exc.value.code == 2
        assert needle in capsys.readouterr().err
