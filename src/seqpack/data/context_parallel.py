"""Packed rows split across context-parallel (CP) ranks, per document, balanced.

A row packed for ``C`` CP ranks holds documents whose lengths were rounded up to a multiple of
``2C`` when it was planned (`cp_lengths`), and ``max_len`` is a multiple of ``2C``. Placed
with each document followed by its rounding padding (`cp_placement`), every document's span
cuts into ``2C`` equal chunks, and rank ``r`` takes chunks ``r`` and ``2C - 1 - r`` of every span
(the causal load-balancing split, rotated over the documents, `cp_shard_index`): each rank holds ``max_len / C`` tokens
and, under the per-document causal mask, the same number of attended (query, key) pairs. The
row's trailing padding is one more span, split the same way. Every column travels with its tokens
(`cp_shard`); nothing is truncated.

    >>> seg = np.array([1, 1, 1, 2, 2, 2, 2, 2, 0, 0, 0, 0])   # documents of 3 and 5 tokens
    >>> lay = cp_placement(seg, cp=1)                            # rounded to 4 and 6 (2C = 2)
    >>> lay.src.tolist(), lay.spans.tolist()
    ([0, 1, 2, -1, 3, 4, 5, 6, 7, -1, -1, -1], [[0, 4], [4, 6], [10, 2]])
    >>> cp_shard_index(np.array([[0, 4], [4, 8]]), cp=2, rank=0).tolist()   # spans of 4 and 8, chunks of 1 and 2
    [0, 3, 6, 7, 8, 9]
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from seqpack._lazy import renamed_names
from seqpack.data.padded import sequence_spans
from seqpack.errors import UserError
from seqpack.packing.histogram import round_up

#: what a column holds where the placement pads (a column not named here pads with 0)
PAD_VALUES = {"labels": -100, "targets": -100}


def check_cp(cp: int) -> None:
    if isinstance(cp, bool) or not isinstance(cp, (int, np.integer)) or cp < 1:
        raise UserError(f"context-parallel size must be an int >= 1, got {cp!r}")


def cp_lengths(lengths: np.ndarray, cp: int) -> np.ndarray:
    """Each length rounded up to a multiple of ``2 * cp`` (what a CP-aware plan packs).

    >>> cp_lengths(np.array([1, 4, 5, 8]), 2).tolist()
    [4, 4, 8, 8]
    """
    check_cp(cp)
    return round_up(lengths, 2 * cp)


def doc_spans(seg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and length of each document (a run of one nonzero id) of one row.  # (L,) -> (D,), (D,)

    >>> [x.tolist() for x in doc_spans(np.array([1, 1, 2, 0, 3, 0]))]
    [[0, 2, 4], [2, 1, 1]]
    """
    spans = sequence_spans(np.asarray(seg)[None])  # (D, 4): pack, start, length, slot
    return spans[:, 1], spans[:, 2]


@dataclass(frozen=True)
class CPPlacement:
    """A row placed for CP: ``src`` (L,) the row position at each slot (-1: padding), ``spans``
    (S, 2) each document's ``(start, rounded length)`` and then the trailing padding's."""

    src: np.ndarray
    spans: np.ndarray


def cp_placement(seg: np.ndarray, *, cp: int) -> CPPlacement:
    """The CP placement of a row with segment ids ``seg`` (L,): each document followed by padding up
    to a multiple of ``2 * cp``, in order, then the row's trailing padding.

    A row whose rounded documents do not fit (it was not planned with `cp_lengths`) is
    refused: pack it for this context-parallel size.
    """
    check_cp(cp)
    seg = np.asarray(seg)
    L = seg.size
    if L % (2 * cp):
        raise UserError(
            f"a row of {L} tokens does not split into 2C = {2 * cp} equal chunks; pack with a max_len "
            f"divisible by {2 * cp}"
        )
    starts, lengths = doc_spans(seg)
    rounded = cp_lengths(lengths, cp)
    used = int(rounded.sum())
    if used > L:
        raise UserError(
            f"the row's documents rounded to multiples of {2 * cp} need {used} tokens, more than its {L}; "
            f"pack it for this context-parallel size (seqpack pack --context-parallel {cp})"
        )
    at = np.concatenate([[0], np.cumsum(rounded)]).astype(np.int64)
    src = np.full(L, -1, dtype=np.int64)
    for s, n, a in zip(starts.tolist(), lengths.tolist(), at[:-1].tolist()):
        src[a : a + n] = np.arange(s, s + n)
    spans = np.stack([at[:-1], rounded], axis=1) if rounded.size else np.zeros((0, 2), np.int64)
    if used < L:
        spans = np.concatenate([spans, [[used, L - used]]])
    return CPPlacement(src, spans.astype(np.int64))


