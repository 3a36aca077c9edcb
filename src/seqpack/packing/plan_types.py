"""``PackingPlan``: which multisets of lengths ("strategies") fill the packs, and how often.

>>> p = PackingPlan(strategies=((3, 1), (4,)), counts=np.array([2, 1]), max_len=4, max_depth=None,
...                 algorithm="manual")
>>> (p.num_packs, p.num_sequences, p.num_tokens, p.efficiency, p.lower_bound)
(3, 5, 12, 1.0, 3)
>>> p.histogram().tolist()
[2, 0, 2, 1]
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from seqpack.errors import UserError

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from typing import Any

PLAN_FORMAT_VERSION = 1
PLAN_KIND = "seqpack.plan"


@dataclass(frozen=True, kw_only=True, eq=False)
class PackingPlan:
    """A plan on a histogram: ``counts[i]`` packs hold exactly the lengths ``strategies[i]``.

    Each strategy is a tuple of sequence lengths in decreasing order whose sum is at
    most ``max_len``; ``max_depth`` (``None`` = unlimited) bounds its size.
    """

    strategies: tuple[tuple[int, ...], ...]
    counts: np.ndarray
    max_len: int
    max_depth: int | None
    algorithm: str
    seconds: float = 0.0
    info: dict[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        counts = np.asarray(self.counts, dtype=np.int64).reshape(-1)
        strategies = tuple(tuple(sorted((int(x) for x in s), reverse=True)) for s in self.strategies)
        object.__setattr__(self, "counts", counts)
        object.__setattr__(self, "strategies", strategies)
        if len(strategies) != counts.size:
            raise UserError(f"{len(strategies)} strategies but {counts.size} counts")
        if counts.size and counts.min() <= 0:
            raise UserError("every strategy count must be >= 1")
        if self.max_depth is not None and self.max_depth < 1:
            raise UserError(f"max_depth must be >= 1 or None, got {self.max_depth}")
        for s in strategies:
            if not s or s[-1] < 1:
                raise UserError(f"strategy {s} must hold lengths >= 1")
            if sum(s) > self.max_len:
                raise UserError(f"strategy {s} sums to {sum(s)} > max_len={self.max_len}")
            if self.max_depth is not None and len(s) > self.max_depth:
                raise UserError(f"strategy {s} holds {len(s)} sequences > max_depth={self.max_depth}")

    # -- sizes -------------------------------------------------------------------------
    @property
    def num_packs(self) -> int:
        return int(self.counts.sum())

    @property
    def depths(self) -> np.ndarray:
        """Sequences per strategy.  # (num_strategies,)"""
        return np.array([len(s) for s in self.strategies], dtype=np.int64)

    @property
    def fills(self) -> np.ndarray:
        """Tokens per strategy.  # (num_strategies,)"""
        return np.array([sum(s) for s in self.strategies], dtype=np.int64)

    @property
    def num_sequences(self) -> int:
        return int(self.depths @ self.counts) if self.counts.size else 0

    @property
    def num_tokens(self) -> int:
        return int(self.fills @ self.counts) if self.counts.size else 0

    @property
    def efficiency(self) -> float:
        """Real tokens / (packs * max_len)."""
        return self.num_tokens / (self.num_packs * self.max_len) if self.num_packs else 0.0

    @property
    def packing_factor(self) -> float:
        """Sequences per pack: the speed-up over one sequence per row that this plan realises."""
        return self.num_sequences / self.num_packs if self.num_packs else 0.0

    @property
    def lower_bound(self) -> int:
        """``ceil(tokens / max_len)``: no plan has fewer packs."""
        return math.ceil(self.num_tokens / self.max_len)

    @property
    def gap_to_lower_bound(self) -> float:
        lb = self.lower_bound
        return (self.num_packs - lb) / lb if lb else 0.0

    @property
    def theoretical_speedup(self) -> float:
        """``sequences * max_len / tokens``: the paper's bound, with no padding and no overhead."""
        return self.num_sequences * self.max_len / self.num_tokens if self.num_tokens else 0.0

    @property
    def max_depth_used(self) -> int:
        return int(self.depths.max()) if self.counts.size else 0

    def histogram(self) -> np.ndarray:
        """The lengths this plan holds, as a histogram.  # (max_len,)

        Returns:
            The counts, int64 `(max_len,)`.
        """
        h = np.zeros(self.max_len, dtype=np.int64)
        for s, c in zip(self.strategies, self.counts.tolist()):
            for length in s:
                h[length - 1] += c
        return h

    def covers(self, hist: np.ndarray) -> bool:
        """True when the plan holds every sequence of ``hist`` exactly once.

        Args:
            hist: counts, `hist[i]` the sequences of length `i + 1` `(L,)`.

        Returns:
            Whether the plan's histogram equals `hist`.
        """
        h = np.zeros(self.max_len, dtype=np.int64)
        h[: min(len(hist), self.max_len)] = np.asarray(hist)[: self.max_len]
        return bool(np.array_equal(self.histogram(), h)) and int(np.asarray(hist)[self.max_len :].sum()) == 0

    # -- serialisation -------------------------------------------------------------------
    def summary(self) -> dict[str, object]:
        """The scalar figures (the keys of ``seqpack plan --json``).

        Returns:
            The algorithm, sizes, packs, efficiency and bounds, by name.
        """
        return {
            "algorithm": self.algorithm,
            "max_len": self.max_len,
            "max_depth": self.max_depth,
            "packs": self.num_packs,
            "sequences": self.num_sequences,
            "tokens": self.num_tokens,
            "efficiency": self.efficiency,
            "packing_factor": self.packing_factor,
            "lower_bound": self.lower_bound,
            "gap_to_lower_bound": self.gap_to_lower_bound,
            "theoretical_speedup": self.theoretical_speedup,
            "seconds": self.seconds,
        }

    def to_dict(self) -> dict[str, object]:
        """The plan as a JSON-ready dict: its `summary`, strategies, counts and info.

        Returns:
            The dict `from_dict` reads back.
        """
        d = {"format_version": PLAN_FORMAT_VERSION, **self.summary()}
        d["strategies"] = [list(s) for s in self.strategies]
        d["counts"] = self.counts.tolist()
        d["info"] = dict(self.info)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PackingPlan:
        """The plan a `to_dict` wrote.

        Args:
            d: the dict, as read from JSON.

        Returns:
            The `PackingPlan`.

        Raises:
            UserError: another format version, or a missing or malformed field.
        """
        version = d.get("format_version")
        if version != PLAN_FORMAT_VERSION:
            raise UserError(f"unsupported plan format_version {version!r} (this seqpack reads {PLAN_FORMAT_VERSION})")
        try:
            return cls(
                strategies=tuple(tuple(s) for s in d["strategies"]),
                counts=np.asarray(d["counts"], dtype=np.int64),
                max_len=int(d["max_len"]),
                max_depth=None if d["max_depth"] is None else int(d["max_depth"]),
                algorithm=str(d["algorithm"]),
                seconds=float(d.get("seconds", 0.0)),
                info=dict(d.get("info", {})),
            )
        except (KeyError, TypeError) as e:
            raise UserError(f"malformed plan: missing or bad field {e}") from e

    def save(self, path: str | Path) -> None:
        """Write the plan as JSON, atomically (temp file, then rename), saying what it is (its ``kind``).

        Args:
            path: the JSON file to write.
        """
        from seqpack._atomic import write_text_atomic

        write_text_atomic(path, json.dumps({"kind": PLAN_KIND, **self.to_dict()}))

    @classmethod
    def load(cls, path: str | Path) -> PackingPlan:
        """Read a plan that `save` wrote.

        Args:
            path: the JSON file.

        Returns:
            The `PackingPlan`.

        Raises:
            UserError: not JSON, another format version, or a malformed field.
        """
        p = Path(path)
        try:
            d = json.loads(p.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise UserError(f"{p}: not a JSON plan ({e})") from e
        return cls.from_dict(d)


def plan_from_packs(
    packs: Iterable[tuple[tuple[int, ...], int]],
    *,
    max_len: int,
    max_depth: int | None,
    algorithm: str,
    seconds: float = 0.0,
    info: dict[str, object] | None = None,
) -> PackingPlan:
    """Merge ``(strategy, count)`` pairs (repeats allowed) into a plan in canonical order.

    Strategies are sorted by decreasing fill, then lexicographically, so equal inputs give
    identical plans.
    """
    merged: Counter[tuple[int, ...]] = Counter()
    for s, c in packs:
        if c:
            merged[tuple(sorted(s, reverse=True))] += int(c)
    keys = sorted(merged, key=lambda s: (-sum(s), s))
    return PackingPlan(
        strategies=tuple(keys),
        counts=np.array([merged[k] for k in keys], dtype=np.int64),
        max_len=max_len,
        max_depth=max_depth,
        algorithm=algorithm,
        seconds=seconds,
        info=info or {},
    )
