from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack.tokenizer import BPEConfig, Tokenizer, train_bpe_corpus
from seqpack.tokenizer import tokenizer as tokmod

EOT = "<|endoftext|>"
FIXTURES = [
    "address.txt",
    "german.txt",
    "tinystories_sample.txt",
    "special_token_double_newlines_non_whitespace.txt",
    "special_token_trailing_newlines.txt",
]


@pytest.fixture(scope="module")
def gpt2() -> Tokenizer:
    from tests.conftest import shared

    d = shared("cs336")
    return Tokenizer.from_files(d / "gpt2_vocab.json", d / "gpt2_merges.txt", [EOT])


@pytest.fixture(scope="module")
def tiktoken_gpt2():
    from tests.conftest import shared

    tiktoken = pytest.importorskip("tiktoken")
    os.environ["TIKTOKEN_CACHE_DIR"] = str(shared("tiktoken_cache"))
    return tiktoken.get_encoding("gpt2")


@pytest.fixture(scope="module")
def small() -> Tokenizer:
    docs = ["the cat sat on the mat. " * 20, "héllo wörld 123 don't stop", "tabs\tand\n\nnewlines  "] * 5
    r = train_bpe_corpus(documents=docs, config=BPEConfig(vocab_size=295, special_tokens=(EOT,), workers=1))
    return Tokenizer(r.vocab, r.merges, [EOT])


def test_tiny_golden():
    vocab = {i: bytes([i]) for i in range(256)} | {256: b"<|eot|>", 257: b"ab", 258: b"abc"}
    tok = Tokenizer(vocab, [(b"a", b"b"), (b"ab", b"c")], special_tokens=["<|eot|>"])
    assert tok.encode("abc<|eot|>ab") == [258, 256, 257]
    assert tok.encode(" abc") == [32, 258]
    assert tok.decode([258, 256, 257]) == "abc<|eot|>ab"


def test_fingerprint_is_pinned():
    """The fingerprint names saved tokenizers (meta.json): its bytes may not change. Per token in id
    order its id (8 bytes LE), length (4) and bytes; per merge each side's length (4) and bytes; then
    each special token after b"\\x00special\\x00". The digest was computed before the compiled stream."""
    import hashlib

    vocab = {i: bytes([i]) for i in range(256)} | {256: b"<|eot|>", 257: b"ab", 258: b"abc"}
    tok = Tokenizer(vocab, [(b"a", b"b"), (b"ab", b"c")], special_tokens=["<|eot|>"])
    by_hand = b"".join(i.to_bytes(8, "little") + len(t).to_bytes(4, "little") + t for i, t in sorted(vocab.items()))
    by_hand += b"\x01\0\0\0a\x01\0\0\0b" + b"\x02\0\0\0ab\x01\0\0\0c" + b"\x00special\x00<|eot|>"
    pinned = "729b755d4a29df8592c36a4906b709132e40b2b8dd02487c6718bb31e6fd5d57"
    assert tok.fingerprint() == tok._fingerprint_oracle() == hashlib.sha256(by_hand).hexdigest() == pinned


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.binary(min_size=2, max_size=5), max_size=8),
    st.lists(st.tuples(st.binary(min_size=1, max_size=3), st.binary(min_size=1, max_size=3)), max_size=6),
    st.lists(st.text(min_size=1, max_size=4), max_size=2, unique=True),
    st.integers(0, 2**40),
)
def test_fingerprint_equals_its_reference(extra, merges, specials, gap):
    """The compiled stream equals the field-by-field reference: any tokens (ids with gaps, up to 2^40),
    merges (their tokens added), special tokens."""
    tokens = [a for m in merges for a in (m[0], m[1], m[0] + m[1])] + extra
    vocab = {i: bytes([i]) for i in range(256)} | {256 + gap + k: t for k, t in enumerate(tokens)}
    tok = Tokenizer(vocab, merges, specials)
    assert tok.fingerprint() == tok._fingerprint_oracle()


