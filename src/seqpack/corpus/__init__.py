"""Corpus readers and the built-in Python-documentation corpus."""

from __future__ import annotations

from seqpack.corpus.builtin import python_docs, python_docstrings
from seqpack.corpus.readers import (
    DEFAULT_SEPARATOR,
    from_hf_dataset,
    iter_decoded,
    read_documents,
    read_jsonl,
    read_parquet,
    read_text,
)
from seqpack.corpus.records import iter_records

__all__ = [
    "DEFAULT_SEPARATOR",
    "from_hf_dataset",
    "iter_decoded",
    "iter_records",
    "python_docs",
    "python_docstrings",
    "read_documents",
    "read_jsonl",
    "read_parquet",
    "read_text",
]
