"""``Sequences``: what every task builds, before packing (CSR over flat token arrays).

Sequence ``i`` holds tokens ``offsets[i]:offsets[i + 1]`` of every per-token field
(``input_ids``, ``labels``, ``token_type_ids``) and row ``i`` of every per-sequence
field (``labels`` of a classifier, ``next_sentence_label``, QA ``start_positions``...).
``example_ids[i]`` is the source document/example, so predictions can go back to it.

    >>> s = from_lists([[7, 8, 9], [5]], example_ids=[0, 1])
    >>> s.num_sequences, s.lengths.tolist(), s.sequence(0)["input_ids"].tolist()
    (2, [3, 1], [7, 8, 9])
"""

from __future__ import annotations

from collections.abc import Sequence as Seq
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from seqpack.errors import UserError

if TYPE_CHECKING:
    import pyarrow as pa

IGNORE_INDEX = -100
#: ``Sequences.info`` entries that count things: summed when shards are combined
COUNTED_INFO = ("split_documents", "truncated_documents", "truncated_tokens", "truncated", "target_tokens", "images")
OVERFLOW = ("split", "truncate", "drop", "error")


def id_dtype(max_id: int) -> np.dtype:
    """Smallest unsigned dtype for ids ``0 .. max_id``."""
    return np.dtype(np.uint16) if max_id < 1 << 16 else np.dtype(np.uint32)


def label_dtype(max_id: int) -> np.dtype:
    """Smallest signed dtype for labels ``-100 .. max_id``."""
    if max_id < 1 << 15:
        return np.dtype(np.int16)
    return np.dtype(np.int32) if max_id < 1 << 31 else np.dtype(np.int64)


@dataclass(frozen=True, eq=False, kw_only=True)
class Sequences:
    """N sequences ready to pack.  ``token_fields[k]``: (T,), ``seq_fields[k]``: (N, ...)."""

    task: str
    offsets: np.ndarray  # (N + 1,) int64
    example_ids: np.ndarray  # (N,) int64
    token_fields: dict[str, np.ndarray]  # always has "input_ids"
    seq_fields: dict[str, np.ndarray] = field(default_factory=dict)
    #: per-sequence fields holding a token position, shifted by the sequence's start in its pack
    position_fields: tuple[str, ...] = ()
    num_examples: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    #: what the examples hold beyond tokens (image-text: their images), a ``pyarrow.Table`` keyed by
    #: ``example_id`` (`seqpack.data.example_table`), written beside the packed rows; ``None``: nothing
    examples: pa.Table | None = None

    def __post_init__(self) -> None:
        n = self.offsets.size - 1
        assert n >= 0 and self.example_ids.shape == (n,), "example_ids must have one entry per sequence"
        assert "input_ids" in self.token_fields
        for k, v in self.token_fields.items():
            assert v.shape == (int(self.offsets[-1]),), f"token field {k} has shape {v.shape}"
        for k, v in self.seq_fields.items():
            assert v.shape[0] == n, f"sequence field {k} has {v.shape[0]} rows, expected {n}"
        assert set(self.position_fields) <= set(self.seq_fields)

    @property
    def num_sequences(self) -> int:
        return int(self.offsets.size - 1)

    @property
    def num_tokens(self) -> int:
        return int(self.offsets[-1])

    @property
    def lengths(self) -> np.ndarray:
        """Tokens per sequence.  # (N,) int64"""
        return np.diff(self.offsets)

    def sequence(self, i: int) -> dict[str, np.ndarray]:
        """All fields of sequence ``i`` (the slow, obvious view used by tests).

        Args:
            i: the sequence's index, in `0..N - 1`.

        Returns:
            Its token fields `(T_i,)` and per-sequence fields `(...)`, by name.
        """
        a, b = int(self.offsets[i]), int(self.offsets[i + 1])
        out = {k: v[a:b] for k, v in self.token_fields.items()}
        out.update({k: v[i] for k, v in self.seq_fields.items()})
        return out


def offsets_of(lengths: np.ndarray) -> np.ndarray:
    """CSR offsets of ``lengths``: ``(N + 1,)`` int64 starting at 0.

    >>> offsets_of(np.array([3, 1])).tolist()
    [0, 3, 4]
    """
    out = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=out[1:])
    return out


def concat_ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(s, s + n)`` for each pair, without a Python loop."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    out = np.ones(total, dtype=np.int64)
    nz = lengths > 0
    s, n = np.asarray(starts, dtype=np.int64)[nz], lengths[nz]
    heads = offsets_of(n)[:-1]
    out[heads[0]] = s[0]
    out[heads[1:]] = s[1:] - (s[:-1] + n[:-1] - 1)
    return np.cumsum(out)


def from_lists(
    sequences: Seq[Seq[int] | np.ndarray],
    *,
    example_ids: Seq[int] | np.ndarray | None = None,
    task: str = "custom",
    **seq_fields: Any,
) -> Sequences:
    """Sequences from Python lists of ids (small inputs and tests).

    Args:
        sequences: each sequence's token ids.
        example_ids: each sequence's example (`None`: one example each, in order).
        task: the task name the rows record.
        **seq_fields: per-sequence fields, each `(N, ...)`.

    Returns:
        The `Sequences`.
    """
    lengths = np.array([len(s) for s in sequences], dtype=np.int64)
    flat = (
        np.concatenate([np.asarray(s, dtype=np.int64) for s in sequences]) if len(sequences) else np.zeros(0, np.int64)
    )
    max_id = int(flat.max()) if flat.size else 0
    ids = np.arange(len(sequences)) if example_ids is None else np.asarray(example_ids)
    return Sequences(
        task=task,
        offsets=offsets_of(lengths),
        example_ids=ids.astype(np.int64),
        token_fields={"input_ids": flat.astype(id_dtype(max_id))},
        seq_fields={k: np.asarray(v) for k, v in seq_fields.items()},
        num_examples=int(ids.max()) + 1 if ids.size else 0,
    )


def check_overflow(overflow: str, *, allowed: tuple[str, ...] = OVERFLOW) -> str:
    if overflow not in allowed:
        raise UserError(f"overflow must be one of {'|'.join(allowed)}, got {overflow!r}")
    return overflow


def overflow_error(count: int, max_len: int, allowed: tuple[str, ...]) -> UserError:
    others = "|".join(o for o in allowed if o != "error")
    return UserError(f"{count:,} sequences exceed max_len={max_len}; pass --overflow {others}")
