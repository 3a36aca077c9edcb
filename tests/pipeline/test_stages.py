"""The route stage's helpers: the gather written a chunk at a time, and saved arrays mapped."""

from __future__ import annotations

import io

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack.data.sequences import offsets_of
from seqpack.pipeline.stages import map_npy, write_in_order


@settings(max_examples=80, deadline=None)
@given(lengths=st.lists(st.integers(0, 9), max_size=30), chunk=st.integers(1, 12), seed=st.integers(0, 99))
def test_write_in_order_equals_one_concatenation(lengths, chunk, seed):
    # chunks smaller than a sequence, empty sequences and no sequence at all: the bytes of one concatenation
    off = offsets_of(np.array(lengths, dtype=np.int64))
    tokens = np.random.default_rng(seed).integers(0, 60_000, int(off[-1])).astype(np.uint16)
    order = np.random.default_rng(seed + 1).permutation(len(lengths)).astype(np.int64)
    f = io.BytesIO()
    write_in_order(f, tokens, off, order, chunk=chunk)
    want = np.concatenate([tokens[off[i] : off[i + 1]] for i in order]) if lengths else tokens[:0]
    assert f.getvalue() == want.tobytes()


def test_map_npy_reads_what_save_wrote(tmp_path):
    for a in (np.arange(7, dtype=np.int32), np.zeros(0, dtype=np.uint16)):
        np.save(tmp_path / "a.npy", a)
        got = map_npy(tmp_path / "a.npy")
        assert got.dtype == a.dtype and got.tolist() == a.tolist() and not got.flags.writeable
