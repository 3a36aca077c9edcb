from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqpack.tokenizer import BPEConfig, train_bpe, train_bpe_corpus
from seqpack.tokenizer.byte_unicode import str_to_bytes
from seqpack.tokenizer.oracle import (
    train_bpe_oracle,
    train_bpe_oracle_from_counts,
)
from seqpack.tokenizer.train import merges_from_counts, vocab_from_merge_ids

EOT = "<|endoftext|>"


def _fast(counts, vocab_size, specials=()):
    left, right = merges_from_counts(counts, vocab_size - 256 - len(specials))
    return vocab_from_merge_ids(left, right, specials)


# ------------------------------------------------------------------ goldens
def test_hand_computed_golden():
    # low x5, lower x2, widest x3, newest x6 (the classic example, no spaces):
    # pairs: es 9, st 9, we 8, lo 7, ow 7, ... -> tie es/st: (s,t) > (e,s) wins
    counts = {"low": 5, "lower": 2, "widest": 3, "newest": 6}
    vocab, merges = _fast(counts, 262)
    assert merges == [
        (b"s", b"t"),
        (b"e", b"st"),
        (b"o", b"w"),
        (b"l", b"ow"),
        (b"w", b"est"),
        (b"n", b"e"),
    ]
    assert vocab[261] == b"ne"
    assert (vocab, merges) == train_bpe_oracle_from_counts(counts, 262)


def test_overlapping_pair_merges_left_to_right():
    # "aaaa" x1: (a,a) count 3 -> [aa, aa] -> (aa,aa) -> [aaaa]
    vocab, merges = _fast({"aaaa": 1, "aaa": 1}, 259)
    # then (aa,aa) and (aa,a) tie at 1: the lexicographically greater pair, (aa,aa), goes first
    assert merges == [(b"a", b"a"), (b"aa", b"aa"), (b"aa", b"a")]
    assert (vocab, merges) == train_bpe_oracle_from_counts({"aaaa": 1, "aaa": 1}, 259)


def test_matches_cs336_reference_exactly(cs336: Path):
    vocab, merges = train_bpe(cs336 / "corpus.en", 500, [EOT])
    ref = [
        tuple(str_to_bytes(t) for t in line.rstrip("\n").split(" "))
        for line in (cs336 / "train-bpe-reference-merges.txt").read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    assert len(ref) == 243
    assert merges == ref
    import json

    ref_vocab = json.loads((cs336 / "train-bpe-reference-vocab.json").read_text(encoding="utf-8"))
    assert set(vocab.values()) == {str_to_bytes(k) for k in ref_vocab}
    assert len(vocab) == 500


@pytest.mark.parametrize("workers", [1, 2])
def test_parallel_and_chunked_match_single_pass(cs336: Path, workers: int):
    config = BPEConfig(vocab_size=400, special_tokens=(EOT,), workers=workers, chunk_bytes=4096)
    chunked = train_bpe_corpus([cs336 / "corpus.en"], config=config)
    text = (cs336 / "corpus.en").read_text(encoding="utf-8")
    assert (chunked.vocab, chunked.merges) == train_bpe_oracle([text], 400, [EOT])


# --------------------------------------------------------------- properties
_ALPHABET = st.sampled_from(list("ab c\n'sé1.") + [EOT, " the", "ll"])
_corpus = st.lists(st.lists(_ALPHABET, max_size=40).map("".join), min_size=1, max_size=8)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs=_corpus, extra=st.integers(0, 60), with_special=st.booleans())
def test_fast_trainer_equals_reference(docs, extra, with_special):
    specials = (EOT,) if with_special else ()
    config = BPEConfig(vocab_size=256 + len(specials) + extra, special_tokens=specials, workers=1)
    expected = train_bpe_oracle(docs, config.vocab_size, specials)
    if not any(expected[0].get(i) for i in range(256)):  # pragma: no cover
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            got = train_bpe_corpus(documents=docs, config=config)
        except ValueError as e:  # empty corpus
            assert "empty" in str(e)
            return
    assert (got.vocab, got.merges) == expected


