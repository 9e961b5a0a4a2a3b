"""Property tests of `trtspec build` over build configs and its command-line flags (hypothesis).

For every generated input: no traceback (any exception but SystemExit fails the test), no hang (each run is given a
time limit), no wrong success (numeric fields follow a hand-written oracle of their documented ranges, and a build
that exits 0 leaves a coherent output), and every failure is one `Error:` line (plus at most one `Hint:` line) with
an exit code from docs/guarantees.md.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import yaml
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

from tests.cli_checks import INT32_MAX, SETTINGS, SPECIAL_FLOATS, VALUES, assert_clean_failure, run_cli

BUILD_EXIT_CODES = {0, 2, 3}  # ok, bad input (incl. click usage errors), TensorRT-LLM needed (docs/guarantees.md)


# --- strategies -------------------------------------------------------------------------------------------------

SECTIONS = {
    "engine": ["dtype", "quantization", "tp_size", "pp_size", "draft_tp_size", "max_batch_size", "max_input_len",
               "max_seq_len", "max_num_tokens", "max_beam_width", "logits_dtype", "use_paged_context_fmha",
               "gather_generation_logits", "workers"],
    "kv_cache": ["enable_block_reuse", "free_gpu_memory_fraction", "max_tokens", "dtype"],
    "gpu": ["memory_gib", "reserve_gib"],
    "trtllm": ["version", "examples_dir", "container"],
    "lookahead": ["window", "ngram", "verification_set"],
    "medusa": ["heads", "num_heads", "num_layers", "choices"],
    "eagle": ["model", "num_layers", "max_non_leaves_per_layer", "choices", "eagle3"],
    "redrafter": ["drafter", "num_beams", "draft_len_per_beam", "greedy"],
    "ngram": ["max_matching_ngram_size"],
    "suffix": ["max_tree_depth", "max_cached_requests", "max_spec_factor", "max_spec_offset", "min_token_prob", "tree"],
}
TOP = ["name", "backend", "target", "draft", "method", "max_draft_len", "k", "output", "trtllm_version"]
METHODS = ["none", "draft_target", "ngram", "medusa", "eagle", "lookahead", "redrafter", "suffix", "nonsense"]


@st.composite
def config_documents(draw: st.DrawFn) -> dict:
    """A build config: a plausible base with a few fields (known or unknown, anywhere) set to arbitrary values."""
    method = draw(st.sampled_from(METHODS))
    doc: dict = {"target": draw(st.sampled_from(["tiny", "tiny", "tiny-draft", "nonexistent-model"])),
                 "method": method, "backend": draw(st.sampled_from(["tensorrtllm", "torch"])),
                 "engine": {"max_input_len": 64, "max_seq_len": 256}}
    if method == "draft_target":
        doc["draft"] = "tiny-draft"
    if method == "medusa":
        doc["medusa"] = {"heads": "tiny-medusa"}
    for _ in range(draw(st.integers(0, 4))):
        where = draw(st.sampled_from(["top", "section", "unknown"]))
        if where == "top":
            doc[draw(st.sampled_from(TOP))] = draw(VALUES)
        elif where == "section":
            section = draw(st.sampled_from(sorted(SECTIONS)))
            if not isinstance(doc.get(section), dict):
                doc[section] = {}
            doc[section][draw(st.sampled_from(SECTIONS[section]))] = draw(VALUES)
        else:
            doc[draw(st.text(min_size=1, max_size=10))] = draw(VALUES)
    return doc


def dump(doc: dict) -> bytes:
    return yaml.safe_dump(doc, allow_unicode=True).encode("utf-8")


# --- build configs --------------------------------------------------------------------------------------------


@settings(SETTINGS, max_examples=250)
@given(doc=config_documents())
@pytest.mark.slow
def test_any_build_config_is_a_plan_or_a_one_line_error(doc, tmp_path_factory):
    path = tmp_path_factory.mktemp("cfg") / "c.yaml"
    path.write_bytes(dump(doc))
    code, out, err = run_cli(["build", str(path), "--dry-run", "--json"], limit=30)
    event(f"exit {code}")
    if code == 0:
        plan = json.loads(out)
        assert plan["plan"]["steps"] and plan["derived"]["max_draft_len"] <= INT32_MAX
    else:
        assert code == 2, (code, err)
        assert_clean_failure(code, err)


@settings(SETTINGS, max_examples=60)
@given(data=st.one_of(
    st.binary(max_size=300),
    st.builds(lambda doc, enc: dump(doc).decode().encode(enc, errors="replace"), config_documents(),
              st.sampled_from(["utf-16", "utf-16-le", "utf-32", "latin-1", "cp1252", "utf-8-sig"])),
    st.builds(lambda depth, open_, close: (b"target: tiny\nx: " + open_ * depth + close * depth),
              st.integers(1, 30000), st.sampled_from([b"[", b"{a: "]), st.sampled_from([b"]", b"}"])),
    st.text(max_size=200).map(lambda t: t.encode("utf-8", errors="surrogatepass")),
))  # fmt: skip
def test_any_file_as_a_build_config_is_a_plan_or_a_one_line_error(data, tmp_path_factory):
    path = tmp_path_factory.mktemp("cfg") / "c.yaml"
    path.write_bytes(data)
    code, out, err = run_cli(["build", str(path), "--dry-run"], limit=30)
    event(f"exit {code}")
    if code != 0:
        assert code == 2, (code, err)
        assert_clean_failure(code, err)


# Oracle: the documented range of each numeric field, for the embedded pair (tiny: 6 heads, 6 KV heads, 6 layers;
# tiny-draft: 3 heads, 3 KV heads, 2 layers; both max_position_embeddings 1024) in the base config below.
BASE = {"target": "tiny", "draft": "tiny-draft", "method": "draft_target", "max_draft_len": 4,
        "engine": {"dtype": "float16", "max_batch_size": 4, "max_input_len": 128, "max_seq_len": 256}}


def _int(v: object) -> int | None:
    """The int pydantic accepts for `v` (ints, and floats with an integral finite value), else None."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and math.isfinite(v) and v.is_integer():
        return int(v)
    return None


