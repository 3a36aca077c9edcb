"""Numeric options: every one is read by a type made here, so that a value out of its range is
refused by argparse in one line naming the option (``seqpack: error: argument --seed: --seed must be
at most 4,294,967,295, got ...``), never Python's or numpy's overflow text later in the run. Light
(argparse only): ``train-tokenizer`` starts without ``seqpack.cli.args``.

    p.add_argument("--workers", type=integer("--workers", 1, WORKERS_LIMIT), default=None)
    p.add_argument("--lr", type=number("--lr", 0, 1e3, above=True), default=default_of(TrainConfig, "lr"))
"""

from __future__ import annotations

import argparse

from seqpack.errors import UserError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

#: the most any count option takes: what numpy and torch hold (int64)
COUNT_LIMIT = 2**63 - 1
#: a row's tokens at most (positions are int32): `seqpack.packing.histogram.MAX_LEN_LIMIT`
TOKENS_PER_ROW = 2**31 - 1
#: a seed: 32 bits, what every generator seqpack seeds takes (torch's, numpy's)
SEED_LIMIT = 2**32 - 1
#: threads or processes an option may start
WORKERS_LIMIT = 4096


def _amount(x: float) -> str:
    return f"{x:,}" if isinstance(x, int) else f"{x:g}"


def int_at_least(text: str, name: str, minimum: int, extra: str = "", maximum: int = COUNT_LIMIT) -> int:
    """``text`` as an int in ``minimum..maximum``, refused in a line naming the option ``name``."""
    try:
        if not text.isascii():  # int() reads other scripts' digits too ("١٢")
            raise UserError(text)
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{name} must be an integer{extra}, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"{name} must be >= {minimum}{extra}, got {value}")
    if value > maximum:
        raise argparse.ArgumentTypeError(f"{name} must be at most {_amount(maximum)}{extra}, got {_amount(value)}")
    return value


def positive_int(text: str, name: str, extra: str = "", maximum: int = COUNT_LIMIT) -> int:
    return int_at_least(text, name, 1, extra, maximum)


def integer(name: str, minimum: int = 1, maximum: int = COUNT_LIMIT, extra: str = "") -> Callable[[str], int]:
    """An argparse ``type``: an int in ``minimum..maximum``, refused in a line naming ``name``."""
    return lambda text: int_at_least(text, name, minimum, extra, maximum)


def number(name: str, low: float, high: float, *, above: bool = False, below: bool = False) -> Callable[[str], float]:
    """An argparse ``type``: a finite float in ``[low, high]`` (``above``: ``> low``; ``below``:
    ``< high``), refused in a line naming ``name``. nan and inf are refused."""

    def parse(text: str) -> float:
        try:
            if not text.isascii():
                raise UserError(text)
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {text!r}") from None
        if not (low < value if above else low <= value) or not (value < high if below else value <= high):
            lo, hi = ("> " if above else ">= ") + _amount(low), ("< " if below else "<= ") + _amount(high)
            raise argparse.ArgumentTypeError(f"{name} must be {lo} and {hi}, got {text}")
        return value

    return parse


def seed(name: str = "--seed") -> Callable[[str], int]:
    """An argparse ``type`` for a seed: an int in 0..2**32-1."""
    return integer(name, 0, SEED_LIMIT)


def depth(text: str) -> int | None:
    """``--max-depth``: sequences per row at most, or none."""
    if text.lower() in ("none", "max", "unlimited"):
        return None
    return positive_int(text, "--max-depth", " (or 'none' for no limit)", TOKENS_PER_ROW)


def max_len(text: str) -> int:
    """``--max-len``: tokens per row, 1..2**31-1."""
    return positive_int(text, "--max-len", maximum=TOKENS_PER_ROW)
