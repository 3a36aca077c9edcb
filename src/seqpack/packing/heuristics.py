"""Greedy histogram packers: SPFHP (worst fit) and LPFHP (best fit), longest sequences first.

Both work on counts, not on sequences: a group of ``c`` identical packs receives ``k``
sequences of one length at once (splitting into ``k`` extended and ``c - k`` unchanged
packs), so the cost grows with the number of distinct strategies, not with the data.

Worked example, ``max_len=6``, lengths ``[4, 4, 2, 2, 1, 1]``:

>>> spfhp_packs([2, 2, 0, 2, 0, 0], 6)   # worst fit; as in the paper, new packs hold one each
[((4, 2), 2), ((1,), 2)]
>>> lpfhp_packs([2, 2, 0, 2, 0, 0], 6)   # best fit: the fullest pack that fits
[((4, 2), 2), ((1, 1), 1)]
>>> lpfhp_packs([0, 2, 1, 0, 1, 0], 6)   # 5, 3, 2, 2
[((5,), 1), ((3, 2), 1), ((2,), 1)]
>>> spfhp_packs([0, 2, 1, 0, 1, 0], 6)
[((5,), 1), ((3, 2), 1), ((2,), 1)]
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

import numpy as np

Packs = list[tuple[tuple[int, ...], int]]


class _OpenPacks:
    """Open pack groups keyed by remaining space: ``space -> [[count, strategy], ...]``."""

    def __init__(self, max_len: int, max_depth: int | None) -> None:
        self.max_len = max_len
        self.max_depth = max_depth
        self.groups: dict[int, list[list]] = {}
        self.keys: list[int] = []  # sorted remaining spaces with at least one open group
        self.closed: Packs = []

    def add(self, strategy: tuple[int, ...], count: int, space: int, min_len: int) -> None:
        """Open ``count`` packs holding ``strategy`` (or close them if nothing more fits)."""
        if space < min_len or (self.max_depth is not None and len(strategy) >= self.max_depth):
            self.closed.append((strategy, count))
            return
        bucket = self.groups.get(space)
        if bucket is None:
            self.groups[space] = [[count, strategy]]
            bisect.insort(self.keys, space)
        else:
            bucket.append([count, strategy])

    def peek(self, space: int) -> tuple[int, ...]:
        return self.groups[space][-1][1]

    def take(self, space: int, want: int) -> tuple[tuple[int, ...], int]:
        """Remove up to ``want`` packs from the newest group with ``space`` left."""
        bucket = self.groups[space]
        group = bucket[-1]
        count, strategy = group
        if count > want:
            group[0] = count - want
            return strategy, want
        bucket.pop()
        if not bucket:
            del self.groups[space]
            self.keys.pop(bisect.bisect_left(self.keys, space))
        return strategy, count

    def finish(self) -> Packs:
        out = list(self.closed)
        for space in self.keys:
            out.extend((s, c) for c, s in self.groups[space])
        return out


def _fit_decreasing(
    hist: Sequence[int] | np.ndarray,
    max_len: int,
    max_depth: int | None,
    *,
    worst: bool,
    open_packs: Iterable[tuple[tuple[int, ...], int]] = (),
) -> Packs:
    h = np.asarray(hist, dtype=np.int64)
    nz = np.flatnonzero(h)
    min_len = int(nz[0]) + 1 if nz.size else max_len + 1
    state = _OpenPacks(max_len, max_depth)
    for strategy, count in open_packs:
        state.add(tuple(strategy), int(count), max_len - sum(strategy), min_len)
    for idx in nz[::-1].tolist():
        length, n = idx + 1, int(h[idx])
        while n:
            keys = state.keys
            if worst:
                space = keys[-1] if keys and keys[-1] >= length else 0
            else:
                i = bisect.bisect_left(keys, length)
                space = keys[i] if i < len(keys) else 0
            if not space:  # new packs; with best fit each takes as many copies as fit
                q = 1 if worst else min(max_len // length, max_len if max_depth is None else max_depth)
                if n // q:
                    state.add((length,) * q, n // q, max_len - q * length, min_len)
                if n % q:
                    state.add((length,) * (n % q), 1, max_len - (n % q) * length, min_len)
                break
            if worst:  # the paper's SPFHP: one sequence per pack of the group
                strategy, k = state.take(space, n)
                state.add((*strategy, length), k, space - length, min_len)
                n -= k
                continue
            # best fit: a pack keeps taking copies while it stays the tightest fit
            depth_left = max_len if max_depth is None else max_depth - len(state.peek(space))
            q = min(space // length, depth_left)
            strategy, k = state.take(space, max(1, n // q))
            q = min(q, n)
            state.add(strategy + (length,) * q, k, space - q * length, min_len)
            n -= k * q
    return state.finish()


def spfhp_packs(hist: Sequence[int] | np.ndarray, max_len: int, max_depth: int | None = None) -> Packs:
    """Shortest-pack-first (worst fit decreasing) on the histogram, the paper's SPFHP."""
    return _fit_decreasing(hist, max_len, max_depth, worst=True)


def lpfhp_packs(
    hist: Sequence[int] | np.ndarray,
    max_len: int,
    max_depth: int | None = None,
    *,
    open_packs: Iterable[tuple[tuple[int, ...], int]] = (),
) -> Packs:
    """Longest-pack-first (best fit decreasing) on the histogram.

    ``open_packs`` are partly filled packs that the new sequences may join first.
    """
    return _fit_decreasing(hist, max_len, max_depth, worst=False, open_packs=open_packs)