def _finite(v: object) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(float(v)) else None


ORACLE = {
    # field path: (valid(value) -> bool | None (None: too close to a threshold to judge), values to try)
    ("engine", "tp_size"): lambda v: _int(v) in (1, 3),  # divides 6 and 3 heads (the draft shares tp_size)
    ("engine", "draft_tp_size"): lambda v: _int(v) == 1,  # 3 heads split, but 4096 logits pad differently
    ("engine", "pp_size"): lambda v: _int(v) in (1, 2),  # <= the draft's 2 layers
    ("engine", "max_batch_size"): lambda v: (i := _int(v)) is not None and 1 <= i <= INT32_MAX,
    ("engine", "max_num_tokens"): lambda v: (i := _int(v)) is not None and 1 <= i <= INT32_MAX,
    ("engine", "max_seq_len"): lambda v: (i := _int(v)) is not None and 128 < i <= 1024 - 4,
    ("max_draft_len",): lambda v: (i := _int(v)) is not None and 1 <= i <= 1024 - 256,
    ("kv_cache", "max_tokens"): lambda v: (i := _int(v)) is not None and 1 <= i <= INT32_MAX,
    ("kv_cache", "free_gpu_memory_fraction"): lambda v: (f := _finite(v)) is not None and 0 < f <= 1,
    # two engines reserve 2 GiB each; the tiny weights and KV cache need a few MiB more
    ("gpu", "memory_gib"): lambda v: None if (f := _finite(v)) is not None and 4 <= f < 4.5
    else f is not None and 4.5 <= f <= 16384,
}
NUMBERS = st.one_of(st.integers(-10, 1100), st.integers(-(2**80), 2**80),
                    st.sampled_from([0, 1, 2, 3, 4, 6, 128, 129, 1020, 1021, 768, 769, INT32_MAX, INT32_MAX + 1]),
                    st.floats(allow_nan=True, allow_infinity=True), SPECIAL_FLOATS,
                    st.sampled_from([4.0, 4.5, 5.0, 0.5, 1.0, 16384.0, 16384.5, 1e-300, 2.5]))


