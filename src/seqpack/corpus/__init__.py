"""Corpus readers and the built-in Python-documentation corpus.

The names load on first use (PEP 562): a reader does not pay for the built-in corpus's imports,
nor a training run (which needs ``readers.require_file``) for any of them.
"""

from __future__ import annotations

from seqpack._lazy import keep, listing

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (a cost in every start-up)
if TYPE_CHECKING:
    from types import ModuleType
    from typing import Any

    from seqpack.corpus.builtin import python_docs, python_docstrings
    from seqpack.corpus.readers import (
        DEFAULT_SEPARATOR,
        expand_inputs,
        from_hf_dataset,
        iter_decoded,
        read_documents,
        read_jsonl,
        read_parquet,
        read_text,
    )
    from seqpack.corpus.records import iter_records, record_files

__all__ = [
    "DEFAULT_SEPARATOR",
    "expand_inputs",
    "from_hf_dataset",
    "iter_decoded",
    "iter_records",
    "python_docs",
    "python_docstrings",
    "read_documents",
    "read_jsonl",
    "read_parquet",
    "read_text",
    "record_files",
]


def __getattr__(name: str) -> Any:
    module: ModuleType
    if name in ("python_docs", "python_docstrings"):
        from seqpack.corpus import builtin as module
    elif name in ("iter_records", "record_files"):
        from seqpack.corpus import records as module
    elif name in __all__:
        from seqpack.corpus import readers as module
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return keep(globals(), module, name)


def __dir__() -> list[str]:
    return listing(globals(), __all__)
