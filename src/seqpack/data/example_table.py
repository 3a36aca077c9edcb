"""The example table: what an example holds that token columns cannot (its images), beside the rows.

A packed row names its sequences' examples in ``example_ids`` ``(P, D)``; the example table holds one
row per packed example, keyed by that id, with whatever columns the task needs (any Arrow type:
image-text rows keep each example's encoded images and their patch grids). It is written as Parquet
parts under ``examples/`` (one per input shard of the pack job) and listed in the manifest::

    "example_table": {"key": "example_id", "columns": ["example_id", "images", "image_grids"],
                      "parts": [{"file": "examples/part-00000.parquet", "rows": 24, "checksum": "..."}]}

A reader joins a row to its examples by id (`ExampleTable.rows`); every part is read against its
checksum first, like the token parts.

    table = ExampleTable("packed/", manifest)
    table.rows([3, 0])          # [{"example_id": 3, "images": [...], ...}, {"example_id": 0, ...}]
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from seqpack.errors import UserError

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

EXAMPLES = "examples"  # the folder of the table's parts
KEY = "example_id"  # the column that keys it (the ids of the rows' example_ids column)
ROW_GROUP = 256  # examples per Parquet row group: what one lookup decodes


def part_name(i: int) -> str:
    """The file of part ``i``, relative to the dataset.

    >>> part_name(3)
    'examples/part-00003.parquet'
    """
    return f"{EXAMPLES}/part-{i:05d}.parquet"


def check_table(table: object, where: str) -> None:
    """A table the writer takes: a ``pyarrow.Table`` with an integer `KEY` column, each id once."""
    import pyarrow as pa

    if not isinstance(table, pa.Table) or KEY not in table.column_names:
        raise TypeError(f"{where}: the example table must be a pyarrow.Table with a {KEY!r} column")
    if not pa.types.is_integer(table.schema.field(KEY).type):
        raise TypeError(f"{where}: the example table's {KEY!r} column must hold integers")
    ids = table.column(KEY).to_numpy()
    if np.unique(ids).size != ids.size:
        raise UserError(f"{where}: the example table holds an example id twice")


def rebase(table: pa.Table, base: int) -> pa.Table:
    """``table`` with ``base`` added to every id (a shard's local ids made the dataset's)."""
    import pyarrow as pa

    if not base:
        return table
    ids = table.column(KEY).to_numpy().astype(np.int64) + base
    return table.set_column(table.column_names.index(KEY), KEY, pa.array(ids))


def write_part(table: pa.Table, path: str | os.PathLike[str]) -> None:
    """One part of the table, uncompressed (its bulk is encoded images, already compressed)."""
    import pyarrow.parquet as pq

    pq.write_table(table, str(path), row_group_size=ROW_GROUP, compression="none")


def table_entry(root: Path, files: Sequence[str]) -> dict[str, Any]:
    """The manifest's ``example_table`` for the written parts ``files`` (relative to ``root``)."""
    import pyarrow.parquet as pq

    from seqpack._stages import file_checksum

    parts = [
        {"file": f, "rows": pq.ParquetFile(root / f).metadata.num_rows, "checksum": file_checksum(root / f)}
        for f in files
    ]
    columns = pq.read_schema(root / files[0]).names if files else [KEY]
    return {"key": KEY, "columns": list(columns), "parts": parts}


def check_entry(entry: Any, root: Path, bad: Callable[[str], Exception]) -> None:
    """The manifest's ``example_table`` as `table_entry` writes it; ``bad(what)`` makes the error."""
    ok = isinstance(entry, dict) and entry.get("key") == KEY and isinstance(entry.get("parts"), list)
    ok = ok and all(
        isinstance(p, dict)
        and isinstance(p.get("file"), str)
        and isinstance(p.get("rows"), int)
        and not isinstance(p["rows"], bool)
        and p["rows"] >= 0
        and isinstance(p.get("checksum", ""), str)
        for p in entry["parts"]
    )
    cols = entry.get("columns", [KEY]) if isinstance(entry, dict) else None
    ok = ok and isinstance(cols, list) and KEY in cols and all(isinstance(c, str) for c in cols)
    if not ok:
        raise bad(
            f"example_table must name its key ({KEY!r}) among its columns and list its parts as {{file, rows, checksum}}"
        )
    real = Path(os.path.realpath(root))
    seen: set[Path] = set()
    for p in entry["parts"]:
        f = Path(os.path.realpath(real / p["file"]))
        if real not in f.parents:
            raise bad(f"example table part {p['file']!r} lies outside the dataset")
        if f in seen:
            raise bad(f"it lists the example table part {p['file']!r} twice")
        seen.add(f)


