"""Sequences + a packing -> fixed-shape columns (the packed rows).

For ``P`` packs of width ``L`` holding at most ``D`` sequences each::

    input_ids, labels, token_type_ids   (P, L)   per-token fields, padded (labels with -100)
    segment_ids                         (P, L)   0 = padding, k = k-th sequence of the pack
    position_ids                        (P, L)   restart at each sequence (+ position_offset)
    <per-sequence fields>               (P, D)   or (P, D, C); -100 in empty slots
    example_ids                         (P, D)   source example of each slot, -1 when empty
    num_sequences                       (P,)

Example: packs ``[[a0 a1 a2], [b0]]`` then ``[[c0 c1]]`` at ``L = 4``::

    input_ids     a0 a1 a2 b0 | c0 c1 0 0
    segment_ids   1  1  1  2  | 1  1  0 0
    position_ids  0  1  2  0  | 0  1  0 0

A per-sequence *position* field (QA start/end) is shifted by the sequence's
first column in its pack, so it indexes the packed row directly.

A task may give its own per-token ``position_ids`` (the preference task's rejected response
continues from its prompt, not from the chosen response); they replace the restarting ones
(plus ``position_offset``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from seqpack.data.sequences import IGNORE_INDEX, Sequences
from seqpack.errors import UserError
from seqpack.packing import DEFAULT_ALGORITHM, Packing, pack_lengths
from seqpack.packing.histogram import check_max_len

if TYPE_CHECKING:
    import pyarrow as pa

_TOKEN_PAD = {"labels": IGNORE_INDEX}


def small_uint(n: int) -> np.dtype:
    """Smallest unsigned dtype holding ``0 .. n``."""
    for dt in (np.uint8, np.uint16, np.uint32):
        if n <= np.iinfo(dt).max:
            return np.dtype(dt)
    return np.dtype(np.uint64)


def signed_for(dtype: np.dtype) -> np.dtype:
    """A dtype that holds every value of ``dtype`` and -100."""
    if dtype.kind in "if":  # signed ints and floats already hold -100
        return dtype
    return np.promote_types(dtype, np.int8)  # bool -> int8, uint8 -> int16, ...


@dataclass(frozen=True, eq=False)
class PackedColumns:
    """The packed rows of one task, in memory."""

    task: str
    columns: dict[str, np.ndarray]
    packing: Packing
    max_len: int
    max_depth: int
    info: dict[str, Any] = field(default_factory=dict)
    examples: pa.Table | None = None  # the sequences' example table (`seqpack.data.example_table`), or None

    @property
    def num_packs(self) -> int:
        return self.packing.num_packs

    @property
    def nbytes(self) -> int:
        return sum(int(c.nbytes) for c in self.columns.values())


def _placement(seqs: Sequences, packing: Packing) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pack of each slot, slot index within its pack, first column of each slot (packed order)."""
    depth = np.diff(packing.pack_offsets)
    slot_pack = np.repeat(np.arange(packing.num_packs), depth)
    within = np.arange(slot_pack.size) - packing.pack_offsets[slot_pack]
    lens = seqs.lengths[packing.sequence_index]
    csum = np.concatenate([[0], np.cumsum(lens)])
    col_start = csum[:-1] - csum[packing.pack_offsets[slot_pack]]
    return slot_pack, within, col_start


def segment_dtype(depth: int) -> np.dtype:
    """``segment_ids``' dtype in packs of up to ``depth`` sequences.

    >>> segment_dtype(344)
    dtype('uint16')
    """
    return small_uint(max(depth, 1))


def _dtypes(seqs: Sequences, max_len: int, depth: int, position_offset: int) -> dict[str, np.dtype]:
    return {
        "segment_ids": segment_dtype(depth),
        "position_ids": small_uint(max_len - 1 + position_offset),
        "example_ids": np.dtype(np.int32) if seqs.num_examples < 2**31 else np.dtype(np.int64),
        "num_sequences": small_uint(max(depth, 1)),
    }


