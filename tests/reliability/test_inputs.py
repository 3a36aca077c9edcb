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
from seqpack.data.format import load_packed
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
    code, _, err = run(capsys, "pack", str(made["store"]), "--task", task, "--max-len", "64", "--tokenizer",
                       str(made["tok"]), "--out", str(out))
    return code, err


def one_line(code: int, err: str) -> bool:
    return code == 2 and "Traceback" not in err and err.count("\n") == 1


@pytest.mark.parametrize("task", ["clm", "mlm"])
def test_a_store_holding_ids_past_the_vocab_is_refused(made: dict[str, Path], tmp_path: Path, capsys, task: str) -> None:
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
    (d / "manifest.json").write_text(json.dumps(m))
    before = tree_hash(d)
    code, _, err = run(capsys, "train", "--data", str(d), "--out", str(tmp_path / "run"), "--steps", "2",
                       "--batch-size", "4", "--quiet")
    assert one_line(code, err) and "past the model's 100 embeddings" in err
    assert tree_hash(d) == before and not (tmp_path / "run").exists()
    assert load_packed(d)[0]["num_packs"] > 0
