"""Packed datasets on disk: Parquet shards + ``manifest.json`` (written last), optional ``.bin``.

Layout::

    DIR/manifest.json              format version, task, plan, histogram, efficiency, columns, shards
    DIR/data/part-00000.parquet    rows = packs; (P, L) columns as fixed-size lists
    DIR/bin/<column>.bin           (optional) raw C-order arrays for zero-copy np.memmap

``datasets.load_dataset("parquet", data_files=f"{DIR}/data/*.parquet")`` loads it;
`load_packed` reads it back into numpy arrays (memory-mapped with ``.bin``).
The directory appears only complete: it is built in a temp dir and renamed.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from seqpack._atomic import OutputKind, atomic_directory, read_versioned_json
from seqpack._parallel import default_workers
from seqpack._stages import verify_file
from seqpack._version import __version__
from seqpack.data.columns import PackedColumns
from seqpack.data.derived import check_rules, derive_columns, stored_needed
from seqpack.errors import UserError

if TYPE_CHECKING:
    import pyarrow as pa

    from seqpack.packing import PackingPlan

FORMAT_VERSION = 1
#: the version of a dataset whose Parquet parts leave out derived columns (``derived_columns``,
#: `seqpack.data.derived`): a reader that cannot rebuild them refuses it instead of missing them
DERIVED_FORMAT_VERSION = 2
READS = (FORMAT_VERSION, DERIVED_FORMAT_VERSION)
KIND = "seqpack.packed_dataset"
MANIFEST = "manifest.json"
#: what a packed dataset directory is: `--overwrite` replaces only these
OUTPUT = OutputKind("packed dataset", (MANIFEST, "kind", KIND))
#: the manifest's own checksum, its last key (`manifest_checksum`): a manifest edited by hand, or without
#: it, is refused
CHECKSUM = "manifest_checksum"
SCHEDULE = "schedule.npy"  # optional: balanced data-parallel steps (the manifest's "schedule")
COMPRESSION = ("none", "snappy", "zstd", "lz4", "gzip")
#: per-token columns: each row holds ``max_len`` of them
TOKEN_COLUMNS = ("input_ids", "segment_ids", "position_ids", "token_type_ids")
#: columns of ids and counts (any integer type, never a float)
INTEGER_COLUMNS = (*TOKEN_COLUMNS, "num_sequences", "example_ids")
#: Parquet encodings of the numeric columns: BYTE_STREAM_SPLIT (`parquet_encodings`; read by
#: pyarrow >= 16, so ``datasets``, and DuckDB since 2026-07) or PLAIN (read by any Parquet reader)
ENCODINGS = ("byte_stream_split", "plain")


#: the task's facts every manifest records (`DatasetFacts`)
FACTS = ("token_labels", "float_labels", "causal_lm")


@dataclass(frozen=True)
class DatasetFacts:
    """What a reader of packed rows must know of the task that wrote them, read from the manifest
    (the pack job writes these keys from the task), so that the format needs no task registry.

    >>> DatasetFacts.of({"token_labels": True, "float_labels": False, "causal_lm": True})
    DatasetFacts(token_labels=True, float_labels=False, causal_lm=True)
    """

    token_labels: bool  # ``labels`` is a per-token (P, L) column
    float_labels: bool  # ``labels`` becomes float32 (multi-hot)
    causal_lm: bool  # trained by a causal LM (the model shifts the labels)

    @classmethod
    def of(cls, manifest: Mapping[str, Any], where: str | os.PathLike[str] = "the packed dataset") -> DatasetFacts:
        """The facts ``manifest`` records; one that lacks any (or holds a non-boolean) is refused,
        naming ``where`` (the dataset's directory)."""
        if not all(isinstance(manifest.get(n), bool) for n in FACTS):
            raise UserError(
                f"{where}: its manifest does not record {', '.join(FACTS)} as true or false, which readers of "
                "packed rows need; pack the data again with seqpack pack"
            )
        return cls(*(manifest[n] for n in FACTS))


def manifest_of(
    pc: PackedColumns, *, extra: dict[str, Any] | None = None, derived: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Everything a reader (or a person) needs to know about the packed rows."""
    specs = {k: {"dtype": v.dtype.name, "shape": list(v.shape[1:])} for k, v in pc.columns.items()}
    return manifest_fields(
        pc.task, pc.packing.plan, pc.max_len, pc.max_depth, specs, {**pc.info, **(extra or {})}, derived=derived
    )


def manifest_fields(
    task: str,
    plan: PackingPlan,
    max_len: int,
    max_depth: int,
    columns: dict[str, Any],
    extra: dict[str, Any],
    *,
    derived: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """`manifest_of` from its parts (the sharded writer has no columns in memory). ``extra`` holds
    the task's `FACTS` (`DatasetFacts`: a reader refuses rows without them) and any other fields;
    ``derived``: the columns left out of the Parquet parts, and the rule that rebuilds each
    (`seqpack.data.derived`)."""
    missing = [n for n in FACTS if not isinstance(extra.get(n), bool)]
    if missing:
        raise TypeError(
            f"a packed dataset's manifest needs the task's facts: extra has no boolean {', '.join(missing)}"
        )
    plan_d = plan.to_dict()
    plan_d.pop("seconds", None)  # timings would make equal inputs give different bytes
    plan_d["info"] = {k: v for k, v in plan.info.items() if "seconds" not in k}
    return {
        "kind": KIND,
        "format_version": DERIVED_FORMAT_VERSION if derived else FORMAT_VERSION,
        "seqpack_version": __version__,  # what wrote it
        "task": task,
        "max_len": max_len,
        "max_depth": max_depth,
        "num_packs": int(plan.num_packs),
        "num_sequences": plan.num_sequences,
        "num_tokens": plan.num_tokens,
        "efficiency": plan.efficiency,
        "packing_factor": plan.packing_factor,
        **extra,
        "histogram": {"index": "length - 1", "counts": plan.histogram().tolist()},
        "plan": plan_d,
        "columns": columns,
        **({"derived_columns": dict(derived)} if derived else {}),
    }


def manifest_checksum(m: Mapping[str, Any]) -> str:
    """``"sha256:HEX"`` of the manifest's canonical JSON (keys sorted, no spaces), its own `CHECKSUM`
    key left out: what a reader checks the manifest against, so that an edit (a histogram, a count, a
    part) is refused, not read as if real.

    >>> manifest_checksum({"b": [1, 2.5], "a": "x"}) == manifest_checksum({"a": "x", "b": [1, 2.5], CHECKSUM: "?"})
    True
    """
    body = {k: v for k, v in m.items() if k != CHECKSUM}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def write_manifest(directory: Path, m: dict[str, Any]) -> dict[str, Any]:
    """Write ``directory/manifest.json`` (`dump_manifest`) with its checksum (`manifest_checksum`) as
    its last key, which ``m`` gains too; returns ``m``. Every writer of a packed dataset ends with this."""
    m.pop(CHECKSUM, None)
    m[CHECKSUM] = manifest_checksum(m)
    (directory / MANIFEST).write_text(dump_manifest(m), encoding="utf-8")
    return m


def dump_manifest(m: dict[str, Any]) -> str:
    """JSON with one top-level key per line (long lists stay on their line)."""
    lines = [f" {json.dumps(k)}: {json.dumps(v)}" for k, v in m.items()]
    return "{\n" + ",\n".join(lines) + "\n}\n"


def _arrow_column(a: np.ndarray) -> pa.Array:
    """``(N, *shape)`` -> an Arrow column of (nested) fixed-size lists; no value may be null, so
    Parquet stores it REQUIRED (no definition levels to write or read)."""
    import pyarrow as pa

    flat = np.ascontiguousarray(a).reshape(-1)
    if flat.dtype.kind in "iuf":  # the array over numpy's buffer: pa.array would import pandas to ask
        arr = pa.Array.from_buffers(pa.from_numpy_dtype(flat.dtype), len(flat), [None, pa.py_buffer(flat)])
    else:
        arr = pa.array(flat)
    for width in reversed(a.shape[1:]):
        item = pa.field("element", arr.type, nullable=False)
        arr = pa.FixedSizeListArray.from_arrays(arr, type=pa.list_(item, width))
    return arr


def _leaf_path(name: str, ndim: int) -> str:
    """A column's leaf in Parquet: ``input_ids`` of ``(P, L)`` is ``input_ids.list.element``."""
    return name + ".list.element" * (ndim - 1)


def parquet_encodings(cols: Mapping[str, np.ndarray]) -> dict[str, str]:
    """BYTE_STREAM_SPLIT for every numeric column (Parquet's own encoding, read by pyarrow >= 16 and so by
    ``datasets``): token ids widened to Parquet's INT32 have two zero bytes each, which the split gathers
    into runs, so zstd compresses half the data: a part is written faster and smaller
    (benchmarks/results/pack_profile.txt).

    >>> parquet_encodings({"input_ids": np.zeros((2, 4), np.uint16), "num_sequences": np.zeros(2, np.uint8)})
    {'input_ids.list.element': 'BYTE_STREAM_SPLIT', 'num_sequences': 'BYTE_STREAM_SPLIT'}
    """
    return {_leaf_path(k, v.ndim): "BYTE_STREAM_SPLIT" for k, v in cols.items() if v.dtype.kind in "iuf"}


def write_parquet_part(
    path: Path,
    cols: dict[str, np.ndarray],
    lo: int,
    hi: int,
    row_group: int,
    compression: str,
    encoding: str = ENCODINGS[0],
) -> None:
    """Rows ``lo:hi`` of ``cols`` as one Parquet file, in row groups of ``row_group`` rows."""
    write_parquet_groups(path, [{k: v[lo:hi] for k, v in cols.items()}], row_group, compression, encoding)


def write_parquet_groups(
    path: Path, groups: Iterable[dict[str, np.ndarray]], row_group: int, compression: str, encoding: str = ENCODINGS[0]
) -> None:
    """One Parquet file from consecutive blocks of rows (each ``column -> array``, the same columns),
    so that only one block need be in memory; a block of up to ``row_group`` rows is one row group.
    The bytes are those of writing all the blocks as one table. ``encoding``: one of `ENCODINGS`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    level = 1 if compression == "zstd" else None  # fast: packed columns are written once, read often
    writer = None
    try:
        for cols in groups:
            arrays = {k: _arrow_column(v) for k, v in cols.items()}
            schema = pa.schema([pa.field(k, a.type, nullable=False) for k, a in arrays.items()])
            table = pa.Table.from_arrays(list(arrays.values()), schema=schema)
            if writer is None:
                writer = pq.ParquetWriter(
                    path,
                    table.schema,
                    compression=compression,
                    compression_level=level,
                    use_dictionary=False,
                    write_statistics=False,
                    store_schema=True,
                    column_encoding=parquet_encodings(cols) if encoding == ENCODINGS[0] else None,
                )
            writer.write_table(table, row_group_size=row_group)
            del cols, arrays, table  # before the next block is made: one block in memory at a time
    finally:
        if writer is not None:
            writer.close()


#: Tokens per Parquet shard when shard_packs is not given: memory per shard stays ~ 2**24 x row bytes
SHARD_TOKENS = 1 << 24


def default_shard_packs(max_len: int) -> int:
    """Packs per shard so that a shard holds about `SHARD_TOKENS` tokens (at most 50,000 packs).

    >>> default_shard_packs(512), default_shard_packs(2048)
    (32768, 8192)
    """
    return max(1, min(50_000, SHARD_TOKENS // max_len))


#: Tokens per Parquet row group when row_group_packs is not given. A reader decodes (and caches) a whole
#: row group to return any of its rows, and the writer lays one out at a time: at 2**20 tokens (512 packs
#: at 2048) than at 4,096 packs a group, PackedRows reads faster in order and at random, and pack
#: peaks at half the memory in the same time (benchmarks/row_groups.py measures it)
ROW_GROUP_TOKENS = 1 << 20


def default_row_group_packs(max_len: int) -> int:
    """Packs per Parquet row group so that a row group holds about `ROW_GROUP_TOKENS` tokens.

    >>> default_row_group_packs(512), default_row_group_packs(2048), default_row_group_packs(1 << 21)
    (2048, 512, 1)
    """
    return max(1, ROW_GROUP_TOKENS // max_len)


@dataclass(frozen=True, kw_only=True)
class WriteOptions:
    """How a packed dataset's files are written: Parquet parts of ``shard_packs`` packs (default: about
    `SHARD_TOKENS` tokens each), in row groups of ``row_group_packs`` packs (default: about
    `ROW_GROUP_TOKENS` tokens each), ``compression``, the ``encoding`` of the numeric columns, optional
    ``.bin`` columns; ``overwrite`` replaces an existing output. Validated here, once, for every writer.

    >>> WriteOptions(compression="lz4").parts(max_len=2048), WriteOptions().row_groups(max_len=2048)
    (8192, 512)
    >>> WriteOptions(shard_packs=0)
    Traceback (most recent call last):
    ...
    seqpack.errors.UserError: shard_packs must be >= 1, got 0
    """

    overwrite: bool = False
    export_bin: bool = False
    compression: str = "zstd"
    encoding: str = ENCODINGS[0]  # of the numeric Parquet columns (plain: readable by any Parquet reader)
    shard_packs: int | None = None
    row_group_packs: int | None = None

    def __post_init__(self) -> None:
        if self.compression not in COMPRESSION:
            raise UserError(f"compression must be one of {'|'.join(COMPRESSION)}, got {self.compression!r}")
        if self.encoding not in ENCODINGS:
            raise UserError(f"encoding must be one of {'|'.join(ENCODINGS)}, got {self.encoding!r}")
        for name in ("shard_packs", "row_group_packs"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise UserError(f"{name} must be >= 1, got {v}")

    def parts(self, *, max_len: int) -> int:
        """Packs per Parquet part.

        Args:
            max_len: the row length, which sets the default.

        Returns:
            The packs per part.
        """
        return self.shard_packs or default_shard_packs(max_len)

    def row_groups(self, *, max_len: int) -> int:
        """Packs per Parquet row group.

        Args:
            max_len: the row length, which sets the default.

        Returns:
            The packs per row group.
        """
        return self.row_group_packs or default_row_group_packs(max_len)


def write_packed(
    pc: PackedColumns,
    out: str | os.PathLike[str],
    *,
    options: WriteOptions | None = None,
    extra: dict[str, Any] | None = None,
    workers: int | None = None,
    arrays: dict[str, np.ndarray] | None = None,
    derived: Mapping[str, str] | None = None,
    beside: Callable[[Path], None] | None = None,
) -> dict[str, Any]:
    """Write ``pc`` to ``out`` (atomically, manifest last) as ``options`` say. ``pc.examples``, when
    given, is written as the example table (`seqpack.data.example_table`).

    Args:
        pc: the packed rows.
        out: the dataset's directory.
        options: how the files are written (`None`: `WriteOptions()`).
        extra: more manifest fields, the task's `FACTS` among them (`DatasetFacts`).
        workers: threads writing the parts (`None`: the cores this process may use).
        arrays: more files of the dataset, `name -> array` saved as `name` (`.npy`; the manifest names them).
        derived: columns left out of the Parquet parts, `name -> rule` (`seqpack.data.derived`).
        beside: writes more files the rows' readers need (a task's processor) into the dataset's
            directory, before its manifest.

    Returns:
        The manifest written.

    Raises:
        FileExistsError: a dataset already at `out` without `options.overwrite`, or a folder seqpack did not make.
    """
    opts = options if options is not None else WriteOptions()
    overwrite, export_bin, compression, encoding = opts.overwrite, opts.export_bin, opts.compression, opts.encoding
    workers = workers or default_workers()  # pyarrow writes shards without the GIL
    if workers < 1:
        raise UserError(f"workers must be >= 1, got {workers}")
    shard_packs, row_group_packs = opts.parts(max_len=pc.max_len), opts.row_groups(max_len=pc.max_len)
    derived = dict(derived or {})
    check_rules(derived, [c for c in pc.columns if c not in derived], "write_packed")
    manifest = manifest_of(pc, extra=extra, derived=derived)
    stored = {k: v for k, v in pc.columns.items() if k not in derived}
    P = pc.num_packs
    bounds = [(lo, min(P, lo + shard_packs)) for lo in range(0, P, shard_packs)]
    shards: list[dict[str, Any]] = [
        {"file": f"data/part-{i:05d}.parquet", "rows": hi - lo} for i, (lo, hi) in enumerate(bounds)
    ]
    with atomic_directory(out, kind=OUTPUT, overwrite=overwrite) as tmp:
        (tmp / "data").mkdir()
        with ThreadPoolExecutor(max_workers=workers) as ex:
            jobs = [
                ex.submit(write_parquet_part, tmp / s["file"], stored, lo, hi, row_group_packs, compression, encoding)
                for s, (lo, hi) in zip(shards, bounds)
            ]
            for j in jobs:
                j.result()
        if export_bin:
            (tmp / "bin").mkdir()
            for name, col in pc.columns.items():
                np.ascontiguousarray(col).tofile(tmp / "bin" / f"{name}.bin")
        for name, arr in (arrays or {}).items():
            np.save(tmp / name, arr)
        if pc.examples is not None:
            manifest["example_table"] = write_example_table(tmp, [pc.examples])
        if beside is not None:
            beside(tmp)
        add_checksums(tmp, shards, workers=workers)
        manifest["shards"] = shards
        manifest["compression"] = compression
        manifest["encoding"] = encoding
        manifest["bin"] = export_bin
        if export_bin:
            manifest["bin_checksums"] = bin_checksums(tmp, pc.columns)
        write_manifest(tmp, manifest)
    return manifest


def write_example_table(root: Path, tables: list[Any]) -> dict[str, Any]:
    """The example tables ``tables`` (one per part, each checked) written under ``root``; returns
    the manifest's ``example_table``."""
    from seqpack.data.example_table import EXAMPLES, check_table, part_name, table_entry, write_part

    (root / EXAMPLES).mkdir()
    for i, t in enumerate(tables):
        check_table(t, "write_packed")
        write_part(t, root / part_name(i))
    return table_entry(root, [part_name(i) for i in range(len(tables))])