def _seq_columns(
    seqs: Sequences, packing: Packing, depth: int, cols: dict[str, np.ndarray], dts: dict[str, np.dtype]
) -> None:
    slot_pack, within, col_start = _placement(seqs, packing)
    order = packing.sequence_index
    P = packing.num_packs
    ex = np.full((P, depth), -1, dtype=dts["example_ids"])
    ex[slot_pack, within] = seqs.example_ids[order]
    for name, values in seqs.seq_fields.items():
        dt = signed_for(values.dtype)
        out = np.full((P, depth, *values.shape[1:]), IGNORE_INDEX, dtype=dt)
        v = values[order].astype(dt)
        if name in seqs.position_fields:
            v = np.where(v == IGNORE_INDEX, v, v + col_start.astype(dt))
        out[slot_pack, within] = v
        cols[name] = out
    cols["example_ids"] = ex
    cols["num_sequences"] = np.diff(packing.pack_offsets).astype(dts["num_sequences"])


def _token_fields(seqs: Sequences, dts: dict[str, np.dtype], position_offset: int) -> dict[str, np.ndarray]:
    """The per-token fields to scatter; a task's own ``position_ids`` shifted by ``position_offset``."""
    fields = dict(seqs.token_fields)
    if "position_ids" in fields:
        fields["position_ids"] = (fields["position_ids"].astype(np.int64) + position_offset).astype(dts["position_ids"])
    return fields


def materialize(
    seqs: Sequences,
    packing: Packing,
    *,
    max_len: int,
    max_depth: int | None = None,
    position_offset: int = 0,
    without_segments: bool = False,
) -> dict[str, np.ndarray]:
    """All columns, built by the compiled kernels (``csrc/packing.h``; packs split over threads).
    ``without_segments``: all but ``segment_ids`` (a pack job that does not write them).

    Args:
        seqs: the sequences.
        packing: which sequences each pack holds.
        max_len: the row length `L`.
        max_depth: the most sequences a pack holds (`None`: the packing's deepest).
        position_offset: the first position id of each sequence.
        without_segments: leave out `segment_ids`.

    Returns:
        Each column's array: token columns `(P, L)`, per-slot columns `(P, D, ...)`, per-row `(P,)`.
    """
    from seqpack import _native
    from seqpack._parallel import default_workers

    depth = pack_depth(packing, max_depth)
    dts = _dtypes(seqs, max_len, depth, position_offset)
    P, threads = packing.num_packs, default_workers()
    order = np.ascontiguousarray(packing.sequence_index, dtype=np.int64)
    poff = np.ascontiguousarray(packing.pack_offsets, dtype=np.int64)
    seq_off = np.ascontiguousarray(seqs.offsets, dtype=np.int64)
    cols: dict[str, np.ndarray] = {}
    for name, src in _token_fields(seqs, dts, position_offset).items():
        out = np.empty((P, max_len), dtype=src.dtype)
        pad = np.asarray(_TOKEN_PAD.get(name, 0), dtype=src.dtype)
        _native.scatter_rows(np.ascontiguousarray(src), seq_off, order, poff, out, pad, threads)
        cols[name] = out
    seg = None if without_segments else np.empty((P, max_len), dtype=dts["segment_ids"])
    pos = np.empty((P, max_len), dtype=dts["position_ids"])
    lengths = np.ascontiguousarray(seqs.lengths, dtype=np.int64)
    _native.segments_positions(lengths, order, poff, seg, pos, position_offset, threads)
    if seg is not None:
        cols["segment_ids"] = seg
    cols.setdefault("position_ids", pos)  # the task's own, when it gave them
    _seq_columns(seqs, packing, depth, cols, dts)
    return cols


