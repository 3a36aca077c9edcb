"""What the machine can hold: arguments whose memory would pass it are refused before any work.

>>> check_memory(1 << 20, what="the batches", hint="lower --batch-size")   # a MiB: fine anywhere
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator

from seqpack.errors import UserError


def cgroup_limit_files(proc_cgroup: str | None = None) -> list[str]:
    """The memory-limit files that bind this process: its own cgroup's and every ancestor's, for
    cgroup v2 (``memory.max``) and v1 (``memory.limit_in_bytes``), read from ``/proc/self/cgroup``
    (``proc_cgroup``: that file's text). A Slurm job's or a systemd unit's limit sits in the
    process's own cgroup, not at the root.

    >>> cgroup_limit_files("0::/user.slice/job")
    ['/sys/fs/cgroup/user.slice/job/memory.max', '/sys/fs/cgroup/user.slice/memory.max', '/sys/fs/cgroup/memory.max']
    """
    if proc_cgroup is None:
        try:
            with open("/proc/self/cgroup", encoding="utf-8") as fh:
                proc_cgroup = fh.read()
        except OSError:
            proc_cgroup = ""
    files = []
    for line in proc_cgroup.splitlines():
        hid, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hid == "0" and controllers == "":
            base, name = "/sys/fs/cgroup", "memory.max"
        elif "memory" in controllers.split(","):
            base, name = "/sys/fs/cgroup/memory", "memory.limit_in_bytes"
        else:
            continue
        parts = [p for p in path.split("/") if p and p != ".."]
        files += ["/".join([base, *parts[:k], name]) for k in range(len(parts), -1, -1)]
    return files


def machine_memory() -> int:
    """Bytes of memory this process may use: physical memory, or the lowest limit of the cgroups
    that hold it (`cgroup_limit_files`) when lower."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    roots = ["/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"]
    for f in dict.fromkeys([*cgroup_limit_files(), *roots]):
        try:
            with open(
                f, encoding="ascii"
            ) as fh:  # open, not pathlib: the trainer imports this module (pathlib would slow its start-up)
                text = fh.read().strip()
        except (OSError, ValueError):
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def check_memory(nbytes: float, *, what: str, hint: str, share: float = 0.5) -> None:
    """Refuse when ``what`` would take more than ``share`` of `machine_memory`."""
    limit = machine_memory() * share
    if nbytes > limit:
        raise UserError(
            f"{what} would take about {nbytes / 2**30:,.1f} GiB, more than {share:.0%} of this machine's "
            f"{machine_memory() / 2**30:,.1f} GiB; {hint}"
        )


@contextlib.contextmanager
def small_pages() -> Iterator[None]:
    """numpy's large arrays on ordinary pages inside the block: numpy asks Linux for huge pages
    (``madvise``) for every array of 4 MB or more. A pack job makes and drops gigabytes of such
    arrays, each written once: a huge page is zeroed 2 MB at a time and may first need memory
    compacted, system time a large pack job spends for nothing. Where numpy lacks the switch,
    nothing changes.

        >>> with small_pages():
        ...     pass
    """
    import numpy as np

    setter = getattr(getattr(getattr(np, "_core", None), "multiarray", None), "_set_madvise_hugepage", None)
    if setter is None:
        yield
        return
    before = setter(False)
    try:
        yield
    finally:
        setter(before)


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cycle collector off inside the block (as it was after it; also a decorator). A block that
    makes tens of thousands of containers holding no cycles (a tokenizer's merge pairs, its id maps)
    otherwise runs the collector every 700 of them, each run walking what came before, for nothing
    (loading GPT-2's files is faster without it).

        >>> with collector_paused():
        ...     gc.isenabled()
        False
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
