"""The torch side of ``token-classification``: a transformers token classifier on packed rows, the
tag scheme the entity metrics read, and the evaluation metrics (imported where they run: the tasks
import no torch at module level).

A transformers ``*ForTokenClassification`` model runs through the encoder door
(`seqpack.nn.hf_adapter.packed_forward`): each document's own mask, positions (RoBERTa's from
``padding_idx + 1``), token types and local windows, the model's own head on every token, so its
logits are those of each sequence alone; an encoder packed rows cannot keep exact is refused there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from seqpack.data.sequences import IGNORE_INDEX
from seqpack.tasks.entities import entity_counts, is_iob

if TYPE_CHECKING:
    import torch

    from seqpack.nn.models.common import PackedOutput
    from seqpack.tasks.spec import Totals

#: what ``out.extra`` holds the tag scheme under: ``(C, 2)`` prefix (an index of `PREFIXES`) and entity type
SCHEME = "tag_scheme"
PREFIXES = "OBIES"


def tag_scheme(names: Sequence[str] | None) -> torch.Tensor | None:
    """IOB tag names as a ``(C, 2)`` tensor of (prefix, type index); ``None`` when they are not IOB.

    >>> tag_scheme(["O", "B-PER", "I-PER", "B-LOC"]).tolist()
    [[0, 0], [1, 1], [2, 1], [1, 0]]
    """
    import torch

    if names is None or not is_iob(names):
        return None
    types = sorted({n[2:] for n in names if n != "O"})
    rows = [[0, 0] if n == "O" else [PREFIXES.index(n[0]), types.index(n[2:])] for n in names]
    return torch.tensor(rows, dtype=torch.long)


def with_tag_scheme(out: PackedOutput, names: Sequence[str] | None) -> PackedOutput:
    """``out`` with the scheme of tag ``names`` in ``out.extra`` (when they are IOB)."""
    scheme = tag_scheme(names)
    if scheme is not None:
        out.extra[SCHEME] = scheme
    return out


def hf_token_forward(model: torch.nn.Module, batch: Mapping[str, torch.Tensor], *, reduction: str) -> PackedOutput:
    """A transformers ``*ForTokenClassification`` model on a packed batch (`packed_forward`): its
    logits ``(B, T, C)`` and, with ``labels``, the loss reduced per sequence or per token
    (``reduction``), the tag scheme of its ``id2label`` beside them."""
    from seqpack.nn.hf_adapter import packed_forward

    out = packed_forward(model, {k: v for k, v in batch.items() if k != "num_sequences"}, reduction=reduction)
    inner = getattr(model, "module", model)  # DistributedDataParallel wraps it
    id2label = getattr(getattr(inner, "_orig_mod", inner).config, "id2label", None) or {}
    names = (
        [str(id2label[i]) for i in range(len(id2label))] if all(i in id2label for i in range(len(id2label))) else None
    )
    return with_tag_scheme(out, names)


def _tags(ids: list[int], scheme: list[list[int]]) -> list[str]:
    return ["O" if scheme[i][0] == 0 else f"{PREFIXES[scheme[i][0]]}-{scheme[i][1]}" for i in ids]


def add_token_metrics(totals: Totals, out: PackedOutput, batch: Mapping[str, torch.Tensor]) -> None:
    """``cls_loss`` (each sequence's mean over its tagged tokens, averaged over sequences),
    ``cls_token_loss`` and ``token_accuracy`` (over tagged tokens) and, when the tags are IOB,
    ``entity_precision``, ``entity_recall`` and ``entity_f1`` (conlleval's, `seqpack.tasks.entities`)."""
    import torch.nn.functional as F

    labels = batch.get("labels")
    if labels is None or out.per_sequence is None or out.present is None or out.logits is None:
        return
    totals.add("cls_loss", float(out.per_sequence[out.present].sum()), float(out.present.sum()))
    tagged = labels != IGNORE_INDEX
    logits, gold = out.logits[tagged], labels[tagged]
    pred = logits.argmax(-1)
    totals.add("cls_token_loss", float(F.cross_entropy(logits.float(), gold.long(), reduction="sum")), gold.numel())
    totals.add("token_accuracy", float((pred == gold).sum()), gold.numel())
    scheme = out.extra.get(SCHEME)
    if scheme is None:
        return
    table = scheme.tolist()
    rows, _cols = tagged.nonzero(as_tuple=True)
    keys = (rows * (int(batch["segment_ids"].max()) + 1) + batch["segment_ids"][tagged]).tolist()
    right = n_pred = n_gold = 0
    g_all, p_all = gold.tolist(), pred.tolist()
    start = 0
    for k in range(1, len(keys) + 1):
        if k == len(keys) or keys[k] != keys[start]:  # one sequence's tagged tokens, in order
            r, p, g = entity_counts(_tags(g_all[start:k], table), _tags(p_all[start:k], table))
            right, n_pred, n_gold = right + r, n_pred + p, n_gold + g
            start = k
    totals.add("entity_precision", right, n_pred)
    totals.add("entity_recall", right, n_gold)
    totals.add("entity_f1", 2 * right, n_pred + n_gold)


__all__ = [
    "SCHEME",
    "add_token_metrics",
    "hf_token_forward",
    "tag_scheme",
    "with_tag_scheme",
]
