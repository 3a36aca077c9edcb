from __future__ import annotations

import subprocess
import sys
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack.data import (
    IGNORE_INDEX,
    Sequences,
    WriteOptions,
    load_packed,
    materialize,
    materialize_oracle,
    pack_sequences,
    read_manifest,
    unpack_predictions,
    write_packed,
)
from seqpack.data.sequences import concat_ranges, offsets_of
from seqpack.packing import pack_lengths
from seqpack.tasks.clm import (
    _append_eos,
    _append_eos_oracle,
    clm_inputs,
    clm_oracle,
    clm_sequences,
)
from tests.data import NO_LABELS

docs_st = st.lists(st.lists(st.integers(1, 500), max_size=40), min_size=1, max_size=30)


def flat(docs):
    lengths = np.array([len(d) for d in docs], dtype=np.int64)
    toks = np.array([t for d in docs for t in d], dtype=np.uint16)
    return toks, offsets_of(lengths)


def test_ranges():
    assert concat_ranges(np.array([5, 0, 9]), np.array([2, 0, 3])).tolist() == [5, 6, 9, 10, 11]
    assert concat_ranges(np.array([], np.int64), np.array([], np.int64)).tolist() == []


@given(
    docs=docs_st,
    max_len=st.integers(1, 50),
    overflow=st.sampled_from(["split", "truncate", "drop"]),
    eos=st.sampled_from([None, 0]),
)
def test_clm_matches_reference(docs, max_len, overflow, eos):
    s = clm_sequences(*flat(docs), max_len=max_len, eos_id=eos, overflow=overflow)
    ref = clm_oracle(docs, max_len=max_len, eos_id=eos, overflow=overflow)
    got = [
        (int(s.example_ids[i]), q["input_ids"].tolist(), q["labels"].tolist())
        for i in range(s.num_sequences)
        for q in [s.sequence(i)]
    ]
    assert got == ref
    assert s.num_examples == len(docs)
    n = [len(d) + (eos is not None) for d in docs]
    too_long = sum(x > max_len for x in n)
    assert s.dropped.get("too_long", 0) == (too_long if overflow == "drop" else 0)
    assert s.dropped.get("empty", 0) == n.count(0)


@given(
    docs=docs_st, dtype=st.sampled_from([np.uint8, np.uint16, np.uint32]), eos=st.sampled_from([0, 255, 300, 70_000])
)
def test_append_eos_matches_reference(docs, dtype, eos):
    # the compiled copy against the numpy rule, eos ids that need a wider dtype than the tokens' included
    toks, off = flat([[t % 250 for t in d] for d in docs])
    toks = toks.astype(dtype)
    got, ref = _append_eos(toks, off, eos), _append_eos_oracle(toks, off, eos)
    assert got[0].dtype == ref[0].dtype
    for a, b in zip(got, ref):
        assert a.tolist() == b.tolist()


def test_append_eos_refuses_offsets_outside_the_tokens():
    with pytest.raises(ValueError, match="offsets must run from 0 to len"):
        _append_eos(np.arange(4, dtype=np.uint16), np.array([0, 3]), 0)
    with pytest.raises(ValueError, match="must not decrease"):
        _append_eos(np.arange(4, dtype=np.uint16), np.array([0, 3, 2, 4]), 0)


@given(
    docs=docs_st,
    max_len=st.integers(1, 50),
    overflow=st.sampled_from(["split", "truncate", "drop"]),
    vocab=st.sampled_from([None, 40_000]),
)
def test_clm_inputs_are_the_sequences_without_labels(docs, max_len, overflow, vocab):
    s = clm_sequences(*flat(docs), max_len=max_len, eos_id=0, overflow=overflow, vocab_size=vocab)
    inputs, labels_dtype = clm_inputs(*flat(docs), max_len=max_len, eos_id=0, overflow=overflow, vocab_size=vocab)
    assert list(inputs.token_fields) == ["input_ids"] and labels_dtype == s.token_fields["labels"].dtype
    assert inputs.token_fields["input_ids"].tolist() == s.token_fields["input_ids"].tolist()
    assert inputs.offsets.tolist() == s.offsets.tolist() and inputs.example_ids.tolist() == s.example_ids.tolist()
    assert (inputs.dropped, inputs.info) == (s.dropped, s.info)


