"""Per-slot model outputs of packed rows -> one row per original example.

``predictions`` has one entry per pack slot, ``(P, D, ...)``, as the packed heads
emit them; ``example_ids`` ``(P, D)`` (-1 for empty slots) says whose each is.

    >>> ex = np.array([[2, 0], [1, -1]])
    >>> preds = np.array([[0.2, 0.0], [0.1, 9.9]])
    >>> unpack_predictions(preds, ex).tolist()
    [0.0, 0.1, 0.2]

An example split over several sequences (clm pieces, qa windows) has several
slots: ``reduce`` picks ``"mean"``, ``"max"`` or ``"list"`` (a list of arrays per
example); the default ``"error"`` refuses. Examples with no slot (dropped) get
``fill`` (or an empty list).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from seqpack.errors import UserError

if TYPE_CHECKING:
    import torch

REDUCE = ("error", "mean", "max", "list")


def _numpy(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):  # a torch tensor, without importing torch
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def unpack_predictions(
    predictions: np.ndarray | torch.Tensor,
    example_ids: np.ndarray | torch.Tensor,
    *,
    num_examples: int | None = None,
    reduce: str = "error",
    fill: float = np.nan,
) -> np.ndarray | list[np.ndarray]:
    """Outputs in example order: ``(num_examples, ...)`` (or a list with ``reduce="list"``).

    Args:
        predictions: one output per slot, `(P, D, ...)`, numpy or torch.
        example_ids: each slot's example, int `(P, D)`; -1 marks an empty slot.
        num_examples: the examples (`None`: the largest id + 1).
        reduce: for an example in several slots: `error`, `mean`, `max` or `list`.
        fill: the value of an example no slot holds.

    Returns:
        `(num_examples, ...)` in example order, or with `reduce="list"` one array per example.

    Raises:
        UserError: shapes that do not match, an id past `num_examples`, an unknown `reduce`, or an example in several slots with `reduce="error"`.
    """
    if reduce not in REDUCE:
        raise UserError(f"reduce must be one of {'|'.join(REDUCE)}, got {reduce!r}")
    preds, ex = _numpy(predictions), _numpy(example_ids).astype(np.int64)
    if preds.shape[: ex.ndim] != ex.shape:
        raise UserError(f"predictions {preds.shape} must start with the shape of example_ids {ex.shape} (P, D)")
    valid = ex >= 0
    ids, vals = ex[valid], preds[valid]
    n = int(num_examples) if num_examples is not None else int(ids.max(initial=-1)) + 1
    if ids.size and ids.max() >= n:
        raise UserError(f"example id {int(ids.max())} >= num_examples={n}")
    counts = np.bincount(ids, minlength=n)
    if reduce == "list":
        order = np.argsort(ids, kind="stable")
        return np.split(vals[order], np.cumsum(counts)[:-1])
    if reduce == "error" and np.any(counts > 1):
        first = int(np.flatnonzero(counts > 1)[0])
        raise UserError(
            f"example {first} has {counts[first]} slots (split or windowed); pass reduce='mean'|'max'|'list'"
        )
    dtype = np.result_type(vals.dtype, np.float32) if np.isnan(fill) or reduce == "mean" else vals.dtype
    out = np.full((n, *vals.shape[1:]), fill, dtype=dtype)
    if reduce == "max":
        out[np.unique(ids)] = -np.inf if dtype.kind == "f" else np.iinfo(dtype).min
        np.maximum.at(out, ids, vals)
    elif reduce == "mean":
        out[np.unique(ids)] = 0
        np.add.at(out, ids, vals)
        has = counts > 0
        out[has] /= counts[has].reshape(-1, *([1] * (vals.ndim - 1)))
    else:
        out[ids] = vals
    return out
