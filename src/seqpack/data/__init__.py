"""Task sequences (clm, mlm, classification, multilabel, qa, chat), packed columns, files, torch Dataset.

Everything but :class:`PackedDataset` and :func:`collate_packed` is numpy/pyarrow;
those two import torch on first use.
"""

from __future__ import annotations

from typing import Any

from seqpack.data.build import PackConfig, build_packed_dataset, build_sequences, pack_task
from seqpack.data.io import load_packed, read_manifest, write_packed
from seqpack.data.pack import PackedColumns, materialize, materialize_reference, pack_sequences
from seqpack.data.sequences import IGNORE_INDEX, Sequences, from_lists
from seqpack.data.trl import trl_examples
from seqpack.data.unpack import unpack_predictions

__all__ = [
    "IGNORE_INDEX",
    "PackConfig",
    "PackedColumns",
    "PackedDataset",
    "Sequences",
    "build_packed_dataset",
    "build_sequences",
    "collate_packed",
    "from_lists",
    "load_packed",
    "materialize",
    "materialize_reference",
    "pack_sequences",
    "pack_task",
    "read_manifest",
    "trl_examples",
    "unpack_predictions",
    "write_packed",
]


def __getattr__(name: str) -> Any:
    if name in ("PackedDataset", "collate_packed"):
        from seqpack.data import torch_dataset

        return getattr(torch_dataset, name)
    raise AttributeError(f"module 'seqpack.data' has no attribute {name!r}")
