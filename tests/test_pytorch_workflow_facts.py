"""trtspec/targets/pytorch-workflow.json: the PyTorch-workflow facts per target are self-consistent.

No network: the file is checked against itself (sources, brackets, classes, fields, Triton names, requests).
"""

from __future__ import annotations

import json
import re
from importlib import resources

import pytest

HEX40 = re.compile(r"^[0-9a-f]{40}$")
SECTIONS = ("llm_api", "triton_llmapi", "trtllm_serve")


def _text() -> str:
    return resources.files("trtspec.targets").joinpath("pytorch-workflow.json").read_text()


@pytest.fixture(scope="module")
def facts() -> dict:
    return json.loads(_text())


def _sections(facts):
    for version, target in facts["targets"].items():
        for name in SECTIONS:
            if name in target:
                yield version, name, target[name]


def _llm_api_versions() -> list[str]:
    return [v for v, target in json.loads(_text())["targets"].items() if "llm_api" in target]


def _has_commit(source: dict) -> bool:
    return bool(HEX40.match(source.get("commit", "")))


def test_written_by_json_module_sorted_with_newline():
    text = _text()
    assert text.endswith("}\n")
    assert text == json.dumps(json.loads(text), indent=1, sort_keys=True) + "\n"


def test_schema_and_targets(facts):
    assert facts["schema"] == "trtspec-pytorch-workflow/1"
    assert "1.2.1" in facts["targets"]
    for version, target in facts["targets"].items():
        assert target["trtllm_version"] == version
        assert isinstance(target["pinned"], bool)
        if not target["pinned"]:
            assert target["not_pinned"] and all(isinstance(line, str) and line for line in target["not_pinned"])


def test_every_source_names_repo_path_and_a_locator(facts):
    for key, source in facts["sources"].items():
        assert source["repo"] and source["path"], key
        assert isinstance(source["pinned"], bool), key
        assert _has_commit(source) or source.get("index_id") or source.get("via"), key
        if "commit" in source:
            assert _has_commit(source), key
        if source["pinned"]:
            assert _has_commit(source), f"{key}: a pinned source needs its 40-hex commit"


def test_every_section_has_sources_with_a_commit_or_bracket(facts):
    sources = facts["sources"]
    for version, name, section in _sections(facts):
        where = f"{version}.{name}"
        assert isinstance(section["pinned"], bool), where
        assert section["sources"], where
        assert set(section["sources"]) <= set(sources), where
        bracket = section.get("bracket")
        if bracket:
            assert HEX40.match(bracket["lower"]) and isinstance(bracket["agree"], bool), where
            if bracket["upper"] is None:  # no stored file is newer than the release: newer published docs bracket it
                assert bracket["upper_sources"] and set(bracket["upper_sources"]) <= set(sources), where
                assert all(sources[key].get("url") for key in bracket["upper_sources"]), where
            else:
                assert HEX40.match(bracket["upper"]) and bracket["lower"] != bracket["upper"], where
        assert bracket or any(_has_commit(sources[key]) for key in section["sources"]), where
        if section["pinned"]:
            assert all(_has_commit(sources[key]) for key in section["sources"]), where
    for version, target in facts["targets"].items():
        assert set(target["sources"]) <= set(sources), version


def _fields(llm_api: dict, cls: str) -> list[str]:
    own = [f["name"] for f in llm_api["classes"][cls]["fields"]]
    return [f["name"] for f in llm_api["base"]["fields"]] + own


@pytest.mark.parametrize("version", _llm_api_versions())
def test_decoding_types_have_their_classes(facts, version):
    llm_api = facts["targets"][version]["llm_api"]
    types = llm_api["decoding_types"]
    assert set(types.values()) == set(llm_api["classes"])
    for decoding_type, cls in types.items():
        assert llm_api["classes"][cls]["decoding_type"] == decoding_type
    assert not set(llm_api["invalid_decoding_types"]) & set(types)
    assert llm_api["extra_keys"] == "forbid"


@pytest.mark.parametrize("version", _llm_api_versions())
def test_fields_once_per_class_and_required_are_fields(facts, version):
    llm_api = facts["targets"][version]["llm_api"]
    base_names = [f["name"] for f in llm_api["base"]["fields"]]
    aliases = [a for f in llm_api["base"]["fields"] for a in f.get("aliases", [])]
    assert not set(aliases) & set(base_names)
    for cls, spec in llm_api["classes"].items():
        names = _fields(llm_api, cls)
        assert len(names) == len(set(names)), f"{version} {cls}: a field is declared twice"
        assert set(spec["required"]) <= set(names), f"{version} {cls}: required {spec['required']}"
        assert spec["backends"] and set(spec["backends"]) <= {"pytorch", "_autodeploy", "tensorrt"}
        for field in spec["fields"]:
            assert {"name", "type", "default"} <= set(field), f"{version} {cls}.{field}"


def test_1_2_1_base_fields_and_rules(facts):
    llm_api = facts["targets"]["1.2.1"]["llm_api"]
    base = {f["name"]: f for f in llm_api["base"]["fields"]}
    assert {"max_draft_len", "max_total_draft_tokens", "speculative_model", "max_concurrency", "draft_len_schedule",
            "load_format", "acceptance_window", "acceptance_length_threshold"} <= set(base)
    assert base["speculative_model"]["aliases"] == ["speculative_model_dir"]
    eagle = {f["name"] for f in llm_api["classes"]["EagleDecodingConfig"]["fields"]}
    assert {"eagle_choices", "use_dynamic_tree", "dynamic_tree_max_topK", "num_eagle_layers",
            "max_non_leaves_per_layer", "eagle3_one_model", "eagle3_layers_to_capture"} <= eagle
    assert "must contain key 1" in llm_api["rules"]["draft_len_schedule"]["rule"]
    # 1.2.1 reads neither Eagle3 nor PARD; the 1.0.0 base has no 1.2 fields
    assert {"Eagle3", "PARD"} <= set(llm_api["invalid_decoding_types"])
    old = {f["name"] for f in facts["targets"]["1.0.0"]["llm_api"]["base"]["fields"]}
    assert old == {"max_draft_len", "speculative_model_dir"}


