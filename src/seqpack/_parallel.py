"""Threads: how many a parallel step may use, and a map over them."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (a cost in every start-up)
if TYPE_CHECKING:
    from typing import Any, TypeVar

    T = TypeVar("T")
    R = TypeVar("R")


def default_workers() -> int:
    """Cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


_END = object()


def map_threads(fn: Callable[[T], R], items: Iterable[T], workers: int) -> Iterator[R]:
    """``fn(item)`` for every item on ``workers`` threads; yields the results as they finish.

    Each thread draws the next item when it is free, so at most ``workers`` items are in flight
    (``items`` may be a lazy stream of large chunks). The first error stops the drawing and is
    raised here, once the threads are done. (Threads and a queue rather than
    ``concurrent.futures``, whose import, logging with it, slows the trainer's start-up.)

        >>> sorted(map_threads(lambda x: x * x, range(5), 2))
        [0, 1, 4, 9, 16]
    """
    import queue
    import threading

    it = iter(items)
    lock = threading.Lock()
    done: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()
    stop = threading.Event()

    def run() -> None:
        try:
            while not stop.is_set():
                with lock:  # one draw at a time: the iterator need not be thread-safe
                    item = next(it, _END)
                if item is _END:
                    break
                done.put((True, fn(item)))  # type: ignore[arg-type]  # the queue is typed for the items, fn maps them
        except BaseException as e:  # noqa: BLE001 - re-raised on the calling thread
            stop.set()
            done.put((False, e))
        finally:
            done.put((False, _END))

    threads = [threading.Thread(target=run, name=f"seqpack-map-{i}", daemon=True) for i in range(workers)]
    for t in threads:
        t.start()
    error: BaseException | None = None
    try:
        live = len(threads)
        while live:
            ok, value = done.get()
            if ok:
                yield value
            elif value is _END:
                live -= 1
            elif error is None:
                error = value
    finally:  # also when the caller stops early or fails: no thread draws again
        stop.set()
        for t in threads:
            t.join()
    if error is not None:
        raise error