def rows_example_ids(path: str | os.PathLike[str], manifest: Mapping[str, Any]) -> Iterator[tuple[Path, np.ndarray]]:
    """``(part, ids)`` for each Parquet part the manifest lists: the distinct example ids its rows
    name (their ``example_ids``, padding left out), which the example table must hold."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for shard in manifest["shards"]:
        f = Path(path) / shard["file"]
        try:
            col = pq.read_table(f, columns=["example_ids"]).column(0).combine_chunks()
        except (pa.ArrowException, OSError, KeyError) as e:  # pyarrow's own error types, and the file system's
            raise UserError(f"{f}: missing or corrupt Parquet shard ({e})") from e
        while pa.types.is_fixed_size_list(col.type) or pa.types.is_list(col.type):
            col = col.flatten()
        ids = np.unique(col.to_numpy(zero_copy_only=False).astype(np.int64))
        yield f, ids[ids >= 0]


class ExampleTable:
    """The example table of a packed dataset, joined by id (see the module); parts are read against
    their checksums when opened, row groups on demand (the last few kept).

    Args:
        path: the packed dataset's directory.
        manifest: its manifest (`read_manifest`).
        cache_groups: row groups kept in memory.

    Raises:
        UserError: no example table, or a part missing, changed or inconsistent with the rows.
    """

    def __init__(self, path: str | os.PathLike[str], manifest: Mapping[str, Any], *, cache_groups: int = 4) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        from seqpack._stages import verify_file

        self.path = Path(path)
        entry = manifest.get("example_table")
        if entry is None:
            raise UserError(f"{self.path}: holds no example table (its task keeps nothing beside its token columns)")
        self.columns: list[str] = list(entry.get("columns", [KEY]))
        self._files, ids, where, starts = [], [], [], []
        for k, part in enumerate(entry["parts"]):
            f = self.path / part["file"]
            verify_file(f, part.get("checksum"))
            try:
                pf = pq.ParquetFile(f)
                got = pf.read(columns=[KEY]).column(0).to_numpy().astype(np.int64)
            except (pa.ArrowException, OSError) as e:  # pyarrow's own error types, and the file system's
                raise UserError(f"{f}: missing or corrupt example table part ({e})") from e
            if got.size != part["rows"]:
                raise UserError(f"{f}: {got.size} examples, the manifest says {part['rows']}; re-run seqpack pack")
            lacks = [c for c in self.columns if c not in pf.schema_arrow.names]
            if lacks:
                raise UserError(
                    f"{f}: no column {lacks[0]!r}, which the manifest's example table lists; re-run seqpack pack"
                )
            sizes = [pf.metadata.row_group(g).num_rows for g in range(pf.num_row_groups)]
            starts.append(np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64))
            self._files.append(f)
            ids.append(got)
            where.append(np.stack([np.full(got.size, k), np.arange(got.size)], axis=1))
        all_ids = np.concatenate(ids) if ids else np.zeros(0, np.int64)
        order = np.argsort(all_ids, kind="stable")
        self._ids = all_ids[order]
        self._where = (np.concatenate(where) if where else np.zeros((0, 2), np.int64))[order]
        if np.any(np.diff(self._ids) == 0):
            raise UserError(f"{self.path}: its example table holds an example id twice; re-run seqpack pack")
        if "example_ids" in manifest.get("columns", {}):
            for f, named in rows_example_ids(self.path, manifest):
                at = np.minimum(np.searchsorted(self._ids, named), max(self._ids.size - 1, 0))
                lost = named[self._ids[at] != named] if self._ids.size else named
                if lost.size:
                    raise UserError(
                        f"{f}: its rows name example {lost[0]}, which the example table lacks (a part of "
                        f"{EXAMPLES}/ emptied, left out or from another dataset); re-run seqpack pack"
                    )
        self._starts = starts
        self._open: dict[int, pq.ParquetFile] = {}
        self._cache: OrderedDict[tuple[int, int], list[dict[str, Any]]] = OrderedDict()
        self.cache_groups = max(1, cache_groups)

    def __len__(self) -> int:
        return int(self._ids.size)

    def __getstate__(self) -> dict[str, Any]:  # DataLoader workers reopen their own files
        state = self.__dict__.copy()
        state["_open"], state["_cache"] = {}, OrderedDict()
        return state

    def _group(self, k: int, g: int) -> list[dict[str, Any]]:
        import pyarrow.parquet as pq

        if (k, g) in self._cache:
            self._cache.move_to_end((k, g))
            return self._cache[k, g]
        if k not in self._open:
            self._open[k] = pq.ParquetFile(self._files[k], memory_map=True)
        rows: list[dict[str, Any]] = self._open[k].read_row_group(g).to_pylist()
        self._cache[k, g] = rows
        while len(self._cache) > self.cache_groups:
            self._cache.popitem(last=False)
        return rows

    def rows(self, example_ids: Sequence[int] | np.ndarray) -> list[dict[str, Any]]:
        """The table's row of each id, in the order given; a ``KeyError`` names an id it lacks.

        Args:
            example_ids: the ids, ints `(K,)`.

        Returns:
            One dict per id, by column name.
        """
        ids = np.asarray(example_ids, dtype=np.int64).reshape(-1)
        at = np.searchsorted(self._ids, ids)
        out = []
        for e, a in zip(ids.tolist(), at.tolist()):
            if a >= self._ids.size or self._ids[a] != e:
                raise KeyError(f"{self.path}: example {e} is not in its example table")
            k, r = (int(x) for x in self._where[a])
            g = int(np.searchsorted(self._starts[k], r, side="right") - 1)
            out.append(self._group(k, g)[r - int(self._starts[k][g])])
        return out


__all__ = ["EXAMPLES", "KEY", "ExampleTable", "check_table", "part_name", "rebase", "table_entry"]
