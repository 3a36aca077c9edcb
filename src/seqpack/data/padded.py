"""The padded baseline of a packed dataset: the same sequences, one per row, padded to ``L``.

``seqpack train --padded`` trains on these rows, so that packed and padded runs see exactly
the same sequences (and masks, labels, positions). Every sequence of the packed rows is
found through ``segment_ids`` alone::

    packed   input_ids     a0 a1 a2 b0 | c0 c1 0 0
             segment_ids   1  1  1  2  | 1  1  0 0
    spans    (pack, start, length, slot) = (0, 0, 3, 0), (0, 3, 1, 1), (1, 0, 2, 0)
    padded   input_ids     a0 a1 a2 0 | b0 0 0 0 | c0 c1 0 0
             segment_ids   1  1  1  0 | 1  0 0 0 | 1  1  0 0

Per-sequence fields ``(P, D)`` become ``(B, 1)`` (the sequence's own slot); QA start / end
positions (``position_fields``) are shifted back to the sequence's own row.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from seqpack.data.sequences import IGNORE_INDEX
from seqpack.errors import UserError

TOKEN_COLUMNS = ("input_ids", "segment_ids", "position_ids", "token_type_ids")


def token_columns(*, token_labels: bool) -> tuple[str, ...]:
    """Names of the ``(P, L)`` per-token columns (``labels`` when the dataset's labels are per token,
    `seqpack.data.format.DatasetFacts.token_labels`)."""
    return TOKEN_COLUMNS + (("labels",) if token_labels else ())


def sequence_spans(segment_ids: np.ndarray, *, chunk: int = 65_536) -> np.ndarray:
    """``(S, 4)`` int64 rows ``(pack, start, length, slot)``, in pack order then slot order.

    >>> sequence_spans(np.array([[1, 1, 1, 2], [1, 1, 0, 0]])).tolist()
    [[0, 0, 3, 0], [0, 3, 1, 1], [1, 0, 2, 0]]
    """
    seg = np.asarray(segment_ids)
    if seg.ndim != 2:
        raise UserError(f"segment_ids must be (packs, max_len), got shape {seg.shape}")
    P, _L = seg.shape
    parts = []
    for lo in range(0, P, chunk):
        s = seg[lo : lo + chunk].astype(np.int64)
        edge = np.ones((s.shape[0], 1), dtype=bool)
        start = (s != 0) & np.concatenate([edge, s[:, 1:] != s[:, :-1]], axis=1)
        end = (s != 0) & np.concatenate([s[:, :-1] != s[:, 1:], edge], axis=1)
        rs, cs = np.nonzero(start)
        _, ce = np.nonzero(end)  # the same rows, in the same order
        parts.append(np.stack([rs + lo, cs, ce - cs + 1, s[rs, cs] - 1], axis=1))
    return np.concatenate(parts) if parts else np.zeros((0, 4), np.int64)


def padded_rows(
    columns: Mapping[str, np.ndarray],
    spans: np.ndarray,
    *,
    token_labels: bool,
    position_fields: Sequence[str] = (),
) -> dict[str, np.ndarray]:
    """One row per span: per-token columns ``(B, L)``, per-sequence ones ``(B, 1, ...)``.

    Vectorised gather; `padded_rows_oracle` is the loop it is tested against.
    """
    spans = np.asarray(spans, dtype=np.int64).reshape(-1, 4)
    pack, start, length, slot = spans.T
    tok = token_columns(token_labels=token_labels)
    L = columns["input_ids"].shape[1]
    col = start[:, None] + np.arange(L)  # (B, L)
    valid = np.arange(L) < length[:, None]
    col = np.where(valid, col, 0)
    out: dict[str, np.ndarray] = {}
    for name, a in columns.items():
        if name in tok:
            pad = IGNORE_INDEX if name == "labels" else 0
            v = np.where(valid, a[pack[:, None], col], pad).astype(a.dtype)
            out[name] = np.where(valid, 1, 0).astype(a.dtype) if name == "segment_ids" else v
        elif name == "num_sequences":
            out[name] = np.ones(len(spans), dtype=a.dtype)
        else:  # per-sequence (P, D, ...): the sequence's own slot becomes slot 0
            v = a[pack, slot][:, None]
            if name in position_fields:
                v = np.where(v == IGNORE_INDEX, v, v - start.reshape(-1, 1).astype(v.dtype))
            out[name] = v
    return out


def padded_rows_oracle(
    columns: Mapping[str, np.ndarray], spans: np.ndarray, *, token_labels: bool, position_fields: Sequence[str] = ()
) -> dict[str, np.ndarray]:
    """The same rows, one sequence at a time (slow, obviously correct)."""
    tok = token_columns(token_labels=token_labels)
    L = columns["input_ids"].shape[1]
    out = {}
    for name, a in columns.items():
        if name in tok:
            out[name] = np.full((len(spans), L), IGNORE_INDEX if name == "labels" else 0, dtype=a.dtype)
        elif name == "num_sequences":
            out[name] = np.ones(len(spans), dtype=a.dtype)
        else:
            out[name] = np.empty((len(spans), 1, *a.shape[2:]), dtype=a.dtype)
    for i, (p, s, n, k) in enumerate(np.asarray(spans).tolist()):
        for name, a in columns.items():
            if name == "segment_ids":
                out[name][i, :n] = 1
            elif name in tok:
                out[name][i, :n] = a[p, s : s + n]
            elif name != "num_sequences":
                v = a[p, k]
                out[name][i, 0] = v - s if name in position_fields and np.all(v != IGNORE_INDEX) else v
    return out
