from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack.tokenizer.counts import WordCounts, count_chunk, count_chunks
from seqpack.tokenizer.pretokenize import DocChunk, FileChunk, count_words, file_chunks

EOT = "<|endoftext|>"


def test_golden():
    c = count_chunk(DocChunk(("the cat, the hat", f"the{EOT}cat")), special_tokens=(EOT,))
    assert c.to_dict() == {"the": 2, " cat": 1, ",": 1, " the": 1, " hat": 1, "cat": 1}
    assert len(c) == 6 and c.total == 7
    assert c.offsets[0] == 0 and c.offsets[-1] == c.blob.size


@settings(max_examples=50, deadline=None)
@given(counts=st.dictionaries(st.text(min_size=1, max_size=6), st.integers(1, 10**12), max_size=20))
def test_round_trips(counts):
    wc = WordCounts.from_dict(counts)
    assert wc.to_dict() == counts
    assert pickle.loads(pickle.dumps(wc)) == wc


def test_counts_from_shards_equal_one_pass(tmp_path: Path, cs336: Path):
    """The map/reduce of a corpus cut into shard files equals counting it whole."""
    text = (cs336 / "tinystories_sample.txt").read_text(encoding="utf-8")
    docs = text.split(EOT)
    shards = []
    for i in range(5):
        p = tmp_path / f"shard-{i}.txt"
        p.write_text(EOT.join(docs[i::5]), encoding="utf-8")
        shards.append(p)
    whole = tmp_path / "whole.txt"
    whole.write_text(EOT.join(EOT.join(docs[i::5]) for i in range(5)), encoding="utf-8")
    per_shard = [count_chunk(FileChunk(str(p), 0, p.stat().st_size), special_tokens=(EOT,)) for p in shards]
    reduced = WordCounts.merge(per_shard)
    one_pass = count_chunks(list(file_chunks(whole, 1 << 30, [EOT])), special_tokens=(EOT,))
    assert reduced == one_pass
    assert reduced.to_dict() == count_words([whole.read_text(encoding="utf-8")], special_tokens=[EOT])
    # and the same through the threaded counter over small chunks of every shard
    chunks = [c for p in shards for c in file_chunks(p, 2048, [EOT])]
    assert count_chunks(chunks, special_tokens=(EOT,), workers=2) == reduced


def test_merge_adds_counts_of_the_same_word():
    a = WordCounts.from_dict({"x": 1, " y": 2})
    b = WordCounts.from_dict({" y": 3, "z": 4})
    assert WordCounts.merge([a, b]).to_dict() == {"x": 1, " y": 5, "z": 4}
    empty = count_chunks([], workers=2)
    assert len(empty) == 0 and empty.total == 0 and np.array_equal(empty.offsets, [0])


def test_chunk_view_is_the_chunk_read_in_place(tmp_path):
    """Counting reads a file chunk through the file mapped; the view equals the bytes read, and an
    empty chunk is empty (a zero-length file cannot be mapped)."""
    from seqpack.tokenizer.pretokenize import FileChunk, chunk_view, read_chunk_bytes

    path = tmp_path / "a.txt"
    path.write_bytes("héllo wörld\n".encode() * 1000)
    for start, end in ((0, 5), (3, 9000), (0, path.stat().st_size)):
        chunk = FileChunk(str(path), start, end)
        with chunk_view(chunk) as view:
            assert bytes(view) == read_chunk_bytes(chunk)
    (tmp_path / "empty.txt").write_bytes(b"")
    with chunk_view(FileChunk(str(tmp_path / "empty.txt"), 0, 0)) as view:
        assert bytes(view) == b""


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from([b"ab", b"<s>", b"<s><s>", b"x", b"<", b"s>", b"\n"]), max_size=60),
    st.integers(1, 9),
    st.booleans(),
)
def test_special_starts_window_by_window_equal_one_search(tmp_path_factory, parts, window, one):
    """The special-token search maps a window at a time and lets each go once searched; it finds
    exactly what one search over the whole file finds, matches across window edges included. With
    one special token it searches with mmap.find (``literal``), not the regex: the same starts."""
    import mmap

    from seqpack.tokenizer import pretokenize

    data = b"".join(parts)
    path = tmp_path_factory.mktemp("s") / "f.txt"
    path.write_bytes(data or b"x")
    specials = ["<s>"] if one else ["<s>", "<s><s>"]
    sp = pretokenize._special_bytes_pattern(specials)
    literal = b"<s>" if one else None
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        want = [m.start() for m in sp.finditer(mm)]
        old = pretokenize._SCAN_BYTES
        pretokenize._SCAN_BYTES = window
        try:
            got = list(pretokenize._special_starts(mm, len(mm), sp, 6 if not one else 3, literal))
        finally:
            pretokenize._SCAN_BYTES = old
    assert got == want
