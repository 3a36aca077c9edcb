"""Length histograms: the input of every packing plan (numpy only).

A histogram ``h`` for ``max_len`` is an int64 array of shape ``(max_len,)`` where
``h[i]`` counts the sequences of length ``i + 1``.

>>> histogram([1, 3, 3, 4], 4).tolist()
[1, 0, 2, 1]
>>> s = length_stats(histogram([1, 3, 3, 4], 4), 4)
>>> (s.sequences, s.tokens, round(s.padding_fraction, 3), round(s.theoretical_speedup, 3))
(4, 11, 0.312, 1.455)
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from seqpack.errors import UserError

OVERFLOW_HINT = "pass --overflow truncate|split|drop"


MAX_LEN_LIMIT = 2**31 - 1


#: the most tokens a histogram may hold: its sums are int64 (a count past this is no count of sequences)
TOKENS_LIMIT = 2**62


def check_max_len(max_len: object) -> int:
    if isinstance(max_len, bool) or not isinstance(max_len, (int, np.integer)):
        raise TypeError(f"max_len must be an int, got {type(max_len).__name__}")
    if max_len < 1:
        raise UserError(f"max_len must be >= 1, got {max_len}")
    if max_len > MAX_LEN_LIMIT:
        raise UserError(f"max_len must be <= {MAX_LEN_LIMIT:,} (positions are int32), got {max_len:,}")
    return int(max_len)


#: a plan's memory grows with max_len (histograms indexed by length); up to this many tokens per
#: row any max_len is planned, past it max_len may not exceed the input's tokens (see below)
FREE_MAX_LEN = 1 << 20


def check_max_len_for(max_len: int, tokens: int) -> int:
    """Refuse a ``max_len`` past `FREE_MAX_LEN` that is also more than all the input's
    ``tokens``: every row would be mostly padding, and the plan's memory would follow the
    argument instead of the data.

    >>> check_max_len_for(4096, 10)          # small rows: always fine
    4096
    >>> check_max_len_for(10**9, 5_000)
    Traceback (most recent call last):
    ...
    seqpack.errors.UserError: --max-len 1,000,000,000 is more than the 5,000 tokens of the whole input (rows would be mostly padding, and memory would grow with --max-len); pass --max-len 5,000 or less
    """
    max_len = check_max_len(max_len)
    if max_len > FREE_MAX_LEN and max_len > tokens:
        raise UserError(
            f"--max-len {max_len:,} is more than the {tokens:,} tokens of the whole input (rows would be "
            f"mostly padding, and memory would grow with --max-len); pass --max-len {max(tokens, 1):,} or less"
        )
    return max_len


def histogram_tokens(histogram: object) -> int:
    """Tokens a histogram (``h[i]`` sequences of length ``i + 1``) holds, without padding it to any max_len."""
    h = np.asarray(histogram)
    if h.ndim != 1 or h.dtype.kind not in "iu":
        return 0  # check_histogram says what is wrong
    return int((h.astype(np.int64) * np.arange(1, h.size + 1, dtype=np.int64)).sum())


def round_up(lengths: object, multiple: int) -> np.ndarray:
    """Each length rounded up to a multiple of ``multiple`` (int64).

    >>> round_up([1, 4, 5, 8], 4).tolist()
    [4, 4, 8, 8]
    """
    return (-(-np.asarray(lengths, dtype=np.int64) // multiple)) * multiple


def check_lengths(lengths: object, max_len: int, *, hint: str = OVERFLOW_HINT) -> np.ndarray:
    """Validate sequence lengths; return them as a 1-D int64 array.

    Lengths of 0 or above ``max_len`` raise ``ValueError`` with their count and ``hint``.
    """
    max_len = check_max_len(max_len)
    arr = np.asarray(lengths)
    if arr.ndim != 1:
        raise UserError(f"lengths must be 1-D, got shape {arr.shape}")
    if arr.size and arr.dtype == object:  # Python ints past int64 (numpy keeps them as objects)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in arr):
            raise TypeError(f"lengths must be integers, got dtype {arr.dtype}")
    elif arr.size and arr.dtype.kind == "f":
        bad = arr[~np.isfinite(arr) | (arr != np.round(arr))]
        if bad.size:
            raise TypeError(f"lengths must be integers, got {bad[0]:g}")
    elif arr.size and (arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer)):
        raise TypeError(f"lengths must be integers, got dtype {arr.dtype}")
    if not arr.size:
        return arr.astype(np.int64)
    # compared before any cast to int64, which would wrap 2**64 - 1 to -1
    if int(arr.min()) <= 0:
        n_zero = int(np.count_nonzero(arr <= 0))
        raise UserError(
            f"{n_zero} sequences have length <= 0 (the first: {int(arr[arr <= 0][0])}); drop empty sequences "
            "before packing"
        )
    longest = int(arr.max())
    if longest > max_len:
        n_long = int(np.count_nonzero(arr > max_len))
        if longest > MAX_LEN_LIMIT:
            raise UserError(
                f"{n_long} sequences exceed max_len={max_len}, the longest of length {longest:,}: past any row "
                f"seqpack packs ({MAX_LEN_LIMIT:,} tokens, positions are int32); check how the lengths were made"
            )
        raise UserError(f"{n_long} sequences exceed max_len={max_len}; " + hint.format(longest=longest))
    return arr.astype(np.int64)


def histogram(lengths: object, max_len: int, *, hint: str = OVERFLOW_HINT) -> np.ndarray:
    """Counts of each length: ``h[i]`` = number of sequences of length ``i + 1``.  # (max_len,)

    Args:
        lengths: one length per sequence, positive ints `(N,)`.
        max_len: the row length: the histogram's size.
        hint: what a length over `max_len` should make the caller do (`{longest}` is filled in).

    Returns:
        The counts, int64 `(max_len,)`.

    Raises:
        UserError: a length below 1 or over `max_len`.
    """
    arr = check_lengths(lengths, max_len, hint=hint)
    check_max_len_for(max_len, int(arr.sum()))
    return np.bincount(arr - 1, minlength=int(max_len)).astype(np.int64)


def check_histogram(
    hist: object, max_len: int | None = None, *, allow_empty: bool = False, hint: str = OVERFLOW_HINT
) -> np.ndarray:
    """Validate a histogram (1-D, non-negative integer counts); return it as int64.

    With ``max_len`` given, a shorter histogram is zero-extended and a longer one
    must have no sequences above ``max_len``.

    Args:
        hist: counts, `hist[i]` the sequences of length `i + 1` `(L,)`.
        max_len: the row length, or `None` to keep the histogram's own size.
        allow_empty: accept a histogram with no sequences.
        hint: what a length over `max_len` should make the caller do (`{longest}` is filled in).

    Returns:
        The histogram, int64 `(max_len,)` (or `(L,)` without `max_len`).

    Raises:
        UserError: not 1-D, a negative or fractional count, sequences over `max_len`, or empty.
    """
    arr = np.asarray(hist)
    if arr.ndim != 1:
        raise UserError(f"histogram must be 1-D (counts indexed by length - 1), got shape {arr.shape}")
    ints = arr.dtype == object and all(isinstance(v, int) and not isinstance(v, bool) for v in arr)
    if (
        arr.size
        and not ints
        and not np.issubdtype(arr.dtype, np.integer)
        and (
            not np.issubdtype(arr.dtype, np.number) or not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr))
        )
    ):
        raise TypeError(f"histogram counts must be integers, got dtype {arr.dtype}")
    if arr.size and arr.min() < 0:
        n_neg = int(np.count_nonzero(arr < 0))
        raise UserError(f"histogram has {n_neg} negative counts; counts must be >= 0")
    if arr.size:  # checked before the cast to int64, which would wrap a count past it
        lengths = np.arange(1, arr.size + 1, dtype=np.float64)
        tokens = float(np.dot(arr.astype(np.float64), lengths))
        if tokens > TOKENS_LIMIT:
            top = int(np.argmax(arr.astype(np.float64) * lengths))
            raise UserError(
                f"histogram holds about {tokens:.3g} tokens, past the {TOKENS_LIMIT:.3g} seqpack counts "
                f"(int64; the largest share: {int(arr[top]):,} sequences of length {top + 1:,}); "
                "counts are sequences, check how the histogram was made"
            )
    arr = arr.astype(np.int64)
    if max_len is not None:
        max_len = check_max_len_for(max_len, histogram_tokens(arr))  # before it is padded to max_len
        if arr.size > max_len:
            over = int(arr[max_len:].sum())
            if over:
                longest = int(np.flatnonzero(arr)[-1]) + 1
                raise UserError(f"{over} sequences exceed max_len={max_len}; " + hint.format(longest=longest))
            arr = arr[:max_len]
        elif arr.size < max_len:
            arr = np.concatenate([arr, np.zeros(max_len - arr.size, dtype=np.int64)])
    if not allow_empty and not arr.sum():
        raise UserError("histogram is empty (no sequences to pack)")
    return arr


@dataclass(frozen=True)
class LengthStats:
    """What padding costs without packing (one sequence per row of ``max_len``)."""

    sequences: int
    tokens: int
    max_len: int
    longest: int
    mean_length: float

    @property
    def padding_fraction(self) -> float:
        """Fraction of padded-row tokens that are padding."""
        return 1.0 - self.tokens / (self.sequences * self.max_len)

    @property
    def theoretical_speedup(self) -> float:
        """``sequences * max_len / tokens``: the speed-up with no padding and no overhead."""
        return self.sequences * self.max_len / self.tokens

    def to_dict(self) -> dict[str, object]:
        """The figures as a JSON-ready dict, the properties included.

        Returns:
            The fields and `padding_fraction`, `theoretical_speedup`, by name.
        """
        return {
            "sequences": self.sequences,
            "tokens": self.tokens,
            "max_len": self.max_len,
            "longest": self.longest,
            "mean_length": self.mean_length,
            "padding_fraction": self.padding_fraction,
            "theoretical_speedup": self.theoretical_speedup,
        }


def length_stats(hist: object, max_len: int) -> LengthStats:
    """What padding costs on the histogram ``hist`` (one sequence per row of ``max_len``).

    Args:
        hist: counts, `hist[i]` the sequences of length `i + 1` `(L,)`, with at least one sequence.
        max_len: the row length of the padded rows.

    Returns:
        The `LengthStats`.

    Raises:
        UserError: a malformed or empty histogram, or sequences over `max_len`.
    """
    h = check_histogram(hist, max_len)
    lens = np.arange(1, h.size + 1, dtype=np.int64)
    n, tokens = int(h.sum()), int(h @ lens)
    return LengthStats(
        sequences=n, tokens=tokens, max_len=int(max_len), longest=int(np.flatnonzero(h)[-1] + 1), mean_length=tokens / n
    )


def load_npy_1d(path: str | Path, what: str) -> np.ndarray:
    """Read a 1-D ``.npy`` array; errors name the file and say what was expected."""
    p = Path(path)
    if p.is_dir():
        raise UserError(f"{p}: a directory; give a .npy file of {what}")
    if not p.is_file():
        raise UserError(f"{what.split(' ')[0]} file not found: {p}")
    try:
        arr = np.load(p, allow_pickle=False)
    except (ValueError, OSError) as e:
        raise UserError(f"{p}: not a readable .npy file ({e})") from e
    if arr.ndim != 1:
        raise UserError(f"{p}: expected a 1-D array of {what}, got shape {arr.shape}")
    return arr


BUILTIN_HISTOGRAMS = {"wikipedia": "wikipedia_len512.csv"}  # name -> file in seqpack/packing/data/


def builtin_histogram(name: str) -> np.ndarray:
    """A length histogram shipped with the package (provenance in ``packing/data/README.md``).

    >>> h = builtin_histogram("wikipedia")
    >>> int(h.sum()), h.size
    (16279552, 512)

    Args:
        name: a key of `BUILTIN_HISTOGRAMS` (`wikipedia`).

    Returns:
        The counts, int64 `(max length,)`.

    Raises:
        UserError: an unknown name.
    """
    if name not in BUILTIN_HISTOGRAMS:
        raise UserError(f"no built-in histogram {name!r}; built in: {', '.join(BUILTIN_HISTOGRAMS)}")
    return load_histogram(Path(__file__).parent / "data" / BUILTIN_HISTOGRAMS[name])


def load_histogram(path: str | Path, max_len: int | None = None, *, hint: str = OVERFLOW_HINT) -> np.ndarray:
    """Read a histogram from ``.npy`` (counts indexed by length - 1) or ``.csv`` (header ``length,count``).

    A ``.csv`` row's length is checked before the histogram is laid out (an array as long as the
    longest length): past ``max_len`` when it is given (``hint`` says what to do, ``{longest}``
    filled in), past `MAX_LEN_LIMIT` in any case; the error names the file and the line.

    Args:
        path: a `.npy` or `.csv` file.
        max_len: the row length to lay the histogram out to, or `None` for its longest length.
        hint: what a length over `max_len` should make the caller do.

    Returns:
        The counts, int64 `(max_len,)`.

    Raises:
        UserError: a missing, unreadable or malformed file, or a length over `max_len`.
    """
    p = Path(path)
    if not p.is_file():
        raise UserError(f"histogram file not found: {p}")
    suffix = p.suffix.lower()
    if suffix == ".npy":
        arr = load_npy_1d(p, "histogram counts indexed by length - 1")
        try:
            return check_histogram(arr, allow_empty=True)
        except (TypeError, ValueError) as e:
            raise UserError(f"{p}: {e}") from e
    if suffix == ".csv":
        return _read_csv_histogram(p, max_len, hint)
    raise UserError(f"{p}: unknown histogram format {suffix!r}; use .npy (counts) or .csv (length,count)")


def _read_csv_histogram(p: Path, max_len: int | None, hint: str) -> np.ndarray:
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{p}: not a UTF-8 text file") from None
    rows = list(csv.reader(io.StringIO(text)))
    if not rows or [c.strip().lower() for c in rows[0]] != ["length", "count"]:
        raise UserError(f"{p}: expected the header 'length,count' on line 1")
    lengths: list[int] = []
    counts: list[int] = []
    tokens = 0
    for lineno, row in enumerate(rows[1:], start=2):
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != 2:
            raise UserError(f"{p}:{lineno}: expected 2 fields 'length,count', got {len(row)}")
        try:
            length, count = int(row[0]), int(row[1])
        except ValueError:
            raise UserError(f"{p}:{lineno}: length and count must be integers, got {row!r}") from None
        if length < 1:
            raise UserError(f"{p}:{lineno}: length must be >= 1, got {length}")
        if count < 0:
            raise UserError(f"{p}:{lineno}: count must be >= 0, got {count}")
        if length > MAX_LEN_LIMIT:
            raise UserError(
                f"{p}:{lineno}: length {length:,} is past any row seqpack packs ({MAX_LEN_LIMIT:,} tokens, "
                "positions are int32); fix or drop the row"
            )
        if not count:
            continue  # no sequences: nothing to lay out
        if max_len is not None and length > max_len:
            raise UserError(
                f"{p}:{lineno}: {count} sequences exceed max_len={max_len}; "
                + hint.format(longest=max([length, *lengths]))
            )
        tokens += length * count
        if tokens > TOKENS_LIMIT:
            raise UserError(
                f"{p}:{lineno}: the rows up to here hold {tokens:.3g} tokens, past the {TOKENS_LIMIT:.3g} seqpack "
                "counts (int64); counts are sequences, check how the file was made"
            )
        lengths.append(length)
        counts.append(count)
    if not lengths:
        return np.zeros(0, dtype=np.int64)
    out = np.zeros(max(lengths), dtype=np.int64)
    np.add.at(out, np.asarray(lengths) - 1, np.asarray(counts, dtype=np.int64))
    return out


def save_histogram_csv(hist: np.ndarray, path: str | Path) -> None:
    """Write the non-zero bins of ``hist`` as ``length,count`` rows."""
    h = check_histogram(hist, allow_empty=True)
    lines = ["length,count"] + [f"{i + 1},{int(c)}" for i, c in enumerate(h) if c]
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")
