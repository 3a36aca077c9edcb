"""The ``preference`` task: one folder (records, layouts, the task, its objective).

`pair_outputs` (and `PairOutputs`) load torch on first use.
"""

from __future__ import annotations

from typing import Any

from seqpack.tasks.preference.task import TASK, PreferenceOptions

TYPE_CHECKING = False  # typing.TYPE_CHECKING; pair_outputs loads torch, on first use
if TYPE_CHECKING:
    from seqpack.tasks.preference.forward import PairOutputs, pair_outputs

__all__ = ["TASK", "PairOutputs", "PreferenceOptions", "pair_outputs"]


def __getattr__(name: str) -> Any:
    if name in ("PairOutputs", "pair_outputs"):  # torch, loaded only when asked for
        from seqpack.tasks.preference import forward

        return getattr(forward, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