def test_clm_overflow_error_counts():
    with pytest.raises(ValueError, match=r"^2 sequences exceed max_len=3; pass --overflow split\|truncate\|drop$"):
        clm_sequences(*flat([[1, 2, 3], [4], [5, 6, 7, 8]]), max_len=3, eos_id=0, overflow="error")


def random_sequences(rng, n, max_len, depth_field=True):
    lengths = rng.integers(1, max_len + 1, size=n)
    off = offsets_of(lengths)
    T = int(off[-1])
    seq_fields = {"cls": rng.integers(0, 5, n).astype(np.int16), "multi": rng.integers(0, 2, (n, 3)).astype(np.int8)}
    seq_fields["start"] = rng.integers(0, lengths).astype(np.int16)
    seq_fields["start"][::3] = IGNORE_INDEX
    return Sequences(
        task="custom",
        offsets=off,
        example_ids=rng.permutation(n).astype(np.int64),
        token_fields={
            "input_ids": rng.integers(0, 60000, T).astype(np.uint16),
            "labels": rng.integers(-100, 30000, T).astype(np.int16),
            "token_type_ids": rng.integers(0, 2, T).astype(np.uint8),
        },
        seq_fields=seq_fields,
        position_fields=("start",),
        num_examples=n,
    )


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(1, 60),
    max_len=st.integers(1, 40),
    algorithm=st.sampled_from(["spfhp", "lpfhp", "best"]),
    offset=st.sampled_from([0, 2]),
)
def test_fast_columns_equal_reference(seed, n, max_len, algorithm, offset):
    s = random_sequences(np.random.default_rng(seed), n, max_len)
    p = pack_lengths(s.lengths, max_len, algorithm=algorithm, seed=seed)
    fast = materialize(s, p, max_len=max_len, position_offset=offset)
    ref = materialize_oracle(s, p, max_len=max_len, position_offset=offset)
    assert fast.keys() == ref.keys()
    for k in ref:
        assert fast[k].dtype == ref[k].dtype and np.array_equal(fast[k], ref[k]), k
    lean = materialize(s, p, max_len=max_len, position_offset=offset, without_segments=True)  # a pack job's
    assert list(lean) == [k for k in fast if k != "segment_ids"]
    for k in lean:
        assert np.array_equal(lean[k], ref[k]), k


def unpack_rows(cols, token_fields=("input_ids",)):
    """The sequences a packed table holds, read back through segment_ids alone."""
    out = []
    for p in range(cols["segment_ids"].shape[0]):
        seg = cols["segment_ids"][p]
        assert np.all(np.diff(seg[seg > 0].astype(int)) >= 0) and np.all(
            seg[np.argmax(seg == 0) :] == 0 if (seg == 0).any() else True
        )
        for k in range(1, int(seg.max()) + 1):
            where = seg == k
            idx = np.flatnonzero(where)
            assert idx.size and np.all(np.diff(idx) == 1), "a sequence must be one contiguous run in one row"
            out.append(
                (int(cols["example_ids"][p, k - 1]), tuple(tuple(cols[f][p, where].tolist()) for f in token_fields))
            )
        assert int(cols["num_sequences"][p]) == int(seg.max())
    return out


@settings(max_examples=30, deadline=None)
@given(docs=docs_st, max_len=st.integers(2, 64), seed=st.integers(0, 99))
def test_every_sequence_exactly_once_with_its_tokens(docs, max_len, seed):
    s = clm_sequences(*flat(docs), max_len=max_len, eos_id=0)
    pc = pack_sequences(s, max_len, algorithm="best", seed=seed)
    got = Counter(unpack_rows(pc.columns, ("input_ids", "labels")))
    want = Counter(
        (int(s.example_ids[i]), (tuple(q["input_ids"].tolist()), tuple(q["labels"].tolist())))
        for i in range(s.num_sequences)
        for q in [s.sequence(i)]
    )
    assert got == want
    pos = pc.columns["position_ids"]
    seg = pc.columns["segment_ids"]
    assert np.all(pos[seg == 0] == 0) and np.all(pc.columns["labels"][seg == 0] == IGNORE_INDEX)


