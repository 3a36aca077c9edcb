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

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from seqpack._parallel import default_workers
from seqpack.tokenizer.pretokenize import doc_chunks

T = TypeVar("T")
R = TypeVar("R")

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

    On more than one thread a batch is encoded while the caller reads the next one's documents and
    handles the one before (`_one_ahead`): the Python work around the encoder (gathering a batch's
    documents, a store writer's writes) is no longer a serial part that the threads wait through.
    """
    threads = workers or default_workers()
    batches = (chunk.documents for chunk in doc_chunks(documents, batch_chars))
    if threads < 2:
        for batch in batches:
            yield tok.encode_batch_flat(batch, workers=1)
        return
    yield from _one_ahead(lambda batch: tok.encode_batch_flat(batch, workers=threads), batches)


def _one_ahead(fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
    """``fn(item)`` for each item, in order, each on a thread of its own: item ``k + 1`` is drawn
    from ``items`` while ``fn`` runs on item ``k``, and ``fn``'s result for ``k`` is yielded while
    it runs on ``k + 1``. One ``fn`` runs at a time; an error is raised in its item's place.

        >>> list(_one_ahead(lambda x: x * x, iter(range(4))))
        [0, 1, 4, 9]
    """
    import threading

    def start(item: T) -> tuple[threading.Thread, list[tuple[bool, Any]]]:
        box: list[tuple[bool, Any]] = []

        def run() -> None:
            try:
                box.append((True, fn(item)))
            except BaseException as e:  # noqa: BLE001 - raised on the calling thread, in its item's place
                box.append((False, e))

        thread = threading.Thread(target=run, name="seqpack-encode", daemon=True)
        thread.start()
        return thread, box

    def result(job: tuple[threading.Thread, list[tuple[bool, Any]]]) -> R:
        job[0].join()
        ok, value = job[1][0]
        if not ok:
            raise value
        return value

    running = None
    items = iter(items)
    try:
        while True:
            try:
                item = next(items)  # drawn while the item before is encoded
            except StopIteration:
                break
            except BaseException:
                if running is not None:  # the items before a failed draw come first
                    done, running = result(running), None
                    yield done
                raise
            if running is not None:
                done, running = result(running), None
                running = start(item)
                yield done  # handled by the caller while the next one is encoded
            else:
                running = start(item)
        if running is not None:
            done, running = result(running), None
            yield done
    finally:  # the caller stopped early or an item failed: no thread is left running
        if running is not None:
            running[0].join()


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
