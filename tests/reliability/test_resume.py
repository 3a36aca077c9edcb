"""A resumed job never reuses stale work: its inputs changed, or a finished work file was altered
or cut short. Each case kills a job mid-way (an injected failure), changes something, re-runs, and
compares the result with a job run from scratch on what is there now."""

from __future__ import annotations

import filecmp
from pathlib import Path

import numpy as np
import pytest

from seqpack._stages import partial_dir
from seqpack.pipeline import OutputOptions, PackConfig, build_packed_dataset, build_sharded_store
from seqpack.pipeline import job as job_mod
from seqpack.pipeline import tokenize as tokenize_mod
from seqpack.pipeline.engine import LocalEngine
from tests.store.test_store import byte_tokenizer
from tests.tasks.test_sequences import text_docs


def _same_dataset(a: Path, b: Path) -> bool:
    files = sorted(p.relative_to(a).as_posix() for p in a.rglob("*") if p.is_file())
    other = sorted(p.relative_to(b).as_posix() for p in b.rglob("*") if p.is_file())
    return files == other and all(filecmp.cmp(a / f, b / f, shallow=False) for f in files)


def _fail_at(monkeypatch: pytest.MonkeyPatch, module: object, name: str, suffix: str) -> None:
    real = getattr(module, name)

    def failing(path: str, *args: object) -> object:
        if str(path).endswith(suffix):
            raise OSError("killed")
        return real(path, *args)

    monkeypatch.setattr(module, name, failing)


def _same_size_edit(doc: str) -> str:
    """Another document of the same length in characters and bytes (swap the first two letters)."""
    i = next(k for k in range(len(doc) - 1) if doc[k].isalpha() and doc[k + 1].isalpha() and doc[k] != doc[k + 1])
    return doc[:i] + doc[i + 1] + doc[i] + doc[i + 2 :]


def test_tokenize_re_encodes_a_shard_whose_documents_changed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    docs, tok = text_docs(60), byte_tokenizer()
    with monkeypatch.context() as mp:
        _fail_at(mp, tokenize_mod, "encode_shard", "shard-00003")
        with pytest.raises(OSError, match="killed"):
            build_sharded_store(
                docs, tok, tmp_path / "s", shard_chars=500, engine=LocalEngine(1)
            )  # one shard at a time
    edited = [_same_size_edit(docs[0]), *docs[1:]]  # same size: only the content tells
    assert len(edited[0]) == len(docs[0]) and edited[0] != docs[0]
    s = build_sharded_store(edited, tok, tmp_path / "s", shard_chars=500)
    assert s.redone == {"shard-00000": "inputs changed"} and s.reused == ["shard-00001", "shard-00002"]
    fresh = build_sharded_store(edited, tok, tmp_path / "fresh", shard_chars=500)
    assert all(np.array_equal(s[i], fresh[i]) for i in range(len(fresh)))
    assert tok.decode(s[0].tolist()) == edited[0]


def test_tokenize_rebuilds_a_finished_shard_whose_files_were_altered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs, tok = text_docs(60), byte_tokenizer()
    with monkeypatch.context() as mp:
        _fail_at(mp, tokenize_mod, "encode_shard", "shard-00003")
        with pytest.raises(OSError):
            build_sharded_store(
                docs, tok, tmp_path / "s", shard_chars=500, engine=LocalEngine(1)
            )  # one shard at a time
    f = partial_dir(tmp_path / "s") / "shard-00001" / "tokens.bin"
    data = bytearray(f.read_bytes())
    data[0] ^= 1  # one changed value
    f.write_bytes(bytes(data))
    g = partial_dir(tmp_path / "s") / "shard-00002" / "offsets.idx"
    g.write_bytes(g.read_bytes()[:-3])  # cut short
    s = build_sharded_store(docs, tok, tmp_path / "s", shard_chars=500)
    assert s.redone == {"shard-00001": "output changed", "shard-00002": "output changed"} and s.reused == [
        "shard-00000"
    ]
    fresh = build_sharded_store(docs, tok, tmp_path / "fresh", shard_chars=500)
    assert all(np.array_equal(s[i], fresh[i]) for i in range(len(fresh)))


