"""A drop-in for TRL's ``pack_dataset``, packing with one global plan.

    from seqpack.hf import pack_dataset
    packed = pack_dataset(dataset, seq_length=1024)      # where you had trl.pack_dataset(dataset, 1024)
    trainer = SFTTrainer(model, args=SFTConfig(padding_free=True, max_length=None, ...), train_dataset=packed)

Same signature, same output columns: every list column of a row is the concatenation of the
sequences packed into it, and ``seq_lengths`` lists their lengths (TRL's padding-free collator builds
``position_ids`` from it). What differs is the plan: TRL packs each ``datasets.map`` batch (1,000
rows) on its own with best fit decreasing; here one plan covers the whole dataset (``best``: the
fewest of best fit, worst fit and the LP's rounding, the LP's effort bounded by what it could still
win, see `seqpack.packing.best`), so the same sequences take as many rows or fewer.

    >>> import datasets
    >>> ds = datasets.Dataset.from_dict({"input_ids": [[1, 2, 3, 4, 5], [6, 7], [8, 9, 10], [11]]})
    >>> sorted(pack_dataset(ds, 4)["seq_lengths"])
    [[2], [3, 1], [4]]

Strategies: seqpack's ``best`` (default), ``lpfhp``, ``spfhp``, ``nnlshp``, and TRL's names
``bfd`` (best fit decreasing, over the whole dataset) and ``bfd_split``. Sequences longer than
``seq_length`` are truncated (TRL's ``bfd``), or, with ``bfd_split`` or a ``*_split`` strategy
(``best_split``...), split into pieces of at most ``seq_length``. An ``IterableDataset`` is packed
online (`seqpack.packing.StreamPacker`) in buffers of ``map_kwargs["batch_size"]``
(default 10,000) sequences; a ``DatasetDict`` split by split.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from seqpack._ids import token_ids
from seqpack.errors import UserError
from seqpack.packing import ALGORITHMS, DEFAULT_ALGORITHM, StreamPacker, pack_lengths

if TYPE_CHECKING:
    import datasets
    import pyarrow as pa

STRATEGIES = (*ALGORITHMS, *(f"{a}_split" for a in ALGORITHMS), "bfd", "bfd_split")
_ALIASES = {"bfd": "lpfhp"}  # best fit decreasing is seqpack's lpfhp, here over the whole dataset


def _strategy(strategy: str) -> tuple[str, bool]:
    """``(algorithm, split)`` of a strategy name."""
    if strategy not in STRATEGIES:
        raise UserError(f"unknown packing strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    split = strategy.endswith("_split")
    base = strategy[: -len("_split")] if split else strategy
    return _ALIASES.get(base, base), split


def pack_dataset(
    dataset: Any, seq_length: int, strategy: str = "best", map_kwargs: dict[str, Any] | None = None
) -> Any:
    """Pack the sequences of ``dataset`` (a ``datasets.Dataset``, ``IterableDataset`` or ``DatasetDict``
    whose columns are all lists of equal length per row) into rows of at most ``seq_length``; see the module.

    Args:
        dataset: a `datasets.Dataset`, `IterableDataset`, `DatasetDict` or `IterableDatasetDict`.
        seq_length: the row length.
        strategy: a planner of `seqpack.packing.ALGORITHMS` or `bfd` (TRL's name), `_split` after it to
            cut sequences longer than `seq_length` rather than truncate them.
        map_kwargs: TRL's argument; its `batch_size` is a stream's buffer.

    Returns:
        The packed dataset, of the same kind, with a `seq_lengths` column.

    Raises:
        UserError: a bad `seq_length` or strategy, or columns that are not lists of one length per row.
        TypeError: not a `datasets` dataset.
    """
    import datasets

    if isinstance(seq_length, bool) or not isinstance(seq_length, int) or seq_length < 1:
        raise UserError(f"seq_length must be an int >= 1, got {seq_length!r}")
    algorithm, split = _strategy(strategy)
    kw = dict(map_kwargs or {})
    if isinstance(dataset, (datasets.DatasetDict, datasets.IterableDatasetDict)):
        return type(dataset)({k: pack_dataset(v, seq_length, strategy, map_kwargs) for k, v in dataset.items()})
    if isinstance(dataset, datasets.IterableDataset):
        return _pack_iterable(dataset, seq_length, algorithm, split, buffer=int(kw.get("batch_size", 10_000)))
    if not isinstance(dataset, datasets.Dataset):
        raise TypeError(
            f"pack_dataset takes a datasets.Dataset, IterableDataset or DatasetDict, got {type(dataset).__name__}"
        )
    fmt = dataset.format
    table = dataset.with_format("arrow")[:]
    packed = datasets.Dataset(pack_table(table, seq_length, algorithm=algorithm, split=split))
    if fmt.get("type") is not None:
        cols = fmt.get("columns")
        packed = packed.with_format(
            fmt["type"],
            columns=None if cols is None else [*cols, "seq_lengths"],
            output_all_columns=fmt.get("output_all_columns", False),
        )
    return packed


def _holds_ids(name: str) -> bool:
    """A column of token ids (``input_ids``, TRL's ``prompt_input_ids``...): its values are checked
    as ids (`seqpack._ids.token_ids`), the other list columns (masks, labels, per-token floats) are
    packed as they are."""
    return name.endswith("input_ids")


def _list_columns(table: pa.Table) -> tuple[list[pa.ListArray], np.ndarray]:
    """The table's columns as list arrays, and the list lengths they all share."""
    import pyarrow as pa

    table = table.combine_chunks()
    cols = []
    for name, col in zip(table.column_names, table.columns):
        arr = col.chunks[0] if col.num_chunks else pa.array([], type=col.type)
        if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
            raise UserError(
                f"column {name!r} is not a list column; pack_dataset packs sequences (lists) only, "
                "drop it first with dataset.remove_columns"
            )
        cols.append(arr)
    if not cols:
        raise UserError("the dataset has no columns to pack")
    lengths = [_lengths(c) for c in cols]
    for name, n in zip(table.column_names[1:], lengths[1:]):
        if not np.array_equal(n, lengths[0]):
            raise UserError(
                f"column {name!r} holds lists of other lengths than {table.column_names[0]!r}; "
                "every list column of a row must have one entry per token"
            )
    return cols, lengths[0]


def _lengths(column: pa.ListArray) -> np.ndarray:
    import pyarrow.compute as pc

    return pc.list_value_length(column).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)


def _split_pieces(column: pa.ListArray, lengths: np.ndarray, seq_length: int) -> pa.ListArray:
    """Each list cut into pieces of ``seq_length`` (the last shorter), in order."""
    import pyarrow as pa

    pieces = -(-lengths // seq_length)
    starts = (
        np.repeat(np.cumsum(lengths) - lengths, pieces)
        + (np.arange(pieces.sum()) - np.repeat(np.cumsum(pieces) - pieces, pieces)) * seq_length
    )
    ends = np.minimum(starts + seq_length, np.repeat(np.cumsum(lengths), pieces))
    offsets = np.concatenate([[0], np.cumsum(ends - starts)])
    flat = column.flatten()
    take = np.concatenate([np.arange(a, b) for a, b in zip(starts, ends)]) if starts.size else np.zeros(0, np.int64)
    return type(column).from_arrays(pa.array(offsets, type=column.offsets.type), flat.take(pa.array(take)))


def pack_table(
    table: pa.Table, seq_length: int, *, algorithm: str = DEFAULT_ALGORITHM, split: bool = False, seed: int = 0
) -> pa.Table:
    """A ``pyarrow.Table`` of list columns packed into rows (one global plan); adds ``seq_lengths``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    cols, lengths = _list_columns(table)
    names = table.column_names
    for name, col in zip(names, cols):
        if _holds_ids(name):
            token_ids(col.flatten().to_numpy(zero_copy_only=False), what=f"pack_dataset: column {name!r}")
    keep = lengths > 0
    cols = [c.filter(pa.array(keep)) for c in cols]
    lengths = lengths[keep]
    if split:
        cols = [_split_pieces(c, lengths, seq_length) for c in cols]
    else:
        cols = [pc.list_slice(c, 0, seq_length) for c in cols]
    lengths = _lengths(cols[0])
    if lengths.size == 0:
        return pa.table(
            {
                **{n: pa.array([], type=c.type) for n, c in zip(names, cols)},
                "seq_lengths": pa.array([], type=pa.list_(pa.int32())),
            }
        )
    packing = pack_lengths(lengths, seq_length, algorithm=algorithm, seed=seed)
    order = pa.array(packing.sequence_index)
    token_ends = np.cumsum(lengths[packing.sequence_index])
    row_offsets = np.concatenate([[0], token_ends[packing.pack_offsets[1:] - 1]])
    out = {}
    for name, col in zip(names, cols):
        flat = col.take(order).flatten()
        out[name] = type(col).from_arrays(pa.array(row_offsets, type=col.offsets.type), flat)
    out["seq_lengths"] = pa.ListArray.from_arrays(
        pa.array(packing.pack_offsets, type=pa.int32()), pa.array(lengths[packing.sequence_index], type=pa.int32())
    )
    return pa.table(out)


def _pack_iterable(
    dataset: datasets.IterableDataset, seq_length: int, algorithm: str, split: bool, *, buffer: int
) -> datasets.IterableDataset:
    import datasets

    def rows() -> Iterator[dict[str, Any]]:
        packer = StreamPacker(seq_length, buffer_size=max(1, buffer), algorithm=algorithm)
        held: dict[int, dict[str, list[Any]]] = {}
        names: list[str] = []
        key = 0

        def emit(packs: list[list[int]]) -> Iterator[dict[str, Any]]:
            for members in packs:
                seqs = [held.pop(k) for k in members]
                row = {n: [x for s in seqs for x in s[n]] for n in names}
                row["seq_lengths"] = [len(s[names[0]]) for s in seqs]
                yield row

        for i, example in enumerate(dataset):
            names = names or list(example)
            for name in filter(_holds_ids, names):
                token_ids(example[name], what=f"pack_dataset: column {name!r} of example {i}")
            n = len(example[names[0]])
            for lo in range(0, n, seq_length) if split else [0]:
                piece = {c: list(example[c][lo : lo + seq_length]) for c in names}
                if piece[names[0]]:
                    held[key] = piece
                    yield from emit(packer.add(len(piece[names[0]]), key))
                    key += 1
        yield from emit(packer.flush())

    return datasets.IterableDataset.from_generator(rows)


__all__ = ["STRATEGIES", "pack_dataset", "pack_table"]
