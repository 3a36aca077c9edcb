"""Progress bars only where a person watches: on a terminal.

When stderr is not a terminal (a log file, CI, ``make demo > log``) a bar's every refresh
would become a line of its own, thousands of them; there the bars stay silent and the
callers' own one-line summaries are the log. A silent bar does not import tqdm (with
``tqdm.auto`` and asyncio, ~40 ms of a command's start-up).
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

    def __enter__(self) -> SilentBar:  # noqa: PYI034 (not subclassed)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def progress_bar(enabled: bool = True, **kw: Any) -> Any:
    """A ``tqdm`` bar if ``enabled`` and stderr is a terminal, else a :class:`SilentBar`."""
    if not (enabled and on_terminal()):
        return SilentBar(**kw)
    from tqdm.auto import tqdm

    return tqdm(**kw)
