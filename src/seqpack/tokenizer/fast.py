"""Fast corpus encoding: many documents, on threads, ids identical to ``encode``.

Documents are read in batches of about ``batch_chars`` characters; each batch goes to
the compiled encoder in one call, which releases the GIL, spreads the batch over
``workers`` threads (contiguous runs of documents of about equal size, a word cache per
thread) and returns one flat ``uint32`` array with offsets. No process pool: nothing is
pickled or forked, and the caches stay warm from batch to batch.

    >>> from seqpack.tokenizer.tokenizer import Tokenizer
    >>> tok = Tokenizer({i: bytes([i]) for i in range(256)} | {256: b"ab"}, [(b"a", b"b")])
    >>> [a.tolist() for a in encode_documents(tok, ["ab", "cab"], workers=1)]
    [[256], [99, 256]]
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

import numpy as np

from seqpack._parallel import default_workers
from seqpack.tokenizer.pretokenize import doc_chunks

if TYPE_CHECKING:
    from seqpack.tokenizer.hf_tokenizer import HFTokenizer
    from seqpack.tokenizer.tokenizer import Tokenizer


def encode_batches(
    tok: Tokenizer | HFTokenizer,
    documents: Iterable[str],
    *,
    workers: int | None = None,
    batch_chars: int = 1 << 20,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Yield ``(ids, offsets)`` per batch: document ``i`` of the batch is ``ids[offsets[i]:offsets[i + 1]]``.

    ``ids`` is ``uint32``, ``offsets`` ``int64``; batches come in input order. A pretrained
    tokenizer (`HFTokenizer`) encodes each batch on the
    ``tokenizers`` thread pool instead.
    """
    threads = workers or default_workers()
    for chunk in doc_chunks(documents, batch_chars):
        yield tok.encode_batch_flat(chunk.documents, workers=threads)


def encode_documents(
    tok: Tokenizer | HFTokenizer,
    documents: Iterable[str],
    *,
    workers: int | None = None,
    batch_chars: int = 1 << 20,
) -> Iterator[np.ndarray]:
    """Yield each document's ids as a ``uint32`` array, in input order."""
    for ids, offsets in encode_batches(tok, documents, workers=workers, batch_chars=batch_chars):
        bounds = offsets.tolist()
        for i in range(len(bounds) - 1):
            yield ids[bounds[i] : bounds[i + 1]]
