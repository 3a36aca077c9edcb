"""Online packing with no global histogram: bounded memory, packs come out as data streams in.

The packer keeps up to ``buffer_size`` sequences. When the buffer is full it plans the
buffer's own histogram (best fit by default, milliseconds), emits the packs, and keeps the
sequences of the emptiest packs (at most ``carry`` of the buffer) to combine with what comes
next. ``flush()`` packs whatever is left.

>>> sp = StreamPacker(8, buffer_size=4)
>>> out = [p for n in [5, 3, 6, 2, 4, 4] for p in sp.add(n)]
>>> out += sp.flush()
>>> sorted(sorted(p) for p in out)
[[0, 1], [2, 3], [4, 5]]
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator
from typing import Any

import numpy as np

from seqpack.errors import UserError
from seqpack.packing.assign import assign
from seqpack.packing.histogram import check_max_len
from seqpack.packing.plan import STREAM_ALGORITHM, check_max_depth, plan


class StreamPacker:
    """Pack a stream of ``(key, length)`` into lists of keys, each list fitting ``max_len``.

    Args:
        max_len: the row length.
        buffer_size: the sequences buffered before a plan is made.
        max_depth: the most sequences a pack holds (`None`: no limit).
        algorithm: the planner of each buffer (`STREAM_ALGORITHM` by default).
        carry: the fraction of the buffer, at most, kept back for the next plan, in `[0, 1)`.
        seed: the assignment's seed.
    """

    def __init__(
        self,
        max_len: int,
        *,
        buffer_size: int,
        max_depth: int | None = None,
        algorithm: str = STREAM_ALGORITHM,
        carry: float = 0.5,
        seed: int = 0,
    ) -> None:
        if isinstance(buffer_size, bool) or not isinstance(buffer_size, int) or buffer_size < 1:
            raise UserError(f"buffer_size must be an int >= 1, got {buffer_size!r}")
        if not 0.0 <= carry < 1.0:
            raise UserError(f"carry must be in [0, 1), got {carry}")
        max_len = check_max_len(max_len)
        self.max_len, self.buffer_size, self.carry = max_len, buffer_size, carry
        self.max_depth = check_max_depth(max_depth)
        self.algorithm, self.seed = algorithm, seed
        self._keys: list[Any] = []
        self._lengths: list[int] = []
        self._count = 0
        self.packs_out = 0
        self.tokens_out = 0

    def add(self, length: int, key: Hashable | None = None) -> list[list[Any]]:
        """Buffer one sequence (key defaults to its position in the stream); return finished packs.

        Args:
            length: the sequence's length, in `1..max_len`.
            key: what the packs hold for it (`None`: its position in the stream).

        Returns:
            The packs finished by this call (often none), each a list of keys.

        Raises:
            UserError: a length outside `1..max_len`.
        """
        length = int(length)
        if not 1 <= length <= self.max_len:
            raise UserError(
                f"sequence length {length} is outside 1..max_len={self.max_len}; pass --overflow truncate|split|drop"
            )
        self._keys.append(self._count if key is None else key)
        self._lengths.append(length)
        self._count += 1
        if len(self._lengths) >= self.buffer_size:
            return self._drain(final=False)
        return []

    def flush(self) -> list[list[Any]]:
        """Pack everything still buffered.

        Returns:
            The last packs, each a list of keys.
        """
        return self._drain(final=True) if self._lengths else []

    def pack(self, items: Iterable[int | tuple[Hashable, int]]) -> Iterator[list[Any]]:
        """Stream packs from lengths or ``(key, length)`` pairs, flushing at the end.

        Args:
            items: lengths (keyed by position) or `(key, length)` pairs.

        Yields:
            Each pack, a list of keys.
        """
        for item in items:
            if isinstance(item, tuple):
                yield from self.add(item[1], item[0])
            else:
                yield from self.add(item)
        yield from self.flush()

    @property
    def efficiency(self) -> float:
        """Real tokens / (packs * max_len) over all packs emitted so far."""
        return self.tokens_out / (self.packs_out * self.max_len) if self.packs_out else 0.0

    def _drain(self, *, final: bool) -> list[list[Any]]:
        lengths = np.asarray(self._lengths, dtype=np.int64)
        h = np.bincount(lengths - 1, minlength=self.max_len)
        p = plan(h, self.max_len, algorithm=self.algorithm, max_depth=self.max_depth)
        packing = assign(p, lengths, seed=self.seed + self._count)
        fill = packing.pack_fill
        order = np.argsort(-fill, kind="stable")  # fullest first
        sizes = np.diff(packing.pack_offsets)[order]
        keep = 0 if final else int(self.carry * self.buffer_size)
        # emit the fullest packs; keep the emptiest ones while they hold at most `keep` sequences
        kept_from = len(order) - int(np.searchsorted(np.cumsum(sizes[::-1]), keep, side="right"))
        out: list[list[Any]] = []
        carried: list[int] = []
        for rank, i in enumerate(order.tolist()):
            members = packing.pack(i).tolist()
            if rank >= kept_from:
                carried.extend(members)
            else:
                out.append([self._keys[j] for j in members])
                self.tokens_out += int(fill[i])
        self.packs_out += len(out)
        self._keys = [self._keys[j] for j in carried]
        self._lengths = [self._lengths[j] for j in carried]
        return out