def test_hand_golden():
    s = clm_sequences(np.array([1, 2, 3, 4, 5, 6]), np.array([0, 3, 4, 6]), max_len=4, eos_id=None)
    pc = pack_sequences(s, 4, algorithm="lpfhp", seed=0)
    c = pc.columns
    rows = sorted(
        zip(c["input_ids"].tolist(), c["segment_ids"].tolist(), c["position_ids"].tolist(), c["example_ids"].tolist())
    )
    assert rows == [
        ([1, 2, 3, 4], [1, 1, 1, 2], [0, 1, 2, 0], [0, 1]),
        ([5, 6, 0, 0], [1, 1, 0, 0], [0, 1, 0, 0], [2, -1]),
    ]


def test_position_fields_are_shifted():
    s = Sequences(
        task="qa",
        offsets=np.array([0, 3, 5]),
        example_ids=np.array([0, 1]),
        token_fields={"input_ids": np.arange(5, dtype=np.uint16)},
        seq_fields={"start_positions": np.array([2, 1], np.int16)},
        position_fields=("start_positions",),
        num_examples=2,
    )
    pc = pack_sequences(s, 5, algorithm="lpfhp")
    (row,) = range(pc.num_packs)
    ids, starts = pc.columns["input_ids"][row], pc.columns["start_positions"][row]
    assert sorted(int(ids[x]) for x in starts) == [2, 4]  # token 2 of seq 0, token 1 of seq 1


