"""Proposer registry: `PROPOSERS[methods.resolve(method).proposer]` is the class that drafts for `method`.

The registry is derived from the registered method homes (trtspec/methods/, `trtspec.methods.register`): each names
its proposer class as a dotted path ("module:Class", `MethodInfo.proposer_class`), imported here, by the engine's side
only, on the first read after each registration. A method whose home names a
proposer is runnable by the engine and selectable in the CLI.
"""

from __future__ import annotations

from importlib import import_module

from trtspec.methods import METHODS, DerivedTable, MethodInfo, derived
from trtspec.spec.proposers.base import AuxBranch, Draft, ProposeInput, Proposer, ProposerContext


def load_proposer(method: MethodInfo) -> type[Proposer]:
    """The proposer class `method`'s home names (`proposer_class`, "module:Class"), imported."""
    if method.proposer_class is None:
        raise KeyError(f"method {method.name} has no proposer")
    module, _, name = method.proposer_class.partition(":")
    cls = getattr(import_module(module), name)
    if not (isinstance(cls, type) and issubclass(cls, Proposer)) or cls.name != method.proposer:
        raise TypeError(f"{method.proposer_class} (method {method.name}) is not a Proposer named {method.proposer}")
    return cls


# derived at each read after a (un)registration (trtspec.methods.register), so a method registered at run time drafts
PROPOSERS: DerivedTable[str, type[Proposer]] = derived(lambda: dict(sorted(
    {m.proposer: load_proposer(m) for m in METHODS.values() if m.proposer is not None and m.proposer_class}.items())))


def runnable_methods() -> list[str]:
    """Engine methods that have a registered proposer (plus the baseline, "none")."""
    from trtspec.methods import engine_methods, resolve

    return [m for m in engine_methods() if resolve(m).baseline or resolve(m).proposer in PROPOSERS]


__all__ = ["PROPOSERS", "AuxBranch", "Draft", "ProposeInput", "Proposer", "ProposerContext", "load_proposer",
           "runnable_methods"]
