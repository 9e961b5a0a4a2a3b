import pytest

from trtspec import choices, methods
from trtspec.errors import ConfigError, UnknownMethodError


@pytest.mark.parametrize("wng,expected", [((7, 7, 7), 83), ((4, 4, 4), 23), ((5, 6, 7), 59), ((2, 2, 1), 2),
                                          ((1, 1, 0), 0), ((4, 3, 4), 15)])
def test_lookahead_formula_matches_tensorrt_llm(wng, expected):
    assert methods.lookahead_max_draft_len(*wng) == expected


def test_lookahead_illegal():
    with pytest.raises(ConfigError, match="N == 1"):
        methods.lookahead_max_draft_len(2, 1, 0)


@pytest.mark.parametrize("wng,expected", [((4, 4, 4), 12), ((7, 5, 7), 28), ((3, 3, 2), 4), ((1, 1, 0), 0)])
def test_lookahead_trie_nodes_is_g_times_n_minus_one(wng, expected):
    assert methods.lookahead_trie_nodes(*wng) == expected


def test_parse_lookahead():
    assert methods.parse_lookahead("7,5,7") == (7, 5, 7)
    with pytest.raises(ConfigError, match="three integers") as exc:
        methods.parse_lookahead("4,4", field="--lookahead")
    assert exc.value.field == "--lookahead" and "--lookahead 4,4,4" in exc.value.hint
    with pytest.raises(ConfigError, match="N == 1"):
        methods.parse_lookahead("2,1,1")


def test_resolve_unknown_method_lists_choices():
    with pytest.raises(UnknownMethodError) as exc:
        methods.resolve("medussa")
    assert "draft_target" in exc.value.hint


def test_engine_methods_have_proposers():
    assert {"none", "draft_target", "ngram"} <= set(methods.engine_methods())


def test_default_tree_is_valid_for_four_heads():
    tree = choices.validate(choices.MC_SIM_7B_63, max_depth=4, max_nodes=63)
    assert len(tree) == 63 and choices.depth(tree) == 4


def test_parse_formats_roundtrip():
    tree = [[0], [0, 0], [1]]
    assert choices.parse(choices.to_triton(tree)) == tree
    assert choices.parse(choices.to_json(tree)) == tree
    assert choices.parse("- [0]\n- [0, 0]\n- [1]\n") == tree
    assert choices.parse("mc_sim_7b_63") == choices.MC_SIM_7B_63
    assert choices.to_triton(tree) == "{0}, {0, 0}, {1}"


@pytest.mark.parametrize("bad,kw,msg", [
    ([[0], [1, 0, 0]], {}, r"parent \[1\] is missing"),
    ([[0], [0]], {}, "duplicate"),
    ([[0], [0, 0], [0, 0, 0]], {"max_depth": 2}, "depth 3"),
    ([[0], [1], [2]], {"max_nodes": 2}, "max_draft_len=2"),
])
def test_validate_errors_show_offending_entry(bad, kw, msg):
    with pytest.raises(ConfigError, match=msg):
        choices.validate(bad, **kw)


@pytest.mark.parametrize("text", ["[[0], [-1]]", "[[0], ['a']]", "{0}, {x}", "[[0], []]", "not: [valid"])
def test_parse_rejects_malformed(text):
    with pytest.raises(ConfigError):
        choices.parse(text)


# --- the method homes (trtspec/methods/<method>.py) -------------------------------------------------------------------


def test_table_is_derived_from_the_homes():
    declared = [m for home in methods.HOMES for m in home.DECLARES]
    assert list(methods.METHODS.values()) == declared and len({m.name for m in declared}) == len(declared)
    assert methods.BASELINE == "none" and [m.name for m in declared if m.baseline] == ["none"]
    for m in declared:
        # a section, a checkpoint or a form named by a home belongs to a method the table has
        for other in (m.build_as, m.reference_form, (m.llmapi_nearest or (None,))[0]):
            assert other is None or other in methods.METHODS, (m.name, other)
        assert (m.checkpoint is not None) == (m.needs_draft_model or m.needs_medusa_heads or m.needs_eagle_drafter)
        assert (m.proposer is None) == (m.proposer_class is None), m.name


def test_proposers_come_from_the_homes_dotted_paths():
    from trtspec.spec.proposers import PROPOSERS, Proposer, load_proposer

    for m in methods.METHODS.values():
        if m.proposer_class is None:
            continue
        cls = load_proposer(m)
        assert issubclass(cls, Proposer) and cls.name == m.proposer and PROPOSERS[m.proposer] is cls
    assert set(PROPOSERS) == {m.proposer for m in methods.METHODS.values() if m.proposer}


@pytest.mark.parametrize("name", sorted(methods.METHODS))
def test_method_fields_sets_only_the_methods_own_part(name):
    from trtspec.contracts.engine import METHOD_PARTS, EagleTree, EngineConfig, method_fields

    info = methods.resolve(name)
    values = dict(choices=[[0], [0, 0], [1]], eagle_tree=lambda: EagleTree(choices=((0,), (1,))),
                  lookahead=(4, 4, 4), ngram_size=3, suffix=None)
    fields = method_fields(name, 5, reference=False, **values)
    assert fields["method"] == name and fields["max_k"] == 5
    assert fields["default_k"] == (5 if info.external_drafts else 0)
    assert method_fields(name, 0, reference=True, **values)["max_k"] == 1
    parts = {p for p in (info.engine_part, *info.reads_parts) if p}  # a hybrid reads suffix's and its drafter's
    assert set(fields) - {"method", "max_k", "default_k"} == parts
    assert {part for part, owners in METHOD_PARTS.items() if name in owners} == parts
    EngineConfig(target="tiny", **fields)  # each part is accepted for its own method


def test_homes_import_neither_torch_nor_click():
    """build, triton and contracts read the homes on machines without torch (a short `python -c` child)."""
    import subprocess
    import sys

    code = ("import sys, trtspec.methods\n"
            "print(','.join(m for m in ('torch', 'click') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == ""
