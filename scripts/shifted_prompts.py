"""Write the shifted prompt suite of docs/retrain.md: HTML from the running interpreter's standard library.

The embedded pair was trained on the standard library's Python source; these prompts are the HTML files that ship
beside it (difflib's test report, IDLE's help), cut into 64-token windows every 96 tokens, every 4th window kept:
213 prompts on which the shipped draft's acceptance is low. Deterministic for a given Python build.

    python scripts/shifted_prompts.py --out shifted-html.jsonl
    trtspec train draft --prompts shifted-html.jsonl --out out/draft-html
"""

from __future__ import annotations

import argparse
import json
import sysconfig
from pathlib import Path

FILES = ("test/test_difflib_expect.html", "idlelib/help.html")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--every", type=int, default=4, help="keep every Nth window")
    args = parser.parse_args()
    from transformers import AutoTokenizer

    from trtspec.models import embedded_path

    tokenizer = AutoTokenizer.from_pretrained(embedded_path("tiny"))
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    windows = []
    for name in FILES:
        ids = tokenizer((stdlib / name).read_text(errors="replace"), add_special_tokens=False)["input_ids"]
        windows += [{"prompt": tokenizer.decode(ids[start:start + 64]), "source": name}
                    for start in range(0, len(ids) - 96, 96)]
    kept = windows[::args.every]
    args.out.write_text("".join(json.dumps(w) + "\n" for w in kept), encoding="utf-8")
    print(f"{len(kept)} prompts -> {args.out}")


if __name__ == "__main__":
    main()
