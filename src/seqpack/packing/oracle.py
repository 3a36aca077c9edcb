"""Slow, obviously correct packers that work sequence by sequence (for tests only).

>>> sorted(map(sorted, best_fit_decreasing([4, 2, 2, 1, 3], 6)))
[[1, 2, 3], [2, 4]]
>>> lp_bound([0, 0, 3], 4)   # three sequences of 3 in rows of 4: nothing shares
3.0
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from seqpack.packing import solvers


def _fit(lengths: Sequence[int], max_len: int, max_depth: int | None, *, worst: bool) -> list[list[int]]:
    """Fit decreasing, one sequence at a time. Among packs with the same space left, the one changed
    last wins (the histogram packers keep such packs newest first): with a depth limit, which of
    two equally full packs takes a sequence changes how many packs there are."""
    packs: list[list[int]] = []
    touched: list[int] = []  # when each pack last changed
    order = sorted((int(x) for x in lengths), reverse=True)
    i = 0
    while i < len(order):
        length = order[i]
        fits = [
            j for j, p in enumerate(packs) if max_len - sum(p) >= length and (max_depth is None or len(p) < max_depth)
        ]
        if not fits:
            if worst:  # the paper's SPFHP opens one pack per remaining sequence of this length
                n = order.count(length) - order[:i].count(length)
                packs.extend([length] for _ in range(n))
                touched.extend([i] * n)
                i += n
                continue
            packs.append([length])
            touched.append(i)
        else:
            space = {j: max_len - sum(packs[j]) for j in fits}
            j = max(fits, key=lambda j: (space[j] if worst else -space[j], touched[j]))
            packs[j].append(length)
            touched[j] = i
        i += 1
    return packs


def best_fit_decreasing(lengths: Sequence[int], max_len: int, max_depth: int | None = None) -> list[list[int]]:
    """Each sequence, longest first, joins the fullest pack it fits (else a new pack)."""
    return _fit(lengths, max_len, max_depth, worst=False)


def worst_fit_decreasing(lengths: Sequence[int], max_len: int, max_depth: int | None = None) -> list[list[int]]:
    """SPFHP one sequence at a time: the emptiest pack it fits."""
    return _fit(lengths, max_len, max_depth, worst=True)


def lp_bound(hist: Sequence[int] | np.ndarray, max_len: int, max_depth: int | None = None) -> float:
    """The LP relaxation of the packing problem, over every pattern enumerated explicitly.

    Exponential in ``max_len``: only for tiny histograms, to check ``seqpack.packing.lp``.
    """
    solvers.ready()  # a preload of scipy's solvers finished first (see solvers)
    from scipy.optimize import linprog

    h = np.asarray(hist, dtype=np.int64)
    lengths = [i + 1 for i in np.flatnonzero(h)]
    patterns: list[tuple[int, ...]] = []

    def grow(start: int, pattern: tuple[int, ...], space: int) -> None:
        if pattern:
            patterns.append(pattern)
        if max_depth is not None and len(pattern) >= max_depth:
            return
        for k in range(start, len(lengths)):
            if lengths[k] <= space:
                grow(k, (*pattern, lengths[k]), space - lengths[k])

    grow(0, (), max_len)
    a = np.zeros((len(lengths), len(patterns)))
    for j, p in enumerate(patterns):
        for x in p:
            a[lengths.index(x), j] += 1
    res = linprog(np.ones(len(patterns)), A_ub=-a, b_ub=-h[np.array(lengths) - 1], method="highs")
    assert res.status == 0, res.message
    return float(res.fun)
