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
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np

from seqpack._parallel import default_workers
from seqpack.tokenizer.pretokenize import doc_chunks

T = TypeVar("T")

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

    On more than one thread the next batch's documents are read on a thread of their own while this
    one is encoded (`_DrawnAhead`): the Python work of reading them is no longer a serial part that
    the encoding threads wait through. A list or tuple that fits in one batch starts no such thread.
    """
    threads = workers or default_workers()
    batches = (chunk.documents for chunk in doc_chunks(documents, batch_chars))
    first = next(batches, None) if threads > 1 else None
    if first is None:  # one thread (or nothing to encode)
        for batch in batches:
            yield tok.encode_batch_flat(batch, workers=1)
        return
    if isinstance(documents, (list, tuple)) and len(first) == len(documents):
        yield tok.encode_batch_flat(first, workers=threads)
        return
    ahead = _DrawnAhead(batches)  # the second batch is drawn while the first is encoded
    try:
        yield tok.encode_batch_flat(first, workers=threads)
        for batch in ahead:
            yield tok.encode_batch_flat(batch, workers=threads)
    finally:
        ahead.close()


_END = object()


class _DrawnAhead(Generic[T]):
    """``items`` in order, drawn on a thread of their own from now on, one ahead of the caller (two
    at most: one waiting, one being drawn), so that drawing the next one overlaps the caller's work on
    this one. An error drawing one is raised in its place; `close` (or the end) stops the drawing.

    The caller does not wait on a thread it starts: a thread started per batch waited 2-4 ms for a
    core and the GIL on a busy 2-core machine, more than the drawing it overlapped. Here the caller
    finds the next item drawn, and the drawing thread waits for room, not the caller for it.

        >>> ahead = _DrawnAhead(iter(range(5)))
        >>> list(ahead)
        [0, 1, 2, 3, 4]
    """

    def __init__(self, items: Iterable[T]) -> None:
        import queue
        import threading

        self._ready: queue.Queue[tuple[bool, Any]] = queue.Queue(maxsize=1)
        self._stop = threading.Event()
        self._items = items
        self._thread = threading.Thread(target=self._draw, name="seqpack-draw", daemon=True)
        self._thread.start()

    def _put(self, entry: tuple[bool, Any]) -> bool:
        import queue

        while not self._stop.is_set():
            try:
                self._ready.put(entry, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _draw(self) -> None:
        try:
            for item in self._items:
                if not self._put((True, item)):
                    return
            self._put((True, _END))
        except BaseException as e:  # noqa: BLE001 - raised on the caller's thread, in its item's place
            self._put((False, e))

    def __iter__(self) -> Iterator[T]:
        try:
            while True:
                ok, item = self._ready.get()
                if not ok:
                    raise item
                if item is _END:
                    return
                yield item
        finally:
            self.close()

    def close(self) -> None:
        """Stop drawing (the item being drawn is finished first)."""
        self._stop.set()
        self._thread.join()


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
