"""The compiled core (csrc/, ``seqpack._native``) against the Python references."""

from __future__ import annotations

import os
import random
import signal
import time

import numpy as np
import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack import _native
from seqpack.tokenizer import Tokenizer
from seqpack.tokenizer.pretokenize import count_words, split_words

EOT = "<|endoftext|>"

# characters at the pattern's edges: the apostrophe forms, the optional space, whitespace
# that is (U+00A0, U+3000, U+2028) and is not (U+001C..U+001F: str.isspace but not \s)
_EDGES = list("'sdmtlvre \t\n\r\x0b\x0c\x1c\x1f\u00a0\u3000\u2028\u2029\u200b\u0085") + [
    "a",
    "Z",
    "é",
    "日",
    "٣",
    "Ⅷ",
    "½",
    "5",
    "!",
    "😀",
    "\u0301",
    "_",
    "-",
    "ß",
]
_edge_text = st.lists(st.sampled_from(_EDGES), max_size=60).map("".join)
_any_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=80)


def test_character_classes_equal_the_regex_module_at_every_code_point():
    table = _native.class_table()  # (0x110000,) uint8
    chars = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000)
    want = np.zeros(0x110000, np.uint8)
    for value, pattern in ((1, r"\p{L}"), (2, r"\p{N}"), (3, r"\s")):
        for m in regex.finditer(pattern, chars):
            want[ord(m.group())] = value
    bad = np.nonzero(table != want)[0]
    assert bad.size == 0, (
        f"{bad.size} code points differ from the installed regex module (first U+{bad[0]:04X}); "
        "regenerate csrc/unicode_tables.h with csrc/gen_unicode_tables.py"
    )


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("Hello, world!  ", ["Hello", ",", " world", "!", "  "]),
        ("a  b", ["a", " ", " b"]),  # \s+(?!\S): the run less its last char
        ("it's 'll'LL", ["it", "'s", " '", "ll", "'", "LL"]),
        ("x\n\n y", ["x", "\n\n", " y"]),
        ("12 ab٣", ["12", " ab", "٣"]),
        (" ", [" "]),
        ("", []),
    ],
)
def test_scanner_goldens(text, words):
    assert _native.split_words(text) == words == split_words(text)


@settings(max_examples=500, deadline=None)
@given(text=_edge_text | _any_text)
def test_scanner_equals_the_regex(text):
    assert _native.split_words(text) == split_words(text)


#: letters and the bytes next to the letter ranges ('@' '[' '`' '{'), digits, a space, an apostrophe, a
#: letter of two bytes and one of three: runs of ASCII letters are scanned 8 bytes at a time (SWAR)
_LETTER_EDGES = st.lists(st.sampled_from(list("aAzZmq@[`{09 '\n") + ["é", "ж", "中"]), max_size=80).map("".join)


@settings(max_examples=400, deadline=None)
@given(text=_LETTER_EDGES, pad=st.integers(0, 9))
def test_scanner_reads_letter_runs_8_bytes_at_a_time_like_the_regex(text, pad):
    # every alignment of the runs against the 8-byte reads, and long runs: "x" * pad shifts them
    for t in ("x" * pad + text, text + "Q" * pad, "word " * pad + text):
        assert _native.split_words(t) == split_words(t)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=40) | _any_text.map(lambda t: t.encode("utf-8") + b"\xed\xa0\x80"))
def test_utf8_validation_reports_where_python_does(data):
    try:
        data.decode("utf-8")
        want = -1
    except UnicodeDecodeError as e:
        want = e.start
    assert _native.utf8_error(data) == want


