"""What the language-model tasks (clm, mlm, chat, token classification, image-text) share: the
store's empty documents, the LM units of a batch, the LM evaluation metrics, and the `Training`
part of a task whose loss is a causal LM's (`LM_TRAINING`)."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import TYPE_CHECKING

from seqpack.data.sequences import IGNORE_INDEX
from seqpack.tasks.spec import Totals, Training

if TYPE_CHECKING:
    import torch

    from seqpack.data.sequences import Sequences
    from seqpack.nn.models.common import PackedOutput
    from seqpack.store import TokenStore


def count_empty(store: TokenStore, seqs: Sequences) -> Sequences:
    """Record the store's empty documents among the dropped."""
    empty = int(store.meta.get("empty_documents", 0))
    if empty:
        seqs.dropped["empty"] = seqs.dropped.get("empty", 0) + empty
    return seqs


def sequences_with_targets(mask: torch.Tensor, seg: torch.Tensor) -> int:
    import torch

    D = int(seg.max()) + 1 if seg.numel() else 1
    rows = torch.arange(seg.shape[0], device=seg.device)[:, None].expand_as(seg)
    return int(torch.unique((rows * D + seg)[mask]).numel())


def lm_units(batch: Mapping[str, torch.Tensor], reduction: str) -> float:
    """Target tokens (``reduction="token"``) or sequences with a target."""
    labels = batch.get("labels")
    if labels is None:
        return 0.0
    mask = labels != IGNORE_INDEX
    return float(int(mask.sum()) if reduction == "token" else sequences_with_targets(mask, batch["segment_ids"]))


def add_lm_metrics(totals: Totals, out: PackedOutput, batch: Mapping[str, torch.Tensor], *, shift: bool) -> None:
    """Per-sequence and per-token LM loss and accuracy at the targets."""
    import torch.nn.functional as F

    assert out.per_sequence is not None and out.present is not None
    totals.add("lm_loss", float(out.per_sequence[out.present].sum()), float(out.present.sum()))
    logits, targets = target_logits(out, batch, shift=shift)
    totals.add("lm_token_loss", float(F.cross_entropy(logits.float(), targets, reduction="sum")), targets.numel())
    totals.add("lm_accuracy", float((logits.argmax(-1) == targets).sum()), targets.numel())


def target_logits(
    out: PackedOutput, batch: Mapping[str, torch.Tensor], *, shift: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logits (N, V), targets (N,))`` at the LM targets, whichever shape the model returned."""
    labels = batch["labels"]
    logits = out.logits
    assert logits is not None
    if shift:
        labels = labels[:, 1:]
        if logits.ndim == 3:
            logits = logits[:, :-1]
    mask = labels != IGNORE_INDEX
    if logits.ndim == 3:
        logits = logits[mask]
    return logits, labels[mask]


def lm_loss_units(batch: Mapping[str, torch.Tensor], reduction: str) -> torch.Tensor:
    """``[lm_units, 0, 0]``, ``(3,)`` float64: the loss is the LM component alone.

    >>> import torch
    >>> b = {"labels": torch.tensor([[-100, 5, 6, -100, 7]]), "segment_ids": torch.tensor([[1, 1, 1, 2, 2]])}
    >>> lm_loss_units(b, "sequence").tolist(), lm_loss_units(b, "token").tolist()
    ([2.0, 0.0, 0.0], [3.0, 0.0, 0.0])
    """
    import torch

    return torch.tensor([lm_units(batch, reduction), 0.0, 0.0], dtype=torch.float64)


def lm_mean(out: PackedOutput) -> list[torch.Tensor | None]:
    """The model's loss as the LM component's mean."""
    return [out.loss, None, None]


def slot_mean(out: PackedOutput) -> list[torch.Tensor | None]:
    """The model's loss as the per-sequence (``cls``) component's mean."""
    return [None, None, out.loss]


#: the training part of a task whose loss is a causal LM's at its labels (shifted by the model)
LM_TRAINING = Training(
    loss_units=lm_loss_units, component_means=lm_mean, update_eval=partial(add_lm_metrics, shift=True)
)
