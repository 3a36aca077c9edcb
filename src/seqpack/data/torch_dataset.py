"""A torch ``Dataset`` over a packed directory, and the collate function for its batches.

    ds = PackedDataset("packed/")
    loader = torch.utils.data.DataLoader(ds, batch_size=8, shuffle=True, collate_fn=collate_packed)
    batch = next(iter(loader))   # {"input_ids": (8, L) int64, "segment_ids": (8, L), ...}

Integer columns become ``int64`` tensors (what embeddings and losses take); a
multi-label target becomes ``float32`` with -100 kept in empty slots.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from seqpack.data.format import DatasetFacts
from seqpack.data.rows import PackedRows
from seqpack.errors import UserError


def _tensor(a: np.ndarray) -> torch.Tensor:
    if a.dtype.kind in "iub":
        return torch.from_numpy(np.asarray(a, dtype=np.int64))
    return torch.from_numpy(np.asarray(a, dtype=np.float32))


def to_tensors(columns: dict[str, np.ndarray], *, float_labels: bool = False) -> dict[str, torch.Tensor]:
    """Columns of one pack ``(L,)`` or of a batch ``(B, L)`` as tensors (see the module docstring)."""
    out = {k: _tensor(np.asarray(v)) for k, v in columns.items()}
    if float_labels and "labels" in out:
        out["labels"] = out["labels"].float()
    return out


class PackedDataset(torch.utils.data.Dataset):
    """Packs of a directory written by ``seqpack pack``; item ``i`` is a dict of tensors.

    Rows are read on demand (`seqpack.data.rows.PackedRows`): memory-mapped ``.bin``
    columns, or Parquet row groups with a small cache; the dataset is never loaded whole.

    Args:
        path: the packed dataset's directory.
        columns: the columns to read (`None`: all).
        mmap: memory-map the `.bin` columns where the dataset has them.

    Raises:
        UserError: no packed dataset at `path`, or an unknown column.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, columns: Sequence[str] | None = None, mmap: bool = True
    ) -> None:
        self.rows = PackedRows(path, columns=list(columns) if columns else None, mmap=mmap)
        self.manifest = self.rows.manifest
        self.task: str = self.manifest["task"]
        self.facts = DatasetFacts.of(self.manifest, path)

    def __len__(self) -> int:
        return int(self.manifest["num_packs"])

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        if not -len(self) <= i < len(self):
            raise IndexError(f"pack {i} out of range ({len(self)} packs)")
        return to_tensors({k: v[0] for k, v in self.rows.take([i]).items()}, float_labels=self.facts.float_labels)

    def __getitems__(self, indices: list[int]) -> list[dict[str, torch.Tensor]]:
        """A whole batch in one read (the DataLoader calls this when it exists)."""
        cols = self.rows.take(indices)
        return [
            to_tensors({k: v[j] for k, v in cols.items()}, float_labels=self.facts.float_labels)
            for j in range(len(indices))
        ]


def collate_packed(batch: Sequence[Mapping[str, np.ndarray | torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Stack a list of items into batch tensors: ``(B, L)``, ``(B, D)``, ``(B,)``...

    Args:
        batch: the items, each a dict of arrays or tensors of one row.

    Returns:
        The stacked tensors, by column: `(B, L)`, `(B, D)`, `(B,)`.

    Raises:
        UserError: an empty batch.
    """
    if not batch:
        raise UserError("collate_packed got an empty batch")
    return {k: torch.stack([torch.as_tensor(item[k]) for item in batch]) for k in batch[0]}
