"""Pricing for column generation: knapsacks over sequence lengths (compiled, ``csrc/packing.h``).

Given a value ``values[i]`` (an LP dual) for each distinct length ``lengths[i]``, find packs
(multisets of lengths with sum <= ``cap`` and at most ``depth`` items) of the greatest total
value. For every item ``i`` we also return the best pack that contains ``i`` at least once,
so one pricing round can add many improving columns.

Returns ``(row_values, patterns)``: ``patterns`` is an int64 array ``(n_items + 1, n_items)``
of item multiplicities, row ``n_items`` the overall best pack and row ``i`` the best pack
containing item ``i``; ``row_values`` their values. Items that cannot fit give an all-zero row.

    >>> values, patterns = price_packs(np.array([2, 3]), np.array([1.0, 1.6]), 5, 2)
    >>> patterns.tolist(), values.round(6).tolist()
    ([[1, 1], [1, 1], [1, 1]], [2.6, 2.6, 2.6])
"""

from __future__ import annotations

import itertools

import numpy as np


def price_packs(lengths: np.ndarray, values: np.ndarray, cap: int, depth: int | None) -> tuple[np.ndarray, np.ndarray]:
    """``lengths`` ascending; ``depth=None`` (or a depth that cannot bind) = unlimited."""
    from seqpack._native import price_packs as native

    lengths = np.ascontiguousarray(lengths, dtype=np.int64)
    d = 0 if depth is None or depth * int(lengths[0]) >= cap else int(depth)
    return native(lengths, np.ascontiguousarray(values, dtype=np.float64), int(cap), d)


def price_packs_oracle(lengths: np.ndarray, values: np.ndarray, cap: int, depth: int | None) -> np.ndarray:
    """Best values only (rows as in `price_packs`), by enumerating every pack. Tiny inputs only."""
    n = len(lengths)
    most = cap // int(min(lengths)) if depth is None else min(depth, cap // int(min(lengths)))
    best = np.zeros(n + 1)
    for k in range(1, most + 1):
        for combo in itertools.combinations_with_replacement(range(n), k):
            if sum(int(lengths[i]) for i in combo) > cap:
                continue
            v = sum(float(values[i]) for i in combo)
            best[n] = max(best[n], v)
            for i in set(combo):
                best[i] = max(best[i], v)
    return best
