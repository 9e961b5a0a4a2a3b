"""Write the shipped `repetitive` prompt suite (trtspec/assets/prompts/repetitive.jsonl): the traffic suffix decoding
is for, generated from templates written for this project (Apache-2.0, like the rest of trtspec; no third-party text).

Four kinds, interleaved in file order so that any first N prompts mix them:
  edit      multi-turn edits of the same code: version 1 of a small module, an instruction, and the start of version
            2; the rest of version 2 is mostly a copy of version 1 (prompt lookup and the per-request tree both see it)
  tool      an agent's tool-call log as JSON lines (the same tools, paths and fields again and again), ending at the
            start of the next call; different sessions share the format, so earlier outputs help later requests
  template  templated answers: a test module whose test methods follow one template with different values, ending
            at the start of the next method
  retry     an exact repeat of an earlier prompt in the suite (a client retry or a regenerate); with greedy decoding
            its output repeats too, which only a cross-request cache can exploit
Deterministic (seeded); rerun to regenerate: python scripts/make_repetitive_suite.py
"""

from __future__ import annotations

import argparse
import json
import random
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "trtspec" / "assets" / "prompts" / "repetitive.jsonl"
SEED = 16

# -- edit: small modules (original code) and edits that keep most lines -------------------------------------------

MODULES = {
    "inventory.py": '''
        class Inventory:
            """Items in stock, by name."""

            def __init__(self, items=None):
                self.items = dict(items or {})

            def add(self, name, count=1):
                if count <= 0:
                    raise ValueError("count must be positive")
                self.items[name] = self.items.get(name, 0) + count
                return self.items[name]

            def remove(self, name, count=1):
                if self.items.get(name, 0) < count:
                    raise KeyError(name)
                self.items[name] -= count
                if not self.items[name]:
                    del self.items[name]
                return self.items.get(name, 0)

            def total(self):
                return sum(self.items.values())

            def names(self):
                return sorted(self.items)
        ''',
    "retry.py": '''
        import time


        def retry(func, attempts=3, delay=0.5, exceptions=(OSError,)):
            """Call func until it succeeds or the attempts run out."""
            last = None
            for attempt in range(attempts):
                try:
                    return func()
                except exceptions as exc:
                    last = exc
                    if attempt + 1 < attempts:
                        time.sleep(delay * (2 ** attempt))
            raise last


        def retry_all(funcs, attempts=3, delay=0.5):
            results = []
            for func in funcs:
                results.append(retry(func, attempts=attempts, delay=delay))
            return results
        ''',
    "config.py": '''
        import os


        class Config:
            """Settings from a mapping, with defaults and environment overrides."""

            defaults = {"host": "localhost", "port": 8080, "debug": False, "workers": 4}

            def __init__(self, values=None, environ=None):
                self.values = dict(self.defaults)
                self.values.update(values or {})
                self.environ = os.environ if environ is None else environ

            def get(self, key):
                name = "APP_" + key.upper()
                if name in self.environ:
                    return self.environ[name]
                return self.values[key]

            def as_dict(self):
                return {key: self.get(key) for key in self.values}

            def __repr__(self):
                return "Config(%r)" % (self.as_dict(),)
        ''',
    "stats.py": '''
        def mean(values):
            values = list(values)
            if not values:
                raise ValueError("mean of an empty sequence")
            return sum(values) / len(values)


        def variance(values):
            values = list(values)
            if len(values) < 2:
                raise ValueError("variance needs at least two values")
            center = mean(values)
            return sum((x - center) ** 2 for x in values) / (len(values) - 1)


        def median(values):
            values = sorted(values)
            if not values:
                raise ValueError("median of an empty sequence")
            middle = len(values) // 2
            if len(values) % 2:
                return values[middle]
            return (values[middle - 1] + values[middle]) / 2
        ''',
    "queue.py": '''
        import collections
        import threading


        class WorkQueue:
            """A bounded queue of jobs shared by worker threads."""

            def __init__(self, maxsize=16):
                self.maxsize = maxsize
                self.jobs = collections.deque()
                self.lock = threading.Lock()
                self.not_empty = threading.Condition(self.lock)

            def put(self, job):
                with self.lock:
                    if len(self.jobs) >= self.maxsize:
                        raise OverflowError("queue is full")
                    self.jobs.append(job)
                    self.not_empty.notify()

            def get(self, timeout=None):
                with self.not_empty:
                    if not self.jobs:
                        self.not_empty.wait(timeout)
                    if not self.jobs:
                        return None
                    return self.jobs.popleft()

            def __len__(self):
                with self.lock:
                    return len(self.jobs)
        ''',
    "paths.py": '''
        import os


        def split_all(path):
            parts = []
            while True:
                head, tail = os.path.split(path)
                if head == path:
                    parts.append(head)
                    break
                if tail == path:
                    parts.append(tail)
                    break
                parts.append(tail)
                path = head
            parts.reverse()
            return parts


        def common_prefix(paths):
            if not paths:
                return ""
            split = [split_all(p) for p in paths]
            prefix = []
            for parts in zip(*split):
                if len(set(parts)) != 1:
                    break
                prefix.append(parts[0])
            return os.path.join(*prefix) if prefix else ""
        ''',
}

