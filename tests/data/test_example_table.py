"""The example table: what examples hold beyond tokens, written beside the packed rows, joined back
by example id; checked like the token parts (checksums, the manifest's entry), refused in one line."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack.data import PackedDataset, hf_dataset, pack_sequences, read_manifest, write_packed
from seqpack.data.example_table import ExampleTable, check_table
from seqpack.data.sequences import from_lists
from tests.data import CLM_FACTS, NO_LABELS


def seqs_with_table(lengths: list[int], ids: list[int] | None = None):
    """Sequences of ``lengths`` whose examples each hold a word and a list of numbers of their own."""
    ids = list(range(len(lengths))) if ids is None else ids
    s = from_lists([[i + 1] * n for i, n in enumerate(lengths)], example_ids=ids, task="clm")
    table = pa.table(
        {
            "example_id": pa.array(ids, pa.int64()),
            "word": [f"w{e}" for e in ids],
            "nums": [list(range(e % 3)) for e in ids],
        }
    )
    return dataclasses.replace(s, examples=table)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 9), min_size=1, max_size=30), st.integers(0, 5))
def test_every_row_joins_its_own_examples(tmp_path_factory, lengths, shift):
    """Each pack's examples, read back by id from the written table, are the examples placed in it."""
    ids = [e * 7 + shift for e in range(len(lengths))]  # ids that are not row numbers
    pc = pack_sequences(seqs_with_table(lengths, ids), 12)
    out = tmp_path_factory.mktemp("t") / "p"
    m = write_packed(pc, out, derived={"segment_ids": "segments"}, extra=CLM_FACTS)
    table = ExampleTable(out, m)
    assert len(table) == len(lengths) and m["example_table"]["columns"] == ["example_id", "word", "nums"]
    ex = pc.columns["example_ids"]
    for p in range(pc.num_packs):
        got = table.rows(ex[p][ex[p] >= 0])
        assert [r["example_id"] for r in got] == ex[p][ex[p] >= 0].tolist()
        assert [r["word"] for r in got] == [f"w{e}" for e in ex[p][ex[p] >= 0]]


def test_hf_dataset_adds_each_rows_example_columns_lists_joined(tmp_path):
    pc = pack_sequences(seqs_with_table([3, 4, 2, 5]), 8)
    write_packed(pc, tmp_path / "p", extra=CLM_FACTS)
    ds = hf_dataset(tmp_path / "p", cache_dir=tmp_path / "cache")
    for p in range(pc.num_packs):
        ex = [e for e in pc.columns["example_ids"][p].tolist() if e >= 0]
        assert ds[p]["word"] == [f"w{e}" for e in ex]
        assert ds[p]["nums"] == [x for e in ex for x in range(e % 3)]
    assert PackedDataset(tmp_path / "p")[0]["input_ids"].shape == (8,)  # the token readers are unchanged


def test_a_dataset_without_examples_has_no_table(tmp_path):
    m = write_packed(pack_sequences(from_lists([[1, 2], [3]]), 4), tmp_path / "p", extra=NO_LABELS)
    assert "example_table" not in m and not (tmp_path / "p" / "examples").exists()
    with pytest.raises(ValueError, match="holds no example table"):
        ExampleTable(tmp_path / "p", m)


def test_an_edited_part_or_manifest_is_refused_in_one_line(tmp_path):
    m = write_packed(pack_sequences(seqs_with_table([3, 4, 2]), 8), tmp_path / "p", extra=CLM_FACTS)
    part = tmp_path / "p" / m["example_table"]["parts"][0]["file"]
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 1
    part.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="changed since seqpack pack wrote it") as e:
        ExampleTable(tmp_path / "p", m)
    assert "\n" not in str(e.value)
    bad = dict(m, example_table={**m["example_table"], "parts": [{"file": "../elsewhere.parquet", "rows": 3}]})
    (tmp_path / "p" / "manifest.json").write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="lies outside the dataset"):
        read_manifest(tmp_path / "p")


def test_a_table_the_writer_cannot_key_is_refused():
    with pytest.raises(TypeError, match="'example_id' column"):
        check_table(pa.table({"id": [1]}), "here")
    with pytest.raises(TypeError, match="integers"):
        check_table(pa.table({"example_id": ["a"]}), "here")
    with pytest.raises(ValueError, match="twice"):
        check_table(pa.table({"example_id": [1, 1]}), "here")


def test_an_id_missing_from_the_table_is_a_key_error(tmp_path):
    m = write_packed(pack_sequences(seqs_with_table([3, 4]), 8), tmp_path / "p", extra=CLM_FACTS)
    with pytest.raises(KeyError, match="example 9 is not in its example table"):
        ExampleTable(tmp_path / "p", m).rows(np.array([0, 9]))
