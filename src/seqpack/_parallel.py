"""Process pools shared by the trainer and the corpus encoder.

    with process_pool(2) as pool:
        for result in windowed_map(pool, fn, tasks, window=8):
            ...
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from itertools import islice
from multiprocessing.pool import Pool
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def default_workers() -> int:
    """Cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


@contextmanager
def process_pool(
    workers: int, *, initializer: Callable[..., Any] | None = None, initargs: tuple[Any, ...] = ()
) -> Iterator[Pool]:
    """A pool of ``workers`` processes, forked where the platform can (fast start)."""
    import multiprocessing as mp

    ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else mp.get_context()
    with ctx.Pool(workers, initializer=initializer, initargs=initargs) as pool:
        yield pool


def windowed_map(
    pool: Pool, fn: Callable[[T], R], tasks: Iterable[T], *, window: int, ordered: bool = True
) -> Iterator[R]:
    """``pool.imap`` over ``tasks`` that reads at most ``window`` tasks ahead.

    A Pool drains its task iterator eagerly; handing it bounded windows keeps
    memory bounded when the tasks carry data (e.g. batches of documents).
    """
    it = iter(tasks)
    run = pool.imap if ordered else pool.imap_unordered
    while batch := list(islice(it, window)):
        yield from run(fn, batch, chunksize=1)