def test_1_3_0rc29_tags_base_fields_and_rules(facts):
    """1.3.0rc29 (facts only, no Triton or trtllm-serve sections): pydantic discriminator tags, not 1.2.1's from_dict
    names; DecodingBaseConfig as the rc29 page lists it; one model only; the release's schedule, max_concurrency and
    gate rules; every class names its sources and evidence."""
    target = facts["targets"]["1.3.0rc29"]
    assert not {"triton_llmapi", "trtllm_serve"} & set(target)
    llm_api = target["llm_api"]
    assert set(llm_api["decoding_types"]) == {"AUTO", "Eagle3", "Eagle", "MTP", "NGram", "Draft_Target", "SA", "PARD",
                                              "DFlash", "DSpark", "User_Provided", "SaveState"}
    assert {"DraftTarget", "UserProvided", "Lookahead", "Medusa"} <= set(llm_api["invalid_decoding_types"])
    assert "renamed Draft_Target" in llm_api["invalid_decoding_types"]["DraftTarget"]
    base = {f["name"]: f for f in llm_api["base"]["fields"]}
    assert set(base) == {"max_draft_len", "max_total_draft_tokens", "speculative_model", "moe_backend",
                         "max_concurrency", "draft_len_schedule", "load_format", "acceptance_rate_window_size",
                         "acceptance_rate_threshold", "use_rejection_sampling", "allow_advanced_sampling",
                         "advanced_sampling_mode", "enable_penalty"}
    assert base["speculative_model"]["aliases"] == ["speculative_model_dir"]
    classes = llm_api["classes"]
    two_model = {"eagle3_one_model", "mtp_eagle_one_model", "greedy_sampling", "posterior_threshold"}
    for cls in ("Eagle3DecodingConfig", "EagleDecodingConfig", "MTPDecodingConfig"):
        assert not {f["name"] for f in classes[cls]["fields"]} & two_model, cls
    for cls, spec in classes.items():
        assert spec["evidence"] and spec["sources"] and set(spec["sources"]) <= set(facts["sources"]), cls
    rules = llm_api["rules"]
    assert "the smallest key's value == max_draft_len (key 1 is not required)" in rules["draft_len_schedule"]["rule"]
    assert "exclusive with draft_len_schedule: both set is a ValueError" in rules["max_concurrency"]["rule"]
    assert "acceptance_rate_threshold in [0.0, 1.0]" in rules["acceptance_gate"]["rule"]
    transceiver = {f["name"]: f for f in rules["cache_transceiver_config"]["fields"]}
    assert {"backend", "max_tokens_in_buffer"} <= set(transceiver)
    assert set(rules["cache_transceiver_config"]["sources"]) <= set(facts["sources"])


def test_1_2_1_triton_model_names_and_documented_requests(facts):
    triton = facts["targets"]["1.2.1"]["triton_llmapi"]
    model = triton["model"]
    inputs = {i["name"]: i for i in model["inputs"]}
    outputs = {o["name"]: o for o in model["outputs"]}
    assert len(inputs) == len(model["inputs"]) and len(outputs) == len(model["outputs"])
    for tensor in model["inputs"] + model["outputs"]:
        assert tensor["data_type"].startswith("TYPE_") and all(isinstance(d, int) for d in tensor["dims"])
    assert [n for n, i in inputs.items() if not i["optional"]] == ["text_input"]
    assert sum(n.startswith("sampling_param_") for n in inputs) == 11
    assert sum(n.startswith("return_") for n in inputs) == 3
    for example in triton["requests"]["examples"]:
        assert set(example) <= set(inputs)
    assert set(triton["requests"]["perf_response_keys"]) <= set(outputs) | {"model_name", "model_version"}
    assert {"acceptance_rate", "total_accepted_draft_tokens", "total_draft_tokens"} <= set(outputs)
    assert not set(triton["not_in_1_2_1"]) & set(inputs)
    yaml_facts = triton["model_yaml"]
    assert set(yaml_facts["template"]) <= set(yaml_facts["keys"])
    assert set(yaml_facts["template"]["triton_config"]) == {"max_batch_size", "decoupled"}
    assert triton["requests"]["source"] in facts["sources"]


def test_1_2_1_trtllm_serve(facts):
    serve = facts["targets"]["1.2.1"]["trtllm_serve"]
    backend = serve["backend"]
    assert backend["default"] == "pytorch" and backend["default"] in backend["choices"]
    assert set(backend["aliases"].values()) <= set(backend["choices"])
    assert {"--backend", "--extra_llm_api_options"} <= set(serve["options"])
    assert len(serve["options"]) == len(set(serve["options"]))
    assert "--backend pytorch --extra_llm_api_options" in serve["command"]


def test_release_notes_date_the_features(facts):
    notes = facts["release_notes"]
    assert notes["source"] in facts["sources"] and facts["sources"][notes["source"]]["pinned"]
    assert "Enabled dynamic draft length support" in notes["1.2"]
    assert "Migrate Eagle-3 and draft/target speculation to Drafter" in notes["1.0"]
    assert {"draft_len_schedule", "max_concurrency", "acceptance_gate", "eagle3_one_model",
            "drafter_migration"} <= set(notes["dating"])
