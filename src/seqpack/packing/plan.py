"""``plan(histogram, max_len, algorithm=...)``: choose which lengths share each pack.

>>> p = plan([2, 2, 0, 2, 0, 0], 6, algorithm="spfhp")   # lengths 1, 1, 2, 2, 4, 4
>>> p.strategies, p.counts.tolist(), p.num_packs          # the paper's SPFHP: new packs hold one each
(((4, 2), (1,)), [2, 2], 4)
>>> plan([2, 2, 0, 2, 0, 0], 6).strategies               # "best": (4, 2) twice, (1, 1)
((4, 2), (1, 1))
"""

from __future__ import annotations

import time

import numpy as np

from seqpack.errors import UserError
from seqpack.packing import solvers
from seqpack.packing.best import best_packs
from seqpack.packing.heuristics import lpfhp_packs, spfhp_packs
from seqpack.packing.histogram import check_histogram
from seqpack.packing.nnlshp import nnlshp_packs
from seqpack.packing.plan_types import PackingPlan, plan_from_packs

ALGORITHMS = ("spfhp", "lpfhp", "nnlshp", "best")
#: the default algorithm where a whole dataset is planned at once: `best`, the LP optimum
DEFAULT_ALGORITHM = "best"
#: the default algorithm of a stream, which plans each buffer as it fills, on the path to the next
#: row: `lpfhp`, milliseconds a buffer (`best` solves a linear program each time)
STREAM_ALGORITHM = "lpfhp"
#: what an algorithm imports when it first plans (scipy's solvers, slow to import)
SOLVERS = {"best": solvers.SCIPY, "nnlshp": solvers.SCIPY}


def preload(algorithm: str) -> None:
    """Import the solver ``algorithm`` needs on a background thread, so that a job which plans
    only after reading its shards does not then wait for the import (the plan is serial; the
    planners wait for this import before their own: `seqpack.packing.solvers`)."""
    module = SOLVERS.get(algorithm)
    if module is not None:
        solvers.preload(module)


def check_max_depth(max_depth: object) -> int | None:
    if max_depth is None:
        return None
    if isinstance(max_depth, bool) or not isinstance(max_depth, (int, np.integer)):
        raise TypeError(f"max_depth must be an int or None, got {type(max_depth).__name__}")
    if max_depth < 1:
        raise UserError(f"max_depth must be >= 1 (or None for no limit), got {max_depth}")
    return int(max_depth)


def plan(
    histogram: object,
    max_len: int,
    *,
    algorithm: str = DEFAULT_ALGORITHM,
    max_depth: int | None = None,
    time_limit: float = 60.0,
) -> PackingPlan:
    """Pack a length histogram (``h[i]`` = sequences of length ``i + 1``) into rows of ``max_len``.

    ``algorithm``: ``spfhp`` (the paper's worst fit, fast), ``lpfhp`` (best fit, fast),
    ``nnlshp`` (the paper's NNLS, depth <= 3, seconds), ``best`` (LP + rounding; see
    ``seqpack.packing.best``). ``max_depth`` bounds sequences per pack (``None``: no limit;
    ``nnlshp`` then uses 3). The plan holds every sequence exactly once. Equal inputs give equal
    plans on any machine (``best`` stops its LP by input-only rules; ``time_limit`` seconds is only
    a guard, and its ``info["lp_stop"]`` says "time" if the guard ever stopped it). ``best`` runs
    no LP when a greedy plan already meets the counting bound (total tokens over ``max_len``,
    sequences over ``max_depth``): no plan has fewer packs (``lp_stop``: "counting bound met").

    Args:
        histogram: counts, `histogram[i]` the sequences of length `i + 1` `(L,)`.
        max_len: the row length.
        algorithm: the planner, one of `ALGORITHMS`.
        max_depth: the most sequences a row holds (`None`: no limit).
        time_limit: seconds after which `best` stops its LP (a guard only).

    Returns:
        The `PackingPlan`: how many rows of each pattern of lengths.

    Raises:
        UserError: an unknown algorithm, a bad option, or a malformed histogram.
    """
    if algorithm not in ALGORITHMS:
        raise UserError(f"unknown algorithm {algorithm!r}; choose one of {', '.join(ALGORITHMS)}")
    depth = check_max_depth(max_depth)
    h = check_histogram(histogram, max_len)  # refuses a max_len that would outgrow the data
    t0 = time.perf_counter()
    info: dict[str, object] = {}
    if algorithm == "spfhp":
        packs = spfhp_packs(h, max_len, depth)
    elif algorithm == "lpfhp":
        packs = lpfhp_packs(h, max_len, depth)
    elif algorithm == "nnlshp":
        depth = 3 if depth is None else depth
        packs = nnlshp_packs(h, max_len, depth)
    else:
        packs, info = best_packs(h, max_len, depth, time_limit=time_limit)
    seconds = time.perf_counter() - t0
    result = plan_from_packs(packs, max_len=max_len, max_depth=depth, algorithm=algorithm, seconds=seconds, info=info)
    assert result.covers(h), f"{algorithm} plan does not cover the histogram"
    return result
