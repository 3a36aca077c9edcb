"""Random packed batches for the nn tests, and slow references written with Python loops."""

from __future__ import annotations

import torch
from hypothesis import strategies as st


@st.composite
def packs(draw, *, max_rows: int = 3, max_len: int = 24, max_depth: int = 4, min_len: int = 1):
    """``(T, rows)`` where each row is a list of sequence lengths summing to <= T."""
    T = draw(st.integers(max(4, min_len), max_len))
    rows = []
    for _ in range(draw(st.integers(1, max_rows))):
        free, row = T, []
        for _ in range(draw(st.integers(1, max_depth))):
            if free < min_len:
                break
            n = draw(st.integers(min_len, free))
            row.append(n)
            free -= n
        rows.append(row)
    return T, rows


def segment_rows(T: int, rows: list[list[int]]) -> torch.Tensor:
    seg = torch.zeros(len(rows), T, dtype=torch.long)
    for b, row in enumerate(rows):
        at = 0
        for k, n in enumerate(row):
            seg[b, at : at + n] = k + 1
            at += n
    return seg


def spans(rows: list[list[int]]) -> list[tuple[int, int, int, int]]:
    """``(row, slot, start, length)`` of every sequence."""
    out = []
    for b, row in enumerate(rows):
        at = 0
        for k, n in enumerate(row):
            out.append((b, k, at, n))
            at += n
    return out


def mask_reference(seg: torch.Tensor, causal: bool) -> torch.Tensor:
    B, T = seg.shape
    m = torch.zeros(B, 1, T, T, dtype=torch.bool)
    for b in range(B):
        for i in range(T):
            for j in range(T):
                same = int(seg[b, i]) == int(seg[b, j]) and int(seg[b, j]) > 0
                m[b, 0, i, j] = same and (j <= i or not causal)
    return m


def positions_reference(seg: torch.Tensor, start: int = 0) -> torch.Tensor:
    out = torch.full_like(seg, start)
    for b in range(seg.shape[0]):
        n, prev = 0, 0
        for t in range(seg.shape[1]):
            s = int(seg[b, t])
            n = n + 1 if s == prev else 0
            if s > 0:
                out[b, t] = start + n
            prev = s
    return out
