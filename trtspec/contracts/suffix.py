"""Suffix decoding's options (`SuffixConfig`) where the contracts' readers import them: the class is defined in its
method's home, trtspec/methods/suffix.py (one options class per method, beside its MethodInfo), and re-exported here
for the modules and tests that read it as part of the engine contract. Pure Python.
"""

from __future__ import annotations

from trtspec.methods.suffix import MAX_CACHED_REQUESTS, MAX_TREE_DEPTH, SuffixConfig

__all__ = ["MAX_CACHED_REQUESTS", "MAX_TREE_DEPTH", "SuffixConfig"]
