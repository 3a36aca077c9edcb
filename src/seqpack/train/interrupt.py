"""Ctrl-C during a training run: a flag the loop checks between steps, so the step finishes and a
checkpoint is saved before the run stops (``--resume`` continues it).

    with StopFlag() as stop:
        while not stop.hit:
            ...
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any


class StopFlag:
    """Turns SIGINT into a flag checked between steps (main thread only)."""

    def __init__(self) -> None:
        self.hit = False
        self._old: Callable[[int, FrameType | None], Any] | int | signal.Handlers | None = None

    def __enter__(self) -> StopFlag:
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.hit = True

    def __exit__(self, *exc: object) -> None:
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)


__all__ = ["StopFlag"]