def test_write_load_roundtrip(tmp_path):
    s = random_sequences(np.random.default_rng(0), 300, 32)
    pc = pack_sequences(s, 32, seed=1)
    m = write_packed(
        pc, tmp_path / "p", extra={"note": "x", **NO_LABELS}, options=WriteOptions(shard_packs=37, export_bin=True)
    )
    assert len(m["shards"]) == -(-pc.num_packs // 37) and m["note"] == "x"
    assert read_manifest(tmp_path / "p") == m
    assert (
        m["num_packs"] == pc.num_packs and m["histogram"]["counts"] == np.bincount(s.lengths - 1, minlength=32).tolist()
    )
    for mmap in (True, False):
        _, cols = load_packed(tmp_path / "p", mmap=mmap)
        for k, v in pc.columns.items():
            assert cols[k].dtype == v.dtype and np.array_equal(cols[k], v), k
    _, some = load_packed(tmp_path / "p", columns=["input_ids"])
    assert list(some) == ["input_ids"]
    with pytest.raises(ValueError, match="no column 'nope'"):
        load_packed(tmp_path / "p", columns=["nope"])
    with pytest.raises(FileExistsError, match="--overwrite"):
        write_packed(pc, tmp_path / "p", extra=NO_LABELS)


def test_same_inputs_same_bytes(tmp_path):
    s = random_sequences(np.random.default_rng(0), 500, 64)
    for name in ("a", "b"):
        write_packed(
            pack_sequences(s, 64, seed=3),
            tmp_path / name,
            options=WriteOptions(shard_packs=50, export_bin=True),
            extra=NO_LABELS,
        )
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert len(files) > 5
    for f in files:
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f


def test_killed_mid_write_leaves_nothing_complete(tmp_path):
    code = (
        "import os, numpy as np\n"
        "import seqpack.data.format as io\n"
        "from seqpack.data import from_lists, pack_sequences\n"
        "pc = pack_sequences(from_lists([[1, 2]] * 50), 4, algorithm='lpfhp')\n"
        "real = io.write_parquet_part\n"
        "def die(*a):\n"
        "    real(*a); os._exit(9)\n"
        "io.write_parquet_part = die\n"
        f"io.write_packed(pc, {str(tmp_path / 'p')!r}, options=io.WriteOptions(shard_packs=5), workers=1, extra={NO_LABELS})\n"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 9
    assert not (tmp_path / "p").exists()
    leftovers = [d for d in tmp_path.iterdir() if d.is_dir()]  # and the dead job's .p.lock (unlocked)
    assert leftovers and all(not (d / "manifest.json").exists() for d in leftovers)
    with pytest.raises(ValueError, match=r"manifest\.json: missing"):
        read_manifest(leftovers[0])


def test_corrupt_shard_is_named(tmp_path):
    pc = pack_sequences(random_sequences(np.random.default_rng(0), 20, 8), 8)
    write_packed(pc, tmp_path / "p", extra=NO_LABELS)
    (tmp_path / "p" / "data" / "part-00000.parquet").write_bytes(b"junk")
    with pytest.raises(ValueError, match=r"part-00000\.parquet: missing or corrupt"):
        load_packed(tmp_path / "p")


def test_hf_datasets_loads_it(tmp_path):
    datasets = pytest.importorskip("datasets")
    pc = pack_sequences(random_sequences(np.random.default_rng(0), 100, 16), 16)
    write_packed(pc, tmp_path / "p", options=WriteOptions(shard_packs=10), extra=NO_LABELS)
    ds = datasets.load_dataset(
        "parquet", data_files=str(tmp_path / "p" / "data" / "*.parquet"), split="train", cache_dir=str(tmp_path / "hf")
    )
    assert len(ds) == pc.num_packs
    ds.set_format("numpy")
    for k in ("input_ids", "segment_ids", "example_ids", "multi"):
        assert np.array_equal(np.stack(list(ds[k])), pc.columns[k]), k


def test_torch_dataset_and_collate(tmp_path):
    import torch

    from seqpack.data import PackedDataset, collate_packed

    s = random_sequences(np.random.default_rng(0), 100, 16)
    pc = pack_sequences(s, 16)
    write_packed(pc, tmp_path / "p", options=WriteOptions(export_bin=True), extra=NO_LABELS)
    ds = PackedDataset(tmp_path / "p")
    assert len(ds) == pc.num_packs
    batch = next(iter(torch.utils.data.DataLoader(ds, batch_size=4, collate_fn=collate_packed)))
    assert batch["input_ids"].shape == (4, 16) and batch["input_ids"].dtype == torch.int64
    assert batch["multi"].shape == (4, pc.max_depth, 3) and batch["num_sequences"].shape == (4,)
    assert torch.equal(batch["segment_ids"], torch.from_numpy(pc.columns["segment_ids"][:4].astype(np.int64)))
    with pytest.raises(IndexError):
        ds[len(ds)]


def test_unpack_predictions_roundtrip():
    s = random_sequences(np.random.default_rng(0), 200, 16)
    pc = pack_sequences(s, 16)
    ex = pc.columns["example_ids"]
    back = unpack_predictions(pc.columns["cls"], ex, num_examples=200)  # per-slot label -> example order
    want = np.empty(200)
    want[s.example_ids] = s.seq_fields["cls"]
    assert np.array_equal(back, want)
    multi = unpack_predictions(pc.columns["multi"], ex)
    assert multi.shape == (200, 3)


def test_unpack_predictions_reduce():
    ex = np.array([[0, 1], [1, -1]])
    preds = np.array([[1.0, 2.0], [4.0, 7.0]])
    with pytest.raises(ValueError, match="example 1 has 2 slots"):
        unpack_predictions(preds, ex)
    assert unpack_predictions(preds, ex, reduce="mean").tolist() == [1.0, 3.0]
    assert unpack_predictions(preds, ex, reduce="max").tolist() == [1.0, 4.0]
    assert [a.tolist() for a in unpack_predictions(preds, ex, reduce="list")] == [[1.0], [2.0, 4.0]]
    out = unpack_predictions(preds[:, :1], ex[:, :1], num_examples=3)
    assert out[0] == 1.0 and out[1] == 4.0 and np.isnan(out[2])
    with pytest.raises(ValueError, match="shape"):
        unpack_predictions(np.zeros(3), ex)
