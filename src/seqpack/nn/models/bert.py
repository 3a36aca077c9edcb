"""A compact BERT that reads packed rows natively (``segment_ids``, restarting ``position_ids``).

    model = BertForPreTraining(BertConfig(vocab_size=V))
    out = model(input_ids, segment_ids, token_type_ids=tt, labels=mlm_labels, next_sentence_label=nsp)
    out.loss                    # MLM (per-sequence mean by default) + NSP over real slots
    out.per_sequence            # (B, D) MLM loss of each sequence, out.present (B, D)

Same parameters as the original: post-LN blocks, word + position + token-type
embeddings, tied MLM decoder, pooler on [CLS]. The pooler reads each sequence's own
[CLS] (its first token), so NSP / classification work over ``(B, D)`` slots.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from seqpack.nn.attention import AttentionPlan
from seqpack.nn.heads import MLMHead, PackedPooler, slot_count
from seqpack.nn.losses import (
    IGNORE_INDEX,
    check_reduction,
    mean_over,
    multilabel_loss,
    qa_logits,
    qa_loss,
    sequence_token_losses,
    slot_cross_entropy,
    target_loss,
    token_loss,
)
from seqpack.nn.models.common import PackedOutput, check_batch, sized
from seqpack.nn.models.layers import (
    Block,
    check_config,
    init_weights,
    positions_and_plan,
    run_blocks,
)


@dataclass(frozen=True, kw_only=True)
class BertConfig:
    """The size and options of seqpack's BERT.

    Attributes:
        vocab_size: the vocabulary `V`.
        hidden: the width `H`.
        layers: the transformer blocks.
        heads: the attention heads.
        intermediate: the feed-forward width (0: `4 * hidden`).
        max_position: the position embeddings: the longest sequence.
        type_vocab: the token types (segments A, B).
        dropout: the dropout probability.
        eps: the LayerNorms' epsilon.
        attention: the attention backend (`seqpack.nn.BACKENDS`; `auto` chooses per batch).
        num_labels: the classes of a classification or tagging head.
        multilabel: the classification head is multi-label (BCE over `num_labels`).
    """

    vocab_size: int
    hidden: int = 256
    layers: int = 4
    heads: int = 4
    intermediate: int = 0  # 0: 4 * hidden
    max_position: int = 512
    type_vocab: int = 2
    dropout: float = 0.1
    eps: float = 1e-12
    attention: str = "auto"
    num_labels: int = 2
    multilabel: bool = False

    def __post_init__(self) -> None:
        check_config(self, ("vocab_size", "hidden", "layers", "heads", "max_position", "type_vocab", "num_labels"))

    @property
    def ffn(self) -> int:
        return self.intermediate or 4 * self.hidden

    @classmethod
    def of_size(cls, size: str, **overrides: object) -> BertConfig:
        """``tiny`` (128/2/2), ``small`` (256/4/4, the benchmark model), ``base`` (768/12/12).

        Args:
            size: a key of `SIZES`.
            **overrides: fields to set, `vocab_size` among them.

        Returns:
            The `BertConfig`.

        Raises:
            UserError: an unknown size or a bad field.
        """
        return cls(**sized(size, overrides))  # type: ignore[arg-type]  # sized() merges the fields as dict[str, object]


class Bert(nn.Module):
    """Encoder: ``(B, T)`` ids -> ``(B, T, H)`` hidden states, sequences kept apart.

    Args:
        config: its size and options.
    """

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        c = self.config = config
        self.word = nn.Embedding(c.vocab_size, c.hidden)
        self.position = nn.Embedding(c.max_position, c.hidden)
        self.token_type = nn.Embedding(c.type_vocab, c.hidden)
        self.ln = nn.LayerNorm(c.hidden, eps=c.eps)
        self.dropout = nn.Dropout(c.dropout)
        self.blocks = nn.ModuleList(
            Block(c.hidden, c.heads, c.ffn, dropout=c.dropout, eps=c.eps, pre_norm=False) for _ in range(c.layers)
        )
        self.checkpoint_blocks = False  # True: recompute each block's activations in backward (run_blocks)
        init_weights(self)

    def forward(
        self,
        input_ids: torch.Tensor,
        segment_ids: torch.Tensor,
        *,
        position_ids: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        plan: AttentionPlan | None = None,
    ) -> torch.Tensor:
        """Hidden states of packed rows, sequences kept apart.

        Args:
            input_ids: packed rows of token ids `(B, T)`.
            segment_ids: each token's sequence in its row, 0 for padding `(B, T)`.
            position_ids: positions `(B, T)` (`None`: restarting at each sequence).
            token_type_ids: segment A/B of each token `(B, T)` (`None`: all 0).
            plan: the attention plan (`None`: made from `segment_ids`).

        Returns:
            The hidden states `(B, T, H)`.
        """
        check_batch(input_ids, segment_ids, position_ids=position_ids, token_type_ids=token_type_ids)
        position_ids, plan = positions_and_plan(
            segment_ids,
            position_ids,
            plan,
            max_position=self.config.max_position,
            causal=False,
            backend=self.config.attention,
            dtype=self.word.weight.dtype,
        )
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        x = self.word(input_ids) + self.position(position_ids) + self.token_type(token_type_ids)
        x = self.dropout(self.ln(x))  # (B, T, H)
        x = run_blocks(self.blocks, x, plan, checkpoint=self.checkpoint_blocks)
        return x


class BertForPreTraining(nn.Module):
    """MLM (+ NSP when ``next_sentence_label`` is given) over packed rows.

    Args:
        config: its size and options.
    """

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.bert = Bert(config)
        self.mlm = MLMHead(config.hidden, self.bert.word, eps=config.eps)
        self.pooler = PackedPooler(config.hidden)
        self.nsp = nn.Linear(config.hidden, 2)
        init_weights(self.mlm.dense)
        init_weights(self.pooler)
        init_weights(self.nsp)

    def forward(
        self,
        input_ids: torch.Tensor,
        segment_ids: torch.Tensor,
        *,
        position_ids: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        next_sentence_label: torch.Tensor | None = None,
        reduction: str = "sequence",
        max_depth: int | None = None,
    ) -> PackedOutput:
        """Without ``labels``: full token logits (B, T, V). With them: logits only at the
        N target tokens (N, V), and the loss.

        Args:
            input_ids: packed rows of token ids `(B, T)`.
            segment_ids: each token's sequence in its row, 0 for padding `(B, T)`.
            position_ids: positions `(B, T)` (`None`: restarting at each sequence).
            token_type_ids: segment A/B of each token `(B, T)` (`None`: all 0).
            labels: MLM targets `(B, T)`, -100 where there is none (`None`: no loss).
            next_sentence_label: NSP labels per slot `(B, D)`, -100 in empty slots (`None`: no NSP).
            reduction: `sequence` or `token` (`seqpack.nn.token_loss`).
            max_depth: the slots per row `D` (`None`: from the labels, else the deepest row).

        Returns:
            The `PackedOutput`: `logits`, and with labels `loss`, `per_sequence`, `present`, `slot_logits`.
        """
        check_reduction(reduction)
        check_batch(input_ids, segment_ids, labels=labels)
        h = self.bert(input_ids, segment_ids, position_ids=position_ids, token_type_ids=token_type_ids)
        out = PackedOutput(hidden=h)
        if labels is None:
            out.logits = self.mlm(h)
        else:
            rows, cols = (labels != IGNORE_INDEX).nonzero(as_tuple=True)
            out.logits = self.mlm(h[rows, cols])  # (N, V)
            out.loss, out.per_sequence, out.present = target_loss(
                out.logits, labels[rows, cols], rows, segment_ids[rows, cols], segment_ids, reduction=reduction
            )
        D = slot_count(segment_ids, next_sentence_label, max_depth=max_depth)
        pooled, _present = self.pooler(h, segment_ids, D)
        out.slot_logits = self.nsp(pooled)  # (B, D, 2)
        if next_sentence_label is not None:
            nsp, per = slot_cross_entropy(out.slot_logits, next_sentence_label)
            out.extra["nsp_loss"], out.extra["nsp_per_sequence"] = nsp, per
            if out.loss is not None:
                out.extra["mlm_loss"] = out.loss
                out.loss = out.loss + nsp
            else:
                out.loss = nsp
        return out


class BertForSequenceClassification(nn.Module):
    """One prediction per packed sequence: ``slot_logits`` (B, D, num_labels).

    ``labels`` (B, D) class ids, or (B, D, C) multi-hot targets when ``config.multilabel``;
    -100 marks empty slots either way.

    Args:
        config: its size and options.
    """

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.bert = Bert(config)
        self.pooler = PackedPooler(config.hidden)
        self.dropout = nn.Dropout(config.dropout)
        self.classifier = nn.Linear(config.hidden, config.num_labels)
        init_weights(self.pooler)
        init_weights(self.classifier)

    def forward(
        self,
        input_ids: torch.Tensor,
        segment_ids: torch.Tensor,
        *,
        position_ids: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        max_depth: int | None = None,
    ) -> PackedOutput:
        """Each sequence's class logits, and the loss with ``labels``.

        Args:
            input_ids: packed rows of token ids `(B, T)`.
            segment_ids: each token's sequence in its row, 0 for padding `(B, T)`.
            position_ids: positions `(B, T)` (`None`: restarting at each sequence).
            token_type_ids: segment A/B of each token `(B, T)` (`None`: all 0).
            labels: class ids `(B, D)`, or multi-hot `(B, D, C)`, -100 in empty slots (`None`: no loss).
            max_depth: the slots per row `D` (`None`: from the labels, else the deepest row).

        Returns:
            The `PackedOutput`: `slot_logits` `(B, D, C)`, and with labels `loss`, `per_sequence`, `present`.
        """
        h = self.bert(input_ids, segment_ids, position_ids=position_ids, token_type_ids=token_type_ids)
        pooled, present = self.pooler(h, segment_ids, slot_count(segment_ids, labels, max_depth=max_depth))
        slot_logits = self.classifier(self.dropout(pooled))
        out = PackedOutput(hidden=h, slot_logits=slot_logits, present=present)
        if labels is not None:
            if self.config.multilabel:
                out.loss, out.per_sequence = multilabel_loss(slot_logits, labels.to(slot_logits.dtype))
            else:
                out.loss, out.per_sequence = slot_cross_entropy(slot_logits, labels)
        return out


class BertForQuestionAnswering(nn.Module):
    """Span prediction per packed sequence: ``extra["start_logits"]``/``["end_logits"]`` are
    (B, D, T), -inf outside each slot's own tokens; positions are row coordinates.

    Args:
        config: its size and options.
    """

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.bert = Bert(config)
        self.qa = nn.Linear(config.hidden, 2)
        init_weights(self.qa)

    def forward(
        self,
        input_ids: torch.Tensor,
        segment_ids: torch.Tensor,
        *,
        position_ids: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        start_positions: torch.Tensor | None = None,
        end_positions: torch.Tensor | None = None,
        max_depth: int | None = None,
    ) -> PackedOutput:
        """Each sequence's start and end logits, and the loss with the positions.

        Args:
            input_ids: packed rows of token ids `(B, T)`.
            segment_ids: each token's sequence in its row, 0 for padding `(B, T)`.
            position_ids: positions `(B, T)` (`None`: restarting at each sequence).
            token_type_ids: segment A/B of each token `(B, T)` (`None`: all 0).
            start_positions: each slot's answer start in row coordinates `(B, D)`, -100 in empty slots.
            end_positions: each slot's answer end `(B, D)`.
            max_depth: the slots per row `D` (`None`: from the positions, else the deepest row).

        Returns:
            The `PackedOutput`: `extra["start_logits"]`, `extra["end_logits"]` `(B, D, T)`, and the loss.
        """
        h = self.bert(input_ids, segment_ids, position_ids=position_ids, token_type_ids=token_type_ids)
        start, end = self.qa(h).unbind(dim=-1)  # (B, T) each
        D = slot_count(segment_ids, start_positions, max_depth=max_depth)
        s_slots, e_slots = qa_logits(start, end, segment_ids, D)
        out = PackedOutput(hidden=h, extra={"start_logits": s_slots, "end_logits": e_slots})
        if start_positions is not None and end_positions is not None:
            out.loss, out.per_sequence = qa_loss(s_slots, e_slots, start_positions, end_positions)
            out.present = start_positions != IGNORE_INDEX
        return out


def token_class_output(
    logits: torch.Tensor, labels: torch.Tensor | None, segment_ids: torch.Tensor, reduction: str
) -> PackedOutput:
    """A per-token classifier's output: ``logits`` (B, T, C) and, with ``labels`` (B, T; -100 where
    a token has no tag), the cross-entropy of each sequence's tagged tokens (``per_sequence``,
    ``present``: (B, D)) reduced per sequence or over all tagged tokens (``reduction``)."""
    check_reduction(reduction)
    out = PackedOutput(logits=logits)
    if labels is not None:
        out.per_sequence, out.present = sequence_token_losses(logits, labels, segment_ids)
        if reduction == "sequence":
            out.loss = mean_over(out.per_sequence, out.present)
        else:
            out.loss = token_loss(logits, labels, segment_ids, reduction="token")
    return out


class BertForTokenClassification(nn.Module):
    """A tag per token of every packed sequence: ``logits`` (B, T, num_labels); ``labels`` (B, T),
    -100 where a token has no tag (padding, specials, a word's later sub-tokens).

    Args:
        config: its size and options.
    """

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.bert = Bert(config)
        self.dropout = nn.Dropout(config.dropout)
        self.classifier = nn.Linear(config.hidden, config.num_labels)
        init_weights(self.classifier)

    def forward(
        self,
        input_ids: torch.Tensor,
        segment_ids: torch.Tensor,
        *,
        position_ids: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        reduction: str = "sequence",
    ) -> PackedOutput:
        """Each token's tag logits, and the loss with ``labels``.

        Args:
            input_ids: packed rows of token ids `(B, T)`.
            segment_ids: each token's sequence in its row, 0 for padding `(B, T)`.
            position_ids: positions `(B, T)` (`None`: restarting at each sequence).
            token_type_ids: segment A/B of each token `(B, T)` (`None`: all 0).
            labels: tag ids `(B, T)`, -100 where a token has none (`None`: no loss).
            reduction: `sequence` or `token` (`seqpack.nn.token_loss`).

        Returns:
            The `PackedOutput`: `logits` `(B, T, C)`, and with labels `loss`, `per_sequence`, `present`.
        """
        check_batch(input_ids, segment_ids, labels=labels)
        h = self.bert(input_ids, segment_ids, position_ids=position_ids, token_type_ids=token_type_ids)
        out = token_class_output(self.classifier(self.dropout(h)), labels, segment_ids, reduction)
        out.hidden = h
        return out
