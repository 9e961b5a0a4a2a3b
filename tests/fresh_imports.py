"""Which heavy packages (torch, tritonclient) importing a module pulls in, for the import-cost tests
(tests/test_imports.py, tests/sweep/test_sweep_imports.py).

One fresh interpreter imports the modules one after another and records, after each, the heavy packages now in
`sys.modules`. While none is loaded this is what a fresh interpreter per module would find (a module already imported
by an earlier one loaded nothing heavy then either); once one is, the modules after it cannot be judged in that
interpreter, so each of them gets an interpreter of its own.
"""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("torch", "tritonclient")
CHILD = """
import importlib, json, sys
heavy, found = {heavy!r}, {{}}
for name in sys.argv[1:]:
    importlib.import_module(name)
    found[name] = [h for h in heavy if h in sys.modules]
    if found[name]:
        break
print(json.dumps(found))
"""


def heavy_modules_loaded_by(modules: list[str]) -> dict[str, list[str]]:
    """{module: the HEAVY packages in sys.modules after importing it} (an empty list: it imports none of them)."""
    found: dict[str, list[str]] = {}
    pending = list(modules)
    while pending:
        proc = subprocess.run([sys.executable, "-c", CHILD.format(heavy=HEAVY), *pending], capture_output=True,
                              text=True)
        assert proc.returncode == 0, proc.stderr
        found.update(json.loads(proc.stdout.splitlines()[-1]))
        pending = [m for m in pending if m not in found]
    return found
