"""The chat template of the embedded models, and the one way trtspec writes a template into a tokenizer directory.

The embedded `tiny` models are base models trained on Python source (trtspec/training/tiny.py): they have no chat
turns to learn from. OpenAI-style servers still need a template (NVIDIA Dynamo's frontend refuses to serve a model
whose `tokenizer_config.json` has no `chat_template`), so they get the plainest one that keeps a chat request
meaningful for a base model:

- the messages' contents are joined with a newline, in order, whatever their role;
- an assistant message ends with the EOS token (a finished earlier answer);
- no generation prompt is added: the model continues the text.

So a chat of one user message renders to exactly that message's text, and its greedy chat completion equals the
greedy text completion of the same text (tests/test_chat.py; the Dynamo acceptance test relies on it).
`write_chat_template` is how the template gets there: `train_pair` calls it for freshly trained models and
`scripts/add_chat_template.py` patches existing directories (idempotent). `chat_text` is how a chat request's messages
become text (the trtllm-serve server; `train draft` renders logged chats with it, so it retrains on the text the server
rendered). `chat_prompt` is how a sweep with `chat_template` turns a suite's prompt into a chat (engine backend; the
OpenAI backend sends it to /v1/chat/completions instead). Pure Python: no torch, no transformers (a tokenizer is
passed in).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trtspec.atomic import write_json
from trtspec.errors import ConfigError, ModelNotFoundError

# Jinja (Hugging Face `apply_chat_template`; minijinja in Dynamo's frontend). Whitespace control keeps it exact.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if not loop.first %}{{ '\\n' }}{% endif -%}"
    "{{- message['content'] -}}"
    "{%- if message['role'] == 'assistant' %}{{ eos_token }}{% endif -%}"
    "{%- endfor -%}"
)
MODEL_TEMPLATE = "model"  # a sweep's `chat_template: model`: the model's own template (the server applies it too)
TOKENIZER_CONFIG = "tokenizer_config.json"
TEMPLATE_FILE = "chat_template.jinja"  # transformers >= 4.50 may save the template here instead; Dynamo reads the JSON


def render(messages: Sequence[dict[str, Any]], eos_token: str) -> str:
    """CHAT_TEMPLATE applied in plain Python (the reference the tests hold the Jinja rendering to)."""
    parts = []
    for message in messages:
        text = str(message.get("content") or "")
        parts.append(text + (eos_token if message.get("role") == "assistant" else ""))
    return "\n".join(parts)


def chat_text(messages: Sequence[dict[str, Any]], tokenizer: Any) -> str:
    """A chat request's messages as the text trtspec's servers render and tokenize (the trtllm-serve server), and so
    what `train draft` retrains on: CHAT_TEMPLATE, in plain Python (`render`), when the tokenizer declares that
    template or none (or there is no tokenizer), else the tokenizer's own template with the generation prompt."""
    template = getattr(tokenizer, "chat_template", None)
    if not template or template == CHAT_TEMPLATE:
        return render(messages, getattr(tokenizer, "eos_token", None) or "")
    return tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)


def chat_prompt(tokenizer: Any, text: str, template: str) -> str:
    """`text` as the user message of a one-turn chat, rendered by `template` (MODEL_TEMPLATE: the tokenizer's own,
    which is what an OpenAI server applies to /v1/chat/completions)."""
    if template == MODEL_TEMPLATE and not getattr(tokenizer, "chat_template", None):
        raise ConfigError("chat_template", template, "the model's tokenizer has no chat template",
                          hint="add one with `python scripts/add_chat_template.py MODEL_DIR`, or give a Jinja template")
    messages = [{"role": "user", "content": text}]
    return tokenizer.apply_chat_template(messages, chat_template=None if template == MODEL_TEMPLATE else template,
                                         tokenize=False, add_generation_prompt=True)


def write_chat_template(model_dir: Path, template: str = CHAT_TEMPLATE) -> bool:
    """Put `template` into `model_dir/tokenizer_config.json` (atomically: temp file + rename); remove a
    `chat_template.jinja` beside it so there is one definition. Returns False when it was already there."""
    path = Path(model_dir) / TOKENIZER_CONFIG
    if not path.is_file():
        raise ModelNotFoundError(f"{path} is missing", hint="save the tokenizer with save_pretrained first")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelNotFoundError(f"{path} is not valid UTF-8 JSON ({exc})",
                                 hint="re-save the tokenizer with save_pretrained") from None
    side_file = Path(model_dir) / TEMPLATE_FILE
    if config.get("chat_template") == template and not side_file.exists():
        return False
    config["chat_template"] = template
    write_json(path, config, ensure_ascii=False)
    side_file.unlink(missing_ok=True)
    return True


def chat_template_of(model_dir: Path) -> str | None:
    """The chat template a tokenizer directory declares in its tokenizer_config.json (None: it has none)."""
    path = Path(model_dir) / TOKENIZER_CONFIG
    try:
        value = json.loads(path.read_text(encoding="utf-8")).get("chat_template")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return None
    return value if isinstance(value, str) else None