@pytest.fixture
def store(tmp_path: Path) -> Path:
    tok = byte_tokenizer()
    return build_sharded_store(text_docs(60), tok, tmp_path / "store", shard_chars=400).path


@pytest.mark.parametrize("task", ["clm", "mlm"])
def test_pack_rebuilds_after_the_store_was_re_tokenized(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, task: str
) -> None:
    tok = byte_tokenizer()
    cfg = PackConfig.for_task(task, max_len=64, seed=2)
    with monkeypatch.context() as mp:
        _fail_at(mp, job_mod, "packs_stage", "part-00002.parquet")
        with pytest.raises(OSError):
            build_packed_dataset(store, tok, tmp_path / "p", cfg, output=OutputOptions(shard_packs=7))
    edited = [_same_size_edit(d) if d else d for d in text_docs(60)]  # same shape: only the content differs
    build_sharded_store(edited, tok, store, shard_chars=400, overwrite=True)
    m = build_packed_dataset(store, tok, tmp_path / "p", cfg, output=OutputOptions(shard_packs=7))
    assert m["reused"] == [] and set(m["redone"].values()) == {"inputs changed"}
    build_packed_dataset(store, tok, tmp_path / "fresh", cfg, output=OutputOptions(shard_packs=7))
    assert _same_dataset(tmp_path / "p", tmp_path / "fresh")


@pytest.mark.parametrize("task", ["clm", "mlm"])
def test_pack_resume_is_byte_identical_and_rebuilds_altered_work_files(
    store: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    task: str,
) -> None:
    tok = byte_tokenizer()
    cfg = PackConfig.for_task(task, max_len=64, seed=2)
    build_packed_dataset(store, tok, tmp_path / "fresh", cfg, output=OutputOptions(shard_packs=7))
    with monkeypatch.context() as mp:
        _fail_at(mp, job_mod, "packs_stage", "part-00003.parquet")
        with pytest.raises(OSError):
            build_packed_dataset(store, tok, tmp_path / "p", cfg, output=OutputOptions(shard_packs=7))
    work = partial_dir(tmp_path / "p")
    arr = work / "sequences-00001" / "example_ids.npy"  # (clm saves no token files: its route stage makes them)
    data = bytearray(arr.read_bytes())
    data[-1] ^= 1  # a changed value in a finished work file
    arr.write_bytes(bytes(data))
    cut = work / "sequences-00002" / "offsets.npy"
    cut.write_bytes(cut.read_bytes()[:-8])  # a truncated one
    (work / "dataset" / "data" / ".part-00003.parquet.tmp-dead").write_bytes(b"half")  # a killed write
    m = build_packed_dataset(store, tok, tmp_path / "p", cfg, output=OutputOptions(shard_packs=7))
    assert m["redone"]["sequences-00001"] == m["redone"]["sequences-00002"] == "output changed"
    assert "sequences-00000" in m["reused"]
    assert _same_dataset(tmp_path / "p", tmp_path / "fresh")  # nothing stale, no stray file, same bytes


def test_pack_rebuilds_an_altered_finished_part(store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tok = byte_tokenizer()
    cfg = PackConfig.for_task("clm", max_len=64)
    with monkeypatch.context() as mp:
        _fail_at(mp, job_mod, "packs_stage", "part-00002.parquet")
        with pytest.raises(OSError):
            build_packed_dataset(store, tok, tmp_path / "p", cfg, output=OutputOptions(shard_packs=7))
    part = partial_dir(tmp_path / "p") / "dataset" / "data" / "part-00001.parquet"
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0xFF
    part.write_bytes(bytes(data))
    m = build_packed_dataset(store, tok, tmp_path / "p", cfg, output=OutputOptions(shard_packs=7))
    assert m["redone"] == {"data/part-00001.parquet": "output changed"} and "data/part-00000.parquet" in m["reused"]
    build_packed_dataset(store, tok, tmp_path / "fresh", cfg, output=OutputOptions(shard_packs=7))
    assert _same_dataset(tmp_path / "p", tmp_path / "fresh")
