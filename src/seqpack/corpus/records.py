"""Dict records (labelled examples) from ``.jsonl``, ``.parquet`` (files, or folders of them) or HF ``datasets``.

    >>> list(iter_records([{"text": "hi", "label": 1}]))
    [{'text': 'hi', 'label': 1}]

A folder is read as its record files in sorted path order (`record_files`), one after
another, so its records are numbered the same on every machine.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from seqpack.corpus.readers import expand_inputs, iter_json_lines, require_file
from seqpack.errors import UserError

RECORD_SUFFIXES = (".jsonl", ".ndjson", ".parquet")


def record_files(source: str | os.PathLike[str], *, glob: str | None = None) -> list[str]:
    """The record files ``source`` names: a file as it is; a folder as every ``.jsonl`` /
    ``.ndjson`` / ``.parquet`` file below it (with ``glob``: every file whose name or relative
    path matches it), in sorted path order, hidden names skipped.

        >>> import pathlib, tempfile
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> for name in ("b.jsonl", "a/part-0.parquet", "notes.txt"):
        ...     (d / name).parent.mkdir(exist_ok=True)
        ...     _ = (d / name).write_text("")
        >>> [pathlib.Path(p).relative_to(d).as_posix() for p in record_files(d)]
        ['a/part-0.parquet', 'b.jsonl']

    Args:
        source: a record file or a folder of them.
        glob: a pattern a folder's files must match (`None`: by suffix).

    Returns:
        The files, as strings.

    Raises:
        FileNotFoundError: a path that does not exist, or a folder with no record file.
    """
    if os.path.isdir(source):
        return expand_inputs([source], glob=glob, suffixes=RECORD_SUFFIXES)
    return [str(require_file(source))]


def _is_paths(source: Any) -> bool:
    return isinstance(source, (list, tuple)) and bool(source) and all(isinstance(x, (str, os.PathLike)) for x in source)


def iter_records(
    source: str | os.PathLike[str] | Iterable[Any], *, glob: str | None = None
) -> Iterator[dict[str, Any]]:
    """Dict records of a ``.jsonl``/``.parquet`` file, of a folder of them (`record_files`;
    ``glob`` picks its files), of a list of such paths, or of any iterable of dicts (HF ``Dataset``).

    Args:
        source: a file, a folder, a list of paths, or an iterable of dicts.
        glob: a pattern a folder's files must match.

    Yields:
        Each record, a dict.

    Raises:
        UserError: a file that is not `.jsonl` or `.parquet`, or a record that is not an object.
        FileNotFoundError: a path that does not exist.
    """
    if _is_paths(source):
        for path in source:  # type: ignore[union-attr]  # _is_paths checked: a list of paths
            yield from iter_records(path, glob=glob)
        return
    if not isinstance(source, (str, os.PathLike)):
        for i, row in enumerate(source):
            if not isinstance(row, dict):
                raise TypeError(f"example {i}: expected a dict record, got {type(row).__name__}")
            yield row
        return
    if os.path.isdir(source):
        yield from iter_records(record_files(source, glob=glob))
        return
    p = require_file(source)
    suffix = p.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        yield from _jsonl(p)
    elif suffix == ".parquet":
        yield from _parquet(p)
    else:
        raise UserError(f"{p}: examples must be .jsonl or .parquet (got {suffix or 'no suffix'})")


def _jsonl(p: Path) -> Iterator[dict[str, Any]]:
    for lineno, obj in iter_json_lines(p):
        if not isinstance(obj, dict):
            raise UserError(f"{p}: line {lineno}: expected a JSON object, got {type(obj).__name__}")
        yield obj


def _parquet(p: Path) -> Iterator[dict[str, Any]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(p)
    except (pa.ArrowException, OSError) as e:  # pyarrow's own error types, and the file system's
        raise UserError(f"{p}: not a readable Parquet file ({e})") from e
    for batch in pf.iter_batches(batch_size=4096):
        yield from batch.to_pylist()
