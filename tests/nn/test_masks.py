from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack.nn import (
    attention_mask,
    block_mask,
    check_segment_ids,
    cu_seqlens,
    max_seqlen,
    position_ids,
    row_runs,
    segment_ids_from_bos,
    segment_ids_from_eos,
    sequence_lengths,
    sequence_starts,
    unpad_index,
)
from tests.nn._packs import (
    mask_reference,
    packs,
    positions_reference,
    segment_rows,
    spans,
)


def test_golden_mask_and_positions() -> None:
    seg = torch.tensor([[1, 1, 2, 2, 2, 0]])
    expected = [
        [1, 1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0],
        [0, 0, 1, 1, 1, 0],
        [0, 0, 1, 1, 1, 0],
        [0, 0, 1, 1, 1, 0],
        [0, 0, 0, 0, 0, 0],
    ]
    assert attention_mask(seg)[0, 0].int().tolist() == expected
    causal = attention_mask(seg, causal=True)[0, 0].int().tolist()
    assert causal[4] == [0, 0, 1, 1, 1, 0] and causal[2] == [0, 0, 1, 0, 0, 0]
    assert position_ids(seg, start=2).tolist() == [[2, 3, 2, 3, 4, 2]]
    fmask = attention_mask(seg, dtype=torch.float16)
    assert fmask.dtype == torch.float16 and fmask.shape == (1, 1, 6, 6)
    assert fmask[0, 0, 0, 1] == 0 and fmask[0, 0, 0, 2] == torch.finfo(torch.float16).min


@settings(max_examples=40, deadline=None)
@given(packs())
def test_masks_match_loop_reference(pack) -> None:
    T, rows = pack
    seg = segment_rows(T, rows)
    check_segment_ids(seg)
    for causal in (False, True):
        assert torch.equal(attention_mask(seg, causal=causal), mask_reference(seg, causal))
    assert torch.equal(position_ids(seg, start=1), positions_reference(seg, 1))
    lengths = [n for row in rows for n in row]
    assert sequence_lengths(seg).tolist() == lengths
    cu = cu_seqlens(seg)
    assert cu.dtype == torch.int32 and cu.tolist() == [sum(lengths[:i]) for i in range(len(lengths) + 1)]
    assert max_seqlen(seg) == max(lengths)
    assert unpad_index(seg).tolist() == [b * T + t for b in range(len(rows)) for t in range(T) if seg[b, t] > 0]
    starts, present = sequence_starts(seg, 4)
    for b, k, at, _ in spans(rows):
        assert int(starts[b, k]) == at and bool(present[b, k])
    assert int(present.sum()) == len(lengths)


def row_runs_reference(seg: torch.Tensor, pad_block: int) -> list[int]:
    """Walk each row: a run starts at the row's start, where the segment id changes, and on
    padding at every multiple of ``pad_block``."""
    B, T = seg.shape
    starts = []
    for b in range(B):
        for t in range(T):
            s = int(seg[b, t])
            if t == 0 or s != int(seg[b, t - 1]) or (s == 0 and t % pad_block == 0):
                starts.append(b * T + t)
    return [*starts, B * T]


@settings(max_examples=60, deadline=None)
@given(packs(max_len=40), st.integers(1, 9))
def test_row_runs_match_loop_reference(pack, pad_block: int) -> None:
    T, rows = pack
    seg = segment_rows(T, rows)
    cu = row_runs(seg, pad_block=pad_block)
    assert cu.dtype == torch.int32 and cu.tolist() == row_runs_reference(seg, pad_block)
    flat = seg.reshape(-1)
    for a, b in zip(cu[:-1].tolist(), cu[1:].tolist()):  # one row, one segment id, short padding
        assert a // T == (b - 1) // T and len(set(flat[a:b].tolist())) == 1
        assert int(flat[a]) > 0 or b - a <= pad_block


def test_row_runs_golden() -> None:
    seg = torch.tensor([[1, 1, 2, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1, 1]])
    # row 0: [1 1] [2] [0 0 0] [0]: its padding cut at t = 3 and 6 (pad_block 3); row 1 one run
    assert row_runs(seg, pad_block=3).tolist() == [0, 2, 3, 6, 7, 14]
    assert row_runs(seg[:, :0]).tolist() == [0]
    with pytest.raises(ValueError, match="pad_block must be at least 1"):
        row_runs(seg, pad_block=0)


@settings(max_examples=40, deadline=None)
@given(packs(min_len=2))
def test_segments_from_eos_and_bos(pack) -> None:
    T, rows = pack
    seg = segment_rows(T, rows)
    ids = torch.randint(3, 50, seg.shape)  # 0 = eos, 1 = bos, 2 = pad; real ids >= 3
    eos, bos = ids.clone(), ids.clone()
    for b, _, at, n in spans(rows):
        eos[b, at + n - 1] = 0
        bos[b, at] = 1
    eos[seg == 0] = 2
    bos[seg == 0] = 2
    assert torch.equal(segment_ids_from_eos(eos, 0, pad_id=2), seg)
    assert torch.equal(segment_ids_from_bos(bos, 1, pad_id=2), seg)


def test_eos_without_pad_and_leading_tokens_before_bos() -> None:
    assert segment_ids_from_eos(torch.tensor([[4, 0, 5, 6]]), 0).tolist() == [[1, 1, 2, 2]]
    assert segment_ids_from_bos(torch.tensor([[4, 1, 5, 1]]), 1).tolist() == [[1, 2, 2, 3]]


@pytest.mark.parametrize(
    ("seg", "message"),
    [
        ([[1, 0, 2, 2]], "position 2 goes from 0 to 2"),
        ([[1, 1, 3, 3]], "position 2 goes from 1 to 3"),
        ([[2, 2, 0, 0]], "position 0 starts at 2"),
        ([[1, 2, 1, 0]], "position 2 goes from 2 to 1"),
        ([[0, 1, 1, 1]], "position 1 goes from 0 to 1"),
        ([[1, -1, 0, 0]], "position 1 goes from 1 to -1"),
    ],
)
def test_bad_segment_ids(seg: list[list[int]], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_segment_ids(torch.tensor(seg))


def test_bad_segment_shapes_and_dtypes() -> None:
    with pytest.raises(ValueError, match=r"must be 2-D \(B, T\)"):
        attention_mask(torch.tensor([1, 1, 0]))
    with pytest.raises(ValueError, match="must hold integers"):
        position_ids(torch.ones(2, 3))
    with pytest.raises(TypeError, match=r"torch\.Tensor"):
        check_segment_ids([[1, 1]])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="bool or a float"):
        attention_mask(torch.tensor([[1, 1]]), dtype=torch.int32)
    with pytest.raises(ValueError, match="max_depth=2 slots"):
        sequence_starts(torch.tensor([[1, 2, 3]]), 2)


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_block_mask_matches_dense_on_cpu_forward() -> None:
    from torch.nn.attention.flex_attention import flex_attention

    seg = torch.tensor([[1] * 5 + [2] * 7 + [0] * 4, [1] * 16])
    q, k, v = (torch.randn(2, 2, 16, 8) for _ in range(3))
    for causal in (False, True):
        bm = block_mask(seg, causal=causal, block_size=8)
        got = flex_attention(q, k, v, block_mask=bm)
        want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask(seg, causal=causal))
        assert torch.allclose(got, want, atol=1e-5)
