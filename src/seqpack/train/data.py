"""Batches for training: packed rows, or the same sequences one per row (``padded``).

The order is a pure function of ``(seed, step)``: step ``s`` takes global rows
``s*R .. (s+1)*R - 1`` of an endless stream of epochs, each a fresh permutation seeded by
``(seed, epoch)``. So a resumed run, or one split over ranks, reads exactly the rows an
uninterrupted single-process run reads::

    rows of step s   = stream[s*R : (s+1)*R]           # R = batch_size * accumulation
    micro-batch m    = rows[m*B : (m+1)*B]              # B = batch_size (all ranks)
    rank r's share   = micro-batch m [r::world]

``by_pack`` (a padded run with ``match="packs"``) streams the packed run's packs and lays each
pack's sequences out one per row: step ``s`` of the padded run then holds exactly the sequences
of the packed run's step ``s``, so the two compute the same gradients (the fair comparison).

A fixed share of packs (``eval_fraction``, chosen by a seed that does not depend on the run's
seed) is held out; both the packed and the padded run evaluate on those same packed rows. An
evaluation reads at most ``eval_tokens`` real tokens of them (a run's bound:
`seqpack.train.config.TrainConfig.eval_tokens`, so that its cost does not grow with the
dataset), a seeded sample of the held-out packs that is the same for every run of the dataset
with that bound; ``0`` evaluates every held-out pack.
"""

from __future__ import annotations

import abc
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from seqpack.data.format import DatasetFacts, read_manifest
from seqpack.data.padded import padded_rows, sequence_spans
from seqpack.data.rows import PackedRows
from seqpack.data.torch_dataset import to_tensors
from seqpack.errors import UserError
from seqpack.tasks import get_task

if TYPE_CHECKING:
    from seqpack.packing.balance import RowCost

SPLIT_SEED = 20_240_101
EVAL_SAMPLE_SEED = SPLIT_SEED + 1


def eval_sample(held_out: np.ndarray, fill: np.ndarray, max_tokens: int) -> np.ndarray:
    """The held-out packs one evaluation reads: a seeded sample of ``held_out`` whose real tokens
    (``fill``, per pack of the dataset) stay within ``max_tokens`` (at least one pack; ``0``: all),
    sorted.

        >>> eval_sample(np.array([0, 2, 3, 5]), np.array([4, 9, 4, 4, 9, 4]), 8).size
        2
        >>> eval_sample(np.array([0, 2, 3, 5]), np.array([4, 9, 4, 4, 9, 4]), 0).tolist()
        [0, 2, 3, 5]
    """
    if max_tokens <= 0 or int(fill[held_out].sum()) <= max_tokens:
        return held_out
    order = np.random.default_rng(EVAL_SAMPLE_SEED).permutation(held_out)
    keep = max(1, int((np.cumsum(fill[order]) <= max_tokens).sum()))  # fill >= 0: the sums only grow
    return np.sort(order[:keep])


