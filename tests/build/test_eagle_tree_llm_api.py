"""EAGLE-3 trees in the LLM API (build/preflight.py `_llm_api_eagle_tree`, build/llm_api.py `_eagle_tree`): a static
tree (eagle.choices: a list, or `trtspec tune tree --eagle --out` output) is eagle_choices with max_draft_len = its
depth and max_total_draft_tokens = len(choices); a dynamic tree (eagle.topk + eagle.depth, k = the node budget) is
use_dynamic_tree + dynamic_tree_max_topK + max_total_draft_tokens. Both checked against each release's facts (1.2.1
and Dynamo's 1.3.0rc29: diff_llm_api clean, mutations refused by name), and the bad inputs: a tree over the budget, a
budget the dynamic shape cannot fill, both trees at once, half a dynamic shape, two-model on a one-model release."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.cli_checks import run_cli
from trtspec.build.plan import llm_api_for_release, plan_build
from trtspec.build.preflight import run_preflight
from trtspec.config import load_build_spec, parse_build_spec
from trtspec.errors import ConfigError
from trtspec.targets import diff_llm_api

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "build_configs" / "llama3.1-8b-eagle3-tree.yaml"
RELEASES = ["1.2.1", "1.3.0rc29"]
STATIC = [[0], [1], [0, 0], [1, 0], [0, 0, 0]]


def resolved_of(eagle, **fields):
    data = {"name": "t", "workflow": "pytorch", "method": "eagle", "target": "/models/Llama-3.1-8B-Instruct",
            "output": "/tmp/out", "trtllm": {"version": "1.2.1"},
            "eagle": {"model": "/models/EAGLE3", "eagle3": True, **eagle}, **fields}
    return run_preflight(parse_build_spec(data), dry_run=True)


def options_of(eagle, version="1.2.1", **fields):
    resolved = resolved_of(eagle, **fields)
    return plan_build(resolved).llm_api if version == "1.2.1" else llm_api_for_release(resolved, version)


@pytest.mark.parametrize("version", RELEASES)
def test_static_tree_renders_eagle_choices_with_its_depth_and_nodes(version):
    options = options_of({"choices": STATIC}, version)
    spec = options["speculative_config"]
    assert spec["eagle_choices"] == STATIC and spec["max_draft_len"] == 3 and spec["max_total_draft_tokens"] == 5
    assert "use_dynamic_tree" not in spec
    assert diff_llm_api(options, version) == []


@pytest.mark.parametrize("version", RELEASES)
def test_dynamic_tree_renders_use_dynamic_tree_with_the_budget(version):
    options = options_of({"topk": 4, "depth": 3}, version, max_draft_len=10)
    spec = options["speculative_config"]
    assert (spec["use_dynamic_tree"], spec["dynamic_tree_max_topK"], spec["max_draft_len"],
            spec["max_total_draft_tokens"]) == (True, 4, 3, 10)
    assert "eagle_choices" not in spec
    assert diff_llm_api(options, version) == []
    default = options_of({"topk": 4, "depth": 3}, version)["speculative_config"]
    assert default["max_total_draft_tokens"] == 12  # the release's default: top-k x depth


def test_tune_tree_output_is_a_static_tree(tmp_path):
    """The file `trtspec tune tree --eagle --out` writes (training.tree_tune.write_choices' layout) as eagle.choices."""
    tuned = tmp_path / "eagle-tree.yaml"
    tuned.write_text("# EAGLE tree tuned by `trtspec tune tree`\neagle_choices:\n"
                     + "".join(f"  - {p}\n" for p in STATIC)
                     + "budget: 5\nestimated_acceptance_length: 2.9\nreplayed_acceptance_length: 2.8\n"
                       "triton: '{0}, {1}, {0, 0}, {1, 0}, {0, 0, 0}'\n")
    options = options_of({"choices": str(tuned)})
    assert options["speculative_config"]["eagle_choices"] == STATIC


def tuned_file(tmp_path, best=(4, 3), budget=10, name="eagle-tree.yaml"):
    """A `trtspec tune tree --eagle --out` file, written by the writer the CLI uses, for a tuning whose best dynamic
    shape is `best` (top-k, depth) at `budget` nodes."""
    from trtspec.training.tree_tune import write_choices

    rows = [{"eagle_topk": k, "eagle_depth": d, "tree": f"dynamic:{k}x{d}", "budget": budget,
             "replayed_acceptance_length": 2.5 if (k, d) == best else 1.5, "draft_s_per_step": 0.01}
            for k, d in ((1, 2), best)]
    result = {"eagle_choices": STATIC, "budget": budget, "estimated_acceptance_length": 2.9,
              "replayed_acceptance_length": 2.8, "triton": "{0}, {1}, {0, 0}, {1, 0}, {0, 0, 0}",
              "dynamic": {"budget": budget, "shapes": rows, "best": dict(rows[1])}}
    path = tmp_path / name
    write_choices(path, result)
    return path


@pytest.mark.parametrize("version", RELEASES)
def test_tune_tree_output_is_a_dynamic_tree_too(tmp_path, version):
    """The same file as eagle.dynamic_tree: its recorded best shape, k = its node budget."""
    tuned = tuned_file(tmp_path)
    recorded = yaml.safe_load(tuned.read_text())["dynamic_tree"]
    assert {k: recorded[k] for k in ("topk", "depth", "max_total_draft_tokens")} == {
        "topk": 4, "depth": 3, "max_total_draft_tokens": 10}
    options = options_of({"dynamic_tree": str(tuned)}, version)
    spec = options["speculative_config"]
    assert (spec["use_dynamic_tree"], spec["dynamic_tree_max_topK"], spec["max_draft_len"],
            spec["max_total_draft_tokens"]) == (True, 4, 3, 10)
    assert "eagle_choices" not in spec and diff_llm_api(options, version) == []
    assert options_of({"choices": str(tuned)}, version)["speculative_config"]["eagle_choices"] == STATIC  # static
    # a budget the shape cannot fill is recorded as the nodes it drafts (top-k x depth), a given k wins in range
    small = tuned_file(tmp_path, best=(2, 3), budget=10, name="small.yaml")
    assert options_of({"dynamic_tree": str(small)}, version)["speculative_config"]["max_total_draft_tokens"] == 6
    assert options_of({"dynamic_tree": str(tuned)}, version, max_draft_len=8)["speculative_config"][
        "max_total_draft_tokens"] == 8


def test_bad_dynamic_tree_files_are_exit_2_naming_the_field(tmp_path):
    tuned = tuned_file(tmp_path)
    medusa = tmp_path / "medusa.yaml"
    medusa.write_text("medusa_choices:\n  - [0]\nbudget: 1\n")
    shallow = tuned_file(tmp_path, best=(4, 3), budget=2, name="shallow.yaml")  # 2 nodes < depth 3
    for eagle, field, words in (
            ({"dynamic_tree": str(medusa)}, "eagle.dynamic_tree", "has no dynamic_tree block"),
            ({"dynamic_tree": str(tmp_path / "missing.yaml")}, "eagle.dynamic_tree", ""),
            ({"dynamic_tree": str(shallow)}, "eagle.dynamic_tree", "outside [depth 3"),
            ({"dynamic_tree": str(tuned), "choices": STATIC}, "eagle.dynamic_tree", "eagle.choices sets a static one"),
            ({"dynamic_tree": str(tuned), "topk": 2}, "eagle.topk", "disagrees with eagle.dynamic_tree"),
            ({"dynamic_tree": 3}, "eagle.dynamic_tree", "is not a file name")):
        with pytest.raises(ConfigError) as err:
            resolved_of(eagle)
        e = err.value
        assert e.exit_code == 2 and e.field == field and words in str(e) and e.hint and "\n" not in str(e), eagle


def test_the_example_renders_a_tree_both_releases_read(tmp_path):
    resolved = run_preflight(load_build_spec(EXAMPLE), dry_run=True)
    plan = plan_build(resolved)
    assert plan.llm_api["speculative_config"]["eagle_choices"] and diff_llm_api(plan.llm_api, "1.2.1") == []
    assert any("not pinned" in note for note in plan.notes)  # the facts' caveat, said in the plan
    code, out, err = run_cli(["k8s", str(EXAMPLE), "--out", str(tmp_path)])
    assert code == 0, err
    engine = yaml.safe_load((tmp_path / "engine_configs" / "agg.yaml").read_text())
    assert engine["speculative_config"]["decoding_type"] == "Eagle3" and diff_llm_api(engine, "1.3.0rc29") == []
    from trtspec.build.plan import tree_notes
    from trtspec.targets.llm_api import llm_api_facts

    assert any("deprecated in TensorRT-LLM 1.3.0rc29" in n for n in tree_notes(engine, llm_api_facts("1.3.0rc29")))


def test_two_model_tree_on_1_2_1_and_one_model_only_on_rc29():
    options = options_of({"choices": STATIC, "one_model": False})
    assert options["speculative_config"]["eagle3_one_model"] is False and options["disable_overlap_scheduler"] is True
    assert diff_llm_api(options, "1.2.1") == []
    with pytest.raises(ConfigError, match="eagle.one_model"):
        options_of({"choices": STATIC, "one_model": False}, "1.3.0rc29")


@pytest.mark.parametrize(("eagle", "fields", "field", "words"), [
    ({"choices": STATIC}, {"max_draft_len": 4}, "eagle.choices", "max_draft_len=4"),  # the tree does not fit
    ({"choices": STATIC}, {"max_draft_len": 6}, "max_draft_len", "!= the static tree's 5 nodes"),
    ({"topk": 4, "depth": 3}, {"max_draft_len": 13}, "max_draft_len", "[eagle.depth 3, eagle.topk x eagle.depth 12]"),
    ({"topk": 4, "depth": 3}, {"max_draft_len": 2}, "max_draft_len", "must lie in"),
    ({"choices": STATIC, "topk": 4}, {}, "eagle.topk", "exclude each other"),
    ({"topk": 4}, {}, "eagle.depth", "needs both"),
    ({"depth": 3}, {}, "eagle.topk", "needs both"),
])
def test_bad_trees_are_exit_2_naming_the_field(eagle, fields, field, words):
    with pytest.raises(ConfigError) as err:
        resolved_of(eagle, **fields)
    e = err.value
    assert e.exit_code == 2 and e.field == field and words in str(e) and e.hint and "\n" not in str(e)


@pytest.mark.parametrize("version", RELEASES)
def test_mutations_are_refused_by_name(version):
    static = options_of({"choices": STATIC}, version)
    dynamic = options_of({"topk": 4, "depth": 3}, version, max_draft_len=10)

    def problems(options, **changes):
        spec = {k: v for k, v in {**options["speculative_config"], **changes}.items() if v is not None}
        return [p.key.removeprefix("speculative_config.") for p in diff_llm_api({**options,
                                                                                 "speculative_config": spec}, version)]

    assert problems(static, use_dynamic_tree=True, dynamic_tree_max_topK=4) == ["use_dynamic_tree"]
    assert problems(static, eagle_choice=STATIC) == ["eagle_choice"]  # nearest: eagle_choices
    assert problems(static, eagle_choices=[[0], ["a"]]) == ["eagle_choices"]
    assert problems(dynamic, dynamic_tree_max_topK=None) == ["dynamic_tree_max_topK"]
    assert problems(dynamic, dynamic_tree_max_topk=4) == ["dynamic_tree_max_topk"]
    if version == "1.2.1":  # the rules 1.2.1's facts state: eagle_choices resets both; the dynamic tree needs a total
        assert problems(static, max_draft_len=2) == ["max_draft_len"]
        assert problems(static, max_total_draft_tokens=4) == ["max_total_draft_tokens"]
        assert problems(dynamic, max_total_draft_tokens=None) == ["max_total_draft_tokens"]
    else:  # rc29: the total lies in [max_draft_len, top-k x max_draft_len]
        assert problems(dynamic, max_total_draft_tokens=13) == ["max_total_draft_tokens"]
        assert problems(dynamic, max_total_draft_tokens=2) == ["max_total_draft_tokens"]