def test_a_token_held_by_two_ids_is_the_lower_id():
    vocab = {i: bytes([i]) for i in range(256)} | {300: b"ab", 256: b"ab"}
    tok = Tokenizer(vocab, [(b"a", b"b")])
    assert tok.token_to_id(b"ab") == 256 and tok.encode("ab") == [256]


def test_merge_ranks_keep_a_pairs_first_rank():
    """A pair merged twice keeps its first rank in the reference encoder's table, as in the compiled one."""
    vocab = {i: bytes([i]) for i in range(256)} | {256: b"ab", 257: b"abc"}
    tok = Tokenizer(vocab, [(b"a", b"b"), (b"ab", b"c"), (b"a", b"b")])
    assert tok._ranks == {(97, 98): (0, 256), (256, 99): (1, 257)}
    assert tok.encode("abcab") == [257, 256]
    assert tok._merge_ids == ([97, 256, 97], [98, 99, 98], [256, 257, 256])


@pytest.mark.parametrize("name", FIXTURES)
def test_gpt2_conformance_with_tiktoken(gpt2, tiktoken_gpt2, cs336, name):
    text = (cs336 / name).read_text(encoding="utf-8")
    ids = gpt2.encode(text)
    assert ids == tiktoken_gpt2.encode(text, allowed_special={EOT})
    assert gpt2.decode(ids) == text
    with open(cs336 / name, encoding="utf-8") as f:
        assert list(gpt2.encode_iterable(f)) == ids


@settings(max_examples=200, deadline=None)
@given(
    text=st.text(max_size=200) | st.lists(st.sampled_from(["<|endoftext|>", "<|", " a", "\n"]), max_size=8).map("".join)
)
def test_gpt2_conformance_on_unicode(gpt2, tiktoken_gpt2, text):
    ids = gpt2.encode(text)
    assert ids == tiktoken_gpt2.encode(text, allowed_special={EOT})
    assert gpt2.decode(ids) == text


def test_longest_special_wins():
    vocab = {i: bytes([i]) for i in range(256)}
    tok = Tokenizer(vocab, [], special_tokens=[EOT, EOT + EOT])
    double, single = tok.special_ids[EOT + EOT], tok.special_ids[EOT]
    assert tok.encode(EOT * 3) == [double, single]
    assert tok.decode(tok.encode("a" + EOT * 2 + "b")) == "a" + EOT * 2 + "b"


def test_decode_replaces_invalid_utf8():
    tok = Tokenizer({i: bytes([i]) for i in range(256)}, [])
    assert tok.decode([0xE2, 0x82]) == "\ufffd"  # a truncated 3-byte sequence
    with pytest.raises(ValueError, match="unknown token id 999"):
        tok.decode([999])


@settings(max_examples=100, deadline=None)
@given(
    pieces=st.lists(
        st.lists(st.sampled_from(list("ab \n\n\t!é'l") + [EOT, "<|end", "oftext|>"]), max_size=30).map("".join),
        max_size=20,
    )
)
def test_encode_iterable_equals_encode(small, pieces):
    old = tokmod._STREAM_FLUSH_CHARS
    tokmod._STREAM_FLUSH_CHARS = 8
    try:
        assert list(small.encode_iterable(pieces)) == small.encode("".join(pieces))
    finally:
        tokmod._STREAM_FLUSH_CHARS = old


def test_encode_iterable_streams(small):
    """Ids come out before the input ends: memory stays bounded."""

    def endless():
        while True:
            yield "the cat sat on the mat.\n"

    it = small.encode_iterable(endless())
    first = [next(it) for _ in range(10_000)]
    assert small.decode(first).startswith("the cat sat")


def test_encode_iterable_streams_one_endless_line(small):
    """A text without a newline (one huge line) streams too: it is cut before a space between letters."""

    def endless():
        while True:
            yield "the cat sat on the mat, and then "

    it = small.encode_iterable(endless())
    first = [next(it) for _ in range(10_000)]
    assert small.decode(first).startswith("the cat sat") and "\n" not in small.decode(first)


@pytest.mark.parametrize("backend", ["python", "hf"])
def test_encode_batch_identical(small, backend):
    texts = ["the cat", "", f"a{EOT}b", "don't   stop\n\n", "héllo 123"] * 3
    assert small.encode_batch(texts, backend=backend) == [small.encode(t) for t in texts]


