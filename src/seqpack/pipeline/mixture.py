"""Several sources of examples read as one stream, each example drawn from a source chosen by weight.

The draw is a pure function of the seed: the ``k``-th example comes from the source a seeded
generator picks among those not yet exhausted, with probability proportional to its weight. A
source that runs out leaves the others; the mixture ends when all have. Iterating yields
``(source index, example)``: `seqpack.pipeline.streaming.PackedStream` counts the realised
mix per source.

    >>> mix = Mixture({"web": ["w0", "w1", "w2", "w3"], "code": ["c0", "c1"]}, weights={"web": 3, "code": 1}, seed=0)
    >>> [x for _, x in mix]
    ['w0', 'w1', 'w2', 'w3', 'c0', 'c1']
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from seqpack.errors import UserError


class Mixture:
    """``sources`` (name -> iterable of examples) mixed by ``weights`` (name -> weight > 0; default equal).

    Args:
        sources: name -> an iterable of examples.
        weights: name -> weight > 0 (`None`: equal weights).
        seed: the seed of the draw.

    Raises:
        UserError: no source, a weight <= 0, or weights that name other sources.
    """

    def __init__(
        self, sources: Mapping[str, Iterable[Any]], *, weights: Mapping[str, float] | None = None, seed: int = 0
    ) -> None:
        if not sources:
            raise UserError("a Mixture needs at least one source")
        weights = dict(weights or dict.fromkeys(sources, 1.0))
        unknown = sorted(set(weights) ^ set(sources))
        if unknown:
            raise UserError(f"weights and sources must name the same sources; {unknown[0]!r} is in only one")
        bad = [k for k, w in weights.items() if not (isinstance(w, (int, float)) and w > 0)]
        if bad:
            raise UserError(f"weight of source {bad[0]!r} must be a number > 0, got {weights[bad[0]]!r}")
        self.names = tuple(sources)
        self.sources = [sources[n] for n in self.names]
        self.weights = np.array([float(weights[n]) for n in self.names])
        self.seed = seed

    def __iter__(self) -> Iterator[tuple[int, Any]]:
        its = [iter(s) for s in self.sources]
        live = np.ones(len(its), dtype=bool)
        rng = np.random.default_rng(self.seed)
        while live.any():
            w = np.where(live, self.weights, 0.0)
            k = int(rng.choice(len(its), p=w / w.sum()))
            try:
                yield k, next(its[k])
            except StopIteration:
                live[k] = False

    def fractions(self, counts: Mapping[str, int]) -> dict[str, float]:
        """``counts`` per source as fractions of their sum (the realised mix).

        Args:
            counts: examples drawn per source, by name.

        Returns:
            Each source's fraction of the total, by name.
        """
        total = sum(counts.values())
        return {k: (v / total if total else 0.0) for k, v in counts.items()}
