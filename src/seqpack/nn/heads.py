"""Packed heads: they read each sequence of a row by index, never by moving tokens.

hidden (B, T, H), segment_ids (B, T)  ->  gather_slots  ->  (B, D, H) one [CLS] per slot

>>> h = torch.arange(6.).view(1, 6, 1)             # token t has hidden value t
>>> cls, present = gather_slots(h, torch.tensor([[1, 1, 2, 2, 2, 0]]), 3)
>>> cls[..., 0].tolist(), present.tolist()
([[0.0, 2.0, 0.0]], [[True, True, False]])
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from seqpack.errors import UserError
from seqpack.nn.masks import check_depth, sequence_starts


def embedding_rows(model: nn.Module) -> int:
    """Rows of the model's input embedding: the ids it can look up (`seqpack._ids.check_vocab`)."""
    get = getattr(model, "get_input_embeddings", None)
    emb = get() if callable(get) else next((m for m in model.modules() if isinstance(m, nn.Embedding)), None)
    return int(emb.num_embeddings) if emb is not None else 2**63 - 1


def gather_slots(hidden: torch.Tensor, segment_ids: torch.Tensor, max_depth: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each sequence's first token (its [CLS]): ``(B, D, H)`` and ``present`` ``(B, D)``.

    Args:
        hidden: the hidden states `(B, T, H)`.
        segment_ids: each token's sequence in its row, 0 for padding `(B, T)`.
        max_depth: the slots per row `D`.

    Returns:
        `(cls, present)`: `(B, D, H)`, and bool `(B, D)`; an empty slot holds position 0's state.

    Raises:
        UserError: `hidden` and `segment_ids` of different `(B, T)`.
    """
    if hidden.shape[:2] != segment_ids.shape:
        raise UserError(f"hidden {tuple(hidden.shape)} must be (B, T, H) for segment_ids {tuple(segment_ids.shape)}")
    starts, present = sequence_starts(segment_ids, max_depth)  # (B, D)
    idx = starts[..., None].expand(-1, -1, hidden.shape[-1])
    return hidden.gather(1, idx), present


def slot_count(segment_ids: torch.Tensor, *labels: torch.Tensor | None, max_depth: int | None = None) -> int:
    """Slots a head emits: ``max_depth`` if given, else the labels' ``D``, else the deepest row."""
    if max_depth is not None:
        return max_depth
    for lab in labels:
        if lab is not None:
            if lab.ndim < 2 or lab.shape[0] != segment_ids.shape[0]:
                raise UserError(f"per-sequence labels must be (B, D[, C]), got {tuple(lab.shape)}")
            return int(lab.shape[1])
    return check_depth(segment_ids, None)


class PackedPooler(nn.Module):
    """BERT's pooler (dense + tanh) applied to every sequence's [CLS], found by index.

    Args:
        hidden: the model's width `H`.
    """

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)

    def forward(
        self, hidden: torch.Tensor, segment_ids: torch.Tensor, max_depth: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The pooled [CLS] of every slot.

        Args:
            hidden: the hidden states `(B, T, H)`.
            segment_ids: each token's sequence in its row, 0 for padding `(B, T)`.
            max_depth: the slots per row `D`.

        Returns:
            `(pooled, present)`: `(B, D, H)`, and bool `(B, D)` for the slots that hold a sequence.
        """
        cls, present = gather_slots(hidden, segment_ids, max_depth)
        return torch.tanh(self.dense(cls)), present  # (B, D, H), (B, D)


#: the vocabulary projection runs on a weight padded to a multiple of this many rows
VOCAB_ALIGN = 64


def vocab_logits(
    hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, *, align: int | None = None
) -> torch.Tensor:
    """``hidden @ weight.T (+ bias)``, the matrix product run with the vocabulary padded to a
    multiple of 64, the result cut back to ``V`` columns.  # (..., H) x (V, H) -> (..., V)

    With an odd vocabulary (BERT's 30,522, GPT-2's 50,257) the logits' rows are not 16-byte
    aligned, and cuBLAS falls back to its slow unaligned kernels for the product and both of its
    gradients (docs/benchmarks/gpu.md measures the difference). The padding rows are zeros
    and the extra columns are cut off, so the values are those of the plain product; the
    gradient of the padding rows is discarded with them. ``align``: the multiple (default 64 on
    CUDA, 1 elsewhere: the CPU's kernels have no alignment rule).

    >>> h, w = torch.randn(3, 4), torch.randn(5, 4)
    >>> torch.allclose(vocab_logits(h, w, align=8), h @ w.T)
    True
    """
    V = weight.shape[0]
    pad = -V % (align if align is not None else VOCAB_ALIGN if hidden.is_cuda else 1)
    if pad == 0:
        return F.linear(hidden, weight, bias)
    out = F.linear(hidden, F.pad(weight, (0, 0, 0, pad)), None if bias is None else F.pad(bias, (0, pad)))
    return out[..., :V]


class MLMHead(nn.Module):
    """Transform (dense, gelu, LayerNorm) then the tied vocabulary projection.

    Args:
        hidden: the model's width `H`.
        embedding: the input embedding, whose weight the projection shares.
        eps: the LayerNorm's epsilon.
    """

    def __init__(self, hidden: int, embedding: nn.Embedding, *, eps: float = 1e-12) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)
        self.ln = nn.LayerNorm(hidden, eps=eps)
        self.embedding = embedding
        self.bias = nn.Parameter(torch.zeros(embedding.num_embeddings))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """Vocabulary logits of the hidden states.

        Args:
            hidden: the hidden states `(..., H)`.

        Returns:
            The logits `(..., V)`.
        """
        h = self.ln(F.gelu(self.dense(hidden)))
        return vocab_logits(h, self.embedding.weight, self.bias)  # (..., V)
