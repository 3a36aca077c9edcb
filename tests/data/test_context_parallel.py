"""Rows split across context-parallel ranks: every token on exactly one rank, nothing truncated,
equal shares, and the causal work of the ranks balanced (exactly when documents need no rounding)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from seqpack.data.context_parallel import (
    causal_pairs,
    cp_lengths,
    cp_placement,
    cp_shard,
    cp_shard_index,
    cp_shard_oracle,
)


def row_of(lengths: list[int], max_len: int) -> np.ndarray:
    seg = np.zeros(max_len, np.int64)
    at = 0
    for d, n in enumerate(lengths, start=1):
        seg[at : at + n] = d
        at += n
    return seg


def positions(seg: np.ndarray) -> np.ndarray:
    pos = np.zeros(seg.size, np.int64)
    for i in range(1, seg.size):
        pos[i] = pos[i - 1] + 1 if seg[i] == seg[i - 1] and seg[i] != 0 else 0
    return pos


@st.composite
def cp_rows(draw):
    cp = draw(st.sampled_from([1, 2, 3, 4, 8]))
    max_len = 2 * cp * draw(st.integers(1, 12))
    lengths: list[int] = []
    while True:
        n = draw(st.integers(1, max_len))
        if int(cp_lengths(np.array(lengths + [n]), cp).sum()) > max_len or draw(st.integers(0, 5)) == 0:
            break
        lengths.append(n)
    return cp, max_len, lengths


@given(cp_rows())
def test_every_token_on_exactly_one_rank_and_equal_shares(case):
    cp, max_len, lengths = case
    seg = row_of(lengths, max_len)
    held = []
    for r in range(cp):
        lay = cp_placement(seg, cp=cp)
        idx = cp_shard_index(lay.spans, cp=cp, rank=r)
        assert idx.size == max_len // cp
        src = lay.src[idx]
        assert src.tolist() == cp_shard_oracle(seg, cp=cp, rank=r)  # the obvious loop
        held += src[src >= 0].tolist()
    assert sorted(held) == np.flatnonzero(seg).tolist()  # no token lost, none twice, none truncated


@given(cp_rows())
def test_causal_work_per_rank_is_balanced(case):
    """Per-document chunks r and 2C-1-r: equal attended pairs when no document is rounded; otherwise
    apart by at most (2C - 1) x its rounded length per rounded document (its padding's share)."""
    cp, max_len, lengths = case
    seg = row_of(lengths, max_len)
    cols = {"segment_ids": seg, "position_ids": positions(seg)}
    pairs = [causal_pairs(**cp_shard(cols, seg, cp=cp, rank=r)) for r in range(cp)]
    assert sum(pairs) == causal_pairs(seg, cols["position_ids"])
    rounded = cp_lengths(np.array(lengths, dtype=np.int64), cp)
    bound = int(((2 * cp - 1) * rounded * (rounded != np.array(lengths))).sum())
    assert max(pairs) - min(pairs) <= bound
    if bound == 0:
        assert len(set(pairs)) == 1


def test_columns_travel_with_their_tokens_and_padding_is_masked():
    seg = row_of([3, 5], 16)
    cols = {
        "input_ids": np.arange(100, 116),
        "labels": np.arange(200, 216),
        "segment_ids": seg,
        "position_ids": positions(seg),
    }
    out = [cp_shard(cols, seg, cp=2, rank=r) for r in range(2)]
    for o in out:
        real = o["segment_ids"] != 0
        assert ((o["input_ids"][real] - 100) == (o["labels"][real] - 200)).all()
        assert (o["labels"][~real] == -100).all() and (o["input_ids"][~real] == 0).all()
    # document 2 (5 tokens, rounded to 8, chunks of 2) is the row's second span: rank 0 takes its chunks 1 and 2
    # (positions 2-5, 5 padding), rank 1 its chunks 0 and 3 (positions 0-1 and 6-7, both padding)
    assert out[0]["position_ids"][out[0]["segment_ids"] == 2].tolist() == [2, 3, 4]
    assert out[1]["position_ids"][out[1]["segment_ids"] == 2].tolist() == [0, 1]


@pytest.mark.parametrize(
    "lengths, max_len, cp, message",
    [
        ([3, 5], 10, 2, "does not split into 2C = 4 equal chunks"),
        ([3, 5, 5], 16, 2, "pack it for this context-parallel size"),
    ],
)
def test_rows_not_packed_for_cp_are_refused(lengths, max_len, cp, message):
    with pytest.raises(ValueError, match=message):
        cp_placement(row_of(lengths, max_len), cp=cp)
