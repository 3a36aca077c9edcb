from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack.packing import ALGORITHMS, StreamPacker, pack_lengths


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 32), min_size=1, max_size=300),
    depth=st.sampled_from([None, 2, 3]),
    seed=st.integers(0, 3),
)
def test_every_sequence_packed_exactly_once(algorithm, lengths, depth, seed):
    p = pack_lengths(lengths, 32, algorithm=algorithm, max_depth=depth, seed=seed)
    lens = np.asarray(lengths)
    assert sorted(p.sequence_index.tolist()) == list(range(len(lengths)))
    assert p.pack_offsets[0] == 0 and p.pack_offsets[-1] == len(lengths)
    assert np.all(np.diff(p.pack_offsets) >= 1)
    assert (p.pack_fill <= 32).all() and p.pack_fill.sum() == lens.sum()
    if p.plan.max_depth is not None:
        assert np.diff(p.pack_offsets).max() <= p.plan.max_depth
    # packs realise the plan exactly
    realised = sorted(tuple(sorted(lens[p.pack(i)].tolist(), reverse=True)) for i in range(p.num_packs))
    planned = sorted(s for s, c in zip(p.plan.strategies, p.plan.counts.tolist()) for _ in range(c))
    assert realised == planned
    assert (p.pack_of_sequence[p.sequence_index] == np.repeat(np.arange(p.num_packs), np.diff(p.pack_offsets))).all()


def test_deterministic_and_seed_shuffles():
    lengths = np.random.default_rng(0).integers(1, 100, 5000)
    a, b = pack_lengths(lengths, 128, seed=1), pack_lengths(lengths, 128, seed=1)
    assert np.array_equal(a.sequence_index, b.sequence_index) and np.array_equal(a.pack_offsets, b.pack_offsets)
    c = pack_lengths(lengths, 128, seed=2)
    assert not np.array_equal(a.sequence_index, c.sequence_index)
    assert c.num_packs == a.num_packs


def test_bad_lengths():
    with pytest.raises(ValueError, match=r"2 sequences exceed max_len=8; pass --overflow truncate\|split\|drop"):
        pack_lengths([3, 9, 10], 8)
    with pytest.raises(ValueError, match="1 sequences have length <= 0"):
        pack_lengths([3, 0], 8)
    with pytest.raises(TypeError, match="integers"):
        pack_lengths([1.5, 2.0], 8)
    with pytest.raises(ValueError, match="max_depth must be >= 1"):
        pack_lengths([1, 2], 8, max_depth=0)
    with pytest.raises(ValueError, match="empty"):
        pack_lengths([], 8)
    with pytest.raises(ValueError, match="unknown algorithm"):
        pack_lengths([1], 8, algorithm="magic")


@settings(max_examples=30, deadline=None)
@given(lengths=st.lists(st.integers(1, 16), max_size=200), buffer=st.integers(1, 40), depth=st.sampled_from([None, 2]))
def test_stream_packs_every_sequence_once(lengths, buffer, depth):
    sp = StreamPacker(16, buffer_size=buffer, max_depth=depth)
    packs = list(sp.pack(lengths))
    seen = sorted(k for p in packs for k in p)
    assert seen == list(range(len(lengths)))
    for p in packs:
        assert sum(lengths[k] for k in p) <= 16
        assert depth is None or len(p) <= depth
    assert len(sp._lengths) == 0


def test_stream_bounded_buffer_and_keys():
    sp = StreamPacker(10, buffer_size=8, carry=0.5)
    out = []
    for i in range(1000):
        out += sp.add(1 + i % 9, key=f"s{i}")
        assert len(sp._lengths) < 8
    out += sp.flush()
    assert sorted(k for p in out for k in p) == sorted(f"s{i}" for i in range(1000))
    with pytest.raises(ValueError, match=r"outside 1\.\.max_len=10"):
        sp.add(11)
    with pytest.raises(ValueError, match="buffer_size"):
        StreamPacker(10, buffer_size=0)
