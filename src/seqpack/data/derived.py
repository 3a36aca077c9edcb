"""Columns a packed dataset need not store: readers rebuild them from the stored ones.

A task may name some of its columns *derived*: ``segment_ids`` follow from ``position_ids`` (which
restart in each sequence) wherever a task does not give its own positions, and ``clm``'s labels are
the input ids with -100 on each sequence's first token and on padding. The pack job then leaves them
out of the Parquet parts (less to encode, compress, write and read: of a ``clm`` part's columns,
encoding ``labels`` took a third of the time, ``segment_ids`` a sixth) and the manifest's
``derived_columns`` names the rule that makes each one again; ``columns`` still lists every column,
with its dtype and shape, and ``.bin`` files (written for zero-copy reads) still hold them all.
Every seqpack reader (`load_packed`, `PackedRows`, so ``PackedDataset`` and training;
``PackedCollator`` for rows read elsewhere) rebuilds them, so what they return is unchanged. Other
readers (``datasets.load_dataset("parquet", ...)``) see the stored columns and may map
`seqpack.data.add_derived_columns` over them (or the dataset be written with ``--write-derived``).

Each rule is a pure function of stored columns, registered here by name (the name is part of
the format: a new rule is added, an existing one never changed).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from seqpack.data.sequences import IGNORE_INDEX
from seqpack.errors import UserError

if TYPE_CHECKING:
    from numpy.typing import DTypeLike


def lm_labels(cols: Mapping[str, np.ndarray], dtype: DTypeLike, position_offset: int) -> np.ndarray:
    """Causal-LM labels of packed rows: ``input_ids``, with -100 on each sequence's first token and
    on padding, which are where ``position_ids`` is at most ``position_offset`` (positions restart at
    the offset in each sequence; padding holds 0). Shapes: ``(P, L)`` -> ``(P, L)``.

    >>> cols = {"input_ids": np.array([[5, 6, 7, 8, 0]]), "position_ids": np.array([[0, 1, 2, 0, 0]])}
    >>> lm_labels(cols, np.int32, 0).tolist()
    [[-100, 6, 7, -100, -100]]
    """
    out = np.asarray(cols["input_ids"]).astype(dtype)
    out[np.asarray(cols["position_ids"]) <= position_offset] = IGNORE_INDEX
    return out


def segments(cols: Mapping[str, np.ndarray], dtype: DTypeLike, position_offset: int) -> np.ndarray:
    """``segment_ids`` of packed rows (k for the k-th sequence of a pack, 0 for padding) from
    ``position_ids``, which restart at ``position_offset`` in each sequence, and ``num_sequences``
    (padding follows the last sequence and holds position 0, so it is what lies below the offset or
    past the pack's sequences). Shapes: ``(P, L)``, ``(P,)`` -> ``(P, L)``.

    >>> cols = {"position_ids": np.array([[0, 1, 2, 0, 0, 0]]), "num_sequences": np.array([2])}
    >>> segments(cols, np.uint8, 0).tolist()
    [[1, 1, 1, 2, 0, 0]]
    >>> segments({"position_ids": np.array([[2, 3, 2, 0]]), "num_sequences": np.array([2])}, np.uint8, 2).tolist()
    [[1, 1, 2, 0]]
    """
    pos = np.asarray(cols["position_ids"])
    n = np.asarray(cols["num_sequences"]).astype(np.int64).reshape(-1, *([1] * (pos.ndim - 1)))
    seg = np.cumsum(pos == position_offset, axis=-1, dtype=np.int64)  # (P, L): sequences started so far
    seg[(seg > n) | (pos < position_offset)] = 0
    return seg.astype(dtype)


@dataclass(frozen=True)
class Rule:
    """How a derived column is made: from the stored columns ``needs``, as
    ``make(cols, dtype, position_offset)`` (the manifest's ``position_offset``)."""

    needs: tuple[str, ...]
    make: Callable[[Mapping[str, np.ndarray], DTypeLike, int], np.ndarray]


RULES: dict[str, Rule] = {
    "lm_labels": Rule(("input_ids", "position_ids"), lm_labels),
    "segments": Rule(("position_ids", "num_sequences"), segments),
}


def check_rules(derived: Mapping[str, str], stored: list[str], where: str) -> None:
    """Refuse a manifest whose derived columns name an unknown rule, or need a column not stored."""
    for name, rule in derived.items():
        if rule not in RULES:
            raise UserError(
                f"{where}: column {name!r} is derived by rule {rule!r}, which this seqpack does not know "
                f"(it knows {', '.join(RULES)}); upgrade seqpack"
            )
        missing = [c for c in RULES[rule].needs if c not in stored]
        if missing:
            raise UserError(f"{where}: derived column {name!r} needs {missing[0]!r}, which is not stored")


def stored_needed(names: list[str], derived: Mapping[str, str]) -> list[str]:
    """The stored columns to read to return ``names``: those asked for, and what the derived ones need.

    >>> stored_needed(["labels", "segment_ids"], {"labels": "lm_labels", "segment_ids": "segments"})
    ['input_ids', 'position_ids', 'num_sequences']
    """
    out = [c for c in names if c not in derived]
    for c in names:
        if c in derived:
            out += [n for n in RULES[derived[c]].needs if n not in out]
    return out


def derive_columns(
    cols: Mapping[str, np.ndarray], manifest: Mapping[str, Any], names: list[str]
) -> dict[str, np.ndarray]:
    """``names`` from the stored ``cols``: the derived ones (the manifest's ``derived_columns``) made
    by their rules, with the dtype its ``columns`` give them."""
    derived, specs = manifest.get("derived_columns", {}), manifest["columns"]
    offset = int(manifest.get("position_offset", 0))
    return {
        c: RULES[derived[c]].make(cols, np.dtype(specs[c]["dtype"]), offset) if c in derived else cols[c] for c in names
    }