def _random_tokenizer(
    rng: random.Random, alphabet: bytes, n_merges: int, *, shuffle: bool, permute: bool = False
) -> Tokenizer:
    """Random merges over ``alphabet``; ``shuffle`` puts later tokens' merges before their parts';
    ``permute`` gives the bytes ids in a random order (as GPT-2's do: byte b is not id b)."""
    toks = [bytes([c]) for c in alphabet]
    merges = []
    for _ in range(n_merges):
        a, b = rng.choice(toks), rng.choice(toks)
        if a + b not in toks:
            toks.append(a + b)
            merges.append((a, b))
    if shuffle:
        rng.shuffle(merges)
    order = rng.sample(range(256), 256) if permute else range(256)
    vocab = {i: bytes([b]) for i, b in enumerate(order)}
    for t in toks:
        if len(t) > 1:
            vocab[len(vocab)] = t
    return Tokenizer(vocab, merges, [EOT])


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10**6),
    shuffle=st.booleans(),
    permute=st.booleans(),
    text=st.lists(st.sampled_from(["a", "b", "ab", " ", "1", EOT]), max_size=400).map("".join),
)
def test_encoder_equals_the_reference_for_any_merge_order(seed, shuffle, permute, text):
    # long words (> 64 bytes) take the heap path, short ones the scan; shuffled merges
    # make pairs formed during one rank's pass rank lower than it (the deferral case); permuted
    # byte ids check the first lookups, which go by the bytes (EncoderCore::byte_pair)
    tok = _random_tokenizer(random.Random(seed), b"ab1 ", 30, shuffle=shuffle, permute=permute)
    want = tok.encode_oracle(text)
    assert tok.encode(text) == want
    # again with the word cache empty: the tokens met are now known to BPE-encode to themselves or not
    # (shuffled merges make many that do not), and the table answers for those that do
    tok.clear_cache()
    assert tok.encode(text) == want == tok.encode_batch([text], workers=2)[0]


def test_pairs_formed_during_a_rank_wait_for_it_to_finish():
    # (ab, a) ranks before (a, b): the reference merges every (a, b) first -> [ab, ab];
    # merging (ab, a) as soon as it forms would give [aba, b]
    vocab = {i: bytes([i]) for i in range(256)} | {256: b"ab", 257: b"aba"}
    tok = Tokenizer(vocab, [(b"ab", b"a"), (b"a", b"b")])
    assert tok.encode_oracle("abab") == [256, 256]
    assert tok.native.bpe_with(b"abab", True) == [256, 256] == tok.native.bpe_with(b"abab", False)
    assert tok.encode("ab" * 100) == [256] * 100  # the heap path (> 64 bytes)


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 10**6))
def test_heap_and_scan_rules_agree(seed):
    rng = random.Random(seed)
    tok = _random_tokenizer(rng, bytes(range(4)), 40, shuffle=seed % 2 == 0, permute=seed % 3 == 0)
    for _ in range(10):
        word = bytes(rng.randrange(4) for _ in range(rng.randrange(300)))
        assert tok.native.bpe_with(word, True) == tok.native.bpe_with(word, False)


def test_encode_batch_on_threads_equals_encode(gpt2_or_small):
    tok = gpt2_or_small
    rng = random.Random(0)
    pieces = ["The ", "quick ", "brown ", "fox's ", "  ", "\n", "日本語 ", "123", EOT, "!!", "é"]
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 300))) for _ in range(200)]
    want = [tok.encode_oracle(t) for t in texts]
    for threads in (1, 2, 3, 8):
        tok.clear_cache()
        ids, offsets = tok.native.encode_batch(texts, threads, thread_bytes=0)  # every thread, however small
        assert offsets[0] == 0 and offsets[-1] == ids.size
        got = [ids[offsets[i] : offsets[i + 1]].tolist() for i in range(len(texts))]
        assert got == want
    assert tok.encode_batch(texts, workers=2) == want == tok.encode_batch(texts, backend="python")


def test_encode_lists_equals_encode_on_threads(gpt2_or_small):
    tok = gpt2_or_small
    rng = random.Random(1)
    pieces = ["The ", "fox's ", "  ", "\n", "日本語 ", "123", EOT, "!!", "é", ""]
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 50))) for _ in range(300)] + ["", "", "a"]
    want = [tok.encode_oracle(t) for t in texts]
    for threads in (1, 2, 3, 64):
        tok.clear_cache()
        assert tok.native.encode_lists(texts, threads, thread_bytes=0) == want
    assert tok.native.encode_lists([], 2, thread_bytes=0) == []


_CUT_PARTS = ["ab", "Q", " ", "\n", "!", "x!\ny", "'s", "5", "\t", "\u00a0", "é", EOT, "!\n!", "  ", "\n\n"]


