"""Batches of packed image-text rows for ``seqpack train`` (the ``vision`` task).

The rows of a micro-batch go side by side into one padding-free ``(1, T)`` row
(`seqpack.tasks.vision.VisionCollator`: ids, labels, per-sample positions, pixels made by
the processor saved with the rows); ``segment_ids`` ``(1, T)`` numbers its samples, which the
per-sample loss and the step's loss units read. Rows are held out and streamed exactly as
`seqpack.train.data.TrainData` does for the token-column format::

    data = VisionTrainData("vlm-packs/")
    batch = data.batch(data.units_at(seed=0, start=0, count=4))
    # input_ids (1, T), labels (1, T), segment_ids (1, T), position_ids (4, 1, T) | (1, T), pixel_values, ...
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from seqpack.train.data import Units, split_packs


class VisionTrainData(Units):
    """A packed image-text directory (`seqpack.tasks.vision.packed`) split into training rows
    and held-out rows; the API `seqpack.train.data.TrainData` offers the training loop."""

    padded = False
    by_pack = False
    pack_columns = None

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
        from seqpack.tasks.vision import VisionCollator, VisionRows

        if padded or by_pack:
            raise ValueError(
                f"{path}: --padded is not offered for image-text rows; their padded baseline is TRL's "
                "(benchmarks/vision.py runs it beside the packed rows)"
            )
        if by_schedule:
            raise ValueError(
                f"{path}: --balance schedule reads a dataset packed with --world-size; image-text rows have none"
            )
        self.path = path
        self.rows = VisionRows(path)
        self.manifest = self.rows.manifest
        if "task" not in self.manifest:  # pragma: no cover - written by every version that writes this kind
            raise ValueError(f"{path}: its manifest names no task; pack it again with seqpack pack --task vision")
        self.task: str = self.manifest["task"]
        self.max_len = int(self.manifest["max_len"])
        self.collate = VisionCollator(self.rows.processor())
        lengths = self.rows.seq_lengths()
        nseq = np.array([x.size for x in lengths], dtype=np.int64)
        fill = np.array([int(x.sum()) for x in lengths], dtype=np.int64)
        self.eval_packs, self.train_packs = split_packs(len(lengths), eval_fraction, str(path))
        self.held_out_packs = self.eval_packs
        self._pack_fill, self._pack_nseq = fill, nseq
        self.size_eval(eval_tokens)
        self.unit_sequences = nseq[self.train_packs]
        self.unit_tokens = fill[self.train_packs]
        self.packing_factor = float(self.unit_sequences.mean())
        self.train_sequences = int(self.unit_sequences.sum())
        self._perms: dict[tuple[int, int], np.ndarray] = {}

    def check_balance(self) -> None:
        raise ValueError(
            "--balance compute orders packs of the token-column format; image-text rows are trained "
            "one padding-free row per micro-batch (drop --balance)"
        )

    def _rows(self, packs: np.ndarray) -> dict[str, torch.Tensor]:
        rows = [self.rows[int(i)] for i in packs]
        batch = {
            k: v for k, v in self.collate(rows).items() if isinstance(v, torch.Tensor)
        }  # use_cache: the task's forward
        lengths = np.concatenate([r["seq_lengths"] for r in rows])
        batch["segment_ids"] = torch.from_numpy(np.repeat(np.arange(1, lengths.size + 1), lengths))[None]  # (1, T)
        return batch

    def batch(self, units: np.ndarray) -> dict[str, torch.Tensor]:
        """The training rows ``units`` as one padding-free row (see the module)."""
        return self._rows(self.train_packs[units])

    def eval_batches(self, batch_size: int) -> Iterator[dict[str, torch.Tensor]]:
        """The held-out rows, in order, ``batch_size`` to a batch."""
        for lo in range(0, len(self.eval_packs), batch_size):
            yield self._rows(self.eval_packs[lo : lo + batch_size])

    def describe(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "max_len": self.max_len,
            "padded": False,
            "train_packs": len(self.train_packs),
            "held_out_packs": len(self.held_out_packs),
            "eval_packs": len(self.eval_packs),
            "eval_tokens": self.eval_tokens,
            "train_sequences": self.train_sequences,
            "eval_sequences": self.eval_sequences,
            "packing_factor": self.packing_factor,
            "units": self.num_units,
            "by_pack": False,
            "images": self.manifest.get("images"),
            "layout": self.manifest.get("layout"),
        }
