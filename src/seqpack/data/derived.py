"""Columns a packed dataset need not store: readers rebuild them from the stored ones.

A task may name some of its columns *derived* (``clm``'s labels: the input ids, with -100 on
each sequence's first token and on padding). The pack job then leaves them out of the Parquet
parts (less to encode, compress, write and read: a third of a ``clm`` part's bytes before
compression) and the manifest's ``derived_columns`` names the rule that makes each one again;
``columns`` still lists every column, with its dtype and shape, and ``.bin`` files (written
for zero-copy reads) still hold them all. Every seqpack reader (:func:`load_packed`,
:class:`PackedRows`, so ``PackedDataset`` and training) rebuilds them, so what they return is
unchanged. Other readers (``datasets.load_dataset("parquet", ...)``) see the stored columns and
may call :func:`derive_columns` (or write the dataset with ``--write-derived``).

Each rule is a pure function of stored columns, registered here by name (the name is part of
the format: a new rule is added, an existing one never changed).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from seqpack.data.sequences import IGNORE_INDEX


def lm_labels(cols: Mapping[str, np.ndarray], dtype: Any) -> np.ndarray:
    """Causal-LM labels of packed rows: ``input_ids``, with -100 on each sequence's first token
    (where ``segment_ids`` changes) and on padding (segment 0). Shapes: ``(P, L)`` -> ``(P, L)``.

    >>> ids = np.array([[5, 6, 7, 8, 0]]); seg = np.array([[1, 1, 1, 2, 0]])
    >>> lm_labels({"input_ids": ids, "segment_ids": seg}, np.int32).tolist()
    [[-100, 6, 7, -100, -100]]
    """
    ids, seg = np.asarray(cols["input_ids"]), np.asarray(cols["segment_ids"])
    out = ids.astype(dtype)
    if out.size:
        first = np.empty(seg.shape, dtype=bool)  # (P, L): a sequence starts here
        first[..., 0] = True
        np.not_equal(seg[..., 1:], seg[..., :-1], out=first[..., 1:])
        out[first | (seg == 0)] = IGNORE_INDEX
    return out


@dataclass(frozen=True)
class Rule:
    """How a derived column is made: from the stored columns ``needs``, as ``make(cols, dtype)``."""

    needs: tuple[str, ...]
    make: Callable[[Mapping[str, np.ndarray], Any], np.ndarray]


RULES: dict[str, Rule] = {
    "lm_labels": Rule(("input_ids", "segment_ids"), lm_labels),
}


def check_rules(derived: Mapping[str, str], stored: list[str], where: str) -> None:
    """Refuse a manifest whose derived columns name an unknown rule, or need a column not stored."""
    for name, rule in derived.items():
        if rule not in RULES:
            raise ValueError(f"{where}: column {name!r} is derived by rule {rule!r}, which this seqpack does not know "
                             f"(it knows {', '.join(RULES)}); upgrade seqpack")
        missing = [c for c in RULES[rule].needs if c not in stored]
        if missing:
            raise ValueError(f"{where}: derived column {name!r} needs {missing[0]!r}, which is not stored")


def stored_needed(names: list[str], derived: Mapping[str, str]) -> list[str]:
    """The stored columns to read to return ``names``: those asked for, and what the derived ones need.

    >>> stored_needed(["labels", "position_ids"], {"labels": "lm_labels"})
    ['position_ids', 'input_ids', 'segment_ids']
    """
    out = [c for c in names if c not in derived]
    for c in names:
        if c in derived:
            out += [n for n in RULES[derived[c]].needs if n not in out]
    return out


def derive_columns(cols: Mapping[str, np.ndarray], derived: Mapping[str, str], specs: Mapping[str, Any],
                   names: list[str]) -> dict[str, np.ndarray]:
    """``names`` from the stored ``cols``: the derived ones made by their rules (``derived``: the
    manifest's ``derived_columns``; ``specs``: its ``columns``)."""
    return {c: RULES[derived[c]].make(cols, np.dtype(specs[c]["dtype"])) if c in derived else cols[c] for c in names}
