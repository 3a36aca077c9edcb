"""The LP relaxation of packing on a histogram, solved by column generation (scipy HiGHS + compiled pricing).

Gilmore-Gomory: rows are the distinct lengths ``l`` with demand ``d[l]``, columns are packs
("patterns", multiplicities of each length, sum <= max_len, at most max_depth items), and

    minimise  sum_j x_j   subject to   A x >= d,  x >= 0.

Its optimum bounds every plan from below (``ceil(value)``). We start from the patterns of a
greedy plan, solve the restricted LP, and ask a knapsack over the duals for packs of
reduced cost ``1 - y . a < 0`` (one per length, the best pack that contains it). When no
such pack exists the restricted LP is optimal for all packs.

>>> r = solve_lp(np.array([0, 0, 3]), 4)   # three 3s: one per pack
>>> round(r.value, 6), r.optimal
(3.0, True)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from seqpack.errors import UserError
from seqpack.packing import solvers
from seqpack.packing.pricing import price_packs

REDUCED_COST_TOL = 1e-9
MAX_ENUMERATED_PAIRS = 300_000  # depth <= 3: enumerate all maximal packs up to ~770 distinct lengths
SMOOTHING = 0.5
#: Column generation stops by rules that depend on the input alone, so that equal inputs give equal
#: plans on any machine: a pricing budget in knapsack cells (distinct lengths x max_len per pricing;
#: seconds on a 2-core CPU), and a stall: over the last STALL_ROUNDS rounds neither the LP value
#: fell nor its lower bound rose by STALL_PACKS (a tail that can neither win nor prove a whole
#: pack). ``time_limit`` is only a guard.
WORK_LIMIT = 400_000_000
STALL_ROUNDS, STALL_PACKS = 20, 0.5


@dataclass(frozen=True)
class LPResult:
    """Column generation outcome; ``patterns[j]`` is a tuple of lengths, ``x[j]`` its LP value."""

    patterns: list[tuple[int, ...]]
    x: np.ndarray
    value: float
    lower: float  # a proven lower bound on the LP optimum (= value when optimal)
    optimal: bool
    iterations: int
    seconds: float
    master: _Master = field(repr=False)
    stop: str = "optimal"  # optimal | bound | stalled | work | time (only "time" depends on the machine)

    @property
    def bound(self) -> int:
        """``ceil(lower)`` (less a hair for float error): no plan has fewer packs."""
        return int(np.ceil(self.lower - 1e-6))


class _Columns:
    def __init__(self, lengths: np.ndarray) -> None:
        self.lengths = lengths
        self.index = {int(x): i for i, x in enumerate(lengths.tolist())}
        self.patterns: list[tuple[int, ...]] = []
        self.seen: set[tuple[int, ...]] = set()
        self.col_start: list[int] = []
        self.rows: list[int] = []
        self.vals: list[int] = []

    def add(self, pattern: tuple[int, ...]) -> bool:
        key = tuple(sorted(pattern, reverse=True))
        if not key or key in self.seen:
            return False
        self.seen.add(key)
        self.patterns.append(key)
        self.col_start.append(len(self.rows))
        for length in set(key):
            self.rows.append(self.index[length])
            self.vals.append(key.count(length))
        return True

    def matrix(self) -> Any:  # a scipy.sparse matrix
        """``[A | F]``: pattern columns, then ``m - 1`` zero-cost flow columns (shape ``(m, n + m - 1)``).

        Flow ``i`` moves one slot from length row ``i + 1`` down to row ``i``: a longer slot
        can hold a shorter sequence. It keeps the duals monotone in length.
        """
        solvers.ready()  # a preload of scipy's solvers finished first (see solvers)
        from scipy.sparse import csc_matrix

        m, n = len(self.lengths), len(self.patterns)
        flow = np.arange(m - 1)
        per_col = np.diff(np.append(np.asarray(self.col_start, dtype=np.int64), len(self.rows)))
        rows = np.concatenate([np.asarray(self.rows, dtype=np.int64), flow, flow + 1])
        cols = np.concatenate([np.repeat(np.arange(n), per_col), n + flow, n + flow])
        vals = np.concatenate([np.asarray(self.vals, dtype=np.float64), np.ones(m - 1), -np.ones(m - 1)])
        return csc_matrix((vals, (rows, cols)), shape=(m, n + m - 1))


def _solve_restricted(a: Any, demand: np.ndarray, method: str = "highs-ds") -> tuple[np.ndarray, np.ndarray, float]:
    """Solve ``min 1.x  s.t.  [A | F] (x, f) >= d`` from scratch; return (x, duals, value)."""
    solvers.ready()  # a preload of scipy's solvers finished first (see solvers)
    from scipy.optimize import linprog

    n = a.shape[1] - (a.shape[0] - 1)
    cost = np.concatenate([np.ones(n), np.zeros(a.shape[0] - 1)])
    res = linprog(cost, A_ub=-a, b_ub=-demand, bounds=(0, None), method=method)
    if res.status != 0:  # pragma: no cover - the start columns make it feasible
        raise RuntimeError(f"LP solver failed: {res.message}")
    return res.x[:n], -res.ineqlin.marginals, float(res.fun)


class _Master:
    """The restricted master LP, kept alive between rounds so HiGHS re-solves from its last basis.

    Uses the HiGHS object that scipy ships (``scipy.optimize._highspy``); where a scipy
    build lacks it, every round is solved from scratch with ``linprog``.
    """

    def __init__(self, cols: _Columns, demand: np.ndarray) -> None:
        self.cols, self.demand, self.n_in = cols, demand, 0
        try:
            solvers.ready()  # a preload of scipy's solvers finished first (see solvers)
            from scipy.optimize._highspy import _core as hc
        except ImportError:  # pragma: no cover - depends on the scipy build
            self.h = None
            return
        h = hc._Highs()
        h.setOptionValue("output_flag", False)
        self.inf = h.getInfinity()
        m = len(demand)
        empty_i, empty_f = np.zeros(0, dtype=np.int32), np.zeros(0)
        h.addRows(m, demand.astype(np.float64), np.full(m, self.inf), 0, empty_i, empty_i, empty_f)
        if m > 1:  # flows: +1 on row i, -1 on row i + 1, cost 0
            k = np.arange(m - 1, dtype=np.int32)
            idx = np.stack([k, k + 1], axis=1).reshape(-1)
            val = np.tile([1.0, -1.0], m - 1)
            h.addCols(m - 1, np.zeros(m - 1), np.zeros(m - 1), np.full(m - 1, self.inf), idx.size, 2 * k, idx, val)
        self.h = h
        self.optimal_status = hc.HighsModelStatus.kOptimal

    def resolve(self, demand: np.ndarray) -> np.ndarray:
        """Same packs, new demand; returns ``x``."""
        if self.h is None:  # scipy without its HiGHS object
            return _solve_restricted(self.cols.matrix(), demand)[0]
        for i, d in enumerate(demand.tolist()):
            self.h.changeRowBounds(i, d, self.inf)
        self.demand = demand
        return self.solve()[0]

    def solve(self, *, ipm: bool = False) -> tuple[np.ndarray, np.ndarray, float]:
        if self.h is None:  # scipy without its HiGHS object
            return _solve_restricted(self.cols.matrix(), self.demand, "highs-ipm" if ipm else "highs-ds")
        c, h, m = self.cols, self.h, len(self.demand)
        new = len(c.patterns) - self.n_in
        if new:
            lo = c.col_start[self.n_in]
            starts = (np.asarray(c.col_start[self.n_in :], dtype=np.int64) - lo).astype(np.int32)
            rows = np.asarray(c.rows[lo:], dtype=np.int32)
            vals = np.asarray(c.vals[lo:], dtype=np.float64)
            h.addCols(new, np.ones(new), np.zeros(new), np.full(new, self.inf), rows.size, starts, rows, vals)
            self.n_in = len(c.patterns)
        h.setOptionValue("solver", "ipm" if ipm else "simplex")
        h.run()
        if h.getModelStatus() != self.optimal_status:  # pragma: no cover
            raise RuntimeError(f"LP solver failed: {h.modelStatusToString(h.getModelStatus())}")
        sol = h.getSolution()
        x = np.asarray(sol.col_value)[m - 1 :]
        return x, np.asarray(sol.row_dual), float(h.getObjectiveValue())


def _price_into(
    cols: _Columns,
    lengths: np.ndarray,
    y: np.ndarray,
    max_len: int,
    max_depth: int | None,
    demand: np.ndarray,
    limit: int,
    *,
    stab: np.ndarray | None,
) -> tuple[int, float]:
    """Add up to ``limit`` improving packs; return (added, Farley lower bound at the priced duals)."""
    duals = y if stab is None else SMOOTHING * stab + (1.0 - SMOOTHING) * y
    row_values, patterns = price_packs(lengths, duals, max_len, max_depth)
    top = float(row_values.max())
    lb = float(demand @ duals) / max(top, 1.0)
    added = 0
    for r in np.argsort(-row_values, kind="stable").tolist():
        # improving at the duals of the restricted LP, not only at the smoothed ones
        if row_values[r] <= 1.0 + REDUCED_COST_TOL or added >= limit:
            break
        if stab is not None and patterns[r] @ y <= 1.0 + REDUCED_COST_TOL:
            continue
        added += cols.add(tuple(np.repeat(lengths, patterns[r]).tolist()))
    return added, lb


def maximal_patterns(lengths: np.ndarray, max_len: int, depth: int) -> list[tuple[int, ...]]:
    """Packs of at most ``depth <= 3`` present lengths where no slot can grow to the next length.

    With flows (a slot holds any shorter sequence) these dominate every pack of that depth,
    so the LP over them is the LP over all packs. ``lengths`` ascending; ``O(m^2)`` packs.

    >>> maximal_patterns(np.array([1, 2, 3]), 4, 2)
    [(2, 2), (3, 1)]
    """
    ls = np.asarray(lengths, dtype=np.int64)
    nxt = np.append(ls[1:], max_len + 1)
    if depth == 1:
        return [(int(ls[-1]),)]
    if depth == 2:
        j = np.searchsorted(ls, np.minimum(ls, max_len - ls), side="right") - 1
        out: list[tuple[int, ...]] = []
        for i in range(len(ls)):
            big = int(ls[i])
            if j[i] < 0:
                if nxt[i] > max_len:
                    out.append((big,))
                continue
            small = int(ls[j[i]])
            if (big == small or big + int(nxt[j[i]]) > max_len) and big + small + (int(nxt[i]) - big) > max_len:
                out.append((big, small))
        return out
    if depth != 3:
        raise UserError("maximal_patterns enumerates depth <= 3")
    ia, ib = np.triu_indices(len(ls))  # ia <= ib: a = ls[ib] >= b = ls[ia]
    a, b = ls[ib], ls[ia]
    ok = a + b <= max_len
    a, b, ia, ib = a[ok], b[ok], ia[ok], ib[ok]
    k = np.searchsorted(ls, np.minimum(b, max_len - a - b), side="right") - 1
    c = np.where(k >= 0, ls[np.maximum(k, 0)], 0)
    keep = ((ia == ib) | (a + nxt[ia] + c > max_len)) & (a + b + c - a + nxt[ib] > max_len)
    a, b, c = a[keep].tolist(), b[keep].tolist(), c[keep].tolist()
    out3: list[tuple[int, ...]] = [(x, y, z) if z else (x, y) for x, y, z in zip(a, b, c)]
    return out3 if len(ls) > 1 and int(ls[-1] + ls[0]) <= max_len else [*out3, (int(ls[-1]),)]


def solve_lp(
    hist: np.ndarray,
    max_len: int,
    max_depth: int | None = None,
    *,
    start: list[tuple[int, ...]] | None = None,
    time_limit: float = 60.0,
    max_new_columns: int = 200,
    lower: float | None = None,
    work_limit: int = WORK_LIMIT,
    max_rounds: int | None = None,
    on_round: Callable[[float, float], None] | None = None,
) -> LPResult:
    """Column generation to LP optimality, or until a rule that depends on the input alone stops
    it (`WORK_LIMIT`, a stall; ``time_limit`` seconds only as a guard): the result's ``stop``.

    ``lower`` is a known lower bound on the LP value (the unlimited-depth LP for a depth-limited
    one): generation stops as soon as ``ceil(value)`` meets ``ceil`` of a lower bound.
    ``max_rounds`` caps the rounds of pricing (``stop`` "gain": the caller's budget for what the LP
    could still win). ``on_round(value, bound)`` is called after each round (progress).
    """
    t0 = time.perf_counter()
    h = np.asarray(hist, dtype=np.int64)
    idx = np.flatnonzero(h)
    lengths = idx + 1
    demand = h[idx].astype(np.float64)
    cols = _Columns(lengths)
    for p in start or []:
        cols.add(p)
    for length in lengths.tolist():  # one column per length keeps the LP feasible
        q = max_len // length if max_depth is None else min(max_len // length, max_depth)
        cols.add((length,) * q)
    m = len(lengths)
    binding = max_depth is not None and max_depth * int(lengths[0]) < max_len
    master = _Master(cols, demand)
    if binding and max_depth <= 3 and m * (m + 1) // 2 <= MAX_ENUMERATED_PAIRS:  # type: ignore[operator]  # max_depth is set here (binding)
        for p in maximal_patterns(lengths, max_len, max_depth):  # type: ignore[arg-type]  # max_depth is set here (binding)
            cols.add(p)
        x, _, value = master.solve(ipm=True)
        return LPResult(cols.patterns, x, value, value, True, 1, time.perf_counter() - t0, master)
    optimal, it, work, stop = False, 0, 0, "optimal"
    cells = m * max_len  # knapsack cells of one pricing
    center, best_lb = None, float(lower or 0.0)
    values: list[float] = []  # the LP value and the best lower bound of every round
    bounds: list[float] = []
    while True:
        it += 1
        x, y, value = master.solve()
        values.append(value)
        y = np.maximum(y, 0.0)
        added, lb_y = _price_into(cols, lengths, y, max_len, max_depth, demand, max_new_columns, stab=center)
        work += cells
        if lb_y > best_lb or center is None:
            best_lb, center = max(lb_y, best_lb), y
        if not added and center is not None:  # mis-priced at the smoothed duals: price at y
            added, lb_y = _price_into(cols, lengths, y, max_len, max_depth, demand, max_new_columns, stab=None)
            work += cells
            if lb_y > best_lb:
                best_lb, center = lb_y, y
        if not added:
            optimal, best_lb = True, value
            break
        bounds.append(best_lb)
        if on_round is not None:
            on_round(value, best_lb)
        if np.ceil(best_lb - 1e-6) >= np.ceil(value - 1e-6):
            stop = "bound"
        elif (
            len(values) > STALL_ROUNDS
            and values[-STALL_ROUNDS - 1] - value < STALL_PACKS
            and best_lb - bounds[-STALL_ROUNDS - 1] < STALL_PACKS
        ):
            stop = "stalled"
        elif work >= work_limit:
            stop = "work"
        elif max_rounds is not None and it >= max_rounds:
            stop = "gain"
        elif time.perf_counter() - t0 > time_limit:
            stop = "time"
        else:
            continue
        x, y, value = master.solve()
        break
    return LPResult(cols.patterns, x, value, min(best_lb, value), optimal, it, time.perf_counter() - t0, master, stop)


def resolve_lp(lp: LPResult, hist: np.ndarray) -> np.ndarray:
    """The LP over ``lp``'s packs for another demand (a residual histogram): new ``x``."""
    return lp.master.resolve(np.asarray(hist, dtype=np.int64)[lp.master.cols.lengths - 1].astype(np.float64))
