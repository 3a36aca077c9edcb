"""Pricing for column generation: knapsacks over sequence lengths (numba).

Given a value ``values[i]`` (an LP dual) for each distinct length ``lengths[i]``, find packs
(multisets of lengths with sum <= ``cap`` and at most ``depth`` items) of the greatest total
value. For every item ``i`` we also return the best pack that contains ``i`` at least once,
so one pricing round can add many improving columns.

Returns ``(best_value, patterns)`` where ``patterns`` is an int64 array ``(n_items + 1, n_items)``
of item multiplicities: row ``n_items`` is the overall best pack, row ``i`` the best pack
containing item ``i``. Values of the row packs are in ``row_values``.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _table(lengths, values, cap, depth):  # pragma: no cover - compiled
    # f[k, c]: best value with at most k items and total length <= c;  choice: -2 = (k-1, c),
    # -1 = (k, c-1), i >= 0 = item i on top of (k-1, c - lengths[i])
    n = lengths.shape[0]
    f = np.zeros((depth + 1, cap + 1))
    choice = np.full((depth + 1, cap + 1), -2, dtype=np.int32)
    for k in range(1, depth + 1):
        for c in range(cap + 1):
            best = f[k - 1, c]
            arg = -2
            if c > 0 and f[k, c - 1] > best:
                best = f[k, c - 1]
                arg = -1
            for i in range(n):
                li = lengths[i]
                if li > c:
                    break
                v = f[k - 1, c - li] + values[i]
                if v > best + 1e-12:
                    best = v
                    arg = i
            f[k, c] = best
            choice[k, c] = arg
    return f, choice


@njit(cache=True)
def _table_unbounded(lengths, values, cap):  # pragma: no cover - compiled
    n = lengths.shape[0]
    f = np.zeros(cap + 1)
    choice = np.full(cap + 1, -1, dtype=np.int32)
    for c in range(1, cap + 1):
        best = f[c - 1]
        arg = -1
        for i in range(n):
            li = lengths[i]
            if li > c:
                break
            v = f[c - li] + values[i]
            if v > best + 1e-12:
                best = v
                arg = i
        f[c] = best
        choice[c] = arg
    return f, choice


@njit(cache=True)
def _walk(choice, lengths, k, c, out):  # pragma: no cover - compiled
    # follow the choices of a (depth + 1, cap + 1) table from (k, c), counting items into out
    while k > 0 and c >= 0:
        a = choice[k, c]
        if a == -2:
            k -= 1
        elif a == -1:
            c -= 1
        else:
            out[a] += 1
            c -= lengths[a]
            k -= 1


@njit(cache=True)
def price(lengths, values, cap, depth):  # pragma: no cover - compiled
    """Best packs overall and per item; ``depth <= 0`` means unlimited.  ``lengths`` ascending."""
    n = lengths.shape[0]
    patterns = np.zeros((n + 1, n), dtype=np.int64)
    row_values = np.zeros(n + 1)
    if depth > 0:
        f, choice = _table(lengths, values, cap, depth)
        _walk(choice, lengths, depth, cap, patterns[n])
        row_values[n] = f[depth, cap]
        for i in range(n):
            if lengths[i] <= cap:
                patterns[i, i] += 1
                _walk(choice, lengths, depth - 1, cap - lengths[i], patterns[i])
                row_values[i] = values[i] + f[depth - 1, cap - lengths[i]]
        return row_values, patterns
    g, pick = _table_unbounded(lengths, values, cap)
    for r in range(n + 1):
        c = cap
        if r < n:
            if lengths[r] > cap:
                continue
            patterns[r, r] += 1
            c = cap - lengths[r]
            row_values[r] = values[r] + g[c]
        else:
            row_values[r] = g[cap]
        while c > 0:
            a = pick[c]
            if a < 0:
                c -= 1
            else:
                patterns[r, a] += 1
                c -= lengths[a]
    return row_values, patterns


def price_packs(lengths: np.ndarray, values: np.ndarray, cap: int, depth: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Python entry: ``lengths`` ascending int64, ``values`` float64; ``depth=None`` = unlimited."""
    d = 0 if depth is None or depth * int(lengths[0]) >= cap else int(depth)
    return price(np.ascontiguousarray(lengths, dtype=np.int64), np.ascontiguousarray(values, dtype=np.float64), int(cap), d)
