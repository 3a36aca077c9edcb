"""Labelled examples (dict records) from ``.jsonl``, ``.parquet`` or HF ``datasets``, and BERT's special ids.

    >>> list(iter_records([{"text": "hi", "label": 1}]))
    [{'text': 'hi', 'label': 1}]
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from seqpack.corpus.readers import iter_json_lines, require_file

if TYPE_CHECKING:
    from seqpack.tokenizer.tokenizer import Tokenizer

BERT_SPECIALS = ("[CLS]", "[SEP]", "[MASK]")


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


def get_field(row: dict[str, Any], name: str, i: int, option: str, kind: type | tuple[type, ...] = str) -> Any:
    """``row[name]``, or a ``ValueError`` naming example ``i`` and the option that picks the field."""
    if name not in row:
        keys = ", ".join(sorted(map(str, row))[:8])
        raise ValueError(f"example {i}: no field {name!r} (fields: {keys}); pass {option} NAME")
    v = row[name]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(v, kinds) or (isinstance(v, bool) and bool not in kinds):
        want = " or ".join(k.__name__ for k in kinds)
        raise ValueError(f"example {i}: field {name!r} is {type(v).__name__}, expected {want}")
    return v


def special_ids(tokenizer: Tokenizer, names: Iterable[str] = BERT_SPECIALS) -> tuple[dict[str, int], int]:
    """Ids of ``names``: the tokenizer's own where it has them, else new ids after its vocab.

    Returns ``(ids, vocab_size)``, the vocab size a model needs to embed every id.
    """
    ids: dict[str, int] = {}
    nxt = tokenizer.vocab_size
    for n in names:
        i = tokenizer.token_to_id(n)
        if i is None:
            i, nxt = nxt, nxt + 1
        ids[n] = i
    return ids, nxt
