#!/usr/bin/env python3
"""Print how trtspec's Triton repository (rendered for the tensorrtllm backend) departs from each target's facts.

Dev tool: renders the repository for each supported target with trtspec.triton.repo.plan_repository, for a few methods
(no engines needed), and runs trtspec.targets.diff_against_target on it. It prints one line per model that departs,
and one line per method that the target refuses. Exit status 0 always; it is a report, not a gate (the tests in
tests/triton/test_build_configs.py are the gate).

    PYTHONPATH=. python scripts/target_diff_report.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from trtspec.errors import TrtspecError
from trtspec.targets import SUPPORTED_TARGETS, diff_against_target, load_target, pbtxt_names
from trtspec.triton.build_output import EngineInfo
from trtspec.triton.repo import RepoSpec, plan_repository

METHODS = {
    "draft_target": dict(engines=("target", "draft"), max_draft_len=4, mode="draft_tokens_external"),
    "lookahead": dict(engines=("target",), max_draft_len=23, mode="lookahead_decoding", lookahead=(4, 4, 4)),
    "medusa": dict(engines=("target",), max_draft_len=63, mode="medusa", heads=4),
}


def rendered(method: str, tokenizer: Path, version: str) -> dict[str, dict]:
    cfg = METHODS[method]
    engines = {role: EngineInfo(role=role, path=Path(f"engines/{role}"),
                                max_draft_len=cfg["max_draft_len"] if role == "target" else 0,
                                speculative_decoding_mode=cfg["mode"] if role == "target" else None,
                                num_medusa_heads=cfg.get("heads"))
               for role in cfg["engines"]}
    spec = RepoSpec(backend="tensorrtllm", method=method, tokenizer_dir=tokenizer, engines=engines,
                    lookahead=cfg.get("lookahead"), trtllm_version=version)
    spec.check()
    plan = plan_repository(spec)
    return {rel.split("/")[0]: pbtxt_names(item.text) for rel, item in plan.items()
            if rel.endswith("/config.pbtxt") and item.text is not None}


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        for method in METHODS:
            for version in SUPPORTED_TARGETS:
                target = load_target(version)
                try:
                    models = rendered(method, Path(tmp), version)
                except TrtspecError as exc:
                    print(f"{version:7} {method:13} refused: {exc.message}")
                    continue
                for name, diff in diff_against_target(models, target).items():
                    if diff.ok:
                        continue
                    parts = [f"{k}={v}" for k, v in vars(diff).items() if k != "model" and v]
                    print(f"{version:7} {method:13} {name:20} " + "; ".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
