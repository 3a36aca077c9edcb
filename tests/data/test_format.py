"""A packed directory loads where users load data: ``datasets.load_dataset("parquet", ...)`` gives the
stored columns with the manifest's dtypes and shapes (fixed-size lists stay fixed-size), and
:func:`add_derived_columns` gives the derived ones (clm's labels) equal to seqpack's own readers'."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from seqpack.data import add_derived_columns, load_packed
from tests.golden.make_packed import GOLDEN


@pytest.mark.parametrize("case", ["clm-sharded", "mlm-store", "multilabel-jsonl", "qa-records"])
def test_load_dataset_parquet_keeps_the_columns_types(case: str) -> None:
    datasets = pytest.importorskip("datasets")
    d: Path = GOLDEN / case
    manifest, cols = load_packed(d, mmap=False)
    ds = datasets.load_dataset("parquet", data_files=str(d / "data" / "*.parquet"), split="train")
    derived = manifest.get("derived_columns", {})
    assert set(derived) == ({"labels", "segment_ids"} if case == "clm-sharded" else {"segment_ids"})
    stored = [c for c in manifest["columns"] if c not in derived]
    assert ds.num_rows == manifest["num_packs"] and sorted(ds.column_names) == sorted(stored)
    ds = ds.map(add_derived_columns(d), batched=True, batch_size=7)  # batches that do not divide the rows
    assert sorted(ds.column_names) == sorted(manifest["columns"])
    table = ds.with_format("arrow")[:]
    for name, spec in manifest["columns"].items():
        feature, shape = ds.features[name], []
        while hasattr(feature, "feature"):  # List(..., length=L) / Sequence: fixed-size lists keep their length
            shape.append(feature.length)
            feature = feature.feature
        if name not in derived:  # map() types what it is given: the derived columns come back as lists
            assert (feature.dtype, shape) == (spec["dtype"], spec["shape"]), (name, ds.features[name], spec)
        shape = spec["shape"]
        flat = table.column(name).combine_chunks()
        for _ in shape:
            flat = flat.flatten()
        arr = flat.to_numpy(zero_copy_only=False).reshape(manifest["num_packs"], *shape)
        assert arr.dtype == np.dtype(spec["dtype"]) and np.array_equal(arr, cols[name])


@pytest.mark.parametrize("case", ["clm-sharded", "qa-records"])
def test_plain_encoding_for_any_parquet_reader(case: str, tmp_path: Path) -> None:
    """``encoding="plain"`` writes no BYTE_STREAM_SPLIT column (for Parquet readers without it on
    integers); the values are the default encoding's."""
    import pyarrow.parquet as pq

    from tests.golden.make_packed import build

    def encodings(d: Path) -> set[str]:
        md = pq.ParquetFile(next((d / "data").glob("*.parquet"))).metadata
        return {
            e
            for g in range(md.num_row_groups)
            for c in range(md.num_columns)
            for e in md.row_group(g).column(c).encodings
        }

    plain = build(case, tmp_path / "plain", tmp_path / "w1", encoding="plain")
    build(case, tmp_path / "bss", tmp_path / "w2")
    assert plain["encoding"] == "plain" and "BYTE_STREAM_SPLIT" not in encodings(tmp_path / "plain")
    assert "BYTE_STREAM_SPLIT" in encodings(tmp_path / "bss")
    a, b = load_packed(tmp_path / "plain", mmap=False)[1], load_packed(tmp_path / "bss", mmap=False)[1]
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


DTYPES = [
    "int8",
    "uint8",
    "int16",
    "uint16",
    "int32",
    "uint32",
    "int64",
    "uint64",
    "float16",
    "float32",
    "float64",
    "bool",
]


@pytest.mark.parametrize("dtype", DTYPES)
def test_arrow_columns_without_pandas_equal_pyarrows_own(dtype: str) -> None:
    """A column is an Arrow array over numpy's buffer (pa.array would import pandas to ask whether it
    was given a Series): the same array pa.array makes, and the same numpy dtype back."""
    pa = pytest.importorskip("pyarrow")
    from seqpack.data.format import _arrow_column, numpy_dtype

    a = (np.arange(24) % 5).astype(dtype).reshape(2, 3, 4)[:, ::-1]  # not contiguous
    col = _arrow_column(a)
    assert col.type == pa.list_(
        pa.field(
            "element",
            pa.list_(pa.field("element", pa.from_numpy_dtype(np.dtype(dtype)), nullable=False), 4),
            nullable=False,
        ),
        3,
    )
    assert col.flatten().flatten().equals(pa.array(np.ascontiguousarray(a).reshape(-1)))
    t = col.type.value_type.value_type
    assert numpy_dtype(t) == np.dtype(t.to_pandas_dtype()) == np.dtype(dtype)


def test_writing_a_packed_part_imports_no_pandas(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    code = (
        "import json, sys\nimport numpy as np\nfrom pathlib import Path\n"
        "from seqpack.data.format import parquet_column_specs, write_parquet_part\n"
        f"p = Path({str(tmp_path / 'part.parquet')!r})\n"
        "write_parquet_part(p, {'input_ids': np.ones((4, 8), np.uint16), 'num_sequences': np.ones(4, np.uint8)}, 0, 4, 2, 'zstd')\n"
        "specs = parquet_column_specs(p)\n"
        "print(json.dumps(['pandas' in sys.modules, specs]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    pandas_loaded, specs = json.loads(out)
    assert not pandas_loaded
    assert specs == {"input_ids": {"dtype": "uint16", "shape": [8]}, "num_sequences": {"dtype": "uint8", "shape": []}}
