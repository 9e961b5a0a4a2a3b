import json
import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trtspec.chat import (
    CHAT_TEMPLATE,
    MODEL_TEMPLATE,
    TEMPLATE_FILE,
    chat_prompt,
    chat_template_of,
    chat_text,
    render,
    write_chat_template,
)
from trtspec.errors import ConfigError, ModelNotFoundError
from trtspec.models import embedded_path, resolve_model

EMBEDDED = ("tiny", "tiny-draft")


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(resolve_model("tiny"))


@pytest.mark.parametrize("name", EMBEDDED)
def test_embedded_models_ship_the_template_in_tokenizer_config(name, tmp_path):
    path = embedded_path(name)
    assert chat_template_of(path) == CHAT_TEMPLATE and not (path / TEMPLATE_FILE).exists()
    copy = tmp_path / name
    shutil.copytree(path, copy, ignore=shutil.ignore_patterns("*.safetensors"))
    assert write_chat_template(copy) is False  # the shipped files are what the script writes: nothing to change


def test_one_user_message_renders_to_its_text(tokenizer):
    messages = [{"role": "user", "content": "def fibonacci(n):"}]
    assert tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == "def fibonacci(n):"


role = st.sampled_from(["system", "user", "assistant"])
text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.fixed_dictionaries({"role": role, "content": text}), min_size=1, max_size=5))
def test_jinja_rendering_equals_the_python_reference(tokenizer, messages):
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert rendered == render(messages, tokenizer.eos_token)


def test_a_chat_request_renders_one_way_for_the_server_and_for_retraining(tokenizer):
    """chat_text: the embedded template (or none) in plain Python, equal to its Jinja rendering; another template by
    the tokenizer; `train draft`'s renderer is the same function."""
    from trtspec.training.distill import chat_renderer

    messages = [{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}, {"role": "user", "content": "u"}]
    jinja = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert chat_text(messages, tokenizer) == jinja == render(messages, tokenizer.eos_token)
    assert chat_renderer(tokenizer)(messages) == jinja and chat_renderer(None) is None

    class Other:  # a tokenizer with its own template
        chat_template, eos_token = "{{ messages[0]['content'] }}!", "</s>"

        def apply_chat_template(self, messages, *, tokenize, add_generation_prompt):
            assert not tokenize and add_generation_prompt
            return "<" + "|".join(m["content"] for m in messages) + ">"

    class Plain:  # no template: the plain one, as the server renders it
        chat_template, eos_token = None, "</s>"

    assert chat_text(messages, Other()) == "<s|a|u>" == chat_renderer(Other())(messages)
    assert chat_text(messages, Plain()) == "s\na</s>\nu" == chat_renderer(Plain())(messages)
    assert chat_text(messages, None) == "s\na\nu"


def test_write_is_idempotent_and_replaces_a_side_file(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    (tmp_path / TEMPLATE_FILE).write_text("{{ messages }}")
    assert write_chat_template(tmp_path) is True
    assert not (tmp_path / TEMPLATE_FILE).exists()
    assert json.loads((tmp_path / "tokenizer_config.json").read_text()) == {"eos_token": "</s>",
                                                                           "chat_template": CHAT_TEMPLATE}
    assert write_chat_template(tmp_path) is False
    assert [p.name for p in tmp_path.iterdir()] == ["tokenizer_config.json"]  # no temp file left


def test_write_names_a_missing_or_bad_tokenizer_config(tmp_path):
    with pytest.raises(ModelNotFoundError, match="tokenizer_config.json is missing"):
        write_chat_template(tmp_path)
    (tmp_path / "tokenizer_config.json").write_bytes(b"\xff{")
    with pytest.raises(ModelNotFoundError, match="not valid UTF-8 JSON"):
        write_chat_template(tmp_path)


def test_chat_prompt_uses_the_models_template_or_a_given_one(tokenizer):
    assert chat_prompt(tokenizer, "def f(", MODEL_TEMPLATE) == "def f("
    assert chat_prompt(tokenizer, "def f(", "<{{ messages[0]['content'] }}>") == "<def f(>"


def test_chat_prompt_without_a_template_names_the_fix():
    class Bare:
        chat_template = None

    with pytest.raises(ConfigError, match="no chat template") as info:
        chat_prompt(Bare(), "x", MODEL_TEMPLATE)
    assert "add_chat_template.py" in (info.value.hint or "")


def test_engine_sweep_applies_the_chat_template(tmp_path):
    from trtspec.sweep.grid import SweepSpec
    from trtspec.sweep.records import read_records
    from trtspec.sweep.runner import run_sweep

    digests = {}
    for template in (None, MODEL_TEMPLATE, "{{ messages[0]['content'] }}\n\n\nclass Other:"):
        spec = SweepSpec.build(methods=["none"], k=[0], num_prompts=1, max_new_tokens=8, calibrate=False, threads=1,
                               chat_template=template)
        out = tmp_path / f"{template is None}-{len(template or '')}.jsonl"
        run_sweep(spec, out, show_progress=False)
        (case,) = [r for r in read_records(out) if r["kind"] == "case"]
        assert case["status"] == "ok" and case["chat_template"] == template
        digests[template] = case["metrics"]["output_sha256"]
    assert digests[None] == digests[MODEL_TEMPLATE]  # one user message renders to its own text
    assert digests["{{ messages[0]['content'] }}\n\n\nclass Other:"] != digests[None]  # a template that changes the prompt shows
