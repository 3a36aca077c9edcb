"""Deprecated: the engines moved to `seqpack.pipeline.engine` (issue 23)."""

from __future__ import annotations

import warnings
from typing import Any

_MOVED = ("ENGINES", "Engine", "LocalEngine", "RayEngine", "get_engine")


def __getattr__(name: str) -> Any:
    if name not in _MOVED:
        raise AttributeError(f"module 'seqpack.engine' has no attribute {name!r}")
    warnings.warn(f"seqpack.engine.{name} moved to seqpack.pipeline.engine.{name}", DeprecationWarning, stacklevel=2)
    from seqpack.pipeline import engine  # deprecated re-export (allowed upward import)

    return getattr(engine, name)