def add_checksums(root: Path, shards: list[dict[str, Any]], *, workers: int | None = None) -> None:
    """Record each written part's ``"SIZE:CRC32"`` in its manifest entry (``checksum``): what a
    resumed training run is checked against (`verify_parts`), and part of the dataset's identity."""
    from seqpack._stages import file_checksum

    with ThreadPoolExecutor(max_workers=workers or default_workers()) as ex:  # zlib reads without the GIL
        for s, c in zip(shards, ex.map(lambda s: file_checksum(root / s["file"]), shards)):
            s["checksum"] = c


def verify_parts(path: str | os.PathLike[str], manifest: Mapping[str, Any]) -> None:
    """Read every Parquet part against the checksum its manifest recorded; ``ValueError`` naming a
    part that changed since it was written (parts of datasets written before checksums pass)."""
    for s in manifest["shards"]:
        verify_file(Path(path) / s["file"], s.get("checksum"))


def bin_checksums(root: Path, names: Iterable[str]) -> dict[str, str]:
    """``{column: "SIZE:CRC32"}`` of the ``bin/`` files (the manifest's ``bin_checksums``)."""
    from seqpack._stages import file_checksum

    return {name: file_checksum(root / "bin" / f"{name}.bin") for name in names}


def parquet_column_specs(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Column dtypes and shapes (the manifest's ``columns``) from a written Parquet part's schema."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = {}
    for field in pq.read_schema(path):
        t, shape = field.type, []
        while pa.types.is_fixed_size_list(t):
            shape.append(t.list_size)
            t = t.value_type
        out[field.name] = {"dtype": numpy_dtype(t).name, "shape": shape}
    return out


def numpy_dtype(t: pa.DataType) -> np.dtype:
    """The numpy dtype of an Arrow integer, float or boolean type: what ``t.to_pandas_dtype()``
    gives, without the pandas import that method makes (slow, in ``seqpack pack``'s start-up).

        >>> import pyarrow as pa
        >>> numpy_dtype(pa.uint16()), numpy_dtype(pa.float32()), numpy_dtype(pa.bool_())
        (dtype('uint16'), dtype('float32'), dtype('bool'))
    """
    import pyarrow as pa

    if pa.types.is_integer(t):
        return np.dtype(f"{'u' if pa.types.is_unsigned_integer(t) else ''}int{t.bit_width}")
    if pa.types.is_floating(t):
        return np.dtype(f"float{t.bit_width}")
    if pa.types.is_boolean(t):
        return np.dtype(bool)
    return np.dtype(t.to_pandas_dtype())  # any other type: pyarrow's own answer


def read_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest of a packed dataset directory (checked kind, format version and the fields
    readers rely on, so that a hand-edited one is refused in one line, naming it).

    Args:
        path: the packed dataset's directory.

    Returns:
        The manifest, as read from its JSON.

    Raises:
        UserError: no manifest, another kind or format version, or a malformed field.
    """
    m = read_versioned_json(
        Path(path), MANIFEST, kind=KIND, version=READS, what="packed dataset", hint="make one with seqpack pack"
    )
    where = Path(path) / MANIFEST

    def bad(what: str) -> UserError:
        return UserError(f"{where}: {what} (edited or damaged); re-run seqpack pack")

    def count(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= 0

    if not count(m.get("num_packs")) or not count(m.get("max_len")) or not m["max_len"]:
        raise bad("num_packs and max_len must be non-negative integers")
    if not isinstance(m.get("task"), str) or not m["task"]:
        raise bad("task must name the task that packed it")
    for key in ("num_sequences", "num_tokens", "max_depth"):
        if not count(m.get(key)):
            raise bad(f"{key} must be a non-negative integer")
    hist = m.get("histogram")
    counts = hist.get("counts") if isinstance(hist, dict) else None
    if not isinstance(counts, list) or len(counts) != m["max_len"] or not all(count(c) for c in counts):
        raise bad(f"histogram must hold counts, one per length 1..max_len ({m['max_len']})")
    cols = m.get("columns")
    if not isinstance(cols, dict) or "input_ids" not in cols:
        raise bad("columns must name each column, input_ids among them")
    for name, spec in cols.items():
        ok = isinstance(spec, dict) and isinstance(spec.get("shape"), list) and all(count(x) for x in spec["shape"])
        try:
            ok = ok and np.dtype(spec["dtype"]).kind in "biuf"
        except (TypeError, KeyError):
            ok = False
        if not ok:
            raise bad(f"column {name!r} needs a numeric dtype and a shape of non-negative integers")
    L = m["max_len"]
    for name in TOKEN_COLUMNS + (("labels",) if m.get("token_labels") else ()):
        if name in cols and cols[name]["shape"] != [L]:
            raise bad(f"column {name!r} has shape {cols[name]['shape']}, not [max_len] = [{L}]")
    for name in INTEGER_COLUMNS:
        if name in cols and np.dtype(cols[name]["dtype"]).kind not in "iu":
            raise bad(f"column {name!r} is {cols[name]['dtype']}; it holds ids, an integer type")
    derived = m.get("derived_columns", {})
    if not isinstance(derived, dict) or not all(isinstance(v, str) and k in cols for k, v in derived.items()):
        raise bad("derived_columns must map columns it lists to rule names")
    if derived and m["format_version"] != DERIVED_FORMAT_VERSION:
        raise bad(f"derived_columns needs format_version {DERIVED_FORMAT_VERSION}")
    check_rules(derived, [c for c in cols if c not in derived], str(where))
    shards = m.get("shards")
    if not isinstance(shards, list) or not all(
        isinstance(s, dict)
        and isinstance(s.get("file"), str)
        and count(s.get("rows"))
        and isinstance(s.get("checksum", ""), str)
        for s in shards
    ):
        raise bad("shards must list {file, rows, checksum}")
    if sum(s["rows"] for s in shards) != m["num_packs"]:
        raise bad(f"its shards hold {sum(s['rows'] for s in shards):,} rows, not num_packs={m['num_packs']:,}")
    root = Path(os.path.realpath(path))
    seen: set[Path] = set()
    for s in shards:
        real = Path(os.path.realpath(root / s["file"]))
        if root not in real.parents:
            raise bad(f"shard file {s['file']!r} lies outside the dataset")
        if real in seen:
            raise bad(f"it lists the part {s['file']!r} twice, which would read its rows twice")
        seen.add(real)
    if "example_table" in m:
        from seqpack.data.example_table import check_entry

        check_entry(m["example_table"], root, bad)
    if CHECKSUM not in m:  # last: the messages above say what is wrong
        raise UserError(
            f"{where}: no {CHECKSUM} (edited by hand, or written before manifests carried their own checksum); "
            "re-run seqpack pack"
        )
    if m[CHECKSUM] != manifest_checksum(m):
        raise UserError(f"{where}: edited by hand (its checksum does not match); re-run seqpack pack")
    return m


def check_part(f: Path, meta: Any, shard: Mapping[str, Any], m: Mapping[str, Any], names: Iterable[str]) -> None:
    """A Parquet part against the manifest: its row count, and each of ``names`` (stored columns)
    present with the manifest's dtype and shape. ``meta``: the part's ``pyarrow`` file metadata."""
    if meta.num_rows != shard["rows"]:
        raise UserError(f"{f}: {meta.num_rows} rows, manifest says {shard['rows']}")
    import pyarrow as pa

    schema = meta.schema.to_arrow_schema()
    for name in names:
        if name not in schema.names:
            raise UserError(
                f"{f}: no column {name!r}, which the manifest lists as stored (an edited manifest, "
                "or derived_columns that lost it); re-run seqpack pack"
            )
        t, shape = schema.field(name).type, []
        while pa.types.is_fixed_size_list(t):
            shape.append(t.list_size)
            t = t.value_type
        spec = m["columns"][name]
        if shape != list(spec["shape"]) or numpy_dtype(t) != np.dtype(spec["dtype"]):
            raise UserError(
                f"{f}: column {name!r} is {numpy_dtype(t).name} {shape}, the manifest says "
                f"{spec['dtype']} {spec['shape']} (edited or from another dataset); re-run seqpack pack"
            )
    verify_file(f, shard.get("checksum"))  # last: the messages above say more about what differs


def manifest_histogram(path: str | os.PathLike[str]) -> np.ndarray:
    """Counts by length (index = length - 1) of a packed dataset's sequences."""
    return np.asarray(read_manifest(path)["histogram"]["counts"], dtype=np.int64)


def load_packed(
    path: str | os.PathLike[str], *, columns: list[str] | None = None, mmap: bool = True
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """``(manifest, {column: array})``; ``.bin`` columns are memory-mapped when present.

    Args:
        path: the packed dataset's directory.
        columns: the columns to read (`None`: all).
        mmap: memory-map the `.bin` columns where the dataset has them.

    Returns:
        `(manifest, columns)`: the manifest, and each column's array `(P, L)`, `(P, D)` or `(P,)`.

    Raises:
        UserError: no packed dataset at `path`, or an unknown column.
    """
    p = Path(path)
    m = read_manifest(p)
    names = list(m["columns"]) if columns is None else columns
    unknown = [c for c in names if c not in m["columns"]]
    if unknown:
        raise UserError(f"{p}: no column {unknown[0]!r} (columns: {', '.join(m['columns'])})")
    P = int(m["num_packs"])
    if m.get("bin") and mmap:
        return m, {c: bin_column(p, c, m["columns"][c], P, checksum=m.get("bin_checksums", {}).get(c)) for c in names}
    stored = _parquet_columns(p, m, stored_needed(names, m.get("derived_columns", {})))
    return m, derive_columns(stored, m, names)


def add_derived_columns(path: str | os.PathLike[str]) -> Callable[[Mapping[str, Any]], dict[str, np.ndarray]]:
    """For readers of the Parquet parts other than seqpack's: a function of a batch of rows that
    returns the derived columns the parts leave out (``{}`` when there are none), for
    ``datasets.Dataset.map(..., batched=True)``::

        ds = datasets.load_dataset("parquet", data_files="packed/data/*.parquet", split="train")
        ds = ds.map(add_derived_columns("packed/"), batched=True)   # + clm's labels

    Args:
        path: the packed dataset's directory.

    Returns:
        A function of a batch (column name -> values) that returns the derived columns `(B, L)`.
    """
    m = read_manifest(path)
    derived = m.get("derived_columns", {})
    needs = set(stored_needed(list(derived), derived))

    def add(batch: Mapping[str, Any]) -> dict[str, np.ndarray]:
        cols = {k: np.asarray(v) for k, v in batch.items() if k in needs}
        return derive_columns(cols, m, list(derived))

    return add


def bin_column(p: Path, name: str, spec: dict[str, Any], P: int, *, checksum: str | None = None) -> np.ndarray:
    """A ``bin/`` column, memory-mapped, read once against its ``checksum`` (`verify_file`)."""
    path = p / "bin" / f"{name}.bin"
    dt = np.dtype(spec["dtype"])
    shape = (P, *spec["shape"])
    want = int(np.prod(shape)) * dt.itemsize
    if not path.is_file() or path.stat().st_size != want:
        raise UserError(f"{path}: missing or truncated (expected {want:,} bytes)")
    verify_file(path, checksum)
    return np.memmap(path, dtype=dt, mode="r", shape=shape) if want else np.zeros(shape, dt)


def _parquet_columns(p: Path, m: dict[str, Any], names: list[str]) -> dict[str, np.ndarray]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    parts: dict[str, list[np.ndarray]] = {c: [] for c in names}
    for shard in m["shards"]:
        f = p / shard["file"]
        try:
            meta = pq.ParquetFile(f).metadata
        except (pa.ArrowException, OSError) as e:  # pyarrow's own error types, and the file system's
            raise UserError(f"{f}: missing or corrupt Parquet shard ({e})") from e
        check_part(f, meta, shard, m, names)
        try:
            table = pq.read_table(f, columns=names, memory_map=True)
        except (pa.ArrowException, OSError) as e:  # pyarrow's own error types, and the file system's
            raise UserError(f"{f}: missing or corrupt Parquet shard ({e})") from e
        for c in names:
            spec = m["columns"][c]
            flat = table.column(c).combine_chunks()
            for _ in spec["shape"]:
                flat = flat.flatten()
            arr = flat.to_numpy(zero_copy_only=False).astype(spec["dtype"], copy=False)
            parts[c].append(arr.reshape(table.num_rows, *spec["shape"]))
    out = {}
    for c in names:
        spec = m["columns"][c]
        out[c] = np.concatenate(parts[c]) if parts[c] else np.zeros((0, *spec["shape"]), spec["dtype"])
    return out
