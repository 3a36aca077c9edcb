"""The step's loss, normalised over the whole step, and evaluation metrics.

A model returns *means* over its batch (per sequence or per token). A step made of several
micro-batches, or split over ranks, must weigh each by how many units (sequences or target
tokens) it holds out of the step's total, or the result depends on how the step was cut::

    loss_step = sum_c  sum_m  mean_{c,m} * n_{c,m} / N_c           # c: mlm / nsp / lm / cls

``N_c`` is counted from the batches before the forward pass (all-reduced over ranks), so 1
process on the global batch, k micro-batches and 2 ranks give the same gradient.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from seqpack.errors import UserError
from seqpack.nn.models.common import PackedOutput
from seqpack.tasks import COMPONENTS, get_task

__all__ = ["COMPONENTS", "EvalTotals", "component_means", "loss_units", "step_loss"]


def loss_units(batch: Mapping[str, torch.Tensor], task: str, reduction: str) -> torch.Tensor:
    """Units behind each component's mean, ``(3,)`` float64 in `COMPONENTS` order (the task counts).

    >>> b = {"labels": torch.tensor([[-100, 5, 6, -100, 7]]), "segment_ids": torch.tensor([[1, 1, 1, 2, 2]])}
    >>> loss_units(b, "clm", "sequence").tolist(), loss_units(b, "clm", "token").tolist()
    ([2.0, 0.0, 0.0], [3.0, 0.0, 0.0])
    """
    return get_task(task).trains().loss_units(batch, reduction)


def component_means(out: PackedOutput, task: str) -> list[torch.Tensor | None]:
    """The model's mean loss per component (None where the model has none)."""
    return get_task(task).trains().component_means(out)


def step_loss(
    means: list[torch.Tensor | None], local: torch.Tensor, total: torch.Tensor, *, world: int = 1
) -> torch.Tensor:
    """``sum_c mean_c * local_c / total_c * world`` (DDP averages gradients over ``world``)."""
    parts = [m * (float(local[c]) / max(float(total[c]), 1.0) * world) for c, m in enumerate(means) if m is not None]
    if not parts:
        raise UserError("the model returned no loss for this batch; does the dataset have labels?")
    return torch.stack(parts).sum()


LOSS_KEYS = ("lm_loss", "nsp_loss", "cls_loss", "span_loss")  # summed into the eval "loss"


class EvalTotals:
    """Sums over an evaluation pass: per-sequence and per-token losses, accuracies (the task
    says which: `seqpack.tasks.Training.update_eval`)."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}

    def add(self, key: str, value: float, count: float) -> None:
        s, n = self.sums.get(key, 0.0), self.sums.get(key + "#n", 0.0)
        self.sums[key], self.sums[key + "#n"] = s + value, n + count

    @torch.no_grad()
    def update(self, out: PackedOutput, batch: Mapping[str, torch.Tensor], task: str) -> None:
        get_task(task).trains().update_eval(self, out, batch)

    def result(self) -> dict[str, float]:
        out = {k: v / max(self.sums[k + "#n"], 1.0) for k, v in self.sums.items() if not k.endswith("#n")}
        out["loss"] = sum(v for k, v in out.items() if k in LOSS_KEYS)
        return out