def _cut_tokenizer() -> Tokenizer:
    """Bytes, a few merges, and a special token with a newline inside (``!\n!``: a cut after its
    newline would straddle it)."""
    base = _random_tokenizer(random.Random(3), b"ab!Q \n", 12, shuffle=False)
    return Tokenizer(base.vocab, base.merges, [EOT, "!\n!"])


@pytest.mark.parametrize(
    ("text", "lo", "hi", "cut"),
    [
        (b"ab cd ef", 1, 7, 5),  # before the space of "d e"
        (b"x\ny z", 1, 3, 2),  # after a newline between printable characters, preferred
        (b"a  b", 1, 3, 0),  # a space run: "a", " ", " b" would change
        (b"a\n b", 1, 3, 0),  # newline then space: not printable around it
        (b"\xc3\xa9 \xc3\xa9", 1, 4, 0),  # letters, but not ASCII ones
        (b"a!\n!b c", 1, 6, 5),  # the newline cut (3) is inside the special "!\n!": the space cut
    ],
)
def test_cut_point_goldens(text, lo, hi, cut):
    assert _cut_tokenizer().native.cut_point(text, lo, hi) == cut


def test_cut_point_rejects_a_bad_range():
    with pytest.raises(ValueError, match="0 < lo <= hi < len"):
        _cut_tokenizer().native.cut_point(b"ab cd", 2, 5)


@settings(max_examples=300, deadline=None)
@given(text=st.lists(st.sampled_from(_CUT_PARTS), min_size=2, max_size=40).map("".join), data=st.data())
def test_a_cut_point_never_changes_the_ids(text, data):
    """Both sides of a cut encode to the whole text's ids (the reference encoder, specials included)."""
    tok, raw = _cut_tokenizer(), text.encode("utf-8")
    hi = data.draw(st.integers(1, len(raw) - 1))
    lo = data.draw(st.integers(1, hi))
    cut = tok.native.cut_point(raw, lo, hi)
    if cut:
        assert lo <= cut <= hi
        left, right = raw[:cut].decode("utf-8"), raw[cut:].decode("utf-8")
        assert tok.encode_oracle(left) + tok.encode_oracle(right) == tok.encode_oracle(text)
        # and the pre-tokens (ids alone could hide a changed split that no merge covers)
        assert _words(left) + _words(right) == _words(text)


def _words(text: str) -> list[str]:
    """Pre-tokens, with the special tokens of :func:`_cut_tokenizer` as words of their own."""
    parts = regex.split(f"({regex.escape(EOT)}|!\n!)", text)
    return [w for i, p in enumerate(parts) for w in ([p] if i % 2 else split_words(p))]


def test_long_texts_are_cut_across_threads_with_the_same_ids():
    """A text longer than an equal share of the batch is encoded in pieces on every thread
    (``cut_long_texts`` in csrc/module.cpp): the ids are still the whole text's, for lists and flat arrays alike."""
    tok, rng = _cut_tokenizer(), random.Random(5)
    texts = ["".join(rng.choice(_CUT_PARTS) for _ in range(n)) for n in (9000, 30, 0, 4000, 12)]
    raw = texts[0].encode("utf-8")
    assert tok.native.cut_point(raw, 4096, 8192)  # the long text does get cut
    want = [tok.encode_oracle(t) for t in texts]
    for threads in (1, 2, 3):
        tok.clear_cache()
        assert tok.native.encode_lists(texts, threads, thread_bytes=0) == want
        ids, offsets = tok.native.encode_batch(texts, threads, thread_bytes=0)
        assert [ids[offsets[i] : offsets[i + 1]].tolist() for i in range(len(texts))] == want
    assert tok.native.encode_lists([texts[0]], 2, thread_bytes=0) == [want[0]]  # one text alone


