"""IncrementalDetokenizer: token deltas in, (tokens, text) deltas out, never splitting a multi-byte character.

A byte-level tokenizer can end a step in the middle of a UTF-8 character (its first bytes decode to U+FFFD). Streaming
that text, or those tokens to a client that decodes each chunk on its own (Triton's postprocessing model does), shows
the client replacement characters that the full text does not have. The detokenizer holds back the tokens of an
incomplete character until the character completes, or until the request finishes, then releases tokens and text
together: every released chunk decodes on its own to exactly its text delta, and the deltas concatenate to the decoded
output. One definition, used by `SpecEngine.stream()` and by `EngineLoop` (and so by every served model).
`push_delta` does it to a RequestDelta in place; per-token fields (log-probs) are held back with their tokens.

Each step decodes a window, not the whole output: the tokens from an anchor (a release point at least CONTEXT_TOKENS
behind the last one, so a tokenizer that looks at neighbouring tokens decodes the new ones in context) to the end;
the new text is what that window's text adds to the anchored part's. Where the window's text does not start with the
anchored part's (a decoder that rewrites across tokens), the step decodes everything, as without the window.
A tokenizer that cleans up tokenization spaces (`clean_up_tokenization_spaces`: " ' " -> "'", " 's" -> "'s", ...)
rewrites text across any anchor, also where the window's text still starts with the anchored part's, so its
detokenizer (`whole=True`, `decodes_whole`) decodes the whole output at every step: each delta is what the whole
decode adds to the previous step's, as a whole-output streamer emits (text that a later token rewrites after it was
emitted, "s '" then "s'", stays as emitted). A 1024-token request streamed 3 tokens a step (tiny's tokenizer): 70-90 ms of decoding on the engine loop's thread with whole-output decodes, 3-6 ms with the window.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

REPLACEMENT = "\ufffd"
CONTEXT_TOKENS = 5  # released tokens decoded again before the new ones (vLLM's incremental detokenizer uses 5)
PER_TOKEN_FIELDS = ("log_probs", "cum_log_probs")  # RequestDelta fields aligned with token_ids


class IncrementalDetokenizer:
    """Per-request state: `push(new_token_ids, finished)` returns the tokens and text to emit now."""

    def __init__(self, decode: Callable[[Sequence[int]], str] | None, whole: bool = False) -> None:
        self._decode = decode
        self._whole = whole  # no window: the anchor stays at the first token (a decoder that cleans up spaces)
        self._token_ids: list[int] = []  # every token pushed so far
        self._released = 0  # tokens released so far (a prefix of _token_ids)
        self._text = ""  # decoded text of the released tokens
        self._marks: list[int] = [0]  # release points since the anchor (the first is the anchor)
        self._anchored = ""  # decoded text of the released tokens from the anchor
        self._held: dict[str, list[Any]] = {}  # per-token field -> values of the tokens not released yet

    def push(self, token_ids: Sequence[int], finished: bool = False) -> tuple[list[int], str]:
        """Add this step's tokens; return (tokens released now, their text delta). Both are empty while held."""
        self._token_ids += token_ids
        if self._decode is None:  # no tokenizer: tokens only, nothing to hold back
            released, self._released = self._token_ids[self._released:], len(self._token_ids)
            return released, ""
        window = self._decode(self._token_ids[self._marks[0]:])
        if not finished and window.endswith(REPLACEMENT):  # an incomplete character: wait for its remaining bytes
            return [], ""
        if self._whole:  # the window is the whole output: what it adds to the previous step's decode
            delta = window[len(self._anchored):]
        elif window.startswith(self._anchored):
            delta = window[len(self._anchored):]
        else:  # the decoder rewrote text across the anchor: decode everything
            delta = self._decode(self._token_ids)[len(self._text):]
        released, self._released = self._token_ids[self._released:], len(self._token_ids)
        self._text += delta
        self._anchored = window  # every token is released now: the window is the anchored part
        if self._whole:  # the anchor stays at the first token
            return released, delta
        self._marks.append(self._released)
        behind = [i for i, mark in enumerate(self._marks) if mark <= self._released - CONTEXT_TOKENS]
        if behind and behind[-1] > 0:  # move the anchor up to the latest release point far enough behind
            self._marks = self._marks[behind[-1]:]
            self._anchored = self._decode(self._token_ids[self._marks[0]:self._released])
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


def decodes_whole(tokenizer: Any) -> bool:
    """Whether `tokenizer`'s decode cleans up tokenization spaces (a Hugging Face tokenizer's, or TextCodec's,
    `clean_up_tokenization_spaces`), so that its IncrementalDetokenizer must decode the whole output (`whole=True`)."""
    return bool(getattr(tokenizer, "clean_up_tokenization_spaces", False))