def test_encode_batch_parallel_on_corpus(gpt2, cs336):
    text = (cs336 / "corpus.en").read_text(encoding="utf-8")
    docs = [text[i : i + 5000] for i in range(0, len(text), 5000)] * 10  # > 1 MB: uses the pool
    from seqpack.tokenizer.fast import encode_documents

    got = [a.tolist() for a in encode_documents(gpt2, docs, workers=2)]
    assert got == [gpt2.encode(d) for d in docs]
    assert gpt2.encode_batch(docs[:20], backend="hf") == got[:20]


def _flat_oracle(tok: Tokenizer, texts: list[str]) -> tuple[list[int], list[int]]:
    """`Tokenizer.encode_batch_flat` the slow, obvious way: each text by the oracle, the ids joined,
    the offsets the running total of their lengths."""
    ids: list[int] = []
    offsets = [0]
    for t in texts:
        ids += tok.encode_oracle(t)
        offsets.append(len(ids))
    return ids, offsets


def test_encode_batch_flat_golden():
    tok = Tokenizer({i: bytes([i]) for i in range(256)} | {256: b"ab"}, [(b"a", b"b")], ["<|eot|>"])
    ids, offsets = tok.encode_batch_flat(["ab", "", "cab<|eot|>"])
    assert ids.dtype == "uint32" and offsets.dtype == "int64"
    assert ids.tolist() == [256, 99, 256, 257] and offsets.tolist() == [0, 1, 1, 4]
    ids, offsets = tok.encode_batch_flat([])
    assert ids.tolist() == [] and offsets.tolist() == [0]
    with pytest.raises(TypeError, match="list of texts"):
        tok.encode_batch_flat("ab")


@settings(max_examples=60, deadline=None)
@given(
    texts=st.lists(st.text(max_size=40) | st.sampled_from([EOT, f"a{EOT}b", "don't  stop\n\n"]), max_size=12),
    workers=st.sampled_from([1, 2, 3]),
    as_iter=st.booleans(),
)
def test_encode_batch_flat_equals_each_text_encoded(small, texts, workers, as_iter):
    ids, offsets = small.encode_batch_flat(iter(texts) if as_iter else texts, workers=workers)
    assert (ids.tolist(), offsets.tolist()) == _flat_oracle(small, texts)


def test_encode_batch_flat_on_threads_equals_each_text_encoded(gpt2, cs336):
    """A corpus over the 32 KB a thread (so on 2 threads, its long documents cut), and read as an
    iterable in several calls (4M characters a call)."""
    text = (cs336 / "corpus.en").read_text(encoding="utf-8")
    docs = [text[i : i + 5000] for i in range(0, len(text), 5000)] + [text] * 3
    want_ids, want_offsets = _flat_oracle(gpt2, docs)
    for texts in (docs, iter(docs * 12)):
        ids, offsets = gpt2.encode_batch_flat(texts, workers=2)
        n = len(docs)
        assert offsets[: n + 1].tolist() == want_offsets and ids[: want_offsets[-1]].tolist() == want_ids
    assert len(offsets) == 12 * n + 1 and offsets[-1] == 12 * want_offsets[-1]


@settings(max_examples=100, deadline=None)
@given(text=st.text(max_size=100))
def test_hf_backend_equals_reference_on_unicode(small, text):
    assert small.encode_batch([text], backend="hf")[0] == small.encode(text)


def test_bad_constructor_arguments():
    with pytest.raises(ValueError, match="single bytes"):
        Tokenizer({0: b"a"}, [])
    vocab = {i: bytes([i]) for i in range(256)}
    with pytest.raises(ValueError, match="missing from the vocab"):
        Tokenizer(vocab, [(b"a", b"b")])
    with pytest.raises(TypeError):
        Tokenizer(vocab, []).encode(b"bytes")
    with pytest.raises(ValueError, match="backend"):
        Tokenizer(vocab, []).encode_batch(["x"], backend="nope")
