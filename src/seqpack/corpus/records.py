"""Dict records (labelled examples) from ``.jsonl``, ``.parquet`` or HF ``datasets``.

    >>> list(iter_records([{"text": "hi", "label": 1}]))
    [{'text': 'hi', 'label': 1}]
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from seqpack.corpus.readers import iter_json_lines, require_file


def iter_records(source: str | os.PathLike[str] | Iterable[Any]) -> Iterator[dict[str, Any]]:
    """Dict records of a ``.jsonl``/``.parquet`` file, or of any iterable of dicts (HF ``Dataset``)."""
    if not isinstance(source, (str, os.PathLike)):
        for i, row in enumerate(source):
            if not isinstance(row, dict):
                raise TypeError(f"example {i}: expected a dict record, got {type(row).__name__}")
            yield row
        return
    p = require_file(source)
    suffix = p.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        yield from _jsonl(p)
    elif suffix == ".parquet":
        yield from _parquet(p)
    else:
        raise ValueError(f"{p}: examples must be .jsonl or .parquet (got {suffix or 'no suffix'})")


def _jsonl(p: Path) -> Iterator[dict[str, Any]]:
    for lineno, obj in iter_json_lines(p):
        if not isinstance(obj, dict):
            raise ValueError(f"{p}: line {lineno}: expected a JSON object, got {type(obj).__name__}")
        yield obj


def _parquet(p: Path) -> Iterator[dict[str, Any]]:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(p)
    except Exception as e:  # pyarrow's own error types
        raise ValueError(f"{p}: not a readable Parquet file ({e})") from None
    for batch in pf.iter_batches(batch_size=4096):
        yield from batch.to_pylist()
