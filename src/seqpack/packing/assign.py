"""From a plan on the histogram to real sequences: which input index goes into which pack.

``pack_lengths`` returns CSR arrays: pack ``i`` holds the sequences
``sequence_index[pack_offsets[i]:pack_offsets[i + 1]]``. The plan fixes how many packs hold
each multiset of lengths; the k-th slot of length ``l`` (in shuffled pack order) takes the
k-th sequence of length ``l`` (in shuffled order), all with sorts, no Python loop over data.

>>> p = pack_lengths([4, 2, 2, 1, 3], 6, algorithm="lpfhp", seed=0)
>>> p.num_packs, sorted(sorted(p.lengths_of(i).tolist()) for i in range(p.num_packs))
(2, [[1, 2, 3], [2, 4]])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from seqpack.errors import UserError
from seqpack.packing.histogram import check_lengths, check_max_len_for, round_up
from seqpack.packing.plan import DEFAULT_ALGORITHM, check_max_depth, plan
from seqpack.packing.plan_types import PackingPlan


@dataclass(frozen=True, eq=False)
class Packing:
    """Packs of real sequences (CSR) and the plan they follow."""

    pack_offsets: np.ndarray  # (num_packs + 1,) int64
    sequence_index: np.ndarray  # (num_sequences,) int64: every input index exactly once
    lengths: np.ndarray  # (num_sequences,) the input lengths, in input order
    plan: PackingPlan

    @property
    def num_packs(self) -> int:
        return int(self.pack_offsets.size - 1)

    def pack(self, i: int) -> np.ndarray:
        """Input indices of the sequences in pack ``i``.

        Args:
            i: the pack's index, in `0..num_packs - 1`.

        Returns:
            The input indices of its sequences, int64 `(sequences in pack i,)`.
        """
        return self.sequence_index[self.pack_offsets[i] : self.pack_offsets[i + 1]]

    def lengths_of(self, i: int) -> np.ndarray:
        """Lengths of the sequences in pack ``i``, in the order of `pack(i)`.

        Args:
            i: the pack's index, in `0..num_packs - 1`.

        Returns:
            Their lengths `(sequences in pack i,)`.
        """
        return self.lengths[self.pack(i)]

    @property
    def pack_of_sequence(self) -> np.ndarray:
        """Pack id of each input sequence.  # (num_sequences,)"""
        out = np.empty(self.sequence_index.size, dtype=np.int64)
        out[self.sequence_index] = np.repeat(np.arange(self.num_packs), np.diff(self.pack_offsets))
        return out

    @property
    def pack_fill(self) -> np.ndarray:
        """Tokens in each pack.  # (num_packs,)"""
        csum = np.concatenate([[0], np.cumsum(self.lengths[self.sequence_index])])
        return csum[self.pack_offsets[1:]] - csum[self.pack_offsets[:-1]]


def _sort_key(lengths: np.ndarray) -> np.ndarray:
    """A narrow dtype so that numpy's stable sort is a radix sort."""
    return lengths.astype(np.uint16) if lengths.size and lengths.max() < 2**16 else lengths


def assign(p: PackingPlan, lengths: np.ndarray, *, seed: int = 0) -> Packing:
    """Map a plan covering ``histogram(lengths)`` onto the sequences.  Deterministic per seed."""
    rng = np.random.default_rng(seed)
    depths = p.depths
    flat = np.fromiter((x for s in p.strategies for x in s), dtype=np.int64, count=int(depths.sum()))
    strat_start = np.concatenate([[0], np.cumsum(depths)[:-1]])
    pack_strategy = np.repeat(np.arange(len(p.strategies)), p.counts)
    pack_strategy = pack_strategy[rng.permutation(pack_strategy.size)]  # shuffled pack order
    pack_depth = depths[pack_strategy]
    offsets = np.concatenate([[0], np.cumsum(pack_depth)])
    slot_pack = np.repeat(np.arange(pack_strategy.size), pack_depth)
    within = np.arange(offsets[-1]) - offsets[slot_pack]
    slot_len = flat[strat_start[pack_strategy[slot_pack]] + within]
    if slot_len.size != lengths.size:
        raise UserError(f"plan holds {slot_len.size} sequences, lengths has {lengths.size}")
    shuffled = rng.permutation(lengths.size)  # random order among equal lengths
    seq_order = shuffled[np.argsort(_sort_key(lengths[shuffled]), kind="stable")]
    slot_order = np.argsort(_sort_key(slot_len), kind="stable")
    if not np.array_equal(slot_len[slot_order], lengths[seq_order]):
        raise UserError("the plan does not cover these lengths exactly (was it made from their histogram?)")
    sequence_index = np.empty(lengths.size, dtype=np.int64)
    sequence_index[slot_order] = seq_order
    return Packing(offsets.astype(np.int64), sequence_index, lengths, p)


def pack_lengths(
    lengths: object,
    max_len: int,
    *,
    algorithm: str = DEFAULT_ALGORITHM,
    max_depth: int | None = None,
    seed: int = 0,
    round_to: int = 1,
) -> Packing:
    """Plan on the histogram of ``lengths``, then assign every sequence to a pack. ``round_to``: plan
    and assign each length rounded up to a multiple of it (context-parallel rows: ``2 * C``), so
    every pack's rounded lengths fit ``max_len``; the packing keeps the real lengths.

        >>> p = pack_lengths([3, 5, 1], 8, round_to=4)
        >>> sorted(sorted(p.lengths_of(i).tolist()) for i in range(p.num_packs))
        [[1, 3], [5]]

    Args:
        lengths: one length per sequence, positive ints `(N,)`.
        max_len: the row length.
        algorithm: the planner (`ALGORITHMS`); the default is the LP optimum.
        max_depth: the most sequences a pack holds (`None`: no limit).
        seed: the shuffle's seed: equal seeds give equal packings.
        round_to: plan each length rounded up to a multiple of this (1: as it is).

    Returns:
        The `Packing`: every input index in exactly one pack.

    Raises:
        UserError: a length outside `1..max_len`, or a bad option.
    """
    arr = check_lengths(lengths, max_len)
    if not arr.size:
        raise UserError("no sequences to pack (lengths is empty)")
    depth = check_max_depth(max_depth)
    if isinstance(round_to, bool) or not isinstance(round_to, (int, np.integer)) or round_to < 1 or max_len % round_to:
        raise UserError(f"round_to must be an int >= 1 dividing max_len={max_len}, got {round_to!r}")
    planned = arr if round_to == 1 else round_up(arr, round_to).astype(arr.dtype)
    check_max_len_for(max_len, int(planned.sum()))  # before the max_len-sized histogram
    h = np.bincount(planned - 1, minlength=max_len).astype(np.int64)
    p = assign(plan(h, max_len, algorithm=algorithm, max_depth=depth), planned, seed=seed)
    return p if round_to == 1 else Packing(p.pack_offsets, p.sequence_index, arr, p.plan)