def test_a_batch_gets_the_threads_its_size_pays_for():
    """A thread for each 32 KB of text at most (starting one costs more than encoding less), blocks
    of at least 2 KB, 32 a thread at most; ``thread_bytes=0``: a thread per text (tests reach them all)."""
    tok = _cut_tokenizer()
    assert tok.native.plan(["ab"] * 100, 2) == (1, 1, 100)  # 200 bytes: 1 thread
    assert tok.native.plan(["ab"] * 100, 2, 0) == (2, 2, 100)
    assert tok.native.plan(["a" * 1000] * 30, 2) == (1, 1, 30)  # 30 KB: 1 thread
    assert tok.native.plan(["a" * 1000] * 66, 2) == (2, 32, 66)  # 66 KB: 2 threads, 2 KB blocks
    assert tok.native.plan(["a" * 1000] * 2000, 2) == (2, 64, 2000)  # 2 MB: 32 blocks a thread
    assert tok.native.plan(["a" * 1000] * 2000, 8)[:2] == (8, 256)
    assert tok.native.plan([], 2) == (1, 0, 0)


def test_helper_threads_linger_then_end():
    """Threads 1.. of a batch are helpers (csrc/helpers.h) that stay a moment for the next call's
    work, then end: none is left running once the calls stop."""
    tok = _cut_tokenizer()
    texts = ["ab " * 50] * 40
    want = [tok.encode_oracle(t) for t in texts]
    started = _native.helper_threads()[0]
    for _ in range(20):
        assert tok.native.encode_lists(texts, 3, thread_bytes=0) == want
        ids, offsets = tok.native.encode_batch(texts, 3, thread_bytes=0)
        assert ids[offsets[1] : offsets[2]].tolist() == want[1]
    assert _native.helper_threads()[0] > started
    deadline = time.monotonic() + 30
    while _native.helper_threads()[1] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _native.helper_threads()[1] == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_encodes_on_threads_of_its_own():
    """A child made by fork() (a DataLoader worker) inherits none of its parent's threads: it counts
    on no helper of the parent's (which may be lingering at the fork) and starts its own."""
    tok = _cut_tokenizer()
    texts = ["ab " * 50] * 40
    want = [tok.encode_oracle(t) for t in texts]
    assert tok.native.encode_lists(texts, 3, thread_bytes=0) == want
    assert _native.helper_threads()[0] >= 2  # the parent's
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave at once (no test machinery runs here)
        fresh = _native.helper_threads() == (0, 0)
        ok = tok.native.encode_lists(texts, 2, thread_bytes=0) == want and _native.helper_threads()[0] == 1
        os.write(w, b"1" if ok and fresh else b"0")
        os._exit(0)
    os.close(w)
    deadline = time.monotonic() + 60
    while os.waitpid(pid, os.WNOHANG) == (0, 0):
        if time.monotonic() > deadline:  # hung: waiting for helpers that do not exist in the child
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            break
        time.sleep(0.01)
    assert os.read(r, 1) == b"1", "the forked child did not encode its batch"
    os.close(r)


@pytest.mark.parametrize("threads", [2, 3, 8])
def test_lists_made_between_blocks_are_each_texts_ids(threads):
    """encode_lists makes the lists of finished blocks while other blocks are encoded: a whole
    text's as soon as its block is done, a text cut across blocks (long texts among 2,000 short
    ones) once all of them are; every list must be its own text's ids, in order."""
    tok, rng = _cut_tokenizer(), random.Random(11)
    sizes = [rng.choice((0, 1, 5, 40, 300)) for _ in range(2000)]
    for at, n in ((3, 30_000), (700, 9_000), (1999, 20_000)):
        sizes[at] = n
    texts = ["".join(rng.choice(_CUT_PARTS) for _ in range(n)) for n in sizes]
    want = [tok.encode_oracle(t) for t in texts]
    tok.clear_cache()
    assert tok.native.encode_lists(texts, threads) == want
    assert tok.native.encode_lists(texts, threads) == want  # warm


def test_id_lists_are_left_to_reference_counting():
    """Id lists hold only ints, so they are not tracked by the cycle collector (which would
    otherwise traverse every held list at each collection); the batch's outer list is."""
    import gc

    tok = _cut_tokenizer()
    assert not gc.is_tracked(tok.encode("ab ab"))
    assert not gc.is_tracked(tok.encode("ab " * 3000))  # the long-text path too
    out = tok.native.encode_lists(["ab", "", "Q" * 9000], 2, thread_bytes=0)
    assert gc.is_tracked(out) and not any(gc.is_tracked(ids) for ids in out)


