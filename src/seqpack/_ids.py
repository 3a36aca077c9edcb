"""The one check of token ids a caller hands seqpack (rollouts, streams of token lists, a model's
batch): a flat run of integers, none negative, each below the vocabulary where it is known. Every
entry point that takes ids calls `token_ids` (and `check_vocab` once the model is known), so a
float, a nested list or an id past the embedding table is one line naming it, never a silent cast,
numpy's "inhomogeneous shape" or torch's ``IndexError`` deep inside a model.

    >>> token_ids([5, 6, 7], what="prompt 0").tolist()
    [5, 6, 7]
    >>> token_ids([5, 6.5], what="prompt 0")
    Traceback (most recent call last):
    ...
    seqpack.errors.UserError: prompt 0: token ids are integers, got float64 values (6.5); pass the ids as ints
    >>> check_vocab(300, 257, what="the rollouts")
    Traceback (most recent call last):
    ...
    seqpack.errors.UserError: the rollouts: token id 300 is past the model's vocabulary of 257 ids (0..256); use the model's own tokenizer
    >>> token_ids([5, 2**64], what="prompt 0")
    Traceback (most recent call last):
    ...
    seqpack.errors.UserError: prompt 0: token id 18446744073709551616 is past any vocabulary (ids are stored as int64, at most 9223372036854775807); pass the ids your tokenizer gave
"""

from __future__ import annotations

import numpy as np

from seqpack.errors import UserError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, NoReturn


def token_ids(x: Any, *, what: str, vocab_size: int | None = None) -> np.ndarray:
    """``x`` as int64 ids ``(n,)``, refused in one line naming ``what`` unless it is a flat run of
    integers (a list, tuple, numpy or torch vector), none negative, each below ``vocab_size``."""
    if isinstance(x, (str, bytes)):
        raise UserError(
            f"{what}: got text ({type(x).__name__}) where token ids belong; encode it first, or pass a tokenizer"
        )
    if hasattr(x, "detach"):  # a torch tensor
        x = x.detach().cpu().numpy()
    elif hasattr(x, "__iter__") and not hasattr(x, "__array__") and not isinstance(x, (list, tuple)):
        x = list(x)  # a generator, a range, a deque
    try:
        arr = np.asarray(x)
    except ValueError:  # numpy's "inhomogeneous shape": ragged nesting
        raise UserError(f"{what}: not a flat list of token ids (nested lists of different lengths)") from None
    if arr.ndim != 1:
        raise UserError(f"{what}: not a flat list of token ids (an array of shape {arr.shape})")
    if arr.dtype.kind == "f" and isinstance(x, (list, tuple)) and all(type(v) is int for v in x):
        arr = np.asarray(x, dtype=object)  # ints past int64 beside small ones: numpy made floats of them
    if arr.size and arr.dtype == object:
        bad = next((v for v in arr if not isinstance(v, (int, np.integer)) or isinstance(v, bool)), None)
        if bad is None:  # integers all, but one outside numpy's int64 (Python ints have no bound)
            values = [int(v) for v in arr]
            if min(values) < 0:
                raise UserError(f"{what}: holds a negative token id ({min(values)})")
            _refuse_past_int64(max(values), what)
        raise UserError(f"{what}: token ids are integers, got a {type(bad).__name__} ({bad!r})")
    if arr.size and (arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer)):
        if arr.dtype.kind == "f":
            bad = arr[arr != np.round(arr)] if np.isfinite(arr).all() else arr[~np.isfinite(arr)]
            shown = bad[0] if bad.size else arr[0]
            raise UserError(f"{what}: token ids are integers, got {arr.dtype} values ({shown:g}); pass the ids as ints")
        raise UserError(f"{what}: token ids are integers, got {arr.dtype} values")
    if arr.size and arr.dtype == np.uint64 and int(arr.max()) > ID_MAX:
        _refuse_past_int64(int(arr.max()), what)  # astype would wrap it to a negative id
    ids = arr.astype(np.int64, copy=False)
    if ids.size and int(ids.min()) < 0:
        raise UserError(f"{what}: holds a negative token id ({int(ids.min())})")
    if vocab_size is not None and ids.size:
        check_vocab(int(ids.max()), vocab_size, what=what)
    return ids


#: the largest id seqpack stores (int64); any vocabulary is far below it
ID_MAX = int(np.iinfo(np.int64).max)


def _refuse_past_int64(top: int, what: str) -> NoReturn:
    raise UserError(
        f"{what}: token id {top} is past any vocabulary (ids are stored as int64, at most {ID_MAX}); "
        "pass the ids your tokenizer gave"
    )


def check_vocab(top: int, vocab_size: int, *, what: str) -> None:
    """Refuse a largest id ``top`` at or past ``vocab_size`` (the model's embedding rows)."""
    if top >= vocab_size:
        raise UserError(
            f"{what}: token id {top} is past the model's vocabulary of {vocab_size} ids (0..{vocab_size - 1}); "
            "use the model's own tokenizer"
        )


__all__ = ["check_vocab", "token_ids"]
