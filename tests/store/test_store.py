from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from seqpack.store import StoreWriter, TokenStore, build_store, token_dtype
from seqpack.tokenizer.tokenizer import Tokenizer

EOT = "<|endoftext|>"


def byte_tokenizer(extra: int = 0) -> Tokenizer:
    vocab = {i: bytes([i]) for i in range(256)} | {256 + k: f"<x{k}>".encode() for k in range(extra)}
    return Tokenizer(vocab, [], special_tokens=[EOT])


def test_token_dtype():
    assert token_dtype(300) == np.uint16 and token_dtype(65536) == np.uint16 and token_dtype(65537) == np.uint32
    with pytest.raises(ValueError):
        token_dtype(0)


docs_st = st.lists(st.lists(st.integers(0, 70_000), max_size=20), max_size=15)


@given(docs=docs_st, big=st.booleans())
def test_writer_reader_roundtrip(tmp_path_factory, docs, big):
    docs = [[t if big else t % 1000 for t in d] for d in docs]
    out = tmp_path_factory.mktemp("s") / "store"
    with StoreWriter(out, vocab_size=70_001 if big else 1000, tokenizer_hash="h") as w:
        for d in docs:
            w.add(np.array(d, dtype=np.int64))
    s = TokenStore(out)
    kept = [d for d in docs if d]
    assert len(s) == len(kept) and s.meta["empty_documents"] == len(docs) - len(kept)
    assert s.dtype == (np.uint32 if big else np.uint16)
    assert [s[i].tolist() for i in range(len(s))] == kept
    assert s.lengths().tolist() == [len(d) for d in kept]
    if kept:
        assert s[-1].tolist() == kept[-1]
    with pytest.raises(IndexError):
        s[len(s)]


def test_build_store_matches_encode(tmp_path):
    tok = byte_tokenizer()
    docs = ["hello world", "", "ünïcode ✓", "a" * 1000, "日本語 😀"]  # 1- to 4-byte characters
    s = build_store(docs, tok, tmp_path / "s")
    assert [s[i].tolist() for i in range(len(s))] == [tok.encode(d) for d in docs if d]
    m = s.meta
    assert m["empty_documents"] == 1 and m["tokenizer_hash"] == tok.fingerprint() and m["format_version"] == 1
    assert m["input_bytes"] == sum(len(d.encode()) for d in docs) and m["mb_per_s"] > 0


def test_build_store_parallel_equals_serial(tmp_path):
    tok = byte_tokenizer()
    docs = [f"document {i} " + "word " * (i % 37) for i in range(400)]
    one = build_store(iter(docs), tok, tmp_path / "a", workers=1, batch_chars=500)
    two = build_store(iter(docs), tok, tmp_path / "b", workers=2, batch_chars=500)
    assert np.array_equal(one.tokens, two.tokens) and np.array_equal(one.offsets, two.offsets)
    assert (tmp_path / "a" / "tokens.bin").read_bytes() == (tmp_path / "b" / "tokens.bin").read_bytes()


def test_refuses_existing_out(tmp_path):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "x").write_text("keep")
    for overwrite in (False, True):  # not a store: never replaced
        with pytest.raises(FileExistsError, match="did not make"):
            build_store(["a"], byte_tokenizer(), tmp_path / "s", overwrite=overwrite)
    (tmp_path / "s" / "x").unlink()
    build_store(["a"], byte_tokenizer(), tmp_path / "s")
    with pytest.raises(FileExistsError, match="holds a token store; pass --overwrite"):
        build_store(["a", "b"], byte_tokenizer(), tmp_path / "s")
    build_store(["a", "b"], byte_tokenizer(), tmp_path / "s", overwrite=True)
    assert len(TokenStore(tmp_path / "s")) == 2


def test_error_mid_write_leaves_nothing(tmp_path):
    def docs():
        yield "fine"
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        build_store(docs(), byte_tokenizer(), tmp_path / "s", workers=1)
    assert list(tmp_path.iterdir()) == []


def test_killed_mid_write_leaves_no_store(tmp_path):
    code = (
        "import os, sys\n"
        "from seqpack.store import StoreWriter\n"
        f"with StoreWriter({str(tmp_path / 's')!r}, vocab_size=10, tokenizer_hash='h') as w:\n"
        "    w.add([1, 2]); os._exit(9)\n"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 9
    assert not (tmp_path / "s").exists()
    left = [d for d in tmp_path.iterdir() if d.is_dir()]
    assert left  # the abandoned temp dir (the lock died with the process)
    for d in left:  # is not a store
        with pytest.raises(ValueError, match=r"meta\.json"):
            TokenStore(d)
    build_store(["abc"], byte_tokenizer(), tmp_path / "s")  # the next job removes it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]


def _store(tmp_path):
    build_store(["abc", "de"], byte_tokenizer(), tmp_path / "s")
    return tmp_path / "s"


@pytest.mark.parametrize(
    ("damage", "match"),
    [
        (lambda p: (p / "tokens.bin").write_bytes((p / "tokens.bin").read_bytes()[:-2]), "tokens.bin.*truncated"),
        (lambda p: (p / "offsets.idx").unlink(), "offsets.idx: missing"),
        (lambda p: (p / "offsets.idx").write_bytes(np.array([0, 4, 3], np.int64).tobytes()), "offsets.idx: corrupt"),
        (lambda p: (p / "meta.json").write_text("{"), "meta.json: corrupt"),
        (lambda p: (p / "meta.json").unlink(), "meta.json: missing"),
        (lambda p: (p / "meta.json").write_text('{"kind": "other"}'), "not a seqpack token store"),
    ],
)
def test_corrupt_store_names_the_file(tmp_path, damage, match):
    p = _store(tmp_path)
    damage(p)
    with pytest.raises(ValueError, match=match):
        TokenStore(p)


def test_missing_store_and_hash_mismatch(tmp_path):
    with pytest.raises(FileNotFoundError, match="seqpack tokenize"):
        TokenStore(tmp_path / "nope")
    s = TokenStore(_store(tmp_path))
    s.check_tokenizer(byte_tokenizer().fingerprint())
    with pytest.raises(ValueError, match="hash mismatch"):
        s.check_tokenizer(byte_tokenizer(extra=1).fingerprint())


def test_writer_rejects_bad_documents(tmp_path):
    with StoreWriter(tmp_path / "s", vocab_size=10, tokenizer_hash="h") as w:
        with pytest.raises(ValueError, match="outside"):
            w.add([3, 10])
        with pytest.raises(TypeError, match="1-D"):
            w.add(np.array([[1]]))
    with pytest.raises(RuntimeError, match="context manager"):
        StoreWriter(tmp_path / "t", vocab_size=10, tokenizer_hash="h").add([1])


def test_store_and_data_import_no_torch():
    code = (
        "import sys, seqpack.store, seqpack.data, seqpack.tasks.mlm, seqpack.tasks.qa, seqpack.tasks.classification;"
        "print('torch' in sys.modules)"
    )
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
        == "False"
    )
