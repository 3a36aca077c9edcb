"""Packing: length histograms -> plans -> packs of real sequences (numpy/scipy; no torch).

>>> h = histogram([5, 3, 3, 2, 1], 8)
>>> p = plan(h, 8)
>>> p.num_packs, p.lower_bound
(2, 2)
>>> packing = pack_lengths([5, 3, 3, 2, 1], 8)
>>> sorted(sorted(packing.lengths_of(i).tolist()) for i in range(packing.num_packs))
[[1, 2, 3], [3, 5]]
"""

from __future__ import annotations

from seqpack.packing.assign import Packing, pack_lengths
from seqpack.packing.histogram import (
    BUILTIN_HISTOGRAMS,
    LengthStats,
    builtin_histogram,
    check_histogram,
    histogram,
    length_stats,
    load_histogram,
)
from seqpack.packing.plan import ALGORITHMS, DEFAULT_ALGORITHM, STREAM_ALGORITHM, plan
from seqpack.packing.plan_types import PackingPlan
from seqpack.packing.stream import StreamPacker

__all__ = [
    "ALGORITHMS",
    "BUILTIN_HISTOGRAMS",
    "DEFAULT_ALGORITHM",
    "LengthStats",
    "Packing",
    "PackingPlan",
    "STREAM_ALGORITHM",
    "StreamPacker",
    "builtin_histogram",
    "check_histogram",
    "histogram",
    "length_stats",
    "load_histogram",
    "pack_lengths",
    "plan",
]
