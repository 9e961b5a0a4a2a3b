"""IncrementalDetokenizer: released chunks decode on their own to their text deltas, which concatenate to the full
text, however a byte-level token stream is cut into steps (a multi-byte character is never split)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from trtspec.spec.detokenize import IncrementalDetokenizer


def decode(ids) -> str:
    """A byte-level tokenizer: token i is byte i."""
    return bytes(ids).decode("utf-8", errors="replace")


TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)


@given(text=TEXT, cuts=st.lists(st.integers(0, 200), max_size=20), extra=st.lists(st.integers(0x80, 0xFF), max_size=3))
def test_chunks_never_split_a_character(text, cuts, extra):
    ids = list(text.encode("utf-8")) + extra  # maybe ending in stray bytes (an unfinished character at the end)
    bounds = sorted({min(c, len(ids)) for c in cuts} | {len(ids)})
    detok, start, chunks, texts = IncrementalDetokenizer(decode), 0, [], []
    for i, end in enumerate(bounds):
        tokens, delta = detok.push(ids[start:end], finished=i == len(bounds) - 1)
        start = end
        if tokens:
            chunks.append(tokens)
            texts.append(delta)
            assert decode(tokens) == delta  # a client decoding each chunk alone sees the same text
    assert [t for c in chunks for t in c] == ids and detok.held_back == 0
    assert "".join(texts) == decode(ids)


def test_holds_back_until_the_character_completes():
    detok = IncrementalDetokenizer(decode)
    euro = list("€".encode())  # 3 bytes
    assert detok.push([ord("a"), euro[0]]) == ([], "")
    assert detok.push([euro[1]]) == ([], "") and detok.held_back == 3
    assert detok.push([euro[2], ord("b")]) == ([ord("a"), *euro, ord("b")], "a€b")


def test_without_a_tokenizer_tokens_pass_through():
    detok = IncrementalDetokenizer(None)
    assert detok.push([1, 2]) == ([1, 2], "") and detok.push([3], finished=True) == ([3], "")
