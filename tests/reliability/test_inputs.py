"""Damaged or hand-edited inputs are refused in one line, exit 2, naming the file, before any output:
token ids past the vocabulary (in a store or in a packed dataset) and a ``shards.json`` that lists a
shard twice, out of order, or outside the store."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from pytest import CaptureFixture

from seqpack._stages import file_checksum
from seqpack.data.format import load_packed, write_manifest
from seqpack.pipeline import build_sharded_store
from tests.cli.test_cli import run
from tests.reliability.test_outputs import tree_hash
from tests.store.test_store import byte_tokenizer
from tests.tasks.test_sequences import text_docs


@pytest.fixture
def made(tmp_path: Path) -> dict[str, Path]:
    tok = byte_tokenizer()
    tok.save(tmp_path / "tok")
    build_sharded_store(text_docs(40), tok, tmp_path / "store", shard_chars=500)
    return {"tok": tmp_path / "tok", "store": tmp_path / "store"}


def pack(capsys: CaptureFixture[str], made: dict[str, Path], task: str, out: Path) -> tuple[int, str]:
    code, _, err = run(
        capsys,
        "pack",
        str(made["store"]),
        "--task",
        task,
        "--max-len",
        "64",
        "--tokenizer",
        str(made["tok"]),
        "--out",
        str(out),
    )
    return code, err


def one_line(code: int, err: str) -> bool:
    return code == 2 and "Traceback" not in err and err.count("\n") == 1


@pytest.mark.parametrize("task", ["clm", "mlm"])
def test_a_store_holding_ids_past_the_vocab_is_refused(
    made: dict[str, Path], tmp_path: Path, capsys, task: str
) -> None:
    f = made["store"] / "shard-00001" / "tokens.bin"
    ids = np.fromfile(f, dtype=np.uint16)
    ids[3] = 4000  # the byte tokenizer has 257 ids
    ids.tofile(f)
    meta_file = made["store"] / "shard-00001" / "meta.json"
    meta = json.loads(meta_file.read_text())  # as another writer would record such a store: its checksums agree
    meta["checksums"]["tokens.bin"] = file_checksum(f)
    meta_file.write_text(json.dumps(meta))
    code, err = pack(capsys, made, task, tmp_path / "out")
    assert one_line(code, err) and "shard-00001: holds token id 4000, past the tokenizer's 257 ids" in err
    assert not (tmp_path / "out").exists() and [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


@pytest.mark.parametrize("edit", ["twice", "order", "outside"])
def test_a_bad_shard_list_is_refused(made: dict[str, Path], tmp_path: Path, capsys, edit: str) -> None:
    p = made["store"] / "shards.json"
    meta = json.loads(p.read_text())
    shards = meta["shards"]
    if edit == "twice":
        shards[1] = dict(shards[0])
    elif edit == "order":
        shards[0], shards[1] = shards[1], shards[0]
    else:
        shards[0]["name"] = "../tok"
    p.write_text(json.dumps(meta))
    code, err = pack(capsys, made, "clm", tmp_path / "out")
    assert one_line(code, err) and "shards.json: the shards must be listed once each, in order" in err


def test_training_on_ids_past_the_model_vocab_is_one_line(made: dict[str, Path], tmp_path: Path, capsys) -> None:
    assert pack(capsys, made, "clm", tmp_path / "packed")[0] == 0
    d = tmp_path / "packed"
    m = json.loads((d / "manifest.json").read_text())
    m["vocab_size"] = 100  # the model is built with 100 ids; the data holds bytes up to 256
    write_manifest(d, m)  # as a writer would record it: its own checksum agrees
    before = tree_hash(d)
    code, _, err = run(
        capsys,
        "train",
        "--data",
        str(d),
        "--out",
        str(tmp_path / "run"),
        "--steps",
        "2",
        "--batch-size",
        "4",
        "--quiet",
    )
    assert one_line(code, err) and "past the model's 100 embeddings" in err
    assert tree_hash(d) == before and not (tmp_path / "run").exists()
    assert load_packed(d)[0]["num_packs"] > 0


def edit_part_in_place(d: Path) -> Path:
    """Rewrite the first Parquet part with one token changed, the same rows, columns and mtime: only
    the manifest's checksum can tell."""
    import os

    import pyarrow as pa
    import pyarrow.parquet as pq

    f = sorted((d / "data").glob("*.parquet"))[0]
    st = f.stat()
    table = pq.read_table(f)
    ids = table.column("input_ids").to_pylist()
    ids[0][0] = (ids[0][0] + 1) % 200
    table = table.set_column(
        table.schema.get_field_index("input_ids"),
        table.schema.field("input_ids"),
        pa.array(ids, type=table.schema.field("input_ids").type),
    )
    pq.write_table(table, f)
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    return f


