"""What the machine can hold: arguments whose memory would pass it are refused before any work.

    >>> check_memory(1 << 20, what="the batches", hint="lower --batch-size")   # a MiB: fine anywhere
"""

from __future__ import annotations

import os
from pathlib import Path


def machine_memory() -> int:
    """Bytes of memory this process may use: physical memory, or a cgroup's limit when lower."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for f in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(f).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def check_memory(nbytes: float, *, what: str, hint: str, share: float = 0.5) -> None:
    """Refuse when ``what`` would take more than ``share`` of :func:`machine_memory`."""
    limit = machine_memory() * share
    if nbytes > limit:
        raise ValueError(f"{what} would take about {nbytes / 2**30:,.1f} GiB, more than {share:.0%} of this machine's "
                         f"{machine_memory() / 2**30:,.1f} GiB; {hint}")
