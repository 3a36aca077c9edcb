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

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

import numpy as np

from seqpack._parallel import default_workers, process_pool, windowed_map
from seqpack.tokenizer.pretokenize import DocChunk, doc_chunks

if TYPE_CHECKING:
    from seqpack.tokenizer.tokenizer import Tokenizer

_WORKER_TOKENIZER: Tokenizer | None = None
#: Below this many characters in total a pool costs more than it saves.
_PARALLEL_MIN_CHARS = 1 << 20


def _set_worker_tokenizer(tok: Tokenizer) -> None:
    global _WORKER_TOKENIZER
    _WORKER_TOKENIZER = tok


def _encode_batch(chunk: DocChunk) -> tuple[np.ndarray, np.ndarray]:
    tok = _WORKER_TOKENIZER
    assert tok is not None
    out: list[int] = []
    lengths = np.empty(len(chunk.documents), dtype=np.int64)
    for i, d in enumerate(chunk.documents):
        before = len(out)
        out.extend(tok.encode(d))
        lengths[i] = len(out) - before
    return np.asarray(out, dtype=np.uint32), lengths


def choose_workers(documents: Iterable[str], workers: int | None) -> int:
    """``workers`` (default: all cores), or 1 for a small in-memory list, where a pool costs more."""
    if isinstance(documents, (list, tuple)) and sum(map(len, documents)) < _PARALLEL_MIN_CHARS:
        return 1
    return workers or default_workers()


def encode_documents(
    tok: Tokenizer,
    documents: Iterable[str],
    *,
    workers: int | None = None,
    batch_chars: int = 1 << 19,
) -> Iterator[np.ndarray]:
    """Yield each document's ids as a ``uint32`` array, in input order."""
    workers = choose_workers(documents, workers)
    batches = doc_chunks(documents, batch_chars)
    _set_worker_tokenizer(tok)
    if workers <= 1:
        yield from _split(map(_encode_batch, batches))
        return
    # forked workers inherit the tokenizer (and its warm cache); elsewhere it is sent once
    with process_pool(workers, initializer=_set_worker_tokenizer, initargs=(tok,)) as pool:
        yield from _split(windowed_map(pool, _encode_batch, batches, window=4 * workers))


def _split(results: Iterable[tuple[np.ndarray, np.ndarray]]) -> Iterator[np.ndarray]:
    for ids, lengths in results:
        start = 0
        for n in lengths.tolist():
            yield ids[start : start + n]
            start += n
