"""Each data-parallel rank's packs, step by step, from a dataset's balanced schedule (numpy, no torch).

``seqpack pack --world-size W --micro-batch B`` writes ``schedule.npy``: every pack in one slot
of ``(steps, W, B)``, each step's ranks of even cost (`seqpack.packing.balance`).
`BalancedSampler` replaces ``DistributedSampler``: rank ``r`` takes ``steps[s, r]`` for
every step ``s``, so a ``DataLoader(..., batch_size=B)`` on every rank gives one balanced step at
a time. Each epoch visits the steps in a fresh order (seeded by ``(seed, epoch)``); a step's
packs never change, so its ranks stay balanced. Iteration is a pure function of
``(seed, epoch, start_step)``: a run resumed at step ``k`` passes ``start_step=k`` and reads
exactly the packs the uninterrupted run would have read. ::

    ds = PackedDataset("packed/")
    sampler = BalancedSampler("packed/", rank=dist.get_rank(), world_size=dist.get_world_size())
    loader = DataLoader(ds, batch_size=sampler.micro_batch, sampler=sampler, collate_fn=collate_packed)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for batch in loader: ...
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from seqpack.data.format import SCHEDULE, read_manifest
from seqpack.errors import UserError


def read_schedule(path: str | os.PathLike[str]) -> np.ndarray:
    """A dataset's balanced steps, ``(steps, world, micro_batch)`` pack indices (-1: an empty slot
    of the last, partial step), checked against its manifest.

    Args:
        path: the packed dataset's directory.

    Returns:
        The pack indices, int `(steps, world, micro_batch)`.

    Raises:
        UserError: no schedule, or one that does not hold every pack once.
    """
    m = read_manifest(path)
    info = m.get("schedule")
    if not info:
        raise UserError(
            f"{path}: the dataset has no balanced schedule; re-pack it with seqpack pack --world-size W "
            "--micro-batch B (or use a DistributedSampler)"
        )
    steps = np.load(Path(path) / SCHEDULE, allow_pickle=False)  # loading never runs the file's code
    shape = (info["steps"], info["world_size"], info["micro_batch"])
    P = int(m["num_packs"])
    ok = steps.shape == shape and steps.dtype.kind == "i"
    if ok:
        used = steps[steps >= 0]
        ok = used.size == P and np.array_equal(np.sort(used), np.arange(P))
    if not ok:
        raise UserError(
            f"{path}/{SCHEDULE}: not the schedule its manifest describes (every pack once in "
            f"{shape}); re-pack the dataset"
        )
    return steps


class BalancedSampler:
    """Pack indices for ``rank`` of ``world_size``: ``micro_batch`` per step, balanced steps in a
    seeded order per epoch (see the module). ``drop_last`` leaves out a last step with empty
    slots; otherwise its empty slots repeat its own packs (every rank still takes
    ``micro_batch``, as ``DistributedSampler`` pads).

    >>> steps = np.array([[[0, 5], [2, 3]], [[1, 4], [6, -1]]])      # (steps 2, world 2, micro_batch 2)
    >>> s = BalancedSampler(steps, rank=1, world_size=2, seed=0)
    >>> list(s), len(s)
    ([2, 3], 2)
    >>> list(BalancedSampler(steps, rank=1, world_size=2, drop_last=False, start_step=1))
    [6, 1]

    Args:
        schedule: the dataset's directory (its balanced schedule), or the steps `(steps, world, micro_batch)`.
        rank: this rank, in `0..world_size - 1`.
        world_size: the ranks; must equal the schedule's.
        seed: the seed of each epoch's order of steps.
        drop_last: leave out a last step with empty slots.
        start_step: the first step of the first epoch (a resume).

    Raises:
        UserError: a schedule of another shape or world size, or a bad rank.
    """

    def __init__(
        self,
        schedule: str | os.PathLike[str] | np.ndarray,
        *,
        rank: int,
        world_size: int,
        seed: int = 0,
        drop_last: bool = True,
        start_step: int = 0,
    ) -> None:
        steps = schedule if isinstance(schedule, np.ndarray) else read_schedule(schedule)
        if steps.ndim != 3:
            raise UserError(f"a schedule is (steps, world, micro_batch), got shape {steps.shape}")
        if world_size != steps.shape[1]:
            raise UserError(
                f"the schedule balances {steps.shape[1]} ranks, not {world_size}; re-pack with "
                f"seqpack pack --world-size {world_size}"
            )
        if not 0 <= rank < world_size:
            raise UserError(f"rank must be in [0, {world_size}), got {rank}")
        full = (steps >= 0).all(axis=(1, 2))
        self.steps = steps[full]
        self.last = None if drop_last or full.all() else steps[~full][0]
        self.rank, self.world_size, self.seed = rank, world_size, seed
        self.micro_batch = int(steps.shape[2])
        self.epoch = 0
        self.start_step = self._checked_start(start_step)

    @property
    def num_steps(self) -> int:
        return len(self.steps) + (self.last is not None)

    def _checked_start(self, start: int) -> int:
        if not 0 <= start <= self.num_steps:
            raise UserError(f"start_step must be in [0, {self.num_steps}], got {start}")
        return start

    def set_epoch(self, epoch: int, start_step: int = 0) -> None:
        """The epoch to iterate next, from ``start_step`` (a resume) or its start.

        Args:
            epoch: the epoch, which seeds its order of steps.
            start_step: the step to start at (0: the epoch's start).
        """
        self.epoch = epoch
        self.start_step = self._checked_start(start_step)

    def _last_row(self) -> np.ndarray:
        assert self.last is not None
        filled = self.last.reshape(-1).copy()
        filled[filled < 0] = np.resize(filled[filled >= 0], int((filled < 0).sum()))  # the step's own packs again
        return filled.reshape(self.last.shape)[self.rank]

    def __iter__(self) -> Iterator[int]:
        order = np.random.default_rng([self.seed, self.epoch]).permutation(len(self.steps))
        for s in order[self.start_step :]:
            yield from self.steps[s, self.rank].tolist()
        if self.last is not None and self.start_step <= len(self.steps):
            yield from self._last_row().tolist()

    def __len__(self) -> int:
        return (self.num_steps - self.start_step) * self.micro_batch


__all__ = ["BalancedSampler", "read_schedule"]
