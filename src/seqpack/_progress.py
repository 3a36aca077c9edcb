"""Progress bars only where a person watches: on a terminal.

When stderr is not a terminal (a log file, CI, ``make demo > log``) a bar's every refresh
would become a line of its own, thousands of them; there the bars stay silent and the
callers' own one-line summaries are the log. A silent bar does not import tqdm (with
``tqdm.auto`` and asyncio, a cost in a command's start-up).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from typing import Any


def on_terminal() -> bool:
    return bool(getattr(sys.stderr, "isatty", lambda: False)())


class SilentBar:
    """What the callers use of a disabled ``tqdm`` bar: it iterates its ``iterable``; ``update``,
    ``set_postfix`` and ``close`` do nothing.

        >>> list(SilentBar(iterable=range(3), desc="x"))
        [0, 1, 2]
    """

    def __init__(self, iterable: Iterable[Any] | None = None, **_: Any) -> None:
        self.iterable = iterable

    def __iter__(self) -> Iterator[Any]:
        return iter(self.iterable if self.iterable is not None else ())

    def update(self, n: float = 1) -> None:
        pass

    def set_postfix(self, *args: Any, **kwargs: Any) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> SilentBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LineBar(SilentBar):
    """A bar for a log: a line on stderr at the first update, then at most one every ``interval``
    seconds, and at the last (``desc: step 3/10, loss 7.123, 12.3 s``), so that a long run written to
    a file is never silent for long."""

    def __init__(
        self,
        iterable: Iterable[Any] | None = None,
        *,
        interval: float = 30.0,
        total: int | None = None,
        initial: int = 0,
        desc: str = "",
        unit: str = "it",
        delay: float = 0.0,
        **_: Any,
    ) -> None:
        import time

        super().__init__(iterable)
        self.interval, self.total, self.n, self.desc, self.unit = interval, total, initial, desc, unit
        self.start, self.postfix, self._clock = time.perf_counter(), "", time.perf_counter
        self.last: float | None = None
        self.delay = delay  # no line before this many seconds: short work stays silent

    def update(self, n: float = 1) -> None:
        self.n += int(n)
        now = self._clock()
        if now - self.start < self.delay:
            return
        if self.last is None or now - self.last >= self.interval or self.n == self.total:
            self.last = now
            of = f"/{self.total}" if self.total else ""
            print(
                f"{self.desc}: {self.unit} {self.n}{of}{self.postfix}, {now - self.start:.1f} s",
                file=sys.stderr,
                flush=True,
            )

    def set_postfix(self, *args: Any, refresh: bool = True, **kwargs: Any) -> None:
        self.postfix = "".join(f", {k} {v}" for k, v in kwargs.items())


def progress_bar(enabled: bool = True, *, lines: float | None = None, **kw: Any) -> Any:
    """A ``tqdm`` bar if ``enabled`` and stderr is a terminal; off a terminal a `LineBar`
    when ``lines`` (its interval in seconds) is given, else a `SilentBar`."""
    if enabled and lines is not None and not on_terminal():
        return LineBar(interval=lines, **kw)
    if not (enabled and on_terminal()):
        return SilentBar(**kw)
    from tqdm.auto import tqdm

    return tqdm(**kw)
