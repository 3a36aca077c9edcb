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
import torch.nn.functional as F

from seqpack.data.sequences import IGNORE_INDEX
from seqpack.nn.models.bert import PackedOutput

COMPONENTS = ("lm", "nsp", "cls")


def _sequences_with_targets(mask: torch.Tensor, seg: torch.Tensor) -> int:
    D = int(seg.max()) + 1 if seg.numel() else 1
    rows = torch.arange(seg.shape[0])[:, None].expand_as(seg)
    return int(torch.unique((rows * D + seg)[mask]).numel())


def loss_units(batch: Mapping[str, torch.Tensor], task: str, reduction: str) -> torch.Tensor:
    """Units behind each component's mean, ``(3,)`` float64 in :data:`COMPONENTS` order.

    >>> b = {"labels": torch.tensor([[-100, 5, 6, -100, 7]]), "segment_ids": torch.tensor([[1, 1, 1, 2, 2]])}
    >>> loss_units(b, "clm", "sequence").tolist(), loss_units(b, "clm", "token").tolist()
    ([2.0, 0.0, 0.0], [3.0, 0.0, 0.0])
    """
    n = torch.zeros(3, dtype=torch.float64)
    labels = batch.get("labels")
    if task in ("clm", "mlm") and labels is not None:
        mask = labels != IGNORE_INDEX
        n[0] = int(mask.sum()) if reduction == "token" else _sequences_with_targets(mask, batch["segment_ids"])
    nsp = batch.get("next_sentence_label")
    if nsp is not None:
        n[1] = int((nsp != IGNORE_INDEX).sum())
    if task in ("classification", "multilabel") and labels is not None:
        present = labels != IGNORE_INDEX
        n[2] = int((present.all(dim=-1) if labels.ndim == 3 else present).sum())
    return n


def component_means(out: PackedOutput, task: str) -> list[torch.Tensor | None]:
    """The model's mean loss per component (None where the model has none)."""
    if task in ("clm", "mlm"):
        lm = out.extra.get("mlm_loss", out.loss) if task == "mlm" else out.loss
        return [lm, out.extra.get("nsp_loss"), None]
    return [None, None, out.loss]


def step_loss(means: list[torch.Tensor | None], local: torch.Tensor, total: torch.Tensor, *, world: int = 1) -> torch.Tensor:
    """``sum_c mean_c * local_c / total_c * world`` (DDP averages gradients over ``world``)."""
    parts = [m * (float(local[c]) / max(float(total[c]), 1.0) * world) for c, m in enumerate(means) if m is not None]
    if not parts:
        raise ValueError("the model returned no loss for this batch; does the dataset have labels?")
    return torch.stack(parts).sum()


def target_logits(out: PackedOutput, batch: Mapping[str, torch.Tensor], task: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logits (N, V), targets (N,))`` at the LM targets, whichever shape the model returned."""
    labels = batch["labels"]
    logits = out.logits
    assert logits is not None
    if task == "clm":
        labels = labels[:, 1:]
        if logits.ndim == 3:
            logits = logits[:, :-1]
    mask = labels != IGNORE_INDEX
    if logits.ndim == 3:
        logits = logits[mask]
    return logits, labels[mask]


class EvalTotals:
    """Sums over an evaluation pass: per-sequence and per-token losses, accuracies."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}

    def add(self, key: str, value: float, count: float) -> None:
        s, n = self.sums.get(key, 0.0), self.sums.get(key + "#n", 0.0)
        self.sums[key], self.sums[key + "#n"] = s + value, n + count

    @torch.no_grad()
    def update(self, out: PackedOutput, batch: Mapping[str, torch.Tensor], task: str) -> None:
        if task in ("clm", "mlm"):
            assert out.per_sequence is not None and out.present is not None
            self.add("lm_loss", float(out.per_sequence[out.present].sum()), float(out.present.sum()))
            logits, targets = target_logits(out, batch, task)
            self.add("lm_token_loss", float(F.cross_entropy(logits.float(), targets, reduction="sum")), targets.numel())
            self.add("lm_accuracy", float((logits.argmax(-1) == targets).sum()), targets.numel())
        if task == "clm":
            return
        # per-slot losses as the model computed them: NSP (B, D) for mlm, the labels' otherwise
        slots = batch.get("next_sentence_label" if task == "mlm" else "labels")
        per = out.extra.get("nsp_per_sequence") if task == "mlm" else out.per_sequence
        if slots is None or per is None:
            return
        key = "nsp" if task == "mlm" else "cls"
        present = (slots != IGNORE_INDEX).all(dim=-1) if slots.ndim == 3 else slots != IGNORE_INDEX
        self.add(f"{key}_loss", float(per[present].sum()), float(present.sum()))
        if slots.ndim == 2 and out.slot_logits is not None:  # single-label: accuracy
            hits = out.slot_logits.argmax(-1) == slots
            self.add(f"{key}_accuracy", float(hits[present].sum()), float(present.sum()))

    def result(self) -> dict[str, float]:
        out = {k: v / max(self.sums[k + "#n"], 1.0) for k, v in self.sums.items() if not k.endswith("#n")}
        out["loss"] = sum(v for k, v in out.items() if k in ("lm_loss", "nsp_loss", "cls_loss"))
        return out
