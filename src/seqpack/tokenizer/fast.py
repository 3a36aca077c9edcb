"""Fast corpus encoding: many documents, several processes, ids identical to ``encode``.

Each worker runs :meth:`Tokenizer.encode` itself, whose cost after warm-up is the
GPT-2 regex plus one dict lookup per pre-token (the per-word BPE cache), so the
ids are identical by construction. Workers are forked (the parent's warm cache
comes along) and return one flat ``uint32`` array per batch of documents.

    >>> from seqpack.tokenizer.tokenizer import Tokenizer
    >>> tok = Tokenizer({i: bytes([i]) for i in range(256)} | {256: b"ab"}, [(b"a", b"b")])
    >>> [a.tolist() for a in encode_documents(tok, ["ab", "cab"], workers=1)]
    [[256], [99, 256]]
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from itertools import islice
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from seqpack.tokenizer.tokenizer import Tokenizer

_WORKER_TOKENIZER: Tokenizer | None = None
#: Below this many characters in total a pool costs more than it saves.
_PARALLEL_MIN_CHARS = 1 << 20


def _set_worker_tokenizer(tok: Tokenizer) -> None:
    global _WORKER_TOKENIZER
    _WORKER_TOKENIZER = tok


def _encode_batch(docs: list[str]) -> tuple[np.ndarray, np.ndarray]:
    tok = _WORKER_TOKENIZER
    assert tok is not None
    out: list[int] = []
    lengths = np.empty(len(docs), dtype=np.int64)
    for i, d in enumerate(docs):
        before = len(out)
        out.extend(tok.encode(d))
        lengths[i] = len(out) - before
    return np.asarray(out, dtype=np.uint32), lengths


def _batches(documents: Iterable[str], batch_chars: int) -> Iterator[list[str]]:
    batch: list[str] = []
    size = 0
    for d in documents:
        batch.append(d)
        size += len(d)
        if size >= batch_chars:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def encode_documents(
    tok: Tokenizer,
    documents: Iterable[str],
    *,
    workers: int | None = None,
    batch_chars: int = 1 << 19,
) -> Iterator[np.ndarray]:
    """Yield each document's ids as a ``uint32`` array, in input order."""
    if workers is None:
        workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if isinstance(documents, (list, tuple)) and sum(map(len, documents)) < _PARALLEL_MIN_CHARS:
        workers = 1
    batches = _batches(documents, batch_chars)
    if workers <= 1:
        _set_worker_tokenizer(tok)
        results: Iterable[tuple[np.ndarray, np.ndarray]] = map(_encode_batch, batches)
        yield from _split(results)
        return
    import multiprocessing as mp

    methods = mp.get_all_start_methods()
    ctx = mp.get_context("fork" if "fork" in methods else None)
    _set_worker_tokenizer(tok)
    with ctx.Pool(workers, initializer=None if "fork" in methods else _set_worker_tokenizer,
                  initargs=() if "fork" in methods else (tok,)) as pool:
        # a Pool drains its task iterator eagerly: hand it bounded windows instead
        while window := list(islice(batches, 4 * workers)):
            yield from _split(pool.imap(_encode_batch, window, chunksize=1))


def _split(results: Iterable[tuple[np.ndarray, np.ndarray]]) -> Iterator[np.ndarray]:
    for ids, lengths in results:
        start = 0
        for n in lengths.tolist():
            yield ids[start : start + n]
            start += n
