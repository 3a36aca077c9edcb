"""Atomic directory output: write into a temp dir beside the target, then rename.

    with atomic_directory("out", overwrite=False) as tmp:
        (tmp / "data.bin").write_bytes(...)
        (tmp / "meta.json").write_text(...)   # manifest last
    # "out" now exists, complete, or not at all
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def check_output_dir(path: str | os.PathLike[str], *, overwrite: bool) -> Path:
    """Refuse an existing non-empty ``path`` unless ``overwrite``."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise FileExistsError(f"{out}: exists and is not empty; pass --overwrite to replace it")
    return out


@contextmanager
def atomic_directory(path: str | os.PathLike[str], *, overwrite: bool = False) -> Iterator[Path]:
    """Yield a fresh temp dir; on success it replaces ``path`` in one rename."""
    out = check_output_dir(path, overwrite=overwrite)
    parent = out.resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=parent))
    try:
        yield tmp
        os.chmod(tmp, 0o755)
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=parent))
            os.rename(out, old / "x")
            os.rename(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