@settings(SETTINGS, max_examples=300)
@given(field=st.sampled_from(sorted(ORACLE)), value=NUMBERS)
def test_numeric_fields_succeed_exactly_inside_their_documented_range(field, value, tmp_path_factory):
    expected = ORACLE[field](value)
    assume(expected is not None)
    doc = json.loads(json.dumps(BASE))
    target = doc
    for part in field[:-1]:
        target = target.setdefault(part, {})
    target[field[-1]] = value
    assert_plan_exactly_when_valid(doc, expected, (field, value), tmp_path_factory)


def assert_plan_exactly_when_valid(doc: dict, expected: bool, what: object, tmp_path_factory) -> str:
    """`trtspec build --dry-run` of `doc` plans (exit 0) when `expected`, else fails in one line (exit 2); stderr."""
    path = tmp_path_factory.mktemp("cfg") / "c.yaml"
    path.write_bytes(dump(doc))
    code, out, err = run_cli(["build", str(path), "--dry-run", "--json"], limit=30)
    event(f"{'valid' if expected else 'invalid'} -> exit {code}")
    if expected:
        assert code == 0, (what, err)
    else:
        assert code == 2, (what, code, out[:300])
        assert_clean_failure(code, err)
    return err


# The suffix section (method suffix, torch backend): SuffixConfig's ranges. Its integers are strict (no 4.0, no
# booleans): the section is checked by SuffixConfig itself, the same checks as the engine's proposer options.
SUFFIX_BASE = {"target": "tiny", "method": "suffix", "backend": "torch", "max_draft_len": 8,
               "engine": {"dtype": "float32", "max_batch_size": 2, "max_input_len": 128, "max_seq_len": 256}}
SUFFIX_ORACLE = {
    "max_tree_depth": lambda v: isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 1024,
    "max_cached_requests": lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= INT32_MAX,
    "max_spec_factor": lambda v: (f := _finite(v)) is not None and f > 0,
    "max_spec_offset": lambda v: _finite(v) is not None,
    "min_token_prob": lambda v: (f := _finite(v)) is not None and 0 <= f <= 1,
}


@settings(SETTINGS, max_examples=120)
@given(field=st.sampled_from(sorted(SUFFIX_ORACLE)), value=NUMBERS | st.booleans())
def test_suffix_fields_succeed_exactly_inside_their_documented_range(field, value, tmp_path_factory):
    expected = SUFFIX_ORACLE[field](value)
    doc = {**json.loads(json.dumps(SUFFIX_BASE)), "suffix": {field: value}}
    err = assert_plan_exactly_when_valid(doc, expected, (field, value), tmp_path_factory)
    assert expected or f"suffix.{field}=" in err


# --- command-line flags -------------------------------------------------------------------------------------------

PATH_CHARS = st.sampled_from(list("abcXYZ019 -_.;&|$`'\"()<>*?!#~=+,:@%^{}[]\\"))
REL_PATHS = st.text(PATH_CHARS, min_size=1, max_size=12).filter(
    lambda p: p.strip("/") and ".." not in p and not p.startswith(("/", "~")) and p not in (".",))