def cp_shard_index(spans: np.ndarray, *, cp: int, rank: int) -> np.ndarray:
    """Slots of a laid-out row that rank ``rank`` of ``cp`` holds: chunks ``r`` and ``2cp-1-r`` of
    span ``s``, with ``r = (rank + s) % cp`` (the pairs of chunks rotate over the spans, so the
    padding that ends each rounded document falls on each rank in turn), spans in order.  # (S, 2) -> (L / cp,)"""
    check_cp(cp)
    if not 0 <= rank < cp:
        raise UserError(f"rank must be in 0..{cp - 1}, got {rank}")
    parts = []
    for s, (a, n) in enumerate(np.asarray(spans, dtype=np.int64).tolist()):
        if n % (2 * cp):
            raise UserError(
                f"a span of {n} tokens does not split into 2C = {2 * cp} chunks; lay the row out for cp={cp}"
            )
        c, r = (
            n // (2 * cp),
            (rank + s) % cp,
        )  # rotated per span: a document's rounding padding lands on each rank in turn
        parts += [np.arange(a + r * c, a + (r + 1) * c), np.arange(a + (2 * cp - 1 - r) * c, a + (2 * cp - r) * c)]
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)


def cp_shard(
    columns: Mapping[str, np.ndarray], segment_ids: np.ndarray, *, cp: int, rank: int
) -> dict[str, np.ndarray]:
    """Rank ``rank``'s share of one row: every per-token column (L,) placed (`cp_placement`,
    padding from `PAD_VALUES`, else 0) and gathered at `cp_shard_index`.  # (L,) -> (L / cp,)

    ``segment_ids`` is padding (0) on the placement's padding, so no token attends to it.

        >>> cols = {"input_ids": np.arange(10, 16), "segment_ids": np.array([1, 1, 1, 2, 0, 0])}
        >>> {k: v.tolist() for k, v in cp_shard(cols, cols["segment_ids"], cp=1, rank=0).items()}
        {'input_ids': [10, 11, 12, 0, 13, 0], 'segment_ids': [1, 1, 1, 0, 2, 0]}
    """
    lay = cp_placement(segment_ids, cp=cp)
    idx = cp_shard_index(lay.spans, cp=cp, rank=rank)
    src = lay.src[idx]
    real = src >= 0
    out = {}
    for k, v in columns.items():
        v = np.asarray(v)
        got = np.full(idx.size, PAD_VALUES.get(k, 0), dtype=v.dtype)
        got[real] = v[src[real]]
        out[k] = got
    return out


def cp_shard_oracle(segment_ids: np.ndarray, *, cp: int, rank: int) -> list[int]:
    """The obvious loop behind `cp_placement` + `cp_shard_index`: the row positions rank
    ``rank`` holds, in order (-1: padding)."""
    seg = [int(x) for x in segment_ids]
    laid: list[int] = []
    spans: list[tuple[int, int]] = []
    i = 0
    while i < len(seg):
        if seg[i] == 0:
            i += 1
            continue
        j = i
        while j < len(seg) and seg[j] == seg[i]:
            j += 1
        n = j - i
        rounded = -(-n // (2 * cp)) * 2 * cp
        spans.append((len(laid), rounded))
        laid += list(range(i, j)) + [-1] * (rounded - n)
        i = j
    if len(laid) < len(seg):
        spans.append((len(laid), len(seg) - len(laid)))
        laid += [-1] * (len(seg) - len(laid))
    out: list[int] = []
    for k, (a, n) in enumerate(spans):
        c, r = n // (2 * cp), (rank + k) % cp
        for chunk in (r, 2 * cp - 1 - r):
            out += laid[a + chunk * c : a + (chunk + 1) * c]
    return out


def causal_pairs(segment_ids: np.ndarray, position_ids: np.ndarray) -> int:
    """Attended (query, key) pairs of a shard under the per-document causal mask: ``position + 1``
    summed over its real tokens (each query attends its document's keys up to itself).

    >>> causal_pairs(np.array([1, 1, 0, 2]), np.array([0, 1, 0, 0]))
    4
    """
    real = np.asarray(segment_ids) != 0
    return int((np.asarray(position_ids)[real] + 1).sum())


__all__ = [
    "PAD_VALUES",
    "CPPlacement",
    "causal_pairs",
    "check_cp",
    "cp_placement",
    "cp_lengths",
    "cp_shard",
    "cp_shard_index",
    "cp_shard_oracle",
    "doc_spans",
]


#: the names these had before "layout" came to mean one thing (how continuations share a row)
__getattr__ = renamed_names(globals(), {"CPLayout": "CPPlacement", "cp_layout": "cp_placement"})
