"""The decoding types and speculative_config options trtspec does not render (methods/unrendered.py): PARD, AUTO,
UserProvided, SaveState, DFlash, DSpark and llm_api.allow_advanced_sampling / use_rejection_sampling are refused at
config load (exit 2, one line) naming the field, the target and the nearest valid choice, with the reason the
target's facts give (pytorch-workflow.json); every decoding type of each target's facts is rendered by a home,
refused by its home, or refused here; AUTO's nearest choice is the NGram the facts say AUTO runs, rendered clean."""

from __future__ import annotations

import pytest

from tests.cli_checks import run_cli
from trtspec.build.llm_api import LlmApiRefusal, Speculation, decoding_type, llm_api_options
from trtspec.config import parse_build_spec
from trtspec.errors import ConfigError
from trtspec.methods import METHODS
from trtspec.methods.ngram import NGRAM
from trtspec.methods.unrendered import UNRENDERED_OPTIONS, UNRENDERED_TYPES
from trtspec.targets import diff_llm_api
from trtspec.targets.controls import release
from trtspec.targets.llm_api import llm_api_facts

RELEASES = ["1.2.1", "1.3.0rc29"]


def refusal(version: str, **fields) -> ConfigError:
    data = {"target": "tiny", "trtllm_version": version, **fields}
    with pytest.raises(ConfigError) as err:
        parse_build_spec(data)
    e = err.value
    assert e.exit_code == 2 and "\n" not in str(e) and f"TensorRT-LLM {version}" in str(e) and e.hint
    return e


@pytest.mark.parametrize("version", RELEASES)
@pytest.mark.parametrize("row", UNRENDERED_TYPES, ids=lambda row: row.class_name)
def test_each_unrendered_type_is_refused_with_the_facts_reason(version, row):
    facts = llm_api_facts(version)
    tag = next((t for t, d in facts.decoding_types.items() if d.class_name == row.class_name), None)
    for spelling in (row.class_name.removesuffix("DecodingConfig"), tag or row.spellings[0], row.spellings[0].upper()):
        e = refusal(version, method=spelling)
        assert e.field == "method" and e.hint.startswith("nearest: method: ")
        if tag is not None:  # the release has it: its own tag, and trtspec's reason
            assert f"decoding type {tag} is not rendered by trtspec: {row.why}" in str(e)
        else:  # the release lacks it: the facts' words, where they give some
            assert f"TensorRT-LLM {version} has no {row.class_name}" in str(e)
            words = [w for t, w in facts.invalid_decoding_types.items() if t.lower() in row.spellings]
            assert all(w in str(e) for w in words)


@pytest.mark.parametrize("version", RELEASES)
def test_every_decoding_type_of_the_facts_is_decided(version):
    """Rendered by a home, refused by a home (with its reason), or refused here: a decoding type added to the facts
    without a decision fails this test."""
    facts = llm_api_facts(version)
    rendered, refused_by_home = set(), set()
    for name, info in METHODS.items():
        for eagle3 in (False, True):
            try:
                kind = decoding_type(name, facts, eagle3=eagle3)
            except LlmApiRefusal:
                refused_by_home.add(info.llmapi_decoding_type)
            else:
                rendered.add(kind)
    here = {t for t, d in facts.decoding_types.items() if d.class_name in {r.class_name for r in UNRENDERED_TYPES}}
    assert not rendered & here  # decided once
    assert set(facts.decoding_types) - rendered - refused_by_home - here == set()


@pytest.mark.parametrize("version", RELEASES)
@pytest.mark.parametrize("batch", [1, 4, 5, 64])
def test_auto_points_at_the_ngram_it_runs_and_that_ngram_renders_clean(version, batch):
    picks = llm_api_facts(version).raw["classes"]["AutoDecodingConfig"]["picks"]
    row = next(r for r in picks["by_max_batch_size"]
               if r["max_batch_size_at_most"] is None or batch <= r["max_batch_size_at_most"])
    e = refusal(version, method="AUTO", engine={"max_batch_size": batch})
    assert f"max_draft_len: {row['max_draft_len']}, ngram.max_matching_ngram_size: {row['max_matching_ngram_size']}" \
        in e.hint
    assert picks["decoding_type"] == NGRAM.llmapi_decoding_type
    # AUTO's max_concurrency is suggested only where the release's controls facts say its NGram reads it (1.2.1),
    # and the suggestion then renders clean; elsewhere the hint says why it is left out
    reads = release(version).applies(release(version).tag(NGRAM.llmapi_decoding_type)) is True
    suggested = f"llm_api.max_concurrency: {picks['max_concurrency']}" in e.hint
    assert suggested == reads and (reads or "so trtspec does not write it" in e.hint)
    controls = {"max_concurrency": picks["max_concurrency"]} if suggested else None
    spec = Speculation(NGRAM.name, row["max_draft_len"], "/m/target", max_matching_ngram_size=row[
        "max_matching_ngram_size"], controls=controls, max_batch_size=batch)
    options = llm_api_options(spec, llm_api_facts(version), {"max_batch_size": batch})
    assert options["speculative_config"]["max_draft_len"] == row["max_draft_len"]
    assert diff_llm_api(options, version) == []


@pytest.mark.parametrize("version", RELEASES)
@pytest.mark.parametrize("name", sorted(UNRENDERED_OPTIONS))
def test_sampling_options_are_refused_as_the_facts_describe_them(version, name):
    field = next((f for f in llm_api_facts(version).raw["base"]["fields"] if f["name"] == name), None)
    e = refusal(version, method=NGRAM.name, llm_api={name: True})
    assert e.field == f"llm_api.{name}"
    if field is None:
        assert f"is not a speculative_config field of TensorRT-LLM {version}" in str(e)
    elif field.get("status") == "deprecated":
        assert "deprecated no-op" in str(e) and e.hint == UNRENDERED_OPTIONS[name]["deprecated"]
    else:
        assert UNRENDERED_OPTIONS[name]["present"] in str(e) and UNRENDERED_OPTIONS[name]["nearest"] in e.hint


def test_the_cli_refuses_in_one_line(tmp_path):
    config = tmp_path / "pard.yaml"
    config.write_text("target: tiny\nmethod: PARD\nbackend: tensorrtllm\nworkflow: pytorch\n")
    code, out, err = run_cli(["build", str(config), "--dry-run"])
    assert code == 2 and "method='PARD'" in err and "TensorRT-LLM 1.2.1 has no PARDDecodingConfig" in err
    assert "nearest: method: draft_target" in err and "Traceback" not in err