@st.composite
def build_argv(draw: st.DrawFn) -> list[str]:
    argv = ["build"]
    config = draw(st.sampled_from(["tiny-torch.yaml"] * 3 + ["tiny-baseline.yaml"] * 2 + ["missing.yaml", None]))
    if config:
        argv.append(config)
    # weighted towards command lines that build (real work), with every flag and some bad values in the mix
    flags = draw(st.lists(st.sampled_from(["--only", "--only", "--out", "--out", "--out", "--backend", "--json",
                                           "--json", "--dry-run", "--example", "--list-examples", "--schema",
                                           "--bogus"]), max_size=4))
    for flag in flags:
        argv.append(flag)
        if flag == "--only":
            argv.append(draw(st.sampled_from(["convert", "convert", "engines", "files"])))
        elif flag == "--out":
            argv.append(draw(REL_PATHS))
        elif flag == "--backend":
            argv.append(draw(st.sampled_from(["torch", "torch", "tensorrtllm", "onnx"])))
        elif flag == "--example":
            argv.append(draw(st.sampled_from(["tiny-torch", "no-such-example"])))
    return argv


def _work_config(name: str) -> str:
    doc = yaml.safe_load((Path(__file__).resolve().parents[2] / "build_configs" / f"{name}.yaml").read_text())
    doc.update(output=f"out/{name}", engine={**doc["engine"], "dtype": "float32"})
    return yaml.safe_dump(doc)


# small configs: the torch bundle and a one-model conversion (the same text for every example, made once)
WORK_CONFIGS = {name: _work_config(name) for name in ("tiny-torch", "tiny-baseline")}


@settings(SETTINGS, max_examples=150)
@given(argv=build_argv())
@pytest.mark.slow
def test_any_build_command_line_is_a_result_or_a_one_line_error(argv, tmp_path_factory, monkeypatch):
    work = tmp_path_factory.mktemp("work")
    for name, text in WORK_CONFIGS.items():
        (work / f"{name}.yaml").write_text(text)
    monkeypatch.chdir(work)
    code, out, err = run_cli(argv, limit=120)
    assert code in BUILD_EXIT_CODES, (argv, code, err)
    event(f"exit {code}" + (" (built)" if code in (0, 3) and "--dry-run" not in argv and
                            not {"--schema", "--example", "--list-examples"} & set(argv) else ""))
    only = argv[len(argv) - 1 - argv[::-1].index("--only") + 1] if "--only" in argv else None
    if code != 0:
        assert_clean_failure(code, err)
    if code == 3:  # pending TensorRT-LLM steps of the selected stage: the error says what to run where
        assert "needs TensorRT-LLM" in err and only != "convert", (argv, err)
    if "--json" in argv and code == 0 and not {"--list-examples", "--example"} & set(argv):
        json.loads(out)
    built = code in (0, 3) and "--dry-run" not in argv and not {"--schema", "--example", "--list-examples"} & set(argv)
    if built:  # a real build: its output directory holds a manifest whose every listed step is done or pending
        last_out = len(argv) - 1 - argv[::-1].index("--out") if "--out" in argv else None
        out_dir = Path(argv[last_out + 1]) if last_out is not None else work / "out" / Path(argv[1]).stem
        manifest = json.loads((out_dir / "trtspec-manifest.json").read_text())
        assert {s["status"] for s in manifest["steps"]} <= {"done", "pending"}
        assert all((out_dir / o).exists() for s in manifest["steps"] if s["status"] == "done" for o in s["outputs"])
        again, out2, err2 = run_cli(argv, limit=120)  # the same build again: same outcome, nothing redone
        assert again == code, (argv, err2)
        if "--json" in argv:
            assert json.loads(out2)["done"] == [], (argv, out2)
    assert not [p for p in work.rglob("*trtspec-tmp-*")], "staging left behind"
    assert not [p for p in Path(os.getcwd()).rglob("*") if p.name in ("PWNED",)]


@pytest.mark.parametrize("argv", [["build", "--only"], ["build", "x.yaml", "--backend"], ["build", "--bogus"]])
def test_click_usage_errors_exit_2(argv):
    code, _, err = run_cli(argv)
    assert code == 2 and "Error: " in err and "Traceback" not in err