def row_squares(segment_ids: np.ndarray) -> np.ndarray:
    """Sum of squared sequence lengths of each packed row (a sequence is a run of one id; 0 is
    padding).  # (n, L) -> (n,)

    >>> row_squares(np.array([[1, 1, 1, 2, 0], [1, 1, 1, 1, 1]])).tolist()
    [10, 25]
    """
    n, L = segment_ids.shape
    flat = segment_ids.reshape(-1)
    change = np.ones(flat.size, dtype=bool)
    change[1:] = flat[1:] != flat[:-1]
    change[::L] = True  # every row starts a run
    starts = np.flatnonzero(change)
    lengths = np.diff(np.append(starts, flat.size))
    real = flat[starts] != 0
    return np.bincount(starts[real] // L, weights=lengths[real] ** 2, minlength=n).astype(np.int64)


def _split_schedule(path: str | os.PathLike[str], eval_fraction: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Held-out packs as whole steps of the dataset's schedule (``seqpack pack --world-size``), so
    that every training step is one of its balanced steps: eval packs, train packs, and the
    training steps as indices into the train packs.  # (E,), (T,), (S, W, B)"""
    from seqpack.data.sampler import read_schedule

    steps = read_schedule(path)
    full = (steps >= 0).all(axis=(1, 2))
    n_full = int(full.sum())
    n_eval = max(1, round(n_full * eval_fraction))
    if n_full - n_eval < 1:
        raise UserError(
            f"{path}: its schedule has {n_full} full step(s); --balance schedule needs at least 2 "
            "(one to train on, one to evaluate); re-pack with a smaller --world-size or --micro-batch"
        )
    order = np.flatnonzero(full)[np.random.default_rng(SPLIT_SEED).permutation(n_full)]
    train_steps = steps[np.sort(order[n_eval:])]
    held = np.concatenate([steps[order[:n_eval]].reshape(-1), steps[~full].reshape(-1)])  # a partial step: evaluated
    train_packs = np.sort(train_steps.reshape(-1))
    return np.sort(held[held >= 0]), train_packs, np.searchsorted(train_packs, train_steps)


def _check_counts(path: str | os.PathLike[str], m: dict[str, Any], nseq: np.ndarray, fill: np.ndarray) -> None:
    """The manifest's counts against the rows just read (a hand-edited manifest trains nothing)."""
    got = {"num_sequences": int(nseq.sum()), "num_tokens": int(fill.sum()), "max_depth": int(nseq.max(initial=0))}
    for key, value in got.items():
        want = m.get(key)
        if want is None:
            continue
        if (value > want) if key == "max_depth" else (value != want):
            raise UserError(
                f"{path}: its rows hold {key} {value:,}, its manifest says {want:,} (the manifest was edited, "
                "or the rows are another dataset's); re-run seqpack pack"
            )


class Units(abc.ABC):
    """Training units (packs or sequences) read as an endless stream of epochs, each a fresh
    permutation seeded by ``(seed, epoch)`` (see the module); ``unit_sequences`` and
    ``unit_tokens`` hold each unit's counts.

    The interface the train loop reads, and the only one: every kind of training data (a packed
    dataset of any task, image-text rows included, or a stream) is a `Units`, and the loop never
    asks which."""

    task: str  # the task's registered name
    manifest: dict[str, Any]  # the packed directory's manifest (a stream: the one it would write)
    facts: DatasetFacts  # what the rows' task makes of them (per-token labels, a causal LM's rows)
    by_pack: bool = False  # a padded run that reads the packed run's packs, each as its sequences
    #: per-pack columns added at read time (a reference model's log-probabilities), or None
    pack_columns: Callable[[np.ndarray], dict[str, np.ndarray]] | None = None

    unit_sequences: np.ndarray
    unit_tokens: np.ndarray
    packing_factor: float
    _perms: dict[tuple[int, int], np.ndarray]
    held_out_packs: np.ndarray  # out of training; an evaluation reads eval_packs of them
    eval_packs: np.ndarray
    eval_tokens: int
    eval_sequences: int
    pack_fill: np.ndarray  # real tokens of each pack (indexed by pack): what a run's size is reckoned from
    _pack_nseq: np.ndarray  # sequences of each pack

    @property
    def num_units(self) -> int:
        return len(self.unit_sequences)

    def _epoch_order(self, seed: int, epoch: int) -> np.ndarray:
        return np.random.default_rng([seed, epoch]).permutation(self.num_units)

    def size_eval(self, max_tokens: int) -> None:
        """An evaluation reads a seeded sample of the held-out packs of at most ``max_tokens`` real
        tokens (`eval_sample`; 0: all of them)."""
        fill, nseq = self.pack_fill, self._pack_nseq
        self.eval_packs = eval_sample(self.held_out_packs, fill, max_tokens)
        self.eval_tokens = int(fill[self.eval_packs].sum())
        self.eval_sequences = int(nseq[self.eval_packs].sum())

    @property
    def schedule_shape(self) -> tuple[int, int] | None:
        """``(steps, rows)`` of a balanced schedule stored with the data (default: none)."""
        return None

    @abc.abstractmethod
    def batch(self, units: np.ndarray) -> dict[str, torch.Tensor]:
        """The rows of ``units`` as tensors, ``(B, L)`` each."""

    @abc.abstractmethod
    def eval_batches(self, batch_size: int) -> Iterator[dict[str, torch.Tensor]]:
        """The held-out rows an evaluation reads, ``batch_size`` at a time."""

    @abc.abstractmethod
    def describe(self) -> dict[str, Any]:
        """What a run's config.json records of its data."""

    def counts(self, units: np.ndarray) -> tuple[int, int]:
        """Sequences and real tokens of ``units`` (after `batch` read them)."""
        return int(self.unit_sequences[units].sum()), int(self.unit_tokens[units].sum())

    def state_dict(self) -> dict[str, Any] | None:
        """What a checkpoint must keep of the data's position besides the step (default: nothing)."""
        return None

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        """Restore `state_dict`'s state (default: nothing to restore)."""
        return None  # a default, not a step left out: nothing to restore

    def units_at(self, seed: int, start: int, count: int) -> np.ndarray:
        """The units at positions ``start .. start + count - 1`` of the run's order: epoch after
        epoch, each a permutation seeded by ``(seed, epoch)``."""
        pos = np.arange(start, start + count)
        n = self.num_units
        out = np.empty(count, np.int64)
        for epoch in np.unique(pos // n):
            key = (seed, int(epoch))
            if key not in self._perms:
                self._perms = {key: self._epoch_order(seed, int(epoch))}
            sel = pos // n == epoch
            out[sel] = self._perms[key][pos[sel] % n]
        return out


def split_packs(num_packs: int, eval_fraction: float, where: str) -> tuple[np.ndarray, np.ndarray]:
    """Held-out and training packs, both sorted: a share ``eval_fraction`` (at least one) chosen by
    `SPLIT_SEED`, the same for every run of the dataset.

    >>> [x.tolist() for x in split_packs(4, 0.25, "d")]
    [[1], [0, 2, 3]]
    """
    n_eval = max(1, round(num_packs * eval_fraction))
    if num_packs - n_eval < 1:
        raise UserError(f"{where}: only {num_packs} pack(s); need at least 2 (one to train on, one to evaluate)")
    perm = np.random.default_rng(SPLIT_SEED).permutation(num_packs)
    return np.sort(perm[:n_eval]), np.sort(perm[n_eval:])


class TrainData(Units):
    """A packed dataset split into training units (packs, or sequences when ``padded``) and
    held-out evaluation packs."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        padded: bool = False,
        by_pack: bool = False,
        eval_fraction: float = 0.05,
        by_schedule: bool = False,
        eval_tokens: int = 0,
    ) -> None:
        manifest = read_manifest(path)
        task = get_task(manifest["task"])
        task.check_manifest(manifest, str(path))
        maker = task.trains().batch_maker
        #: the task's own batches of the packs' columns (image-text: rows with their images), or None
        self.make_batch = maker(path, manifest) if maker is not None else None
        if self.make_batch is not None and padded:
            raise UserError(
                f"{path}: --padded is not offered for task {task.name}; its padded baseline is TRL's "
                "(benchmarks/vision.py runs it beside the packed rows)"
            )
        # example ids are not needed to train, unless the task joins its example table by them
        columns = [c for c in manifest["columns"] if c != "example_ids" or self.make_batch is not None]
        # rows are read on demand (memory-mapped .bin, or Parquet row groups): never the whole dataset
        self.path = path
        self.rows = PackedRows(path, columns=columns)
        self.manifest = self.rows.manifest
        self.task: str = self.manifest["task"]
        self.facts = DatasetFacts.of(self.manifest, path)
        self.padded = padded
        self.max_len = int(self.manifest["max_len"])
        self.position_fields = tuple(self.manifest.get("position_fields", ()))
        P = int(self.manifest["num_packs"])
        split = split_packs(P, eval_fraction, str(path))
        self._schedule: np.ndarray | None = None  # (steps, world, micro_batch) training units, with by_schedule
        if by_schedule:
            if padded:
                raise UserError(
                    "--balance schedule trains the dataset's packs; a --padded run has sequences as its units"
                )
            self.eval_packs, self.train_packs, self._schedule = _split_schedule(path, eval_fraction)
        else:
            self.eval_packs, self.train_packs = split
        nseq = np.empty(P, np.int64)
        fill = np.empty(P, np.int64)
        squares = np.empty(P, np.int64)
        span_parts = []
        for lo, chunk in self.rows.chunks(["num_sequences", "segment_ids"]):  # one pass, bounded memory
            seg = chunk["segment_ids"]
            nseq[lo : lo + len(seg)] = chunk["num_sequences"]
            fill[lo : lo + len(seg)] = (seg != 0).sum(axis=1)
            squares[lo : lo + len(seg)] = row_squares(seg)
            if padded:
                sp = sequence_spans(seg)
                sp[:, 0] += lo
                span_parts.append(sp)
        _check_counts(path, self.manifest, nseq, fill)
        self.held_out_packs = self.eval_packs  # out of training; an evaluation reads eval_packs of them
        self.pack_fill, self._pack_nseq = fill, nseq
        self.size_eval(eval_tokens)
        self.by_pack = bool(padded and by_pack)
        if padded:
            spans = np.concatenate(span_parts) if span_parts else np.zeros((0, 4), np.int64)
            is_train = np.zeros(P, bool)
            is_train[self.train_packs] = True
            self.spans = spans[is_train[spans[:, 0]]]
        if padded and not self.by_pack:  # units are sequences
            self.unit_sequences = np.ones(len(self.spans), np.int64)
            self.unit_tokens = self.spans[:, 2].copy()
        else:  # units are packs (with by_pack, each read as its sequences, one per row)
            self.unit_sequences = nseq[self.train_packs]
            self.unit_tokens = fill[self.train_packs]
        if self.by_pack:
            self._first_span = np.searchsorted(self.spans[:, 0], self.train_packs)  # spans are in pack order
        self.pack_stats = np.stack([fill, squares, nseq], axis=1)  # (P, 3): tokens, sum(l^2), sequences
        self.packing_factor = float(nseq[self.train_packs].mean())
        self.train_sequences = int(nseq[self.train_packs].sum())
        self._perms: dict[tuple[int, int], np.ndarray] = {}
        #: extra (P, ...) columns of packs computed by the run (the reference model's log-probabilities)
        self.pack_columns: Callable[[np.ndarray], dict[str, np.ndarray]] | None = None
        self._balance: tuple[np.ndarray, int, int] | None = None

    def balance(self, cost: RowCost, *, world: int, rows: int) -> dict[str, float]:
        """Order each epoch's packs into compute-balanced steps (`seqpack.packing.balance`):
        every micro-batch of ``rows`` rows gives each of ``world`` ranks packs of even cost (its
        share ``[r::world]``). Returns the first epoch's imbalance, sequential and balanced."""
        from seqpack.packing.balance import balance_report

        if self.padded:
            raise UserError("--balance compute orders packs; a --padded run has sequences as its units")
        if rows % world:
            raise UserError(f"--balance compute needs rows per micro-batch ({rows}) divisible by the {world} ranks")
        costs = cost.of(*self.pack_stats[self.train_packs].T)
        self._balance = (costs, world, rows // world)
        self._perms = {}  # epochs ordered before are ordered anew
        return {"world": world, **balance_report(costs, world=world, micro_batch=rows // world)[1]}

    @property
    def schedule_shape(self) -> tuple[int, int] | None:
        """``(world, micro_batch)`` of the dataset's schedule, with ``by_schedule``."""
        return None if self._schedule is None else (int(self._schedule.shape[1]), int(self._schedule.shape[2]))

    def _epoch_order(self, seed: int, epoch: int) -> np.ndarray:
        if self._schedule is not None:  # the dataset's steps, in a fresh order per epoch
            steps = self._schedule[np.random.default_rng([seed, epoch]).permutation(len(self._schedule))]
        elif self._balance is not None:
            from seqpack.packing.balance import balanced_steps

            costs, world, per_rank = self._balance
            steps = balanced_steps(costs, world=world, micro_batch=per_rank, seed=seed * 1_000_003 + epoch)
        else:
            return super()._epoch_order(seed, epoch)
        flat = steps.transpose(0, 2, 1).reshape(-1)  # micro-batch row b * world + r is rank r's b-th pack
        return flat[flat >= 0]

    def _take(self, packs: np.ndarray) -> dict[str, np.ndarray]:
        cols = self.rows.take(packs)
        if self.pack_columns is not None:
            cols.update(self.pack_columns(np.asarray(packs)))
        return cols

    def batch(self, units: np.ndarray) -> dict[str, torch.Tensor]:
        """Tensors for training units (pack or sequence indices): ``(B, L)`` / ``(B, D)``. With
        ``by_pack`` the units are packs and the rows their sequences, one per row, padded."""
        if self.by_pack:
            units = np.concatenate(
                [np.arange(self._first_span[u], self._first_span[u] + self.unit_sequences[u]) for u in units]
            )
        if self.padded:
            spans = self.spans[units].copy()
            packs, spans[:, 0] = np.unique(spans[:, 0], return_inverse=True)
            cols = padded_rows(
                self.rows.take(packs), spans, token_labels=self.facts.token_labels, position_fields=self.position_fields
            )
        else:
            cols = self._take(self.train_packs[units])
        return self._tensors(cols)

    def _tensors(self, cols: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        if self.make_batch is not None:
            return dict(self.make_batch(cols))
        return to_tensors(cols, float_labels=self.facts.float_labels)

    def eval_batches(self, batch_size: int) -> Iterator[dict[str, torch.Tensor]]:
        """The held-out packs, in order, packed (the same for packed and padded runs)."""
        for lo in range(0, len(self.eval_packs), batch_size):
            yield self._tensors(self._take(self.eval_packs[lo : lo + batch_size]))

    def describe(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "max_len": self.max_len,
            "padded": self.padded,
            "train_packs": len(self.train_packs),
            "held_out_packs": len(self.held_out_packs),
            "eval_packs": len(self.eval_packs),
            "eval_tokens": self.eval_tokens,
            "train_sequences": self.train_sequences,
            "eval_sequences": self.eval_sequences,
            "packing_factor": self.packing_factor,
            "units": self.num_units,
            "by_pack": self.by_pack,
        }