# (instruction, old, new): every occurrence of `old` becomes `new` in version 2
EDITS = {
    "inventory.py": [("rename `count` to `quantity`", "count", "quantity"),
                     ("rename `items` to `stock`", "self.items", "self.stock")],
    "retry.py": [("rename `attempts` to `tries`", "attempts", "tries"),
                 ("rename `delay` to `backoff`", "delay", "backoff")],
    "config.py": [("rename `values` to `settings`", "values", "settings"),
                  ("use the prefix `SVC_` instead of `APP_`", '"APP_"', '"SVC_"')],
    "stats.py": [("rename `values` to `data`", "values", "data"),
                 ("rename `center` to `mu`", "center", "mu")],
    "queue.py": [("rename `jobs` to `items`", "jobs", "items"),
                 ("rename `lock` to `mutex`", "lock", "mutex")],
    "paths.py": [("rename `parts` to `pieces`", "parts", "pieces"),
                 ("rename `split_all` to `explode`", "split_all", "explode")],
}


def edit_prompt(name: str, edit: tuple[str, str, str], rng: random.Random) -> str:
    v1 = textwrap.dedent(MODULES[name]).strip("\n") + "\n"
    instruction, old, new = edit
    v2 = v1.replace(old, new)
    lines = v2.splitlines(keepends=True)
    cut = rng.randint(len(lines) // 5, len(lines) // 3)  # the assistant has written the first lines of version 2
    return (f"# session: edit {name}\n# turn 1: the current file\n{v1}\n# turn 2: {instruction}; reply with the "
            f"whole file\n" + "".join(lines[:cut]))


# -- tool: agent tool-call logs --------------------------------------------------------------------------------------

TOOLS = ["read_file", "grep", "list_dir", "run_tests", "write_file"]
PATHS = ["src/app/models.py", "src/app/views.py", "src/app/forms.py", "src/app/urls.py", "tests/test_models.py",
         "tests/test_views.py", "src/app/utils.py", "src/app/admin.py"]
PATTERNS = ["def save", "class Meta", "import json", "def clean", "TODO", "def get_queryset"]


def tool_call(rng: random.Random, step: int) -> str:
    tool = TOOLS[step % len(TOOLS)] if rng.random() < 0.7 else rng.choice(TOOLS)
    path = rng.choice(PATHS)
    if tool == "grep":
        args = {"pattern": rng.choice(PATTERNS), "path": path.rsplit("/", 1)[0]}
    elif tool == "list_dir":
        args = {"path": path.rsplit("/", 1)[0]}
    elif tool == "run_tests":
        args = {"path": rng.choice([p for p in PATHS if p.startswith("tests/")]), "verbose": False}
    elif tool == "write_file":
        args = {"path": path, "mode": "patch"}
    else:
        args = {"path": path}
    status = "ok" if rng.random() < 0.85 else "error"
    return json.dumps({"step": step, "tool": tool, "args": args, "status": status})


def tool_prompt(rng: random.Random) -> str:
    steps = rng.randint(6, 9)
    calls = "\n".join(tool_call(rng, i) for i in range(1, steps + 1))
    return f"# agent tool log (one JSON object per call)\n{calls}\n{{\"step\": {steps + 1}, \"tool\": \""


# -- template: a test module whose methods share one template ----------------------------------------------------------

FUNCS = [("parse_size", "str", ["'10k'", "'3M'", "'512'", "'2G'", "'7k'"], ["10240", "3145728", "512", "2147483648",
                                                                               "7168"]),
         ("clamp", "int", ["5", "-3", "12", "0", "9"], ["5", "0", "10", "0", "9"]),
         ("slugify", "str", ["'Hello World'", "'a  b'", "'Tab\\tKey'", "'x'", "'Mixed CASE'"],
          ["'hello-world'", "'a-b'", "'tab-key'", "'x'", "'mixed-case'"]),
         ("is_leap", "int", ["2000", "1900", "2024", "2023", "2400"], ["True", "False", "True", "False", "True"])]


def template_prompt(rng: random.Random) -> str:
    func, _, inputs, outputs = rng.choice(FUNCS)
    cases = list(zip(inputs, outputs, strict=True))
    rng.shuffle(cases)
    shown = rng.randint(3, len(cases))
    methods = []
    for i, (arg, expected) in enumerate(cases[:shown], start=1):
        methods.append(f"    def test_{func}_{i}(self):\n        result = {func}({arg})\n"
                       f"        self.assertEqual(result, {expected})\n        self.assertIsNotNone(result)\n")
    return (f"import unittest\n\nfrom app.util import {func}\n\n\nclass Test{func.title().replace('_', '')}"
            f"(unittest.TestCase):\n\n" + "\n".join(methods) + f"\n    def test_{func}_{shown + 1}(self):\n")


def build(num: int = 32, seed: int = SEED) -> list[dict[str, str]]:
    rng = random.Random(seed)
    edits = [(name, edit) for name in MODULES for edit in EDITS[name]]
    rng.shuffle(edits)
    rows: list[dict[str, str]] = []
    kinds = ["edit", "tool", "template", "edit", "tool", "template", "retry"]
    while len(rows) < num:
        kind = kinds[len(rows) % len(kinds)]
        if kind == "edit":
            name, edit = edits[len(rows) % len(edits)]
            rows.append({"prompt": edit_prompt(name, edit, rng), "kind": "edit", "source": name})
        elif kind == "tool":
            rows.append({"prompt": tool_prompt(rng), "kind": "tool", "source": "agent session"})
        elif kind == "template":
            rows.append({"prompt": template_prompt(rng), "kind": "template", "source": "unittest template"})
        else:  # an exact repeat of an earlier prompt (not of a retry)
            earlier = rng.choice([i for i, r in enumerate(rows) if r["kind"] != "retry"])
            rows.append({"prompt": rows[earlier]["prompt"], "kind": "retry", "source": f"line {earlier + 1}"})
    for row in rows:
        row["suite"] = "repetitive"
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--num", type=int, default=32, help="prompts to write")
    args = parser.parse_args()
    rows = build(args.num)
    args.out.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    print(f"wrote {len(rows)} prompts to {args.out}")


if __name__ == "__main__":
    main()
