"""NNLSHP: the paper's non-negative least squares histogram packing (scipy).

Columns of the "packing matrix" ``A`` (shape ``(max_len, S)``) are all strategies of at
most ``depth`` sequences whose lengths sum exactly to ``max_len``. Solving
``min ||w * (A x - h)||`` for ``x >= 0`` (weight 0.09 on lengths <= 8, whose residual
matters less), rounding ``x`` to the nearest integers, then:

* lengths the rounded plan misses (positive residual) get one new pack per sequence,
  as in the paper;
* lengths it holds too often (negative residual: the paper's padding slots) are taken
  out of packs, so the plan covers the histogram exactly.

>>> exact_sum_strategies(4, 3)
[(4,), (3, 1), (2, 2), (2, 1, 1)]
"""

from __future__ import annotations

import numpy as np

from seqpack.errors import UserError
from seqpack.packing import solvers

NNLS_WEIGHT = 0.09
NNLS_WEIGHT_CUTOFF = 8
MAX_MATRIX_ENTRIES = 60_000_000  # ~480 MB of float64: max_len 600 at depth 3


def exact_sum_strategies(max_len: int, depth: int) -> list[tuple[int, ...]]:
    """Every multiset of at most ``depth`` lengths summing exactly to ``max_len`` (decreasing)."""
    out: list[tuple[int, ...]] = []

    def grow(prefix: tuple[int, ...], space: int, largest: int) -> None:
        if space <= largest:
            out.append((*prefix, space))
        if len(prefix) + 2 <= depth:
            for x in range(min(largest, space - 1), 0, -1):
                if x * (depth - len(prefix)) < space:
                    break  # the rest cannot fill the gap with parts <= x
                grow((*prefix, x), space - x, x)

    grow((), max_len, max_len)
    return out


def _packing_matrix(strategies: list[tuple[int, ...]], max_len: int) -> np.ndarray:
    flat = np.fromiter((x for s in strategies for x in s), dtype=np.int64)
    cols = np.repeat(np.arange(len(strategies)), [len(s) for s in strategies])
    a = np.zeros((max_len, len(strategies)))
    np.add.at(a, (flat - 1, cols), 1.0)
    return a


def nnlshp_packs(hist: np.ndarray, max_len: int, depth: int = 3) -> list[tuple[tuple[int, ...], int]]:
    solvers.ready()  # a preload of scipy's solvers finished first (see solvers)
    from scipy.optimize import nnls

    if not 1 <= depth <= 3:
        raise UserError(f"nnlshp enumerates strategies of at most 3 sequences; got max_depth={depth} (use 'best')")
    h = np.asarray(hist, dtype=np.int64)
    strategies = exact_sum_strategies(max_len, depth)
    if len(strategies) * max_len > MAX_MATRIX_ENTRIES:
        raise UserError(
            f"nnlshp at max_len={max_len}, depth {depth} needs a {max_len}x{len(strategies)} matrix; "
            "use --algorithm best (faster and at least as good)"
        )
    a = _packing_matrix(strategies, max_len)
    w = np.ones(max_len)
    w[:NNLS_WEIGHT_CUTOFF] = NNLS_WEIGHT
    x, _ = nnls(w[:, None] * a, w * h, maxiter=50 * a.shape[1])
    counts = np.rint(x).astype(np.int64)
    residual = h - a.astype(np.int64) @ counts
    used = np.flatnonzero(counts)
    packs = [(strategies[j], int(counts[j])) for j in used.tolist()]
    packs = remove_surplus(packs, np.maximum(-residual, 0))
    packs += [((i + 1,), int(residual[i])) for i in np.flatnonzero(residual > 0).tolist()]
    return packs


def remove_surplus(packs: list[tuple[tuple[int, ...], int]], surplus: np.ndarray) -> list[tuple[tuple[int, ...], int]]:
    """Take ``surplus[l - 1]`` sequences of length ``l`` out of the packs (emptied packs vanish).

    Removes from the fullest packs first, so the gaps left are the ones most likely to stay
    unused.

    >>> remove_surplus([((3, 1), 2), ((2, 1), 1)], np.array([2, 0, 0]))
    [((3,), 2), ((2, 1), 1)]
    """
    need = np.asarray(surplus, dtype=np.int64)
    packs = sorted(packs, key=lambda p: -sum(p[0]))
    for idx in np.flatnonzero(need).tolist():
        length, n = idx + 1, int(need[idx])
        out: list[tuple[tuple[int, ...], int]] = []
        for strategy, count in packs:
            per_pack = strategy.count(length)
            if not n or not per_pack:
                out.append((strategy, count))
                continue
            # all copies from k packs, then the remainder r from one more pack
            k, r = divmod(min(n, per_pack * count), per_pack)
            without = tuple(x for x in strategy if x != length)
            out.extend(_split(without, k))
            if r:
                out.extend(_split(without + (length,) * (per_pack - r), 1))
            out.extend(_split(strategy, count - k - (1 if r else 0)))
            n -= k * per_pack + r
        assert n == 0, "surplus larger than what the packs hold"
        packs = out
    return packs


def _split(strategy: tuple[int, ...], count: int) -> list[tuple[tuple[int, ...], int]]:
    return [(tuple(sorted(strategy, reverse=True)), count)] if strategy and count else []
