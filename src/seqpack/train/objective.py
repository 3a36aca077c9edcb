"""Deprecated: renamed `seqpack.train.step_loss` (objective means a task's training loss); kept for one release."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    import seqpack.train.step_loss as module
    from seqpack._lazy import renamed

    return renamed("seqpack.train", f"objective.{name}", f"step_loss.{name}", getattr(module, name))
