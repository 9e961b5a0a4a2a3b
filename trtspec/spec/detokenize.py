"""IncrementalDetokenizer: token deltas in, (tokens, text) deltas out, never splitting a multi-byte character.

A byte-level tokenizer can end a step in the middle of a UTF-8 character (its first bytes decode to U+FFFD). Streaming
that text, or those tokens to a client that decodes each chunk on its own (Triton's postprocessing model does), shows
the client replacement characters that the full text does not have. The detokenizer holds back the tokens of an
incomplete character until the character completes, or until the request finishes, then releases tokens and text
together: every released chunk decodes on its own to exactly its text delta, and the deltas concatenate to the decoded
output. One definition, used by `SpecEngine.stream()` and by `EngineLoop` (and so by every served model).
`push_delta` does it to a RequestDelta in place; per-token fields (log-probs) are held back with their tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

REPLACEMENT = "\ufffd"
PER_TOKEN_FIELDS = ("log_probs", "cum_log_probs")  # RequestDelta fields aligned with token_ids


class IncrementalDetokenizer:
    """Per-request state: `push(new_token_ids, finished)` returns the tokens and text to emit now."""

    def __init__(self, decode: Callable[[Sequence[int]], str] | None) -> None:
        self._decode = decode
        self._token_ids: list[int] = []  # every token pushed so far
        self._released = 0  # tokens released so far (a prefix of _token_ids)
        self._text = ""  # decoded text of the released tokens
        self._held: dict[str, list[Any]] = {}  # per-token field -> values of the tokens not released yet

    def push(self, token_ids: Sequence[int], finished: bool = False) -> tuple[list[int], str]:
        """Add this step's tokens; return (tokens released now, their text delta). Both are empty while held."""
        self._token_ids += token_ids
        if self._decode is None:  # no tokenizer: tokens only, nothing to hold back
            released, self._released = self._token_ids[self._released:], len(self._token_ids)
            return released, ""
        text = self._decode(self._token_ids)
        if not finished and text.endswith(REPLACEMENT):  # an incomplete character: wait for its remaining bytes
            return [], ""
        released, self._released = self._token_ids[self._released:], len(self._token_ids)
        delta, self._text = text[len(self._text):], text
        return released, delta

    def push_delta(self, delta: Any) -> None:
        """`push` a RequestDelta in place: its token_ids and text become what is released now, and each per-token
        field (PER_TOKEN_FIELDS, when not None) keeps the values of exactly those tokens; the rest wait for them."""
        delta.token_ids, delta.text = self.push(delta.token_ids, delta.finished)
        released = len(delta.token_ids)
        for name in PER_TOKEN_FIELDS:
            values = getattr(delta, name, None)
            if values is None:
                continue
            pending = self._held.get(name, []) + list(values)  # one value per held or new token
            setattr(delta, name, pending[:released])
            self._held[name] = pending[released:]

    @property
    def held_back(self) -> int:
        """Tokens pushed but not released yet."""
        return len(self._token_ids) - self._released
