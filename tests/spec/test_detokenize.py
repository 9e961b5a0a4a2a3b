"""IncrementalDetokenizer: released chunks decode on their own to their text deltas, which concatenate to the full
text, however a byte-level token stream is cut into steps (a multi-byte character is never split)."""

from __future__ import annotations

import json

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from trtspec.spec.detokenize import IncrementalDetokenizer, decodes_whole


def decode(ids) -> str:
    """A byte-level tokenizer: token i is byte i."""
    return bytes(ids).decode("utf-8", errors="replace")


TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)


@settings(deadline=None)  # timing is not the property: a loaded CI machine stalls an example past 200 ms
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


def test_per_token_log_probs_are_held_back_with_their_tokens():
    from trtspec.spec.engine import RequestDelta

    detok = IncrementalDetokenizer(decode)
    euro = list("€".encode())  # 3 bytes: the first two steps end inside the character
    steps = [[ord("a"), euro[0]], [euro[1]], [euro[2], ord("b")]]
    log_probs = [[-0.1, -0.2], [-0.3], [-0.4, -0.5]]
    cum, released = 0.0, []
    for i, (tokens, values) in enumerate(zip(steps, log_probs, strict=True)):
        cums = []
        for v in values:
            cum += v
            cums.append(cum)
        delta = RequestDelta(request_id=0, token_ids=tokens, finished=i == 2, log_probs=values, cum_log_probs=cums)
        detok.push_delta(delta)
        assert len(delta.log_probs) == len(delta.cum_log_probs) == len(delta.token_ids)
        released.append(delta)
    assert [d.token_ids for d in released] == [[], [], [ord("a"), *euro, ord("b")]]
    assert [d.log_probs for d in released] == [[], [], [-0.1, -0.2, -0.3, -0.4, -0.5]]
    assert released[1].cum_log_prob is None and released[2].cum_log_prob == pytest.approx(-1.5)
    assert released[2].cum_log_probs == pytest.approx([-0.1, -0.3, -0.6, -1.0, -1.5]) and released[2].text == "a€b"


WORDS = ["\u2581the", "\u2581cat", "s", "\u2581.", "\u2581caf", "\u00e9", "!", "\u2581"]


def decode_words(ids) -> str:
    """A SentencePiece-like decoder that looks across tokens: the first token's leading space is dropped, and " ." is
    cleaned up to "." (as clean_up_tokenization_spaces does)."""
    text = "".join(WORDS[i] for i in ids).replace("\u2581", " ")
    return text[1:].replace(" .", ".") if text.startswith(" ") else text.replace(" .", ".")


@settings(deadline=None)
@given(ids=st.lists(st.integers(0, len(WORDS) - 1), max_size=60), cuts=st.lists(st.integers(0, 60), max_size=30))
def test_decoding_a_window_gives_the_whole_decode(ids, cuts):
    """Each step decodes from an anchor, not the whole output; the deltas still concatenate to the whole decode with a
    decoder that rewrites text across tokens."""
    bounds = sorted({min(c, len(ids)) for c in cuts} | {len(ids)})
    detok, start, texts = IncrementalDetokenizer(decode_words), 0, []
    for i, end in enumerate(bounds):
        texts.append(detok.push(ids[start:end], finished=i == len(bounds) - 1)[1])
        start = end
    assert "".join(texts) == decode_words(ids)


def test_a_long_output_is_not_decoded_whole_at_every_step():
    calls: list[int] = []
    detok = IncrementalDetokenizer(lambda ids: calls.append(len(ids)) or decode(ids))
    for _ in range(300):
        detok.push([ord("a"), ord("b"), ord("c")])
    assert max(calls) <= 3 + 2 * 5 + 3  # a window of a few steps, not the 900 tokens so far


WORDPIECES = ["[UNK]", "[CLS]", "[SEP]", "s", "'", "the", "a", ".", ",", "n't", "##s", "'s", "?", "!", "m", "'m",
              "##a", "b", "re", "'re"]


@pytest.fixture(scope="module")
def cleanup_codec(tmp_path_factory):
    """A WordPiece tokenizer whose tokenizer_config asks for clean_up_tokenization_spaces, loaded as the served models
    load it (TextCodec: through transformers' AutoTokenizer, which cleans up after a WordPiece decode)."""
    from tokenizers import Tokenizer, decoders, models

    from trtspec.text_codec import TextCodec

    tokenizer = Tokenizer(models.WordPiece(vocab={word: i for i, word in enumerate(WORDPIECES)}, unk_token="[UNK]"))
    tokenizer.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    tokenizer.add_special_tokens(["[CLS]", "[SEP]"])
    path = tmp_path_factory.mktemp("cleanup_tokenizer")
    tokenizer.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": True, "unk_token": "[UNK]",
        "cls_token": "[CLS]", "sep_token": "[SEP]"}))
    codec = TextCodec(path)
    assert codec.decode([3, 4]) == "s '" and codec.decode([3, 4, 5]) == "s'the"  # " ' " -> "'": it cleans up
    return codec


def whole_output_deltas(decode_ids, ids, bounds):
    """What a streamer that decodes the whole output at every step emits: each step's decode minus the previous one's."""
    previous, deltas = "", []
    for end in bounds:
        text = decode_ids(ids[:end])
        deltas.append(text[len(previous):])
        previous = text
    return deltas


@settings(deadline=None, max_examples=300)
@given(ids=st.lists(st.integers(0, len(WORDPIECES) - 1), max_size=30), cuts=st.lists(st.integers(0, 30), max_size=15))
@example(ids=[3, 2, 4, 2, 2, 1, 14, 5, 6], cuts=[0, 1, 4, 6, 7, 8])
def test_a_tokenizer_that_cleans_up_spaces_is_decoded_whole(cleanup_codec, ids, cuts):
    """With clean_up_tokenization_spaces (" ' " -> "'", " n't" -> "n't", " ." -> ".") a decode rewrites text across
    any anchor, so the detokenizer decodes the whole output: its deltas are a whole-output streamer's, and they join to
    the full decode wherever no later token rewrites text an earlier step already emitted (no streamer can undo that)."""
    assert decodes_whole(cleanup_codec)
    bounds = sorted({min(c, len(ids)) for c in cuts} | {len(ids)})
    detok, start, deltas = IncrementalDetokenizer(cleanup_codec.decode, decodes_whole(cleanup_codec)), 0, []
    for i, end in enumerate(bounds):
        deltas.append(detok.push(ids[start:end], finished=i == len(bounds) - 1)[1])
        start = end
    assert deltas == whole_output_deltas(cleanup_codec.decode, ids, bounds)
    steps = [cleanup_codec.decode(ids[:end]) for end in bounds]
    if all(later.startswith(earlier) for earlier, later in zip(steps, steps[1:], strict=False)):
        assert "".join(deltas) == cleanup_codec.decode(ids)
