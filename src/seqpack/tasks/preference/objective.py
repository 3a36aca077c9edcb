"""Deprecated: renamed `seqpack.tasks.preference.forward` (objective means a task's training loss);
kept for one release."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    import seqpack.tasks.preference.forward as module
    from seqpack._lazy import renamed

    return renamed("seqpack.tasks.preference", f"objective.{name}", f"forward.{name}", getattr(module, name))
