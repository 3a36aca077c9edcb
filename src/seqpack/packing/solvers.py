"""The solvers' imports (``scipy.optimize``, slow to import), started early on a thread of their own, and
the wait for them.

A job that plans only after reading its shards starts the import while it reads (`preload`).
Every planner that imports scipy first calls `ready`, which waits for such an import to
finish: two threads importing modules of one package at once can deadlock, and importlib then
raises ``_DeadlockError`` in one of them. (``seqpack pack`` printed that traceback from its preload
thread in 5 of 20 runs, ``scipy.optimize`` against ``scipy.optimize._highspy``; had the planner's
thread drawn it, the command would have failed.)

    >>> preload("math"); ready("math")   # already imported: nothing started, nothing to wait for
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import threading

#: the module the LP and NNLS planners import
SCIPY = "scipy.optimize"

_started: dict[str, threading.Thread] = {}
_lock = threading.Lock()


def preload(module: str = SCIPY) -> None:
    """Import ``module`` on a background thread (once), unless it is imported already."""
    with _lock:
        if module in sys.modules or module in _started:
            return
        thread = threading.Thread(target=_import_quietly, args=(module,), name="seqpack-preload", daemon=True)
        _started[module] = thread
        thread.start()  # under the lock: ready() never finds a thread it cannot join yet


def _import_quietly(module: str) -> None:
    # any failure: the planner imports it again on its own thread, and reports what fails there
    with contextlib.suppress(Exception):
        importlib.import_module(module)


def ready(module: str = SCIPY) -> None:
    """Wait until a `preload` of ``module``, if one was started, has finished. Call it before
    importing ``module`` or any part of it."""
    thread = _started.get(module)
    if thread is not None and thread is not threading.current_thread():
        thread.join()


__all__ = ["SCIPY", "preload", "ready"]
