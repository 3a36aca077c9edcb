"""Encoders of transformers (BERT, RoBERTa, XLM-R, ELECTRA, DistilBERT, ALBERT, DeBERTa, ModernBERT...)
on packed rows, exact: every document gives what it gives run alone through the model.

    out = encoder_forward(model, batch)              # batch: input_ids, segment_ids (B, T), labels...
    out.slot_logits                                  # (B, D, C): each document's own classification

The door (`seqpack.nn.hf_support.encoder_support`) reads from the model's config and layers how its
rows are kept apart: one ``(B, 1, T, T)`` block-diagonal mask (bool for ``sdpa``, additive for
``eager``; DeBERTa's own attention reads it as 0/1 and its embeddings a 2-D mask), narrowed for the
sliding-window layers (ModernBERT's local attention: ``|i - j| <= sliding_window`` within the
document); positions restart at every document, counted from ``padding_idx + 1`` where the
embeddings count so (RoBERTa, XLM-R, CamemBERT: exactly the ids the model makes for the document
alone); relative positions (DeBERTa's buckets) need nothing more, a document's distances being its
row's. It refuses, in one line, what cannot be made exact.

Heads (`HEADS`, one entry a task): the encoder runs once over the packed rows, then the model's own
forward runs its own head modules on the encoder's states (`head_on`): per token on the rows
(masked LM, token classification, question answering's span logits), per document on each
document's own states (sequence classification: RoBERTa's head reads each document's ``<s>``,
BERT's pooler its ``[CLS]``, ModernBERT's pools by ``cls`` or each document's own mean per its
``classifier_pooling``). Losses are per sequence (the paper's) or per token (``reduction="token"``).

Rows that hold one document each (``seqpack train --padded``) run the model's own padded forward
instead: an ordinary 2-D ``attention_mask`` and the model's own positions and heads.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from seqpack.errors import UserError
from seqpack.nn.heads import slot_count
from seqpack.nn.hf_support import EncoderSupport, check_encoder
from seqpack.nn.losses import (
    IGNORE_INDEX,
    check_reduction,
    mean_over,
    multilabel_loss,
    qa_logits,
    qa_loss,
    sequence_token_losses,
    slot_cross_entropy,
    token_loss,
)
from seqpack.nn.masks import attention_mask, check_segment_ids, position_ids
from seqpack.nn.models.common import PackedOutput
from seqpack.nn.models.layers import compute_dtype

#: config keys naming how a classification head pools a sequence; a value not in `FIRST_TOKEN`
#: (``mean``, ``late``, ``last``) makes the head read each document's whole states
POOLING_KEYS = ("classifier_pooling", "clf_pooling", "summary_type")
FIRST_TOKEN = frozenset({"cls", "bos", "first"})


def _inner(model: Any) -> Any:
    inner = getattr(model, "_orig_mod", model)
    return getattr(inner, "module", inner)


# ---------------------------------------------------------------------------- documents


@dataclass(frozen=True)
class Documents:
    """The documents of packed rows, in row order: document ``n`` is ``row[n]``'s slot ``slot[n]``,
    ``length[n]`` tokens from column ``start[n]``."""

    segment_ids: torch.Tensor  # (B, T)
    row: torch.Tensor  # (N,)
    slot: torch.Tensor  # (N,)
    start: torch.Tensor  # (N,)
    length: torch.Tensor  # (N,)

    @classmethod
    def of(cls, seg: torch.Tensor) -> Documents:
        is_start = seg > 0
        is_start[:, 1:] &= seg[:, 1:] != seg[:, :-1]
        row, start = is_start.nonzero(as_tuple=True)
        slot = seg[row, start].long() - 1
        depth = int(seg.max()) if seg.numel() else 0
        counts = torch.zeros(seg.shape[0], depth + 1, dtype=torch.long, device=seg.device)
        counts.scatter_add_(1, seg.long(), torch.ones_like(seg, dtype=torch.long))
        return cls(seg, row, slot, start, counts[row, slot + 1])

    @property
    def one_per_row(self) -> bool:
        """Every row holds at most one document, from its first column: padded rows."""
        return bool((self.segment_ids.max(dim=1).values <= 1).all()) and bool((self.start == 0).all())

    def scatter(self, values: torch.Tensor, depth: int) -> torch.Tensor:
        """Per-document ``values`` (N, ...) into slots (B, D, ...), zero where a slot is empty."""
        B = self.segment_ids.shape[0]
        out = values.new_zeros((B, depth, *values.shape[1:]))
        keep = self.slot < depth
        return out.index_put((self.row[keep], self.slot[keep]), values[keep])

    def present(self, depth: int) -> torch.Tensor:
        """(B, D) which slots hold a document."""
        out = torch.zeros(self.segment_ids.shape[0], depth, dtype=torch.bool, device=self.segment_ids.device)
        keep = self.slot < depth
        out[self.row[keep], self.slot[keep]] = True
        return out

    def unpack(self, x: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Each document's first ``width`` tokens of ``x`` (B, T, ...) as rows of their own:
        ``(N, width, ...)`` and the mask of its real tokens ``(N, width)``."""
        T = x.shape[1]
        j = torch.arange(width, device=x.device)
        real = j[None, :] < self.length[:, None]
        col = torch.where(real, self.start[:, None] + j[None, :], torch.zeros_like(j)[None, :]).clamp(max=T - 1)
        return x[self.row[:, None], col], real


