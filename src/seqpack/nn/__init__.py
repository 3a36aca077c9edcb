"""The PyTorch side of packing: masks, attention backends, packed heads, per-sequence losses,
compact BERT/GPT, Hugging Face adapters and LAMB.

    seg = batch["segment_ids"]                                  # (B, T): 1..k then 0
    plan = plan_attention(seg, causal=False)                    # once per batch
    out = packed_attention(q, k, v, plan)                       # every layer, (B, H, T, d)

    model = BertForPreTraining(BertConfig.of_size("tiny", vocab_size=V))
    loss = model(batch["input_ids"], seg, labels=batch["labels"]).loss   # per-sequence MLM loss
"""

from __future__ import annotations

from seqpack.nn.attention import (
    BACKENDS,
    AttentionPlan,
    choose_backend,
    eager_attention,
    packed_attention,
    plan_attention,
)
from seqpack.nn.heads import MLMHead, PackedPooler, gather_slots
from seqpack.nn.hf_adapter import (
    check_hf_mask,
    hf_attention_mask,
    hf_inputs,
    packed_forward,
)
from seqpack.nn.hf_collator import PackedCollator
from seqpack.nn.losses import (
    multilabel_loss,
    qa_logits,
    qa_loss,
    sequence_token_losses,
    slot_cross_entropy,
    target_loss,
    token_loss,
)
from seqpack.nn.masks import (
    attention_mask,
    block_mask,
    check_segment_ids,
    cu_seqlens,
    max_seqlen,
    position_ids,
    row_runs,
    segment_ids_from_bos,
    segment_ids_from_eos,
    sequence_lengths,
    sequence_starts,
    unpad_index,
)
from seqpack.nn.models import (
    GPT,
    Bert,
    BertConfig,
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    GPTConfig,
    PackedOutput,
)
from seqpack.nn.optim import (
    Lamb,
    adjust_betas,
    packed_accumulation,
    packed_learning_rate,
)

__all__ = [
    "BACKENDS",
    "GPT",
    "AttentionPlan",
    "Bert",
    "BertConfig",
    "BertForPreTraining",
    "BertForQuestionAnswering",
    "BertForSequenceClassification",
    "GPTConfig",
    "Lamb",
    "MLMHead",
    "PackedOutput",
    "PackedPooler",
    "adjust_betas",
    "attention_mask",
    "block_mask",
    "check_hf_mask",
    "check_segment_ids",
    "choose_backend",
    "cu_seqlens",
    "eager_attention",
    "gather_slots",
    "PackedCollator",
    "hf_attention_mask",
    "hf_inputs",
    "max_seqlen",
    "multilabel_loss",
    "packed_accumulation",
    "packed_attention",
    "packed_forward",
    "packed_learning_rate",
    "plan_attention",
    "position_ids",
    "row_runs",
    "qa_logits",
    "qa_loss",
    "segment_ids_from_bos",
    "segment_ids_from_eos",
    "sequence_lengths",
    "sequence_starts",
    "sequence_token_losses",
    "slot_cross_entropy",
    "target_loss",
    "token_loss",
    "unpad_index",
]
