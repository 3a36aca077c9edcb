from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack.corpus import (
    from_hf_dataset,
    iter_decoded,
    python_docs,
    read_documents,
    read_jsonl,
    read_parquet,
    read_text,
)

EOT = "<|endoftext|>"


def test_read_text_separator_and_lines(tmp_path: Path):
    p = tmp_path / "a.txt"
    p.write_text(f"one{EOT}two\nlines{EOT}three{EOT}")
    assert list(read_text(p)) == ["one", "two\nlines", "three"]
    assert list(read_text(p, one_per_line=True)) == [f"one{EOT}two", f"lines{EOT}three{EOT}"]
    assert list(read_text(p, separator=None)) == [p.read_text()]


def test_read_text_separator_across_blocks(tmp_path: Path, monkeypatch):
    import seqpack.corpus.readers as readers

    monkeypatch.setattr(readers, "_BLOCK", 3)
    p = tmp_path / "a.txt"
    p.write_text(f"héllo{EOT}wörld")
    assert list(read_text(p)) == ["héllo", "wörld"]


def test_invalid_utf8_offset_across_blocks(tmp_path: Path, monkeypatch):
    import seqpack.corpus.readers as readers

    monkeypatch.setattr(readers, "_BLOCK", 4)
    p = tmp_path / "bad.txt"
    p.write_bytes("héllo wö".encode() + b"\xff" + b"rest")
    with pytest.raises(ValueError, match=r"bad.txt: invalid UTF-8 at byte offset 10"):
        list(iter_decoded(p))
    readers.REPLACED.clear()
    assert "".join(iter_decoded(p, errors="replace")) == "héllo wö\ufffdrest"
    assert readers.REPLACED.files == {str(p): [1, 10]}  # counted, at its byte offset across blocks
    assert "1 invalid UTF-8 sequence(s)" in (readers.replacement_line() or "")
    readers.REPLACED.clear()


def test_read_jsonl(tmp_path: Path):
    p = tmp_path / "a.jsonl"
    p.write_text('{"text": "a"}\n\n{"text": "b", "x": 1}\n')
    assert list(read_jsonl(p)) == ["a", "b"]
    p.write_text('{"text": "a"}\n{"body": "b"}\n')
    with pytest.raises(ValueError, match=r"a.jsonl: line 2: no field 'text' \(fields: body\); pass --text-field"):
        list(read_jsonl(p))
    p.write_text('{"text": 3}\n')
    with pytest.raises(ValueError, match="line 1: field 'text' is int"):
        list(read_jsonl(p))
    p.write_text('{"text": \n')
    with pytest.raises(ValueError, match="line 1: not valid JSON"):
        list(read_jsonl(p))


def test_read_parquet(tmp_path: Path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    p = tmp_path / "a.parquet"
    pq.write_table(pa.table({"body": ["x", "y z"], "n": [1, 2]}), p)
    assert list(read_parquet(p, text_field="body")) == ["x", "y z"]
    with pytest.raises(ValueError, match=r"no column 'text' \(columns: body, n\)"):
        list(read_parquet(p))
    (tmp_path / "bad.parquet").write_text("not parquet")
    with pytest.raises(ValueError, match="not a readable Parquet file"):
        list(read_parquet(tmp_path / "bad.parquet"))


def test_hf_dataset_like_and_dispatch(tmp_path: Path):
    assert list(from_hf_dataset([{"text": "a"}, {"text": "b"}])) == ["a", "b"]
    (tmp_path / "x.jsonl").write_text(json.dumps({"text": "j"}) + "\n")
    (tmp_path / "y.txt").write_text(f"t1{EOT}t2")
    assert list(read_documents([tmp_path / "x.jsonl", tmp_path / "y.txt"])) == ["j", "t1", "t2"]


def test_missing_file(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match="no such file"):
        list(read_text(tmp_path / "nope.txt"))
    with pytest.raises(IsADirectoryError):
        list(read_text(tmp_path))


def test_builtin_corpus_is_python_docs():
    docs = python_docs()
    assert len(docs) > 300
    assert sum(map(len, docs)) > 1_000_000
    assert any("for" in d and "statement" in d for d in docs[:100])  # pydoc topics first
    assert python_docs() == docs  # second call: from the cache, identical


def test_python_docstrings_are_labelled_by_package() -> None:
    from seqpack.corpus import python_docstrings

    a = python_docstrings(packages=4, per_package=50)
    assert a == python_docstrings(packages=4, per_package=50)  # seeded
    labels = {r["label"] for r in a}
    assert len(labels) == 4 and len(a) == 200 and all(r["text"].strip() for r in a)
    assert {r["label"] for r in python_docstrings(packages=4, per_package=50, seed=1)} == labels


@settings(max_examples=120, deadline=None)
@given(
    text=st.text(alphabet="ab\r\n<|é", max_size=60),
    sep=st.sampled_from(["<|", "\n", "a", "<|a|<", EOT]),
    block=st.integers(1, 9),
    per_line=st.booleans(),
)
def test_read_text_splits_as_str_split_for_any_blocks(tmp_path_factory, text, sep, block, per_line) -> None:
    """Whatever the block size (a separator may straddle any number of blocks), the documents are
    ``str.split``'s, less a trailing empty one; per line, less each line's final ``\\r`` and blank lines."""
    import seqpack.corpus.readers as readers

    p = tmp_path_factory.mktemp("rt") / "t.txt"
    p.write_bytes(text.encode("utf-8"))
    old, readers._BLOCK = readers._BLOCK, block
    try:
        got = list(read_text(p, separator=sep, one_per_line=per_line))
    finally:
        readers._BLOCK = old
    want = text.split("\n" if per_line else sep)
    if want and want[-1] == "":
        want.pop()
    if per_line:
        want = [w[:-1] if w.endswith("\r") else w for w in want]
        want = [w for w in want if w]
    assert got == want
