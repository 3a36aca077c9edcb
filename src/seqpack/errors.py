"""seqpack's one error type for what a user can fix: a bad option, a bad or damaged input, data
that does not fit the model. Its message says what is wrong and how to fix it, in one line; the
command line prints that line and exits with code 2. Any other exception is a bug in seqpack (or in
a library under it) and keeps its traceback.

    >>> try:
    ...     raise UserError("47 sequences exceed max_len=512; pass --overflow truncate|split|drop")
    ... except ValueError as e:  # a UserError is a ValueError: callers that catch those keep working
    ...     print(e)
    47 sequences exceed max_len=512; pass --overflow truncate|split|drop
"""

from __future__ import annotations


class UserError(ValueError):
    """What a user can fix (bad input, a bad option, damaged data), said in one line with the fix."""


__all__ = ["UserError"]
