#!/usr/bin/env python
"""Write trtspec's chat template (trtspec/chat.py CHAT_TEMPLATE) into the embedded models' tokenizer_config.json.

    python scripts/add_chat_template.py            # patch tiny and tiny-draft in place (idempotent)
    python scripts/add_chat_template.py DIR ...    # patch other tokenizer directories

`scripts/train_tiny_models.py` (trtspec.training.tiny.train_pair) writes the same template into freshly trained
models, so a retrain and this patch give the same files. Exit code 2 names a directory without a tokenizer_config.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from trtspec.chat import write_chat_template  # noqa: E402
from trtspec.errors import TrtspecError  # noqa: E402
from trtspec.models import embedded_path  # noqa: E402


def main(argv: list[str]) -> int:
    dirs = [Path(a) for a in argv] or [embedded_path("tiny"), embedded_path("tiny-draft")]
    for model_dir in dirs:
        try:
            changed = write_chat_template(model_dir)
        except TrtspecError as exc:
            print(f"Error: {exc.message}\nHint: {exc.hint}", file=sys.stderr)
            return exc.exit_code
        print(f"{model_dir}: {'chat template written' if changed else 'already has the chat template'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
