"""A packed directory loads where users load data: ``datasets.load_dataset("parquet", ...)`` gives the
columns with the manifest's dtypes and shapes (fixed-size lists stay fixed-size)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from seqpack.data import load_packed
from tests.golden.make_packed import GOLDEN


@pytest.mark.parametrize("case", ["clm-sharded", "mlm-store", "multilabel-jsonl", "qa-records"])
def test_load_dataset_parquet_keeps_the_columns_types(case: str) -> None:
    datasets = pytest.importorskip("datasets")
    d: Path = GOLDEN / case
    manifest, cols = load_packed(d, mmap=False)
    ds = datasets.load_dataset("parquet", data_files=str(d / "data" / "*.parquet"), split="train")
    assert ds.num_rows == manifest["num_packs"] and sorted(ds.column_names) == sorted(manifest["columns"])
    table = ds.with_format("arrow")[:]
    for name, spec in manifest["columns"].items():
        feature, shape = ds.features[name], []
        while hasattr(feature, "feature"):  # List(..., length=L) / Sequence: fixed-size lists keep their length
            shape.append(feature.length)
            feature = feature.feature
        assert (feature.dtype, shape) == (spec["dtype"], spec["shape"]), (name, ds.features[name], spec)
        flat = table.column(name).combine_chunks()
        for _ in shape:
            flat = flat.flatten()
        arr = flat.to_numpy(zero_copy_only=False).reshape(manifest["num_packs"], *shape)
        assert arr.dtype == np.dtype(spec["dtype"]) and np.array_equal(arr, cols[name])