def _document_positions(ids: torch.Tensor, seg: torch.Tensor, padding_idx: int | None) -> torch.Tensor:
    """Each token's position in its document, as the model counts it for the document alone: from 0,
    or (``padding_idx``: RoBERTa's embeddings) ``padding_idx + 1`` on, a token equal to the pad id
    taking ``padding_idx`` and not counted (``create_position_ids_from_input_ids``).  # (B, T)"""
    pos = position_ids(seg)
    if padding_idx is None:
        return pos
    counted = ((ids != padding_idx) & (seg > 0)).long()
    total = counted.cumsum(dim=1)
    first = torch.arange(seg.shape[1], device=seg.device)[None, :] - pos  # the column each document starts at
    before = torch.where(first > 0, total.gather(1, (first - 1).clamp(min=0)), torch.zeros_like(total))
    return (total - before) * counted + padding_idx


# ---------------------------------------------------------------------------- the encoder's states


def _mask_dtype(model: Any, config: Any) -> torch.dtype:
    impl = str(getattr(config, "_attn_implementation", None) or "eager")
    if impl == "sdpa":
        return torch.bool
    p = next(model.parameters())
    return compute_dtype(p.device, p.dtype)


def encoder_inputs(model: Any, batch: Mapping[str, torch.Tensor], support: EncoderSupport) -> dict[str, Any]:
    """The encoder's keywords for packed rows: ``input_ids``, the block-diagonal ``attention_mask``
    (`_mask_dtype`), per-document ``position_ids`` and, where it reads them, ``token_type_ids``."""
    inner = _inner(model)
    ids, seg = batch["input_ids"], batch["segment_ids"]
    dtype = torch.bool if support.mask == "deberta" else _mask_dtype(inner, inner.config)
    out: dict[str, Any] = {
        "input_ids": ids,
        "attention_mask": attention_mask(seg, causal=False, dtype=dtype),
        "position_ids": _document_positions(ids, seg, support.padding_idx),
    }
    if support.token_types:
        out["token_type_ids"] = batch.get("token_type_ids", torch.zeros_like(ids))
    return out


