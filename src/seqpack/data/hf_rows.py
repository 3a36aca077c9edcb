"""A packed directory as a ``datasets.Dataset``: the one way, every column there.

The Parquet parts are memory-mapped as Arrow (``datasets.Dataset.from_parquet``) after the same
checks every seqpack reader makes (the manifest, the parts' checksums, the row count), and the
columns the parts leave out (``segment_ids``; clm's ``labels``) are made again by their rules
(`seqpack.data.format.add_derived_columns`), so the rows hold what `seqpack.data.PackedDataset`
gives. A dataset with an example table (`seqpack.data.example_table`: image-text rows' images) gets
each of its columns too, a row's value being its examples' values in order (lists joined)::

    ds = hf_dataset("packed/")          # columns: input_ids, position_ids, ..., segment_ids, labels
    ds = hf_dataset("vlm-packs/")       # ... and images, image_grids
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from seqpack.data.format import add_derived_columns, read_manifest, verify_parts
from seqpack.errors import UserError

if TYPE_CHECKING:
    import datasets


def hf_dataset(path: str | os.PathLike[str], *, cache_dir: str | os.PathLike[str] | None = None) -> datasets.Dataset:
    """The packed rows at ``path``, every column (the derived ones made again), as a
    ``datasets.Dataset``; ``cache_dir``: where ``datasets`` keeps its Arrow copy.

    Args:
        path: the packed dataset's directory.
        cache_dir: where `datasets` keeps its Arrow copy (`None`: its default).

    Returns:
        The `datasets.Dataset`, one row per pack.

    Raises:
        UserError: no packed dataset at `path`, or a damaged part.
    """
    import datasets

    m = read_manifest(path)
    verify_parts(path, m)  # the check every packed reader makes
    files = [str(Path(path) / s["file"]) for s in m["shards"]]  # the manifest's parts, nothing else in data/
    ds = datasets.Dataset.from_parquet(files, cache_dir=None if cache_dir is None else str(cache_dir))
    if len(ds) != int(m["num_packs"]):
        raise UserError(f"{path}: {len(ds)} rows in the Parquet shards, the manifest says {m['num_packs']}")
    if m.get("derived_columns"):
        ds = ds.map(add_derived_columns(path), batched=True, desc=None)
    if m.get("example_table"):
        ds = ds.map(add_example_columns(path, m), batched=True, desc=None)
    return ds


def add_example_columns(path: str | os.PathLike[str], manifest: Mapping[str, Any]) -> Any:
    """A function of a batch of packed rows that returns the example table's columns for each row
    (its examples' values in order, lists joined), for ``datasets.Dataset.map(..., batched=True)``."""
    import numpy as np

    from seqpack.data.example_table import KEY, ExampleTable

    table = ExampleTable(path, manifest)
    names = [c for c in table.columns if c != KEY]

    def add(batch: Mapping[str, Any]) -> dict[str, list[Any]]:
        out: dict[str, list[Any]] = {c: [] for c in names}
        for ids, n in zip(batch["example_ids"], batch["num_sequences"]):
            rows = table.rows(np.asarray(ids)[: int(n)])
            for c in names:
                joined: list[Any] = []
                for r in rows:
                    if isinstance(r[c], list):
                        joined.extend(r[c])
                    else:
                        joined.append(r[c])
                out[c].append(joined)
        return out

    return add


__all__ = ["hf_dataset"]
