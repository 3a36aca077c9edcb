"""A compact GPT-2-style causal LM over packed rows (nanoGPT's shape, packed attention).

    model = GPT(GPTConfig(vocab_size=V))
    out = model(input_ids, segment_ids, labels=labels)     # labels: HF convention, model shifts
    out.loss, out.per_sequence                              # (B, D) mean loss of each sequence

Positions restart at every sequence (learned absolute embeddings), the causal mask never
crosses a sequence boundary, and the data's -100 on each sequence's first label means no
token is trained to predict the next, unrelated sequence.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from seqpack.nn.attention import AttentionPlan
from seqpack.nn.heads import vocab_logits
from seqpack.nn.losses import IGNORE_INDEX, check_reduction, target_loss
from seqpack.nn.models.common import PackedOutput, check_batch, sized
from seqpack.nn.models.layers import (
    Block,
    check_config,
    init_weights,
    positions_and_plan,
    run_blocks,
)


@dataclass(frozen=True, kw_only=True)
class GPTConfig:
    """The size and options of seqpack's GPT.

    Attributes:
        vocab_size: the vocabulary `V`.
        hidden: the width `H`.
        layers: the transformer blocks.
        heads: the attention heads.
        max_position: the position embeddings: the longest sequence.
        dropout: the dropout probability.
        eps: the LayerNorms' epsilon.
        attention: the attention backend (`seqpack.nn.BACKENDS`; `auto` chooses per batch).
    """

    vocab_size: int
    hidden: int = 256
    layers: int = 4
    heads: int = 4
    max_position: int = 2048
    dropout: float = 0.0
    eps: float = 1e-5
    attention: str = "auto"

    def __post_init__(self) -> None:
        check_config(self, ("vocab_size", "hidden", "layers", "heads", "max_position"))

    @classmethod
    def of_size(cls, size: str, **overrides: object) -> GPTConfig:
        """``tiny`` (128/2/2), ``small`` (256/4/4), ``base`` (768/12/12).

        Args:
            size: a key of `SIZES`.
            **overrides: fields to set, `vocab_size` among them.

        Returns:
            The `GPTConfig`.

        Raises:
            UserError: an unknown size or a bad field.
        """
        return cls(**sized(size, overrides))  # type: ignore[arg-type]  # sized() merges the fields as dict[str, object]


class GPT(nn.Module):
    """A causal LM (pre-norm GPT-2 blocks, tied head) over packed rows.

    Args:
        config: its size and options.
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        c = self.config = config
        self.wte = nn.Embedding(c.vocab_size, c.hidden)
        self.wpe = nn.Embedding(c.max_position, c.hidden)
        self.dropout = nn.Dropout(c.dropout)
        self.blocks = nn.ModuleList(
            Block(c.hidden, c.heads, 4 * c.hidden, dropout=c.dropout, eps=c.eps, pre_norm=True) for _ in range(c.layers)
        )
        self.ln_f = nn.LayerNorm(c.hidden, eps=c.eps)
        self.checkpoint_blocks = False  # True: recompute each block's activations in backward (run_blocks)
        init_weights(self)

    def forward(
        self,
        input_ids: torch.Tensor,
        segment_ids: torch.Tensor,
        *,
        position_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        reduction: str = "sequence",
        plan: AttentionPlan | None = None,
        branch_ids: torch.Tensor | None = None,
        logits: bool = True,
    ) -> PackedOutput:
        """Without ``labels``: ``logits`` (B, T, V) (``logits=False``: only ``hidden``, for a caller
        that projects the positions it needs with `token_logits`). With ``labels`` (B, T) (HF
        convention, the model shifts): the loss, and logits only at the N positions that have a
        target (N, V). ``branch_ids``: a shared prefix (`seqpack.nn.masks.attention_mask`).

        Args:
            input_ids: packed rows of token ids `(B, T)`.
            segment_ids: each token's sequence in its row, 0 for padding `(B, T)`.
            position_ids: positions `(B, T)` (`None`: restarting at each sequence).
            labels: targets `(B, T)`, unshifted, -100 where there is none (`None`: no loss).
            reduction: `sequence` or `token` (`seqpack.nn.token_loss`).
            plan: the attention plan (`None`: made from `segment_ids`).
            branch_ids: each token's branch, 0 for a shared prefix `(B, T)`.
            logits: compute the logits (`False`: only `hidden`).

        Returns:
            The `PackedOutput`: `hidden`, `logits`, and with labels `loss`, `per_sequence`, `present`.
        """
        check_reduction(reduction)
        check_batch(input_ids, segment_ids, position_ids=position_ids, labels=labels, branch_ids=branch_ids)
        position_ids, plan = positions_and_plan(
            segment_ids,
            position_ids,
            plan,
            max_position=self.config.max_position,
            causal=True,
            backend=self.config.attention,
            dtype=self.wte.weight.dtype,
            branch_ids=branch_ids,
        )
        x = self.dropout(self.wte(input_ids) + self.wpe(position_ids))
        x = run_blocks(self.blocks, x, plan, checkpoint=self.checkpoint_blocks)
        h = self.ln_f(x)
        if not logits:
            return PackedOutput(hidden=h)
        if labels is None:
            return PackedOutput(hidden=h, logits=vocab_logits(h, self.wte.weight))  # (B, T, V), tied
        # the loss needs logits only where there is a target: (N, V) instead of (B, T, V)
        rows, cols = (labels[:, 1:] != IGNORE_INDEX).nonzero(as_tuple=True)
        target_logits = vocab_logits(h[rows, cols], self.wte.weight)  # position t predicts labels[t + 1]
        out = PackedOutput(hidden=h, logits=target_logits)
        out.loss, out.per_sequence, out.present = target_loss(
            target_logits, labels[rows, cols + 1], rows, segment_ids[rows, cols + 1], segment_ids, reduction=reduction
        )
        return out

    def token_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The LM head (tied to the embeddings).  # (..., H) -> (..., V)

        Args:
            hidden: hidden states `(..., H)`.

        Returns:
            The logits `(..., V)`.
        """
        return vocab_logits(hidden, self.wte.weight)


class GPTReward(nn.Module):
    """A reward model: the GPT body and a scalar score per token (read at a response's last token).

    score = GPTReward(cfg)(input_ids, segment_ids)        # (B, T)

    Args:
        config: its size and options.
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.gpt = GPT(config)
        self.score = nn.Linear(config.hidden, 1, bias=False)
        nn.init.normal_(self.score.weight, std=0.02)

    def forward(
        self,
        input_ids: torch.Tensor,
        segment_ids: torch.Tensor,
        *,
        position_ids: torch.Tensor | None = None,
        branch_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """A score per token; a response's reward is the score at its last token.

        Args:
            input_ids: packed rows of token ids `(B, T)`.
            segment_ids: each token's sequence in its row, 0 for padding `(B, T)`.
            position_ids: positions `(B, T)` (`None`: restarting at each sequence).
            branch_ids: each token's branch, 0 for a shared prefix `(B, T)`.

        Returns:
            The scores `(B, T)`.
        """
        h = self.gpt(input_ids, segment_ids, position_ids=position_ids, branch_ids=branch_ids, logits=False).hidden
        return self.score(h).squeeze(-1)
