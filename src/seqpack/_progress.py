"""Progress bars only where a person watches: on a terminal.

When stderr is not a terminal (a log file, CI, ``make demo > log``) a bar's every refresh
would become a line of its own, thousands of them; there the bars stay silent and the
callers' own one-line summaries are the log.
"""

from __future__ import annotations

import sys
from typing import Any


def on_terminal() -> bool:
    return bool(getattr(sys.stderr, "isatty", lambda: False)())


def progress_bar(enabled: bool = True, **kw: Any) -> Any:
    """A ``tqdm`` bar, disabled unless ``enabled`` and stderr is a terminal."""
    from tqdm.auto import tqdm

    return tqdm(disable=not (enabled and on_terminal()), **kw)
