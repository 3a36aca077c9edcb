"""The TRL versions seqpack's trainers are made for, in one place.

`PackedSFTTrainer`, `PackedDPOTrainer` and `PackedGRPOTrainer` replace a few of TRL's methods,
some of them private, so a TRL outside this range may call them differently: each trainer refuses
it in one line before any work, never trains silently wrong. The ``hf`` extra pins the same range
(a test reads it). Checked with trl 1.13 and 1.16, the range's ends (its DPO and GRPO tests compare
each step with TRL's own trainer).

    >>> check_trl("1.16.0"), check_trl("1.13.2")
    (None, None)
    >>> check_trl("1.12.0")
    Traceback (most recent call last):
    ...
    seqpack.errors.UserError: seqpack's TRL trainers work with trl>=1.13,<1.17; this is trl 1.12.0: pip install 'trl>=1.13,<1.17'
"""

from __future__ import annotations

from seqpack.errors import UserError

#: the oldest TRL the trainers work with, and the first they do not yet know
TRL_MIN, TRL_BELOW = "1.13", "1.17"
TRL_RANGE = f"trl>={TRL_MIN},<{TRL_BELOW}"


def check_trl(version: str | None = None) -> None:
    """Refuse a TRL (``version``, default the installed one's) outside `TRL_RANGE`, in one line."""
    from packaging.version import Version

    if version is None:
        import trl

        version = trl.__version__
    if not Version(TRL_MIN) <= Version(version) < Version(TRL_BELOW):
        raise UserError(
            f"seqpack's TRL trainers work with {TRL_RANGE}; this is trl {version}: pip install '{TRL_RANGE}'"
        )


__all__ = ["TRL_BELOW", "TRL_MIN", "TRL_RANGE", "check_trl"]