def test_short_and_long_texts_take_both_paths():
    """Texts up to 4 KB encode with the GIL held (the inline cache), longer ones without it (a pooled
    cache): the same ids, and the cached ids are shared ints that stay valid."""
    import sys

    tok = _random_tokenizer(random.Random(3), b"ab1 ", 30, shuffle=True)
    rng = random.Random(4)
    for n in (0, 1, 4095, 4096, 4097, 20_000):
        text = "".join(rng.choice("ab1 ") for _ in range(n))
        assert tok.encode(text) == tok.encode_oracle(text)
    ids = tok.encode("ab" * 10)
    before = sys.getrefcount(ids[0])
    del ids
    assert sys.getrefcount(tok.encode("ab" * 10)[0]) <= before  # lists hold references, freed with them


def test_encode_from_many_threads():
    """Short texts (GIL held, the inline cache) and long ones (GIL released, pooled caches) from
    eight Python threads at once: every result equals the reference."""
    from concurrent.futures import ThreadPoolExecutor

    tok = _random_tokenizer(random.Random(5), b"ab1 ", 30, shuffle=True)
    rng = random.Random(6)
    texts = ["".join(rng.choice("ab1 ") for _ in range(rng.choice((10, 300, 5000, 9000)))) for _ in range(400)]
    want = [tok.encode_oracle(t) for t in texts]
    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(tok.encode, texts)) == want


def test_unencodable_text_raises_like_python():
    tok = Tokenizer({i: bytes([i]) for i in range(256)}, [])
    with pytest.raises(UnicodeEncodeError):
        tok.encode("a\ud800b")
    with pytest.raises(TypeError, match="str"):
        tok.native.encode_batch(["a", b"b"], 1)


def test_tokenizer_pickles_without_its_native_encoder():
    import pickle

    tok = _random_tokenizer(random.Random(1), b"ab", 5, shuffle=False)
    tok.encode("abab")
    back = pickle.loads(pickle.dumps(tok))
    assert back.encode("abab ba") == tok.encode("abab ba")


@settings(max_examples=100, deadline=None)
@given(docs=st.lists(_edge_text | _any_text, max_size=5))
def test_counter_equals_count_words(docs):
    counter = _native.WordCounter([EOT.encode()])
    counter.add_texts(docs)
    blob, offsets, counts = counter.to_arrays()
    data = blob.tobytes()
    got = {data[offsets[i] : offsets[i + 1]].decode(): int(counts[i]) for i in range(len(counts))}
    assert got == count_words(docs, special_tokens=[EOT])
    assert counter.total == sum(got.values())


@pytest.fixture(scope="module")
def gpt2_or_small() -> Tokenizer:
    from seqpack.tokenizer import BPEConfig, train_bpe_corpus

    docs = ["the quick brown fox's tail, 123 日本語 " * 30, "héllo wörld!!  \n\n"] * 3
    r = train_bpe_corpus(documents=docs, config=BPEConfig(vocab_size=300, special_tokens=(EOT,), workers=1))
    return Tokenizer(r.vocab, r.merges, [EOT])


@settings(max_examples=200, deadline=None)
@given(
    seed=st.integers(0, 10**6),
    size=st.integers(2, 12),
    text=st.lists(
        st.sampled_from(["a", "b", "ab", " ", "  ", "\n", "x\ny", "1", ".", "é", EOT + " "]), max_size=300
    ).map("".join),
)
def test_a_long_text_encoded_a_piece_at_a_time_equals_it_whole(seed, size, text):
    """Above 2 x ``_PIECE_CHARS`` characters ``encode`` cuts the text (bounded working memory); the
    cuts (a space between letters, a newline between printable characters, never in a special
    token) must not change one id. A tiny piece size makes every short text take that path."""
    from seqpack.tokenizer import tokenizer as tok_mod

    tok = _random_tokenizer(random.Random(seed), b"ab1. \n\xc3\xa9xy", 30, shuffle=False)
    pieces = list(tok._pieces(text, size))
    assert "".join(pieces) == text
    assert all(len(p) <= size for p in pieces[:-1])
    with pytest.MonkeyPatch.context() as m:
        m.setattr(tok_mod, "_PIECE_CHARS", size)
        assert tok.encode(text) == tok.native.encode(text)  # the whole text in one native call