@settings(max_examples=100, deadline=None)
@given(
    text=st.lists(st.sampled_from([*"ab \n\n\t!xéZ", " A", "b c", EOT, "<s p>"]), max_size=120).map("".join),
    chunk=st.integers(1, 64),
    specials=st.sampled_from([[EOT], [EOT, "<s p>"], [EOT, "b\nc"]]),
)
def test_file_chunking_never_changes_counts(tmp_path_factory, text, chunk, specials):
    """Cuts at special tokens, after the newline of "x\ny", before the space of "a b" (not where
    a special token has a space or a newline): the counts are those of the whole text."""
    from seqpack.tokenizer.counts import count_chunks
    from seqpack.tokenizer.pretokenize import count_words, file_chunks

    path = tmp_path_factory.mktemp("chunk") / "c.txt"
    path.write_text(text, encoding="utf-8", newline="")
    chunks = list(file_chunks(path, chunk, specials))
    spans = [(c.start, c.end) for c in chunks]
    assert all(a < b for a, b in spans)
    assert [s for s, _ in spans[1:]] == [e for _, e in spans[:-1]]
    if spans:
        assert spans[0][0] == 0 and spans[-1][1] == len(text.encode("utf-8"))
    got = count_chunks(chunks, special_tokens=specials).to_dict()
    assert got == count_words([text], special_tokens=specials)


def test_text_whose_newlines_are_blank_lines_still_splits(tmp_path: Path):
    """No "x\ny" anywhere (paragraphs between blank lines): the cuts fall before spaces."""
    from seqpack.tokenizer.pretokenize import file_chunks

    path = tmp_path / "p.txt"
    path.write_text("\n\n".join(["lorem ipsum dolor sit amet"] * 2000), encoding="utf-8")
    chunks = list(file_chunks(path, 4096, [EOT]))
    assert len(chunks) > 10
    assert all(path.read_bytes()[c.end : c.end + 1] == b" " for c in chunks[:-1])


# ------------------------------------------------------------------ errors
def test_vocab_size_below_minimum_names_the_minimum():
    with pytest.raises(ValueError, match="minimum is 258"):
        BPEConfig(vocab_size=257, special_tokens=("<a>", "<b>"))


def test_empty_corpus(tmp_path: Path):
    p = tmp_path / "empty.txt"
    p.write_text(f"{EOT}{EOT}")
    with pytest.raises(ValueError, match="empty"):
        train_bpe(p, 300, [EOT])


def test_unreachable_vocab_size_stops_early_and_warns(tmp_path: Path):
    p = tmp_path / "tiny.txt"
    p.write_text("abcabc")
    with pytest.warns(UserWarning, match="stopped after"):
        vocab, merges = train_bpe(p, 1000, workers=1)
    # one pre-token "abcabc": (b,c) beats (a,b) on the tie, then (a,bc), then (abc,abc)
    assert merges == [(b"b", b"c"), (b"a", b"bc"), (b"abc", b"abc")] and len(vocab) == 259


def test_invalid_utf8_names_file_and_offset(tmp_path: Path):
    p = tmp_path / "bad.txt"
    p.write_bytes(b"hello world \xff\xfe and more")
    with pytest.raises(ValueError, match=r"bad.txt: invalid UTF-8 at byte offset 12"):
        train_bpe(p, 260, errors="strict")
    vocab, _ = train_bpe(p, 260)  # the default replaces (and counts) invalid UTF-8
    assert len(vocab) == 260


def test_missing_file(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match="no such file"):
        train_bpe(tmp_path / "nope.txt", 300)


def test_config_validation():
    with pytest.raises(TypeError):
        BPEConfig(vocab_size="300")
    with pytest.raises(ValueError, match="workers"):
        BPEConfig(vocab_size=300, workers=0)
    with pytest.raises(ValueError, match="distinct"):
        BPEConfig(vocab_size=300, special_tokens=("a", "a"))
    with pytest.raises(ValueError, match="errors"):
        BPEConfig(vocab_size=300, errors="ignore")


