"""Rows of a packed dataset read on demand, never the whole dataset.

``.bin`` columns are memory-mapped (any row, zero copy until indexed). Parquet shards are
read one row group at a time (only the columns asked for), decoded to numpy and kept in a
small LRU cache, so sequential and row-group-local access is cheap and memory stays
bounded by ``cache_groups`` row groups whatever the dataset size. For shuffled access
over a dataset larger than memory, write it with ``--export-bin``.

    rows = PackedRows("packed/")
    batch = rows.take([7, 3])          # {"input_ids": (2, L), "num_sequences": (2,), ...}
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from seqpack.data.derived import derive_columns, stored_needed
from seqpack.data.format import bin_column, check_part, read_manifest
from seqpack.errors import UserError

if TYPE_CHECKING:
    import pyarrow.parquet as pq


class PackedRows:
    """Lazy row access to a packed dataset directory (see the module docstring)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        columns: Sequence[str] | None = None,
        mmap: bool = True,
        cache_groups: int = 4,
    ) -> None:
        self.path = Path(path)
        self.manifest = read_manifest(self.path)
        specs = self.manifest["columns"]
        self.names = list(specs) if columns is None else list(columns)
        unknown = [c for c in self.names if c not in specs]
        if unknown:
            raise UserError(f"{self.path}: no column {unknown[0]!r} (columns: {', '.join(specs)})")
        self.num_rows = int(self.manifest["num_packs"])
        self.cache_groups = max(1, cache_groups)
        self._bin = None
        if self.manifest.get("bin") and mmap:
            sums = self.manifest.get("bin_checksums", {})
            self._bin = {c: bin_column(self.path, c, specs[c], self.num_rows, checksum=sums.get(c)) for c in self.names}
            return
        import pyarrow as pa
        import pyarrow.parquet as pq

        files, groups, starts = [], [], []
        row = 0
        self._derived = self.manifest.get("derived_columns", {})
        self._stored = stored_needed(self.names, self._derived)  # what the row groups are read for
        for k, shard in enumerate(self.manifest["shards"]):
            f = self.path / shard["file"]
            try:
                meta = pq.ParquetFile(f).metadata
            except (pa.ArrowException, OSError) as e:  # pyarrow's own error types, and the file system's
                raise UserError(f"{f}: missing or corrupt Parquet shard ({e})") from e
            check_part(f, meta, shard, self.manifest, self._stored)
            files.append(f)
            for g in range(meta.num_row_groups):
                groups.append((k, g))
                starts.append(row)
                row += meta.row_group(g).num_rows
        self._files = files
        self._groups = groups
        self._starts = np.asarray([*starts, row], dtype=np.int64)
        self._open: dict[int, pq.ParquetFile] = {}
        self._cache: OrderedDict[int, dict[str, np.ndarray]] = OrderedDict()

    def __len__(self) -> int:
        return self.num_rows

    def __getstate__(self) -> dict[str, Any]:  # DataLoader workers reopen their own files
        state = self.__dict__.copy()
        state["_open"], state["_cache"] = {}, OrderedDict()
        return state

    def _group(self, i: int) -> dict[str, np.ndarray]:
        if i in self._cache:
            self._cache.move_to_end(i)
            return self._cache[i]
        import pyarrow as pa
        import pyarrow.parquet as pq

        k, g = self._groups[i]
        try:
            if k not in self._open:
                self._open[k] = pq.ParquetFile(self._files[k], memory_map=True)
            table = self._open[k].read_row_group(g, columns=self._stored)
        except (pa.ArrowException, OSError) as e:  # a corrupt zstd page, a truncated file: name the file
            raise UserError(
                f"{self._files[k]}: row group {g} cannot be read ({type(e).__name__}: {e}); "
                "the file is damaged, re-run seqpack pack"
            ) from e
        stored = {}
        for c in self._stored:
            spec = self.manifest["columns"][c]
            flat = table.column(c).combine_chunks()
            for _ in spec["shape"]:
                flat = flat.flatten()
            arr = flat.to_numpy(zero_copy_only=False).astype(spec["dtype"], copy=False)
            stored[c] = arr.reshape(table.num_rows, *spec["shape"])
        out = derive_columns(stored, self.manifest, self.names)
        self._cache[i] = out
        while len(self._cache) > self.cache_groups:
            self._cache.popitem(last=False)
        return out

    def take(self, indices: Sequence[int] | np.ndarray, columns: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Rows ``indices`` (in that order) of ``columns`` (default: all opened): ``(len(indices), ...)``."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        names = self.names if columns is None else list(columns)
        if idx.size and (idx.min() < -self.num_rows or idx.max() >= self.num_rows):
            raise IndexError(f"row out of range ({self.num_rows} packs)")
        idx = idx % max(self.num_rows, 1)
        if self._bin is not None:
            return {c: np.asarray(self._bin[c][idx]) for c in names}
        specs = self.manifest["columns"]
        out = {c: np.empty((idx.size, *specs[c]["shape"]), dtype=specs[c]["dtype"]) for c in names}
        grp = np.searchsorted(self._starts, idx, side="right") - 1
        for g in np.unique(grp).tolist():
            sel = grp == g
            data = self._group(g)
            for c in names:
                out[c][sel] = data[c][idx[sel] - self._starts[g]]
        return out

    def chunks(
        self, columns: Sequence[str] | None = None, rows: int = 4096
    ) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
        """``(first row, {column: rows})`` over the whole dataset in order, a bounded piece at a time."""
        step = rows if self._bin is not None else None
        if step is None:
            for g in range(len(self._groups)):
                data = self._group(g)
                yield int(self._starts[g]), {c: data[c] for c in (self.names if columns is None else columns)}
            return
        for lo in range(0, self.num_rows, step):
            yield lo, self.take(np.arange(lo, min(self.num_rows, lo + step)), columns)