@contextlib.contextmanager
def _windows(base: Any) -> Iterator[None]:
    """transformers' sliding-window mask function of the model's modeling file, narrowing the 4-D
    document mask it is handed to the layer's window (``|i - j| <= sliding_window``, its own rule)
    instead of passing it through."""
    module: Any = sys.modules[type(base).__module__]  # a transformers modeling file: its names read by name
    own = module.create_bidirectional_sliding_window_mask

    def narrowed(config: Any, inputs_embeds: torch.Tensor, attention_mask: torch.Tensor, **_: Any) -> torch.Tensor:
        T = attention_mask.shape[-1]
        i = torch.arange(T, device=attention_mask.device)
        near = (i[:, None] - i[None, :]).abs() <= int(config.sliding_window)
        if attention_mask.dtype == torch.bool:
            return attention_mask & near
        return attention_mask.masked_fill(~near, torch.finfo(attention_mask.dtype).min)

    module.create_bidirectional_sliding_window_mask = narrowed
    try:
        yield
    finally:
        module.create_bidirectional_sliding_window_mask = own


@contextlib.contextmanager
def _embeddings_mask(base: Any, name: str, seg: torch.Tensor) -> Iterator[None]:
    """Embeddings that multiply by the mask they are handed (ESM's, DeBERTa's) read it as 2-D: they
    get the real tokens' (``name``: their parameter)."""

    real = (seg > 0).to(torch.long)
    at = list(inspect.signature(base.embeddings.forward).parameters).index(name)

    def two_d(_module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
        if kwargs.get(name) is not None:
            kwargs[name] = real
        elif len(args) > at and args[at] is not None:
            args = (*args[:at], real, *args[at + 1 :])
        return args, kwargs

    handle = base.embeddings.register_forward_pre_hook(two_d, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()


def encoder_states(model: Any, batch: Mapping[str, torch.Tensor], support: EncoderSupport) -> torch.Tensor:
    """The encoder's last hidden states on packed rows.  # (B, T, H)"""
    base = _inner(model).base_model
    with contextlib.ExitStack() as stack:
        if support.windows:
            stack.enter_context(_windows(base))
        if support.embeddings_mask is not None:
            stack.enter_context(_embeddings_mask(base, support.embeddings_mask, batch["segment_ids"]))
        return base(**encoder_inputs(model, batch, support))[0]


def _pooler(base: Any, states: torch.Tensor) -> torch.Tensor | None:
    """The encoder's own pooler on states whose first token is a document's first: BERT's (a module
    reading it), ALBERT's (a linear layer and its activation), or None."""
    pooler = getattr(base, "pooler", None)
    if pooler is None:
        return None
    if isinstance(pooler, torch.nn.Linear):
        act = getattr(base, "pooler_activation", None)
        out = pooler(states[:, 0])
        return act(out) if act is not None else out
    return pooler(states)


@contextlib.contextmanager
def head_on(model: Any, states: torch.Tensor, pooled: torch.Tensor | None) -> Iterator[None]:
    """While inside, the model's encoder returns ``states`` (and ``pooled`` as its pooler output) in
    place of running, so that the model's own forward runs its own head modules, dropout and
    pooling on them."""
    from transformers.modeling_outputs import BaseModelOutputWithPooling

    base = _inner(model).base_model
    out = BaseModelOutputWithPooling(last_hidden_state=states, pooler_output=pooled)

    def forward(*_: Any, **__: Any) -> Any:
        return out

    base.forward = forward
    try:
        yield
    finally:
        del base.forward


class _Packed:
    """Packed rows: the encoder once over the rows, the heads on its states."""

    def __init__(self, model: Any, batch: Mapping[str, torch.Tensor], support: EncoderSupport, docs: Documents):
        self.model, self.batch, self.support, self.docs = _inner(model), batch, support, docs
        self.states = encoder_states(model, batch, support)  # (B, T, H)

    def tokens(self, *, pooled: bool = False) -> Any:
        """The model's own output on the rows' states (per token), with its pooler's output on each
        document's first token (N, H) when ``pooled``."""
        base = self.model.base_model
        first = self.states[self.docs.row, self.docs.start][:, None] if pooled else None  # (N, 1, H)
        with head_on(self.model, self.states, _pooler(base, first) if first is not None else None):
            return self.model(input_ids=self.batch["input_ids"])

    def documents(self) -> Any:
        """The model's own output on each document's states as a row of its own (per document, N):
        its first token, or all of its tokens when the head pools more (`POOLING_KEYS`)."""
        config = self.model.config
        pooling = [str(getattr(config, k)) for k in POOLING_KEYS if getattr(config, k, None) is not None]
        width = 1 if all(p in FIRST_TOKEN for p in pooling) else int(self.docs.length.max())
        states, real = self.docs.unpack(self.states, width)  # (N, W, H), (N, W)
        ids, _ = self.docs.unpack(self.batch["input_ids"], width)
        with head_on(self.model, states, _pooler(self.model.base_model, states)):
            return self.model(input_ids=ids, attention_mask=real.long())

    def per_document(self, x: torch.Tensor) -> torch.Tensor:
        return x


class _Padded:
    """Rows of one document each: the model's own padded forward (2-D mask, its own positions)."""

    def __init__(self, model: Any, batch: Mapping[str, torch.Tensor], support: EncoderSupport, docs: Documents):
        self.model, self.docs, self.states = _inner(model), docs, None
        ids, seg = batch["input_ids"], batch["segment_ids"]
        kw: dict[str, Any] = {"input_ids": ids, "attention_mask": (seg > 0).long()}
        if support.token_types:
            kw["token_type_ids"] = batch.get("token_type_ids", torch.zeros_like(ids))
        self.out = self.model(**kw)

    def tokens(self, *, pooled: bool = False) -> Any:
        return self.out

    def documents(self) -> Any:
        return self.out

    def per_document(self, x: torch.Tensor) -> torch.Tensor:
        return x[self.docs.row]


_Run = _Packed | _Padded

# ---------------------------------------------------------------------------- heads, by task


def _token_reduce(
    logits: torch.Tensor,
    labels: torch.Tensor,
    seg: torch.Tensor,
    per: torch.Tensor,
    present: torch.Tensor,
    reduction: str,
) -> torch.Tensor:
    if reduction == "sequence":
        return mean_over(per, present)
    return token_loss(logits, labels, seg, reduction=reduction, shift=False)


def _per_token(run: _Run, batch: Mapping[str, torch.Tensor], reduction: str, depth: int | None) -> PackedOutput:
    """Masked LM and token classification: the model's head on every token (B, T, C); each
    sequence's loss is the mean over its labelled tokens."""
    logits = run.tokens().logits
    out = PackedOutput(logits=logits, hidden=run.states)
    labels = batch.get("labels")
    if labels is not None:
        seg = batch["segment_ids"]
        out.per_sequence, out.present = sequence_token_losses(logits, labels, seg, max_depth=depth)
        out.loss = _token_reduce(logits, labels, seg, out.per_sequence, out.present, reduction)
    return out


def _spans(run: _Run, batch: Mapping[str, torch.Tensor], reduction: str, depth: int | None) -> PackedOutput:
    """Question answering: the model's span head on every token, unpacked per document with
    ``-inf`` outside it (B, D, T)."""
    res = run.tokens()
    seg = batch["segment_ids"]
    sp, ep = batch.get("start_positions"), batch.get("end_positions")
    s_slots, e_slots = qa_logits(res.start_logits, res.end_logits, seg, slot_count(seg, sp, max_depth=depth))
    out = PackedOutput(hidden=run.states, extra={"start_logits": s_slots, "end_logits": e_slots})
    if sp is not None and ep is not None:
        out.loss, out.per_sequence = qa_loss(s_slots, e_slots, sp, ep)
        out.present = sp != IGNORE_INDEX
    return out


def _sequences(run: _Run, batch: Mapping[str, torch.Tensor], reduction: str, depth: int | None) -> PackedOutput:
    """Sequence classification: the model's pooling and head on each document's own states, its
    logits in the document's slot (B, D, C)."""
    seg, labels = batch["segment_ids"], batch.get("labels")
    D = slot_count(seg, labels, max_depth=depth)
    logits = run.docs.scatter(run.per_document(run.documents().logits), D)
    out = PackedOutput(hidden=run.states, slot_logits=logits, present=run.docs.present(D))
    if labels is not None:
        config = _inner(run.model).config
        if config.problem_type == "multi_label_classification" or labels.ndim == 3:
            out.loss, out.per_sequence = multilabel_loss(logits, labels.to(logits.dtype))
        else:
            out.loss, out.per_sequence = slot_cross_entropy(logits, labels)
    return out


def _pretraining(run: _Run, batch: Mapping[str, torch.Tensor], reduction: str, depth: int | None) -> PackedOutput:
    """Pre-training heads (BERT's MLM and next sentence, ALBERT's sentence order): token logits
    over the rows, the pair head on each document's pooled first token (B, D, 2)."""
    seg, labels = batch["segment_ids"], batch.get("labels")
    nsp = batch.get("next_sentence_label")
    res = run.tokens(pooled=True)
    logits = res.prediction_logits
    pair = getattr(res, "seq_relationship_logits", None)
    if pair is None:
        pair = getattr(res, "sop_logits", None)
    if pair is None:
        raise UserError(f"{type(run.model).__name__}'s pre-training output has no sentence-pair logits")
    D = slot_count(seg, nsp, max_depth=depth)
    slot_logits = run.docs.scatter(run.per_document(pair), D)
    out = PackedOutput(hidden=run.states, logits=logits, slot_logits=slot_logits)
    losses = []
    if labels is not None:
        out.per_sequence, out.present = sequence_token_losses(logits, labels, seg)
        out.extra["mlm_loss"] = _token_reduce(logits, labels, seg, out.per_sequence, out.present, reduction)
        losses.append(out.extra["mlm_loss"])
    if nsp is not None:
        out.extra["nsp_loss"], out.extra["nsp_per_sequence"] = slot_cross_entropy(slot_logits, nsp)
        losses.append(out.extra["nsp_loss"])
    if losses:
        out.loss = sum(losses[1:], losses[0])
    return out


#: task (`seqpack.nn.hf_support.ENCODER_TASKS`) -> its head: ``(run, batch, reduction, max_depth) -> PackedOutput``
HEADS: dict[str, Callable[[Any, Mapping[str, torch.Tensor], str, int | None], PackedOutput]] = {
    "masked-lm": _per_token,
    "token-classification": _per_token,
    "question-answering": _spans,
    "sequence-classification": _sequences,
    "pretraining": _pretraining,
}


def encoder_forward(
    model: Any,
    batch: Mapping[str, torch.Tensor],
    *,
    reduction: str = "sequence",
    max_depth: int | None = None,
    padded: bool | None = None,
) -> PackedOutput:
    """An encoder (`seqpack.nn.hf_support.is_encoder`) on a packed batch; see the module.
    ``padded``: rows of one document each run the model's own padded forward (None: when the rows
    are so)."""
    check_reduction(reduction)
    support = check_encoder(model)
    assert support.task is not None  # check_encoder refused a model without a head
    for key in ("input_ids", "segment_ids"):
        if key not in batch:
            raise UserError(f"the packed batch has no {key!r} column")
    ids, seg = batch["input_ids"], batch["segment_ids"]
    if ids.shape != seg.shape:
        raise UserError(f"segment_ids has shape {tuple(seg.shape)} but input_ids is {tuple(ids.shape)}")
    check_segment_ids(seg)
    docs = Documents.of(seg)
    if padded is None:
        padded = docs.one_per_row
    elif padded and not docs.one_per_row:
        raise UserError("padded=True needs rows of one document each, from their first column")
    run: _Run = _Padded(model, batch, support, docs) if padded else _Packed(model, batch, support, docs)
    return HEADS[support.task](run, batch, reduction, max_depth)


__all__ = ["HEADS", "POOLING_KEYS", "Documents", "encoder_forward", "encoder_inputs", "encoder_states", "head_on"]