def test_parallel_counting_reads_ahead_boundedly():
    """A corpus larger than RAM: at most a few chunks are alive at once (each thread holds the one it
    counts), however far the stream goes."""
    import gc
    import weakref

    from seqpack.tokenizer.counts import count_chunks
    from seqpack.tokenizer.pretokenize import DocChunk

    class Docs(list):  # a list that can be tracked by a weak reference
        pass

    pulled = freed = most_alive = 0

    def free() -> None:
        nonlocal freed
        freed += 1

    def chunks():
        nonlocal pulled, most_alive
        for _ in range(200):
            docs = Docs(["a b c"])
            weakref.finalize(docs, free)
            pulled += 1
            most_alive = max(most_alive, pulled - freed)
            yield DocChunk(docs)
            del docs

    gc.collect()
    counts = count_chunks(chunks(), workers=2)
    assert counts.to_dict() == {"a": 200, " b": 200, " c": 200}
    assert pulled == freed == 200
    assert most_alive <= 2 + 1  # one per thread, and the one being handed out


def test_training_runs_without_numpy(tmp_path: Path):
    """``from seqpack.tokenizer import train_bpe`` loads the trainer alone, and the merge loop runs
    on the compiled counter (``merges``), so a training run never imports numpy (about 60 ms of
    its start-up), nor ``concurrent.futures`` (with logging, ~4 ms: the counting threads are
    ``_parallel.map_threads``); its merges equal those of the arrays' path (``merges_from_counts``)."""
    import json
    import subprocess
    import sys

    path = tmp_path / "corpus.txt"
    # over 1 MB (_PARALLEL_MIN_BYTES), so that the counting runs on two threads
    path.write_text("low lower newest widest<|endoftext|>low low lowest\n" * 21_000, encoding="utf-8")
    code = (
        "import sys\n"
        "from seqpack.tokenizer import train_bpe\n"
        f"vocab, merges = train_bpe({str(path)!r}, 300, ['<|endoftext|>'], workers=2)\n"
        "loaded = [m for m in ('numpy', 'concurrent.futures') if m in sys.modules]\n"
        "import json\n"
        "print(json.dumps({'loaded': loaded, 'merges': [[a.hex(), b.hex()] for a, b in merges]}))\n"
    )
    out = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert out["loaded"] == []
    from seqpack.tokenizer.train import count_corpus

    counts, _ = count_corpus([path], config=BPEConfig(vocab_size=300, special_tokens=("<|endoftext|>",)))
    _, want = vocab_from_merge_ids(*merges_from_counts(counts, 300 - 257), ["<|endoftext|>"])
    assert [[a.hex(), b.hex()] for a, b in want] == out["merges"]


@settings(max_examples=40, deadline=None)
@given(
    docs=st.lists(st.text(alphabet="ab c\nde", max_size=40), min_size=1, max_size=8),
    extra=st.integers(0, 30),
    specials=st.lists(st.sampled_from(["<s>", "a", "ab", " c", "<|endoftext|>", "é"]), max_size=3, unique=True),
)
def test_the_trained_tokenizer_is_the_one_built_from_its_vocab_and_merges(docs, extra, specials):
    """``BPEResult.tokenizer()`` builds from the ids the trainer made (``Tokenizer._trained``): the same
    tokenizer, attribute by attribute, as ``Tokenizer(vocab, merges, specials)`` looks them up, special
    tokens that are also a byte or a merge's token included (those take the looked-up path)."""
    from seqpack.tokenizer import Tokenizer

    config = BPEConfig(vocab_size=256 + len(specials) + extra, special_tokens=tuple(specials), workers=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a vocab beyond what the corpus reaches stops early
        try:
            r = train_bpe_corpus(documents=docs, config=config)
        except ValueError as e:  # nothing left once the special tokens are taken out (docs ["a"], specials ["a"])
            assert "the corpus is empty" in str(e)
            return
    got, want = r.tokenizer(), Tokenizer(r.vocab, r.merges, list(r.special_tokens))
    for name in ("vocab", "merges", "special_tokens", "special_ids", "_id_of", "_byte_ids", "_merge_ids"):
        assert getattr(got, name) == getattr(want, name), name
    assert got.fingerprint() == want.fingerprint()
    text = "".join(docs) + "".join(specials)
    assert got.encode(text) == want.encode(text) == want.encode_oracle(text)