def materialize_oracle(
    seqs: Sequences, packing: Packing, *, max_len: int, max_depth: int | None = None, position_offset: int = 0
) -> dict[str, np.ndarray]:
    """The same columns, one pack and one sequence at a time (slow, obviously correct).

    Args:
        seqs: the sequences.
        packing: which sequences each pack holds.
        max_len: the row length `L`.
        max_depth: the most sequences a pack holds (`None`: the packing's deepest).
        position_offset: the first position id of each sequence.

    Returns:
        The columns `materialize` returns.
    """
    depth = pack_depth(packing, max_depth)
    dts = _dtypes(seqs, max_len, depth, position_offset)
    P = packing.num_packs
    fields = _token_fields(seqs, dts, position_offset)
    cols = {n: np.full((P, max_len), _TOKEN_PAD.get(n, 0), dtype=v.dtype) for n, v in fields.items()}
    cols["segment_ids"] = np.zeros((P, max_len), dtype=dts["segment_ids"])
    cols["position_ids"] = np.zeros((P, max_len), dtype=dts["position_ids"])
    own_positions = "position_ids" in fields
    cols["example_ids"] = np.full((P, depth), -1, dtype=dts["example_ids"])
    for name, values in seqs.seq_fields.items():
        cols[name] = np.full((P, depth, *values.shape[1:]), IGNORE_INDEX, dtype=signed_for(values.dtype))
    cols["num_sequences"] = np.zeros(P, dtype=dts["num_sequences"])
    for p in range(P):
        col = 0
        for k, s in enumerate(packing.pack(p)):
            seq = seqs.sequence(int(s))
            n = len(seq["input_ids"])
            for name in seqs.token_fields:
                cols[name][p, col : col + n] = seq[name]
            cols["segment_ids"][p, col : col + n] = k + 1
            own = seq["position_ids"] if own_positions else np.arange(n)
            cols["position_ids"][p, col : col + n] = position_offset + own
            cols["example_ids"][p, k] = seqs.example_ids[s]
            for name in seqs.seq_fields:
                v = seq[name]
                shift = name in seqs.position_fields and v != IGNORE_INDEX
                cols[name][p, k] = v + col if shift else v
            col += n
            cols["num_sequences"][p] = k + 1
    return cols


def pack_depth(packing: Packing, max_depth: int | None) -> int:
    used = int(np.diff(packing.pack_offsets).max()) if packing.num_packs else 1
    if max_depth is not None and max_depth < used:
        raise UserError(f"packing holds up to {used} sequences per pack, more than max_depth={max_depth}")
    return max_depth if max_depth is not None else used


def pack_sequences(
    seqs: Sequences,
    max_len: int,
    *,
    algorithm: str = DEFAULT_ALGORITHM,
    max_depth: int | None = None,
    seed: int = 0,
    position_offset: int = 0,
    round_to: int = 1,
) -> PackedColumns:
    """Plan with `seqpack.packing.pack_lengths` (``round_to``: its rounding of the lengths),
    assign, and build every column.

    Args:
        seqs: the sequences.
        max_len: the row length.
        algorithm: the planner (`seqpack.packing.ALGORITHMS`).
        max_depth: the most sequences a pack holds (`None`: no limit).
        seed: the assignment's seed.
        position_offset: the first position id of each sequence.
        round_to: plan each length rounded up to a multiple of this.

    Returns:
        The `PackedColumns`.

    Raises:
        UserError: a sequence longer than `max_len`, or a bad option.
    """
    check_max_len(max_len)
    if isinstance(position_offset, bool) or not isinstance(position_offset, int) or position_offset < 0:
        raise UserError(f"position_offset must be an int >= 0, got {position_offset!r}")
    if seqs.num_sequences == 0:
        raise UserError("no sequences to pack (every document or example was empty or dropped)")
    packing = pack_lengths(
        seqs.lengths, max_len, algorithm=algorithm, max_depth=max_depth, seed=seed, round_to=round_to
    )
    depth = pack_depth(packing, max_depth)
    cols = materialize(seqs, packing, max_len=max_len, max_depth=depth, position_offset=position_offset)
    info = {"position_offset": position_offset, "seed": seed, "algorithm": algorithm}
    return PackedColumns(seqs.task, cols, packing, max_len, depth, info, examples=seqs.examples)