READERS = {
    "load_packed": lambda d: load_packed(d),
    "PackedRows": lambda d: __import__("seqpack.data.rows", fromlist=["PackedRows"]).PackedRows(d),
    "PackedDataset": lambda d: __import__("seqpack.data", fromlist=["PackedDataset"]).PackedDataset(d),
    "hf_dataset": lambda d: __import__("seqpack.data", fromlist=["x"]).hf_dataset(d),
}


@pytest.mark.parametrize("reader", list(READERS))
def test_every_reader_refuses_a_part_edited_in_place(
    made: dict[str, Path], tmp_path: Path, capsys, reader: str
) -> None:
    assert pack(capsys, made, "clm", tmp_path / "packed")[0] == 0
    f = edit_part_in_place(tmp_path / "packed")
    with pytest.raises(ValueError, match=f"{f.name}: changed since seqpack pack wrote it"):
        READERS[reader](tmp_path / "packed")


def test_a_fresh_train_refuses_a_part_edited_in_place(made: dict[str, Path], tmp_path: Path, capsys) -> None:
    assert pack(capsys, made, "clm", tmp_path / "packed")[0] == 0
    edit_part_in_place(tmp_path / "packed")
    code, _, err = run(
        capsys,
        "train",
        "--data",
        str(tmp_path / "packed"),
        "--out",
        str(tmp_path / "run"),
        "--steps",
        "1",
        "--batch-size",
        "4",
        "--quiet",
    )
    assert one_line(code, err) and "changed since seqpack pack wrote it" in err and not (tmp_path / "run").exists()


def test_an_edited_bin_column_is_refused(made: dict[str, Path], tmp_path: Path, capsys) -> None:
    code, _, err = run(
        capsys,
        "pack",
        str(made["store"]),
        "--task",
        "clm",
        "--max-len",
        "64",
        "--tokenizer",
        str(made["tok"]),
        "--out",
        str(tmp_path / "packed"),
        "--export-bin",
    )
    assert code == 0, err
    assert "bin_checksums" in json.loads((tmp_path / "packed" / "manifest.json").read_text())
    f = tmp_path / "packed" / "bin" / "input_ids.bin"
    data = bytearray(f.read_bytes())
    data[0] ^= 1
    f.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"input_ids\.bin: changed since seqpack pack wrote it"):
        load_packed(tmp_path / "packed")


TOKEN_ID_ENTRY_POINTS = {
    "pack_rollouts": lambda ids: __import__("seqpack.rl", fromlist=["x"]).pack_rollouts([[3, 4]], [[ids]], max_len=64),
    "StreamingPackedDataset": lambda ids: list(
        __import__("seqpack.pipeline.stream_dataset", fromlist=["x"]).StreamingPackedDataset(
            [[5, 6, 7], ids], max_len=16, buffer_size=4
        )
    ),
}
BAD_IDS = {
    "float ids": ([5.0, 6.0], r"token ids are integers, got float64 values \(5\)"),
    "a fraction": ([5, 6.5], r"token ids are integers, got float64 values \(6.5\)"),
    "nested": ([[5, 6], [7]], "not a flat list of token ids"),
    "a matrix": ([[5, 6], [7, 8]], r"not a flat list of token ids \(an array of shape \(2, 2\)\)"),
    "negative": ([5, -1], r"holds a negative token id \(-1\)"),
    "bools": ([True, False], "token ids are integers, got bool values"),
    "text": ("hello", "got text|got str"),
}


@pytest.mark.parametrize("entry", list(TOKEN_ID_ENTRY_POINTS))
@pytest.mark.parametrize("bad", list(BAD_IDS))
def test_every_entry_point_that_takes_token_ids_refuses_bad_ones_in_one_line(entry: str, bad: str) -> None:
    ids, message = BAD_IDS[bad]
    with pytest.raises(ValueError, match=message):
        TOKEN_ID_ENTRY_POINTS[entry](ids)


def test_library_calls_refuse_a_wrong_type_instead_of_casting_it() -> None:
    """A float id is not cast, a text is not taken for ids or for a batch of one-character texts."""
    tok = byte_tokenizer()
    assert tok.decode([97, 98]) == "ab"
    with pytest.raises(ValueError, match=r"decode: token ids are integers, got float64 values \(97\)"):
        tok.decode([97.0])  # type: ignore[list-item]  # the wrong type under test
    with pytest.raises(ValueError, match="decode: got text"):
        tok.decode("ab")  # type: ignore[arg-type]  # the wrong type under test
    with pytest.raises(TypeError, match="encode_batch takes a list of texts, got one str"):
        tok.encode_batch("ab")