@pytest.mark.parametrize("threads", [1, 2])
def test_id_lists_share_ints_that_are_never_freed(threads):
    """Id lists hold one shared Python int per id, made once per process with a reference count
    raised by 2^40 (module.cpp, ``id_ints``): a list takes no reference to its items (filling
    it is plain stores), and freeing lists gives them back, so the count stays near the
    raise and the int is never freed. A free-threaded build counts references as usual."""
    import sys

    vocab = {i: bytes([i]) for i in range(256)} | {256: b"ab", 257: b"abc"}
    tok = Tokenizer(vocab, [(b"a", b"b"), (b"ab", b"c")])
    probe = tok.native.encode_lists(["abc"], 1)[0][0]  # the encoder's int 257 (not a small int)
    assert probe == 257
    base = sys.getrefcount(probe)
    for _ in range(3):
        out = tok.native.encode_lists(["abc" * 50 + "x"] * 40, threads, thread_bytes=0)  # 2,040 ids
        assert out == [[257] * 50 + [ord("x")]] * 40
        assert out[5][7] is probe and tok.encode("abc")[0] is probe
        counted = sys.getrefcount(probe)
        del out
    if base < 2**39:  # counted references: exactly one per item
        assert counted == base + 50 * 40 + 1
        assert sys.getrefcount(probe) == base
    else:  # uncounted: freeing 6,000 items left the raised count near where it was
        assert sys.getrefcount(probe) > 2**39
        assert 0 <= base - sys.getrefcount(probe) <= 3 * 50 * 40 + 10  # each freed item gave one back
    assert Tokenizer(vocab, [(b"a", b"b"), (b"ab", b"c")]).encode("abc")[0] is probe  # one int per process


