"""Compact BERT and GPT that take ``segment_ids`` / ``position_ids`` natively."""

from __future__ import annotations

from seqpack.nn.models.bert import (
    Bert,
    BertConfig,
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
)
from seqpack.nn.models.common import SIZES, PackedOutput
from seqpack.nn.models.gpt import GPT, GPTConfig, GPTReward

__all__ = [
    "GPT",
    "Bert",
    "BertConfig",
    "BertForPreTraining",
    "BertForQuestionAnswering",
    "BertForSequenceClassification",
    "BertForTokenClassification",
    "GPTConfig",
    "GPTReward",
    "PackedOutput",
    "SIZES",
]
