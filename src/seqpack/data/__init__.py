"""The packed format alone: sequences before packing, the packed columns,
Parquet parts + ``manifest.json`` (+ optional ``.bin``, + the example table), lazy readers, the torch ``Dataset``,
the padded view, predictions unpacked, and TRL's padding-free examples.

Everything but `PackedDataset` and `collate_packed` is numpy/pyarrow;
those two import torch on first use. The pack job that writes this format is
`seqpack.pipeline` (``PackConfig``, ``build_packed_dataset``).
"""

from __future__ import annotations

from typing import Any

from seqpack.data.columns import (
    PackedColumns,
    materialize,
    materialize_oracle,
    pack_sequences,
)
from seqpack.data.example_table import ExampleTable
from seqpack.data.format import (
    WriteOptions,
    add_derived_columns,
    load_packed,
    read_manifest,
    write_packed,
)
from seqpack.data.hf_rows import hf_dataset
from seqpack.data.sampler import BalancedSampler, read_schedule
from seqpack.data.sequences import IGNORE_INDEX, Sequences, from_lists
from seqpack.data.trl import trl_examples
from seqpack.data.unpack import unpack_predictions

__all__ = [
    "IGNORE_INDEX",
    "BalancedSampler",
    "ExampleTable",
    "PackedColumns",
    "PackedDataset",
    "Sequences",
    "add_derived_columns",
    "collate_packed",
    "from_lists",
    "hf_dataset",
    "load_packed",
    "materialize",
    "materialize_oracle",
    "pack_sequences",
    "read_manifest",
    "read_schedule",
    "trl_examples",
    "unpack_predictions",
    "write_packed",
    "WriteOptions",
]


def __getattr__(name: str) -> Any:
    if name in ("PackedDataset", "collate_packed"):
        from seqpack.data import torch_dataset

        return getattr(torch_dataset, name)
    raise AttributeError(f"module 'seqpack.data' has no attribute {name!r}")