@pytest.mark.parametrize("n", [0, 1, 63, 64, 65, 5000])
def test_id_lists_behave_as_lists_of_their_length(n):
    """An id list's item array is allocated without being zeroed and set whole (module.cpp,
    ``new_list``: standard builds): the list must then be an ordinary list of exactly its ids,
    whatever its size (64 ids and fewer come from CPython's small-object allocator, more from
    malloc), one that grows, shrinks and copies as any other, and that the collector ignores."""
    import gc

    vocab = {i: bytes([i]) for i in range(256)}
    tok = Tokenizer(vocab, [])
    text = "".join(chr(97 + i % 26) for i in range(n))
    want = [97 + i % 26 for i in range(n)]
    for ids in (
        tok.native.encode(text),
        tok.native.encode_lists([text, "z" * 70], 1)[0],
        tok.native.encode_lists(["y", text], 2, thread_bytes=0)[1],
    ):
        assert type(ids) is list and len(ids) == n and ids == want
        assert not gc.is_tracked(ids)
        ids.append(-1)
        ids.extend(range(3))
        assert ids[n:] == [-1, 0, 1, 2] and ids[:n] == want
        del ids[: n // 2]
        assert ids == want[n // 2 :] + [-1, 0, 1, 2] and ids[:] == ids and sorted(ids) == sorted(ids[:])


def test_a_full_word_cache_starts_again_with_the_same_ids():
    """A word cache holds at most 2^19 words (``WordCache::kMaxWords``), then starts again empty:
    600,000 different numbers in one call pass that limit, then 1,000 of them come again (words
    seen before the restart); the ids stay those of the two halves encoded apart (each well under
    it). Few merges: many ids a word, so some id lists live outside the entries."""
    tok = _random_tokenizer(random.Random(7), b"0123456789 ", 4, shuffle=False)
    n = 600_000
    text = " ".join(map(str, [*range(n), *range(100_000, 101_000)]))
    cut = text.index(f" {n // 2} ")
    whole = tok.native.encode(text)
    tok.clear_cache()
    first = tok.native.encode(text[:cut])
    tok.clear_cache()
    assert whole == first + tok.native.encode(text[cut:])


def test_a_cleared_word_cache_forgets_its_words_through_every_generation():
    """``clear_cache`` writes nothing: the word cache's entries carry the generation they were made
    in, and a clear starts the next (every 2^16 - 1 clears the table is zeroed and it starts again
    at 1). Words of up to 24 bytes with more than 6 ids keep their ids in a pool that each clear
    empties: an entry taken for live after its clear would give the pool's new contents, the ids
    of another word. So: "abcdefgh" in generation 1, then "zyxwvuts" (its ids where those of
    "abcdefgh" were in the pool) in every generation, up to the wrap back to 1; "abcdefgh" must
    then give its own ids (met again in any other generation, it would have replaced its old entry)."""
    tok = Tokenizer({i: bytes([i]) for i in range(256)}, [])  # no merges: a word's bytes are its ids
    a, z = list(b"abcdefgh"), list(b"zyxwvuts")
    assert tok.native.encode("abcdefgh") == a  # the encoder's first generation
    for _ in range(2**16 - 1):  # generations 2 .. 2^16 - 1, then 1 again
        tok.native.clear_cache()
        assert tok.native.encode("zyxwvuts") == z
        assert tok.native.encode("zyxwvuts") == z  # from the cache
    assert tok.native.encode("abcdefgh") == a


def test_the_compiled_encode_call_checks_types_and_makes_no_cycle():
    """After the first call ``tok.encode`` is the compiled call itself: it raises the method's
    TypeError, pickles away, and references nothing that refers back to the tokenizer (so the
    tokenizer, with its word caches, is freed at once, without the cycle collector)."""
    import gc
    import pickle
    import weakref

    tok = _random_tokenizer(random.Random(8), b"ab ", 5, shuffle=False)
    assert tok.encode("ab ba") == tok.encode_oracle("ab ba")
    assert "encode" in vars(tok)
    with pytest.raises(TypeError, match="encode takes a str, got bytes"):
        tok.encode(b"ab")
    assert "encode" not in pickle.loads(pickle.dumps(tok)).__dict__
    gc.disable()
    try:
        ref = weakref.ref(tok)
        del tok
        assert ref() is None
    finally:
        gc.enable()


def test_encode_taken_before_any_call_is_the_compiled_call():
    """``f = tok.encode`` before the first call (``map(tok.encode, texts)``) is the compiled call, not a
    method that stays a Python frame a call; on the class ``Tokenizer.encode`` is still a function, and
    a tokenizer unpickled (which drops the compiled call) makes it again."""
    import pickle

    tok = _random_tokenizer(random.Random(9), b"ab ", 5, shuffle=False)
    assert "encode" not in vars(tok)
    f = tok.encode
    assert type(f) is type(len) and vars(tok)["encode"] is f  # a builtin, the one in the instance's dict
    assert f("ab ba") == tok.encode_oracle("ab ba") == Tokenizer.encode(tok, "ab ba")
    assert "Token ids of" in (Tokenizer.encode.__doc__ or "")
    again = pickle.loads(pickle.dumps(tok))
    assert "encode" not in vars(again) and type(again.encode) is type(len)
    assert again.encode("ab ba") == f("ab ba")


def test_a_token_its_own_bytes_do_not_encode_to_is_not_taken_whole():
    """The encoder looks a word up among the tokens before running BPE, but only among those whose
    bytes BPE-encode to themselves: "abc" is a token (a + bc), yet BPE merges (a, b) first."""
    vocab = {i: bytes([i]) for i in range(256)} | {256: b"ab", 257: b"bc", 258: b"abc"}
    tok = Tokenizer(vocab, [(b"a", b"b"), (b"b", b"c"), (b"a", b"bc")])
    assert tok.encode_oracle("abc") == [256, 99]
    assert tok.encode("abc") == [256, 99] == tok.encode_batch(["abc"], workers=1)[0]
    assert tok.encode("bc abc") == tok.encode_oracle("bc abc") == [257, 32, 256, 99]
    for _ in range(2):  # once it is known that "abc" is not taken whole and "bc" is, on any thread
        tok.clear_cache()
        assert tok.encode("abc bc") == [256, 99, 32, 257]
        assert tok.encode_batch(["abc", "bc", "x abc"] * 50, workers=2)[0] == [256, 99]
