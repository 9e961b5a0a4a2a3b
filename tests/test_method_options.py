"""One typed options class per method, in its home (issue 41, build item 1): the build config's method sections and the
engine configuration's parts are the homes' declarations (MethodInfo.options, engine_part / engine_part_class).

Unit tests: no servers, no models loaded.
"""

from __future__ import annotations

import sys
import typing
from dataclasses import fields
from pathlib import Path

import pytest

from trtspec.config import BuildSpec, load_build_spec
from trtspec.contracts.engine import CHECKPOINTS, PARTS, EagleTree, EngineConfig
from trtspec.errors import ConfigError
from trtspec.methods import HOMES, METHODS
from trtspec.methods.eagle import EagleSpec
from trtspec.methods.lookahead import LookaheadSpec
from trtspec.methods.medusa import MedusaSpec
from trtspec.methods.ngram import NgramSpec

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "build_configs").glob("*.yaml"))
WITH_SECTION = [m for m in METHODS.values() if m.section]


def _home_of(name: str) -> str:
    return next(home.__name__ for home in HOMES for m in home.DECLARES if m.name == name)


@pytest.mark.parametrize("method", WITH_SECTION, ids=lambda m: m.name)
def test_each_section_is_its_homes_class(method):
    """The class is defined in the home module of a method of that section (a hybrid borrows its drafter's: eagle for
    suffix_eagle3), and BuildSpec's field of that section holds it."""
    assert method.options is not None, f"{method.name} has section {method.section} but declares no options class"
    assert method.options.__module__ in {_home_of(m.name) for m in METHODS.values() if m.section == method.section}
    annotation = typing.get_type_hints(BuildSpec)[method.section]
    assert set(typing.get_args(annotation)) == {method.options, type(None)}


def test_methods_without_a_section_declare_no_options():
    assert all(m.options is None for m in METHODS.values() if not m.section)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_options_is_the_section_of_the_method_built(path):
    spec = load_build_spec(path)
    section = METHODS[spec.method].section
    expected = getattr(spec, section) if section else None
    assert spec.options is expected
    if expected is not None:
        assert isinstance(spec.options, METHODS[spec.method].options)
        assert spec.method_options(type(expected)) is expected


def test_options_is_discriminated_by_method_not_by_the_sections_given():
    spec = BuildSpec(target="tiny", method="ngram", ngram={"max_matching_ngram_size": 5}, lookahead=[4, 4, 4])
    assert isinstance(spec.options, NgramSpec) and spec.options.max_matching_ngram_size == 5
    assert BuildSpec(target="tiny", method="none", ngram={"max_matching_ngram_size": 5}).options is None


def test_method_options_unset_section():
    spec = BuildSpec(target="tiny", method="medusa")
    with pytest.raises(ConfigError) as info:
        spec.method_options(MedusaSpec)
    assert info.value.field == "medusa" and "add `medusa:`" in info.value.hint
    lookahead = BuildSpec(target="tiny", method="lookahead").method_options(LookaheadSpec, default=True)
    assert lookahead == LookaheadSpec() and lookahead.as_tuple() == (4, 3, 4)
    with pytest.raises(TypeError, match="MedusaSpec"):
        BuildSpec(target="tiny", method="lookahead", lookahead=[5, 3, 2]).method_options(MedusaSpec)


def test_suffix_section_is_read_by_its_own_class():
    """SuffixConfig is a dataclass, not a pydantic model: BuildSpec reads it through SuffixConfig.from_options."""
    spec = BuildSpec(target="tiny", backend="torch", method="suffix", suffix={"max_tree_depth": 8, "tree": False})
    assert (spec.options.max_tree_depth, spec.options.tree) == (8, False)
    with pytest.raises(ConfigError) as info:
        BuildSpec(target="tiny", method="suffix", suffix={"max_tree_depth": 0})
    assert info.value.field == "suffix.max_tree_depth"


@pytest.mark.parametrize("method", [m for m in METHODS.values() if m.engine_part], ids=lambda m: m.name)
def test_engine_parts_are_the_homes_classes(method):
    names = {f.name for f in fields(EngineConfig)}
    assert method.engine_part in names
    module, _, cls = (method.engine_part_class or "").partition(":")
    assert PARTS[method.engine_part] is getattr(sys.modules[module], cls)


def test_checkpoint_fields_are_the_homes():
    assert list(CHECKPOINTS) == ["target", *dict.fromkeys(m.checkpoint for m in METHODS.values() if m.checkpoint)]
    assert set(CHECKPOINTS) <= {f.name for f in fields(EngineConfig)}


def test_eagle_tree_from_section_names_the_yaml_path():
    eagle = EagleSpec(model="tiny-eagle", topk=3, depth=5)
    assert EagleTree.from_section(eagle) == EagleTree(topk=3, depth=5)
    assert EagleTree.from_section(EagleSpec(model="m"), [[0], [0, 0]]).choices == ((0,), (0, 0))
    with pytest.raises(ConfigError) as info:
        EagleTree.from_section(eagle, [[0]])
    assert info.value.field == "eagle.topk"
