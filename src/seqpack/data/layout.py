"""Deprecated: renamed `seqpack.data.columns` (layout means how a prompt's continuations share a
row); kept for one release."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    import seqpack.data.columns as module
    from seqpack._lazy import renamed

    return renamed("seqpack.data", f"layout.{name}", f"columns.{name}", getattr(module, name))
