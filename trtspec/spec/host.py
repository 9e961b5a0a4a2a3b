"""EngineHost: one served reference engine, whatever the front-end (the Triton Python model, the Dynamo worker).

It owns what serving an engine takes beyond the transport: EngineConfig -> SpecEngine, the check that the configured
method runs here, the one serving loop (`spec.serving.EngineLoop`) and the prompt log. A front-end keeps only what is
its own: request parsing, response encoding and its metrics.

`check(config)` is what can be checked before anything loads: the checkpoints exist and fit the method (a draft with
the target's vocabulary, Medusa heads, an EAGLE-3 drafter), and the method's optional package is installed. Launchers
call it before they start a process, so a deployment that cannot serve fails at start (exit 2 or 3), not in a worker.
Importing this module does not import torch; building an EngineHost does.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from trtspec.contracts.engine import EngineConfig
from trtspec.contracts.prompt_log import PromptLog
from trtspec.errors import ConfigError, UsageError
from trtspec.methods.eagle import EAGLE3
from trtspec.methods.medusa import MEDUSA


def check(config: EngineConfig, spell: Callable[[str], str] = lambda name: name) -> Path:
    """Refuse a configuration no engine could serve, before loading anything; returns the target's directory.
    `spell(field)` is how the caller names a field in errors (`draft` -> `--draft`)."""
    from trtspec.methods import engine_methods, resolve
    from trtspec.models import check_pair, resolve_eagle, resolve_medusa, resolve_model

    if config.method not in engine_methods():
        from trtspec.methods import METHODS

        why = METHODS[config.method].reference_unsupported if config.method in METHODS else None
        raise ConfigError(spell("method"), config.method, f"is not a method of the reference engine{': ' + why if why else ''}",
                          hint=f"use one of {', '.join(engine_methods())}")
    from trtspec.devices import check_device

    check_device(config.device, field=spell("device"))  # this machine has it (imports torch)
    target = resolve_model(config.target, field=spell("target"))
    info = resolve(config.method)
    role = info.checkpoint  # the checkpoint the method needs (draft, medusa, eagle)
    if role is not None and getattr(config, role) is None:
        raise UsageError(f"{spell(role)} is required by {spell('method')} {config.method}",
                         hint=f"e.g. {spell(role)} {info.checkpoint_example}")
    if config.draft is not None:
        check_pair(target, resolve_model(config.draft, field=spell("draft")))
    if config.medusa is not None:
        resolve_medusa(config.medusa, field=spell(MEDUSA.checkpoint))
    if config.eagle is not None:
        resolve_eagle(config.eagle, field=spell(EAGLE3.checkpoint))
    if info.proposer_class is not None:  # its optional package (suffix: arctic-inference) is installed
        from trtspec.spec.proposers import load_proposer

        load_proposer(info).check_installed()  # ToolNotFoundError (exit 3) with the install hint
    return target


class EngineHost:
    """The engine of one EngineConfig on its serving loop, with the prompt log when the configuration turns it on.

    `model` and `version` label the prompt log's lines (the served model's name and version); `on_iteration` gets
    each step's `contracts.iteration.IterationStats` on the loop thread (a server's iteration statistics)."""

    def __init__(self, config: EngineConfig, *, model: str = "", version: str = "",
                 on_iteration: Callable[[Any], None] | None = None) -> None:
        from trtspec.spec.engine import SpecEngine
        from trtspec.spec.serving import EngineLoop

        self.config = config
        self.engine = SpecEngine.from_config(config)
        if config.method not in self.engine.available_methods:
            raise self.engine.unavailable.get(config.method) or ConfigError(
                "method", config.method, "cannot run with this engine's checkpoints",
                hint=f"available: {', '.join(self.engine.available_methods)}")
        self.loop = EngineLoop(self.engine, on_iteration=on_iteration)  # each step's IterationStats
        log = config.prompt_log
        self.prompt_log = None if log is None else PromptLog(
            Path(log.directory), sample_rate=log.sample_rate, max_mb=log.max_mb, model=model, version=version)

    def submit_to(self, sink: Any, prompt_ids: list[int], sampling: Any, spec: Any, *,
                  is_cancelled: Callable[[], bool] | None = None, log_prompt: bool = True) -> int:
        """Offer the prompt to the prompt log (sampled there; a failing log never fails a request), then hand the
        request to the loop; returns its handle (`cancel`). Raises what EngineLoop.submit_to raises."""
        if log_prompt and self.prompt_log is not None:
            self.prompt_log.offer(prompt_ids, prompt=self.engine.decode(prompt_ids),
                                  max_tokens=sampling.max_new_tokens, temperature=sampling.temperature)
        return self.loop.submit_to(sink, prompt_ids, sampling, spec, is_cancelled=is_cancelled)

    def cancel(self, handle: int) -> None:
        self.loop.cancel(handle)

    def close(self) -> None:
        """Running requests finish within the configuration's drain_timeout_s, then the rest are aborted."""
        self.loop.shutdown(drain=True, timeout=self.config.drain_timeout_s)
        if self.prompt_log is not None:
            self.prompt_log.close()
