"""Numba kernels that lay sequences into fixed-shape pack rows (one pass, packs in parallel).

``order`` lists sequence indices pack by pack: pack ``p`` holds
``order[pack_off[p]:pack_off[p + 1]]``, laid left to right, padding after.
The slow reference is :func:`seqpack.data.pack.materialize_reference`.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange


@njit(parallel=True, cache=True)
def scatter_rows(src, seq_off, order, pack_off, out, pad):  # type: ignore[no-untyped-def]
    """out[p] = concat(src[seq_off[s]:seq_off[s+1]] for s in pack p) + pad.  out: (P, L)"""
    n_packs, width = out.shape
    for p in prange(n_packs):
        col = 0
        for j in range(pack_off[p], pack_off[p + 1]):
            s = order[j]
            a = seq_off[s]
            n = seq_off[s + 1] - a
            out[p, col : col + n] = src[a : a + n]
            col += n
        out[p, col:width] = pad


@njit(parallel=True, cache=True)
def segments_positions(lengths, order, pack_off, seg, pos, pos_offset):  # type: ignore[no-untyped-def]
    """seg[p]: 1..k per sequence, 0 padding; pos[p]: pos_offset + 0..n-1 per sequence, 0 padding."""
    n_packs, width = seg.shape
    ramp = (np.arange(width) + pos_offset).astype(pos.dtype)  # copied as a slice: vectorised stores
    for p in prange(n_packs):
        col = 0
        k = 1
        for j in range(pack_off[p], pack_off[p + 1]):
            n = lengths[order[j]]
            seg[p, col : col + n] = k
            pos[p, col : col + n] = ramp[:n]
            col += n
            k += 1
        seg[p, col:width] = 0
        pos[p, col:width] = 0

