"""The output options are one dataclass, validated once: the writer and the pack job take it, and
nothing else (no keyword of its own beside it)."""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest

from seqpack.data import WriteOptions, from_lists, pack_sequences, read_manifest, write_packed
from seqpack.pipeline import OutputOptions, PackConfig, build_packed_dataset
from tests.data import CLM_FACTS


def _pc():
    return pack_sequences(from_lists([np.arange(1, n + 1) for n in (3, 5, 2, 7, 4)], task="clm"), 8)


def test_output_options_extend_the_write_options_in_their_order() -> None:
    names = [f.name for f in fields(OutputOptions)]
    assert names[: len(fields(WriteOptions))] == [f.name for f in fields(WriteOptions)]
    assert OutputOptions(compression="lz4", shard_packs=3).write() == WriteOptions(compression="lz4", shard_packs=3)


@pytest.mark.parametrize(
    "bad", [{"shard_packs": 0}, {"row_group_packs": 0}, {"compression": "brotli"}, {"encoding": "x"}]
)
def test_every_writer_refuses_the_same_bad_options(tmp_path, bad) -> None:
    for make in (WriteOptions, OutputOptions):
        with pytest.raises(ValueError, match=next(iter(bad))):
            make(**bad)


def test_the_writers_take_their_options_alone(tmp_path) -> None:
    m = write_packed(_pc(), tmp_path / "new", options=WriteOptions(shard_packs=2), extra=CLM_FACTS)
    assert m == read_manifest(tmp_path / "new") and len(m["shards"]) > 1
    with pytest.raises(TypeError, match="unexpected keyword argument 'shard_packs'"):
        write_packed(_pc(), tmp_path / "x", shard_packs=2, extra=CLM_FACTS)  # type: ignore[call-arg]


def test_build_packed_dataset_takes_output_options(tmp_path) -> None:
    from seqpack.store import TokenStore, build_store
    from seqpack.tokenizer import Tokenizer

    tok = Tokenizer({i: bytes([i]) for i in range(256)} | {256: b"<|endoftext|>"}, [], special_tokens=["<|endoftext|>"])
    build_store(["abc def", "ghijk", "l m", "nopqrs"], tok, tmp_path / "store", workers=1)
    store, cfg = TokenStore(tmp_path / "store"), PackConfig(task="clm", max_len=16)
    new = build_packed_dataset(store, tok, tmp_path / "new", cfg, output=OutputOptions(shard_packs=1))
    assert len(new["shards"]) == new["num_packs"] > 1
    with pytest.raises(TypeError, match="unexpected keyword argument 'shard_packs'"):
        build_packed_dataset(store, tok, tmp_path / "old", cfg, shard_packs=1)  # type: ignore[call-arg]
